"""Every presentation of a scores file as a TREC run, for trec_eval, ir_measures and ranx.

One file per presentation: ``<out>/first_stage-000.run`` (the pass the quality cells read),
``<out>/<perturbation>-<m:03d>.run`` for each decision presentation (for BSC, its ensembles,
as every decision metric sees them; docs/methods/bsc.md). Lines are
``qid Q0 docid rank score tag``, ranks 1..n in presdep's own order: score descending,
ties to the document shown first (docs/methods/presentations.md).

The tools re-sort a run by its score column and break ties their own way (trec_eval by
doc id), so by default the score column holds a strict stand-in, n + 1 - rank, and any tool
reads exactly presdep's ranking. ``raw_scores=True`` writes the scorer's own scores
instead; tied documents may then be ordered differently by each tool. The re-reads of
``protocol.noise_rereads`` (perturbation ``batch_noise``) are a diagnostic and are not
exported.
"""

from __future__ import annotations

import os
from pathlib import Path

import polars as pl

from presdep.contracts.errors import InvalidInput
from presdep.contracts.schemas import read_metadata, read_table, write_text_atomic
from presdep.contracts.tasks import FIRST_STAGE
from presdep.contracts.views import BATCH_NOISE, decision_presentations, first_stage_pass
from presdep.metrics.blocks import build_blocks
from presdep.metrics.quality import presented_order


def presentation_runs(scores: pl.DataFrame, *, bsc_k: int = 1, ensembles: int = 4, tag: str = "presdep",
                      raw_scores: bool = False) -> dict[str, str]:
    """{file name: TREC run text} for every presentation of ``scores`` (see the module doc)."""
    perts = sorted(set(scores["perturbation"].cast(pl.String).unique().to_list()) - {FIRST_STAGE, BATCH_NOISE})
    views = [(FIRST_STAGE, first_stage_pass(scores, bsc_k=bsc_k, ensembles=ensembles))]
    for p in perts:
        views.append((p, decision_presentations(scores, bsc_k=bsc_k if p == "random_shuffle" else 1,
                                                ensembles=ensembles, perturbation=p)))
    out: dict[str, str] = {}
    for pert, view in views:
        blocks = build_blocks(view.with_columns(pl.lit(pert).alias("perturbation"))).get(pert, [])
        lines: dict[int, list[str]] = {}
        for b in blocks:
            order = presented_order(b.scores, b.positions)
            n = len(b.doc_ids)
            for row, m in enumerate(b.presentations):
                for rank, d in enumerate(order[row], start=1):
                    score = float(b.scores[row, d]) if raw_scores else float(n + 1 - rank)
                    lines.setdefault(int(m), []).append(
                        f"{b.query_id} Q0 {b.doc_ids[d]} {rank} {score:.17g} {tag}-{pert}-{int(m)}")
        for m in sorted(lines):
            out[f"{pert}-{m:03d}.run"] = "\n".join(lines[m]) + "\n"
    return out


def export_trec(scores_path: str | os.PathLike, out_dir: str | os.PathLike, *, raw_scores: bool = False,
                tag: str | None = None) -> list[Path]:
    """Write the runs of a scores file (BSC's K and E from its metadata); returns the paths, sorted."""
    meta = read_metadata(scores_path)
    scores = read_table(scores_path, "scores")
    if scores.height == 0:
        raise InvalidInput(f"{scores_path}: no scores to export")
    bsc_k, ensembles = int(meta.get("bsc_k") or 1), int(meta.get("bsc_ensembles") or 4)
    name = tag or _tag(Path(scores_path))
    runs = presentation_runs(scores, bsc_k=bsc_k, ensembles=ensembles, tag=name, raw_scores=raw_scores)
    out = Path(out_dir)
    return sorted(write_text_atomic(out / f, text) for f, text in runs.items())


def _tag(path: Path) -> str:
    """A run tag without spaces: the scores file's variant folder and dataset (scores/<variant>/<dataset>)."""
    parts = [p for p in (path.parent.name, path.stem) if p]
    return "-".join(parts).replace(" ", "_") or "presdep"


__all__ = ["export_trec", "presentation_runs"]
