import polars as pl
import pytest

from presdep.config import apply_replacing_sections, protocol_for
from presdep.data.errors import InputFormatError
from presdep.fixtures import build_fixture
from presdep.schemas import read_metadata, read_table


def test_dl19_fixture(shared_data, tmp_path):
    cfg = {
        "task": "rerank",
        "candidates": {"format": "rank_llm_json", "path": str(shared_data / "trec-dl19/bm25_retrieve_results_dl19_top100.json")},
        "qrels": {"format": "trec", "path": str(shared_data / "trec-dl19/qrels.dl19-passage.txt")},
    }
    build_fixture("dl19", cfg, tmp_path / "c.parquet", tmp_path / "q.parquet", {"x": 1})
    cands = read_table(tmp_path / "c.parquet", "candidates")
    qrels = read_table(tmp_path / "q.parquet", "qrels")
    assert cands.height == 4300 and qrels.height == 9260
    first = cands.filter(pl.col("query_id") == "264014").head(1)
    assert first["first_stage_rank"][0] == 1 and first["doc_id"][0] == "5611210"
    assert read_metadata(tmp_path / "c.parquet")["dataset"] == "dl19"


def test_qrels_for_unknown_queries_are_skipped_and_logged(tmp_path, caplog):
    cands = tmp_path / "c.json"
    cands.write_text('[{"query": "q", "hits": [{"content": "x", "qid": "1", "docid": "a", "rank": 1, "score": 1.0}]}]')
    qrels = tmp_path / "q.txt"
    qrels.write_text("1 0 a 1\n99 0 z 1\n")
    cfg = {"task": "rerank", "candidates": {"format": "rank_llm_json", "path": str(cands)}, "qrels": {"format": "trec", "path": str(qrels)}}
    build_fixture("tiny", cfg, tmp_path / "c.parquet", tmp_path / "q.parquet")
    assert "1 judgement(s) for 1 query id(s) without candidates are ignored" in caplog.text
    assert read_table(tmp_path / "q.parquet", "qrels")["query_id"].to_list() == ["1"]


def test_no_matching_qrels_is_an_error_and_writes_nothing(tmp_path):
    cands = tmp_path / "c.json"
    cands.write_text('[{"query": "q", "hits": [{"content": "x", "qid": "1", "docid": "a", "rank": 1, "score": 1.0}]}]')
    qrels = tmp_path / "q.txt"
    qrels.write_text("7 0 a 1\n")
    cfg = {"task": "rerank", "candidates": {"format": "rank_llm_json", "path": str(cands)}, "qrels": {"format": "trec", "path": str(qrels)}}
    with pytest.raises(InputFormatError, match="no judgement matches a query"):
        build_fixture("tiny", cfg, tmp_path / "c.parquet", tmp_path / "q.parquet")
    assert not (tmp_path / "c.parquet").exists() and not (tmp_path / "q.parquet").exists()


def test_user_config_replaces_datasets_and_variants(tmp_path):
    default = {
        "protocol": {"M": 4, "B": {"rerank": 5}},
        "datasets": {"synthetic": {"task": "rerank"}},
        "variants": {"bm25": {"scorer": "identity"}, "off": {"scorer": "transformers"}},
    }
    user = tmp_path / "user.yaml"
    user.write_text("datasets:\n  dl19: {task: rerank, B: 20}\nvariants:\n  mine: {scorer: identity}\n")
    merged = apply_replacing_sections(default, [user])
    assert list(merged["datasets"]) == ["dl19"]
    assert list(merged["variants"]) == ["mine"]
    assert merged["protocol"]["M"] == 4
    assert protocol_for(merged, "dl19")["B"] == 20
