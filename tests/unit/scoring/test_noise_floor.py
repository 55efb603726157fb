"""protocol.noise_rereads: the first-stage presentation re-read R times in other batch compositions,
and tau_psi_noise beside tau-PSI (the tau-PSI arithmetic alone gives with no presentation dependence).

Oracles: with batch_size 1 every re-read is the prompt alone, so on CPU it equals the first-stage
read bit for bit and tau_psi_noise is 0 by construction; with larger batches, tau_psi_noise is
recomputed here from the stored re-reads with scipy's Kendall tau.
"""

from __future__ import annotations

import itertools
import logging

import numpy as np
import polars as pl
import pytest
import torch
from scipy.stats import kendalltau
from scorers_tiny import VARIANT, char_tokenizer, qwen_config, score_then_metrics

from presdep.config.records import Protocol
from presdep.contracts.errors import ConfigError
from presdep.contracts.schemas import read_metadata
from presdep.scoring.backends import IdentityScorer, TransformersScorer


@pytest.fixture(scope="module")
def tiny():
    from transformers import AutoModelForCausalLM

    tok = char_tokenizer()
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(qwen_config(len(tok)), dtype=torch.float32).eval()
    with torch.no_grad():
        grade_rows = [tok.convert_tokens_to_ids(g) for g in "0123"]
        model.get_output_embeddings().weight[grade_rows].mul_(30.0)  # slots differ visibly
    return model, tok


class Recording(TransformersScorer):
    """The real scorer; remembers every batch it reads (as tuples of token-id tuples)."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.batches = []

    def read_built(self, built):
        self.batches.append(tuple(tuple(b.ids) for b in built))
        return super().read_built(built)


def proto(R: int, B: int = 3) -> dict:
    return {"seed": 13, "M": 3, "B": B, "perturbations": ["random_shuffle"], "max_doc_chars": 200, "noise_rereads": R}


def _noise_and_first(scores: pl.DataFrame) -> pl.DataFrame:
    fs = scores.filter(pl.col("perturbation") == "first_stage").select("query_id", "doc_id", "position",
                                                                        pl.col("score").alias("first"))
    return scores.filter(pl.col("perturbation") == "batch_noise").join(fs, on=["query_id", "doc_id"], suffix="_fs")


def test_batch_size_one_rereads_are_the_first_read_and_the_noise_floor_is_zero(tiny, tmp_path):
    model, tok = tiny
    scorer = TransformersScorer(model, tok, max_doc_chars=200, batch_size=1)
    scores, metrics = score_then_metrics(tmp_path, {**VARIANT, "scorer": "transformers"}, proto(4), "rerank",
                                         scorer=scorer, n_docs=6)
    noise = _noise_and_first(scores)
    assert noise.height == 4 * 4 * 6  # 4 queries x R = 4 re-reads x 6 documents
    assert sorted(noise["presentation"].unique().to_list()) == [0, 1, 2, 3]
    assert (noise["position"] == noise["position_fs"]).all()  # the first-stage presentation, slot for slot
    assert (noise["score"] == noise["first"]).all()  # bit for bit: a read alone is a read alone
    rows = metrics.filter(pl.col("metric") == "tau_psi_noise")
    per_q = rows.filter(pl.col("query_id").is_not_null())
    assert per_q.height == 4 and (per_q["value"] == 0.0).all()
    assert set(rows["perturbation"].to_list()) == {"random_shuffle"}  # beside tau_psi
    # A diagnostic, not a presentation: no decision metric is computed on it, no pass is counted.
    assert "batch_noise" not in set(metrics["perturbation"].to_list())
    passes = metrics.filter(pl.col("metric") == "passes_per_query")["value"][0]
    assert passes == 1 + 3
    meta = read_metadata(tmp_path / "scores.parquet")
    assert meta["batch_noise"] == {"rereads": 4, "measured": True, "batch_size": 1}
    assert meta["presentations"]["batch_noise"] == 4


def test_rereads_change_companions_and_the_noise_floor_is_their_tau_psi(tiny, tmp_path):
    model, tok = tiny
    scorer = Recording(model, tok, max_doc_chars=200, batch_size=4)
    scores, metrics = score_then_metrics(tmp_path, {**VARIANT, "scorer": "transformers"}, proto(5), "rerank",
                                         scorer=scorer, n_docs=6)
    # Every first-stage prompt: the batches its re-reads sat in are not all the same.
    fs = scores.filter(pl.col("perturbation") == "first_stage")
    targets = {tuple(scorer.build(q, d).ids) for q, d in _first_stage_prompts(fs)}
    seen = {t: [b for b in scorer.batches if t in b and len(b) == 4] for t in targets}
    assert all(len(set(bs)) >= 2 for bs in seen.values()), "re-reads must sit in other batch compositions"
    # Oracle: tau-PSI of the stored re-reads, ranks strict with ties by presented position, via scipy.
    noise = scores.filter(pl.col("perturbation") == "batch_noise").sort("query_id", "presentation", "doc_id")
    want = {}
    for (qid,), g in noise.group_by("query_id", maintain_order=True):
        reads = [part.sort("doc_id") for _, part in g.group_by("presentation", maintain_order=True)]
        ranks = [np.lexsort((p["position"].to_numpy(), -p["score"].to_numpy())).argsort() for p in reads]
        taus = [kendalltau(a, b).statistic for a, b in itertools.combinations(ranks, 2)]
        want[qid] = (1 - float(np.mean(taus))) / 2
    got = {r["query_id"]: r["value"] for r in metrics.filter(
        (pl.col("metric") == "tau_psi_noise") & pl.col("query_id").is_not_null()).iter_rows(named=True)}
    assert got == pytest.approx(want, abs=1e-12)
    agg = metrics.filter((pl.col("metric") == "tau_psi_noise") & pl.col("query_id").is_null())["value"][0]
    assert agg == pytest.approx(np.mean(list(want.values())))


def _first_stage_prompts(fs: pl.DataFrame):
    from scorers_tiny import fixture

    cand, _ = fixture(4, 6)
    text = dict(zip(cand["doc_id"], cand["doc"]))
    query = dict(zip(cand["query_id"], cand["query"]))
    for (qid, _), g in fs.group_by("query_id", "prompt", maintain_order=True):
        yield query[qid], [text[d] for d in g.sort("slot")["doc_id"]]


def test_the_counts_file_carries_tau_psi_noise_beside_tau_psi(tiny, tmp_path):
    from presdep.config.records import Variant
    from presdep.report.tables import build_table1

    model, tok = tiny
    scorer = TransformersScorer(model, tok, max_doc_chars=200, batch_size=1)
    _, metrics = score_then_metrics(tmp_path, {**VARIANT, "scorer": "transformers"}, proto(2), "rerank",
                                    scorer=scorer)
    metrics = metrics.with_columns(pl.lit("v").alias("variant"))
    variant = Variant.checked({**VARIANT, "scorer": "transformers", "model": "m", "tasks": ["rerank"]}, name="v")
    _, counts = build_table1(metrics, {"v": variant})
    by_column = {r["column"]: r["tau_psi_noise"] for r in counts.iter_rows(named=True)}
    assert by_column["rerank_tau_psi"] == 0.0
    assert by_column["rerank_ndcg10"] is None and by_column["rerank_jaccard"] is None


def test_a_scorer_without_batches_measures_nothing_and_says_so(tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        scores, metrics = score_then_metrics(tmp_path, {**VARIANT, "scorer": "identity"}, proto(3), "rerank",
                                             scorer=IdentityScorer())
    assert "batch_noise" not in set(scores["perturbation"].to_list())
    assert metrics.filter(pl.col("metric") == "tau_psi_noise").height == 0
    assert "noise_rereads = 3, but scorer identity reads no batches" in caplog.text
    assert read_metadata(tmp_path / "scores.parquet")["batch_noise"]["measured"] is False


@pytest.mark.parametrize("bad", [1, -1, 2.5, True])
def test_noise_rereads_is_zero_or_at_least_two(bad):
    with pytest.raises(ValueError, match="noise_rereads must be 0 \\(off\\) or an integer >= 2"):
        Protocol.checked(proto(bad))


def test_the_schema_refuses_one_reread():
    from presdep.config.load import SCHEMA_PATH, validate_config

    with pytest.raises(ConfigError, match=r"protocol.noise_rereads"):
        validate_config({"protocol": {"noise_rereads": 1}}, SCHEMA_PATH)
