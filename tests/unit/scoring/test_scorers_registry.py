"""The scorer registry: capability records, the config-time check (unknown names and
capability mismatches fail validation naming the variant), and `scorer: hosted` from a
validated config through score_dataset against the loopback fault server."""

from __future__ import annotations

import copy

import polars as pl
import pytest
from fault_server import FaultServer
from scorers_tiny import fixture

from presdep.config import SCHEMA_PATH, ConfigError, WorkflowConfig, validate_config
from presdep.config.records import ScoringRun
from presdep.scoring import BUILTIN, Capabilities, registry, serves

NAMES = ["identity", "transformers", "vllm", "hosted", "jina_listwise", "generative_listwise", "mxbai_rerank",
         "cross_encoder", "reward_model", "pairrm", "pine", "isolated_slots"]


def base_config(**variants) -> dict:
    return {
        "protocol": {},
        "models": {"m": {"source": "local", "path": "model-dir"}},
        "datasets": {"d": {"task": "rerank", "candidates": {"format": "rank_llm_json", "path": "x"},
                           "qrels": {"format": "trec", "path": "q"}}},
        "variants": variants or {"bm25": {"scorer": "identity"}},
    }


def test_the_registry_names_and_records():
    assert list(BUILTIN) == NAMES
    import importlib

    for name, e in BUILTIN.items():  # every factory resolves to a callable (imports stay lazy until then)
        module, func = e.factory.split(":")
        assert callable(getattr(importlib.import_module(module), func)), name
    caps = {n: registry()[n].capabilities for n in NAMES}
    assert [n for n in NAMES if caps[n].probabilities] == ["transformers", "vllm", "pine", "isolated_slots"]
    assert [n for n in NAMES if caps[n].adapter] == ["transformers", "vllm"]
    assert [n for n in NAMES if caps[n].order_invariant] == ["identity", "mxbai_rerank", "cross_encoder",
                                                            "reward_model", "pairrm"]
    assert [n for n in NAMES if caps[n].needs_gpu] == ["vllm"]
    assert caps["identity"].reads == "ids" and all(caps[n].reads == "text" for n in NAMES[1:])
    assert serves("reward_model", "response") and not serves("reward_model", "rerank")
    with pytest.raises(ValueError, match="unknown capability field"):
        Capabilities.from_mapping({"probs": True}, "x")
    with pytest.raises(ValueError, match="tasks"):
        Capabilities(tasks=("ranking",))


def _fails(cfg, *needles):
    with pytest.raises(ConfigError) as err:
        validate_config(cfg, SCHEMA_PATH)
    for n in needles:
        assert n in str(err.value), str(err.value)


def test_unknown_scorer_fails_validation_naming_the_variant():
    _fails(base_config(mine={"scorer": "my_reranker", "model": "m"}),
           "variants.mine.scorer: unknown scorer 'my_reranker'", "presdep.scorers")


def test_capability_mismatches_fail_validation_naming_variant_and_capability():
    _fails(base_config(ce={"scorer": "cross_encoder", "model": "m", "adapter": "lora/"}),
           "variants.ce:", "lacks capability 'adapter'")
    _fails(base_config(ce={"scorer": "cross_encoder", "model": "m", "bsc_k": 4}),
           "variants.ce: BSC (bsc_k 4)", "'batched_listwise'")
    _fails(base_config(j={"scorer": "jina_listwise", "model": "m"},
                       cc={"scorer": "jina_listwise", "model": "m", "calibration": "capcal", "reuse_scores_of": "j"}),
           "variants.cc: CapCal needs grade probabilities", "'probabilities'")
    _fails(base_config(rm={"scorer": "reward_model", "model": "m"}),
           "variants.rm: scored on task(s) ['rerank'], but scorer 'reward_model' serves only ['response']")
    _fails(base_config(rm={"scorer": "reward_model", "model": "m", "tasks": ["rerank", "response"]}),
           "variants.rm: scored on task(s) ['rerank']")
    _fails(base_config(x={"scorer": "mxbai_rerank"}), "variants.x: scorer 'mxbai_rerank' needs a model")
    # the same asks on a scorer that has the capability pass; a skipped row is never checked
    ok = validate_config(base_config(t={"scorer": "transformers", "model": "m", "adapter": "lora/", "bsc_k": 4},
                                     cc={"scorer": "transformers", "model": "m", "calibration": "capcal",
                                         "reuse_scores_of": "t"},
                                     rm={"scorer": "reward_model", "model": "m", "skip": "needs hub weights"},
                                     rm2={"scorer": "reward_model", "model": "m", "tasks": ["response"]}),
                         SCHEMA_PATH)
    assert ok["variants"]["t"]["window"] == 20 and ok["variants"]["t"]["stride"] == 10


def test_hosted_scorer_from_a_config_through_score_dataset(tmp_path, monkeypatch):
    from presdep.contracts.schemas import read_metadata, read_table
    from presdep.scoring.run import score_dataset

    monkeypatch.setenv("PRESDEP_SCORER_TEST_KEY", "k-123")
    with FaultServer({"alpha": ["500", "429:0"]}) as srv:
        raw = base_config(gpt={"scorer": "hosted", "cache_dir": str(tmp_path / "cache"),
                               "hosted": {"model": "grader-1", "base_url": srv.url,
                                          "api_key_env": "PRESDEP_SCORER_TEST_KEY", "base_delay_s": 0.0,
                                          "max_delay_s": 0.0, "timeout_s": 10}})
        cfg = WorkflowConfig.from_validated(validate_config(copy.deepcopy(raw), SCHEMA_PATH))
        cand, qrels = fixture(2, 4)
        out = tmp_path / "scores.parquet"
        # the workflow's own records: the variant as the config built it, the dataset's protocol
        score_dataset(cand, dataset="d", run=ScoringRun(cfg.variants["gpt"]), protocol=cfg.datasets["d"].protocol,
                      out_path=out, qrels=qrels)
    scores = read_table(out, "scores")
    # the server's good reply grades slot i as i % 4: the score is the integer grade of the presented slot
    assert (scores["score"] == ((scores["slot"] + 1) % 4).cast(pl.Float64)).all()
    assert scores["p0"].null_count() == scores.height
    meta = read_metadata(out)
    assert meta["scorer"]["scorer"] == "hosted" and "k-123" not in str(meta)
    assert srv.requests > 0
