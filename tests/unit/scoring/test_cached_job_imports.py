"""A score job whose every read is in the read cache imports neither torch nor transformers.

Real processes run the score job's own function (what scripts/score.py calls) on a tiny Llama
with SmolLM2's tokenizer: the first reads every prompt, the second is answered by the cache
without loading torch and writes the same table; a third, on a copy of the model folder
without the tokenizer's check (so it tokenizes through transformers), is answered by the same
entries: the two tokenizers' ids, and so the cache keys, are the same."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap

import polars as pl
import pytest
from scorers_tiny import fixture, saved_tiny_llama

from presdep.runtime.models import check_tokenizer
from presdep.runtime.tokenizer_files import CHECK_FILE

JOB = textwrap.dedent(
    """
    import json, sys
    from presdep.config.records import Protocol
    from presdep.scoring.job import score_dataset_files, scoring_run

    model_dir, cand, qrels, out, cache = sys.argv[1:6]
    variant = {"scorer": "transformers", "chunking": "contiguous", "calibration": "none", "bsc_k": 1,
               "bsc_ensembles": 2, "capcal_beta": 1.0, "model": "tiny", "tasks": ["reranking"]}
    model = {"source": "local", "device": "cpu", "dtype": "float32", "batch_size": 3}
    prof = score_dataset_files(candidates_path=cand, qrels_path=qrels, out_path=out, dataset="toy",
                               run=scoring_run("ots", variant, model=model, model_dir=model_dir),
                               protocol=Protocol.checked({"seed": 0, "M": 3, "B": 3, "max_doc_chars": 80,
                                                          "perturbations": ["random_shuffle"]}),
                               threads=1, read_cache=cache)
    loaded = {m: m in sys.modules for m in ("torch", "transformers")}
    threads = sys.modules["torch"].get_num_threads() if loaded["torch"] else None
    print(json.dumps({"loaded": loaded, "threads": threads, "tokens_read": prof["tokens_read"]}))
    """
)


@pytest.fixture(scope="module")
def model_dir(smollm2_model_dir, tmp_path_factory):
    """A tiny random Llama with the real SmolLM2 tokenizer, fetched-like: its tokenizer checked."""
    out = saved_tiny_llama(smollm2_model_dir, tmp_path_factory.mktemp("tiny-llama-smollm2-tokenizer"))
    check_tokenizer(out)
    return out


def run_job(model_dir, tmp_path, out_name: str) -> dict:
    cand, qrels = fixture(n_queries=3, n_docs=5)
    if not (tmp_path / "cand.parquet").exists():
        cand.write_parquet(tmp_path / "cand.parquet")
        qrels.write_parquet(tmp_path / "qrels.parquet")
    res = subprocess.run([sys.executable, "-c", JOB, str(model_dir), str(tmp_path / "cand.parquet"),
                          str(tmp_path / "qrels.parquet"), str(tmp_path / out_name), str(tmp_path / "cache")],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_a_job_answered_by_the_cache_loads_no_torch(model_dir, tmp_path):
    assert json.loads((model_dir / CHECK_FILE).read_text())["same_ids"] is True
    first = run_job(model_dir, tmp_path, "first.parquet")
    assert first["loaded"] == {"torch": True, "transformers": True} and first["tokens_read"] > 0
    assert first["threads"] == 1  # the job's threads reach torch though it loaded after they were set

    again = run_job(model_dir, tmp_path, "again.parquet")
    assert again == {"loaded": {"torch": False, "transformers": False}, "threads": None, "tokens_read": 0}
    assert pl.read_parquet(tmp_path / "again.parquet").equals(pl.read_parquet(tmp_path / "first.parquet"))

    # The same model through transformers' tokenizer (no check beside it): the same keys, all cached.
    plain = tmp_path / "unchecked-copy"
    shutil.copytree(model_dir, plain)
    (plain / CHECK_FILE).unlink()
    through = run_job(plain, tmp_path, "through.parquet")
    assert through["loaded"]["transformers"] is True and through["tokens_read"] == 0
    assert pl.read_parquet(tmp_path / "through.parquet").equals(pl.read_parquet(tmp_path / "first.parquet"))
