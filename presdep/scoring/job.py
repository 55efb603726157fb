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
) -> None:
    from presdep.scoring.run import score_dataset

    if threads:
        import torch

        torch.set_num_threads(int(threads))
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
        calibrate_scores_file(source_path=reuse_scores_path, candidates_path=candidates_path, out_path=out_path,
                              dataset=dataset, variant=variant, protocol=protocol)
        return
    candidates = read_table(candidates_path, "candidates")
    qrels = read_table(qrels_path, "qrels") if qrels_path else None
    score_dataset(
        candidates,
        dataset=dataset,
        variant=variant,
        protocol=protocol,
        out_path=out_path,
        qrels=qrels,
    )
