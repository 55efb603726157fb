"""A user's scorer plug-in: installed from a tiny local package (tests/plugin_scorer) into a
scratch site folder, found through its ``presdep.scorers`` entry point by name, checked
against its capability record, and run by the real workflow to a Table 1 row."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from workflow_utils import TINY_RERANK_CONFIG, scratch_workflow, snakemake

PLUGIN = Path(__file__).resolve().parents[2] / "plugin_scorer"

CONFIG = TINY_RERANK_CONFIG + """variants:
  bm25: {label: First stage, scorer: identity}
  words: {label: Query-word count (plug-in), scorer: wordcount}
figure1: {variant: words, dataset: synthetic}
"""


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory):
    site = tmp_path_factory.mktemp("plugin") / "site"
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation",
                           "--no-index", "--quiet", "--target", str(site), str(PLUGIN)],
                          check=False, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise AssertionError(f"pip install of the plug-in failed:\n{proc.stdout}\n{proc.stderr}")
    assert list(site.glob("presdep_wordcount-*.dist-info/entry_points.txt"))
    return site


def _run_python(site: Path, code: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, env=env, timeout=120)


def test_plugin_is_found_by_name_with_its_capabilities(plugin_site):
    out = _run_python(plugin_site, (
        "from presdep.config.records import PromptSettings, ScoringRun\n"
        "from presdep.scoring import registry, make_scorer\n"
        "e = registry()['wordcount']\n"
        "print(e.source, e.factory, e.capabilities.order_invariant, e.capabilities.needs_model)\n"
        "s = make_scorer(ScoringRun.checked({'scorer': 'wordcount', 'chunking': 'contiguous', 'calibration': 'none', "
        "'bsc_k': 1, 'bsc_ensembles': 4}), PromptSettings())\n"
        "print([int(r.score) for r in s.score('red fox', ['a red fox', 'blue', 'red'])])\n"))
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["presdep-wordcount presdep_wordcount:make_wordcount True False",
                                       "[2, 0, 1]"]
    # without the site folder the name is unknown, and validation says where plug-ins come from
    from presdep.scoring import registry

    assert "wordcount" not in registry()


def test_plugin_capabilities_are_checked_at_validation(plugin_site):
    out = _run_python(plugin_site, (
        "from presdep.config import validate_config, SCHEMA_PATH, ConfigError\n"
        "cfg = {'protocol': {}, 'datasets': {'d': {'task': 'rerank', 'candidates': {'format': 'rank_llm_json', "
        "'path': 'x'}, 'qrels': {'format': 'trec', 'path': 'q'}}},\n"
        "       'variants': {'w': {'scorer': 'wordcount', 'bsc_k': 3}}}\n"
        "try:\n    validate_config(cfg, SCHEMA_PATH)\nexcept ConfigError as e:\n    print(e)\n"))
    assert "variants.w: BSC (bsc_k 3), but scorer 'wordcount' lacks capability 'batched_listwise'" in out.stdout, (
        out.stdout + out.stderr)


def test_plugin_scorer_produces_a_table1_row(plugin_site, tmp_path, monkeypatch):
    work = scratch_workflow(tmp_path)
    (work / "plugin.yaml").write_text(CONFIG)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(plugin_site), os.environ.get("PYTHONPATH")])))
    snakemake(work, "results/table1.csv", "--cores", "1", "--configfile", "plugin.yaml", timeout=600)
    table = pl.read_csv(work / "results/table1.csv")
    assert table["variant"].to_list() == ["bm25", "words"]
    row = table.filter(pl.col("variant") == "words").row(0, named=True)
    assert row["rerank_ndcg10"] is not None and 0.0 <= row["rerank_ndcg10"] <= 1.0
    assert row["rerank_tau_psi"] == 0.0  # the plug-in reads one document at a time
    from presdep.contracts.schemas import read_metadata

    assert read_metadata(work / "results/scores/words/synthetic.parquet")["scorer"]["scorer"] == "wordcount"
