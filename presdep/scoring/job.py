"""The `score` job: read a dataset's fixture, score all presentations, write one file.

A capcal variant scores no document: it recalibrates the stored probabilities of the
run it reuses (``reuse_scores_path``) with per-query content-free probes.
"""

from __future__ import annotations

import copy
import os
from typing import Any, Mapping

from presdep.schemas import read_table


def score_dataset_files(
    *,
    candidates_path: str | os.PathLike,
    qrels_path: str | os.PathLike | None,
    out_path: str | os.PathLike,
    dataset: str,
    variant: Mapping[str, Any],
    protocol: Mapping[str, Any],
    model_dir: str | os.PathLike | None = None,
    reuse_scores_path: str | os.PathLike | None = None,
    threads: int | None = None,
    selected_path: str | os.PathLike | None = None,
    seed: int | None = None,
    read_cache: str | os.PathLike | None = None,
) -> dict | None:
    """Returns the job's profile (None for a capcal job); ``read_cache`` is the read cache's folder."""
    from presdep.scoring.run import score_dataset

    if threads and variant.get("scorer") not in ("identity", "hosted"):  # these never load torch (start-up)
        import torch

        torch.set_num_threads(int(threads))
    startup_s = _seconds_since_process_start()  # interpreter, Snakemake's preamble and imports
    variant = copy.deepcopy(dict(variant))
    if model_dir:
        # A fetched model is a local directory from here on; its config name and spec stay in
        # the description, so CapCal can check that the scores it reuses come from this model.
        spec = variant.get("model") if isinstance(variant.get("model"), dict) else {}
        variant["model"] = {**spec, "name": variant.get("model_name"), "path": str(model_dir)}
    if selected_path:
        # A trained variant: the LoRA adapter that lambda selection chose for this seed.
        from presdep.training.select import adapter_for

        variant["adapter"] = adapter_for(selected_path, int(seed))
        variant["training_seed"] = int(seed)
    if variant.get("calibration") == "capcal":
        from presdep.scoring.capcal import calibrate_scores_file

        if not reuse_scores_path:
            raise ValueError(f"variant with calibration capcal needs the scores it reuses (reuse_scores_of) "
                             f"for dataset {dataset!r}")
        scorer = None
        if read_cache:
            # The probes go through the read cache too: a re-run reads none of them again.
            from presdep.scoring import make_scorer

            scorer = make_scorer(variant, protocol)
            if hasattr(scorer, "use_read_cache"):
                scorer.use_read_cache(read_cache)
        calibrate_scores_file(source_path=reuse_scores_path, candidates_path=candidates_path, out_path=out_path,
                              dataset=dataset, variant=variant, protocol=protocol, scorer=scorer)
        if scorer is not None and getattr(scorer, "read_cache", None) is not None:
            scorer.read_cache.compact_written()
        return None
    candidates = read_table(candidates_path, "candidates")
    qrels = read_table(qrels_path, "qrels") if qrels_path else None
    return score_dataset(
        candidates,
        dataset=dataset,
        variant=variant,
        protocol=protocol,
        out_path=out_path,
        qrels=qrels,
        read_cache=read_cache,
        startup_s=startup_s,
    )


def _seconds_since_process_start() -> float | None:
    """Interpreter start-up and imports until the job's own work begins (psutil comes with Snakemake)."""
    import time

    try:
        import psutil

        return max(0.0, time.time() - psutil.Process().create_time())
    except Exception:  # psutil absent or the process table unreadable: the profile says "unknown"
        return None
