"""Empty texts in candidates: an empty query is refused, an empty document is warned and kept.

Rule (check_candidates): a query whose text is empty or whitespace only is an
InputFormatError naming the file, the query id and "expected a non-empty query text";
a document whose text is empty or whitespace only is scored as given, with one warning
naming the count and the first (query, doc) in file order.
"""

from __future__ import annotations

import json
import logging

import polars as pl
import pytest
from records_tiny import fixture_dataset

from presdep.candidates.fixtures import build_fixture, check_candidates
from presdep.contracts.errors import InputFormatError

_SCHEMA = {"query_id": pl.String, "query": pl.String, "doc_id": pl.String, "doc": pl.String,
           "first_stage_rank": pl.Int32, "first_stage_score": pl.Float64}


def _cands(rows: list[tuple[str, str, str, str, int]]) -> pl.DataFrame:
    return pl.DataFrame([(*r, float(-r[4])) for r in rows], schema=_SCHEMA, orient="row")


@pytest.mark.parametrize("blank", ["", "   ", "\t\n"])
def test_empty_query_is_refused_naming_file_and_id(blank):
    cands = _cands([("1", "what is x", "a", "x is y", 1), ("7", blank, "b", "text", 1), ("7", blank, "c", "more", 2)])
    with pytest.raises(InputFormatError) as err:
        check_candidates(cands, "runs/c.json")
    # Oracle: the message the rule states, for query 7 of runs/c.json.
    assert str(err.value) == f"runs/c.json, query 7: expected a non-empty query text, got {blank!r}"
    assert err.value.path == "runs/c.json" and err.value.where == "query 7"


def test_several_empty_queries_name_the_first_and_the_count():
    cands = _cands([("1", "q", "a", "d", 1), ("5", "", "b", "d", 1), ("3", " ", "c", "d", 1)])
    with pytest.raises(InputFormatError, match=r"^c\.json, query 5: expected a non-empty query text, got '' \(2 queries"):
        check_candidates(cands, "c.json")


def test_null_query_is_refused_like_an_empty_one():
    cands = _cands([("1", "q", "a", "d", 1)]).vstack(
        pl.DataFrame([("2", None, "b", "d", 1, 0.0)], schema=_SCHEMA, orient="row"))
    with pytest.raises(InputFormatError, match=r"query 2: expected a non-empty query text"):
        check_candidates(cands, "c.json")


def test_empty_documents_are_warned_with_count_and_first_pair_and_kept(caplog):
    cands = _cands([("2", "q2", "z", "  ", 2), ("2", "q2", "y", "text", 1), ("1", "q1", "a", "", 1), ("1", "q1", "b", "t", 2)])
    with caplog.at_level(logging.WARNING):
        out = check_candidates(cands, "c.json")
    # Kept, ordered by (query, first-stage rank); every row still there.
    assert out.select("query_id", "doc_id").rows() == [("1", "a"), ("1", "b"), ("2", "y"), ("2", "z")]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [("c.json: 2 candidate(s) have an empty document text and are scored as empty "
                         "(first: query 2 doc z)")]


def test_no_empty_text_no_warning(caplog):
    with caplog.at_level(logging.WARNING):
        check_candidates(_cands([("1", "q", "a", "d", 1)]), "c.json")
    assert caplog.records == []


def test_dl19_with_one_query_blanked_is_refused_and_writes_nothing(shared_data, tmp_path):
    entries = json.loads((shared_data / "trec-dl19/bm25_retrieve_results_dl19_top100.json").read_text(encoding="utf-8"))
    victim = entries[5]["hits"][0]["qid"]
    entries[5]["query"] = " "
    cands = tmp_path / "dl19.json"
    cands.write_text(json.dumps(entries), encoding="utf-8")
    cfg = {"task": "rerank", "candidates": {"format": "rank_llm_json", "path": str(cands)},
           "qrels": {"format": "trec", "path": str(shared_data / "trec-dl19/qrels.dl19-passage.txt")}}
    with pytest.raises(InputFormatError) as err:
        build_fixture(fixture_dataset("dl19", cfg, seed=4401), tmp_path / "c.parquet", tmp_path / "q.parquet")
    assert str(err.value) == f"{cands}, query {victim}: expected a non-empty query text, got ' '"
    assert not (tmp_path / "c.parquet").exists() and not (tmp_path / "q.parquet").exists()
