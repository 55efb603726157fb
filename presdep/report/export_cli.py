"""``presdep export-trec SCORES --out DIR``: every presentation of a scores file as a TREC run."""

from __future__ import annotations

import argparse
from pathlib import Path

from presdep.report.trec_export import export_trec


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "export-trec", help="write each presentation of a scores file as a TREC run (trec_eval, ir_measures, ranx)",
        description="One run file per presentation: first_stage-000.run and <perturbation>-<m>.run (BSC: its "
                    "ensembles), ranks in presdep's order (score descending, ties to the document shown first). "
                    "The score column is n + 1 - rank, so every tool reads that order; --raw-scores writes the "
                    "scorer's own scores instead (tools then break ties their own way).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("scores", type=Path, help="a scores Parquet file (results/scores/<variant>/<dataset>.parquet)")
    p.add_argument("--out", type=Path, required=True, help="folder for the run files")
    p.add_argument("--raw-scores", action="store_true", help="the scorer's scores in the score column")
    p.add_argument("--tag", help="run tag prefix (default: <variant>-<dataset> from the path)")
    p.set_defaults(func=_run)


def _run(args) -> int:
    paths = export_trec(args.scores, args.out, raw_scores=args.raw_scores, tag=args.tag)
    print(f"wrote {len(paths)} runs to {args.out}")
    return 0
