"""Loaders on the real files in their original formats, and their errors on bad input."""

import gzip

import polars as pl
import pytest

from presdep.contracts.errors import InputFormatError
from presdep.data.beir import read_beir_qrels
from presdep.data.rank_llm import read_rank_llm_json
from presdep.data.trec import read_qrels, read_run, read_topics, write_qrels, write_run


def test_dl19_files(shared_data):
    dl19 = shared_data / "trec-dl19"
    cands = read_rank_llm_json(dl19 / "bm25_retrieve_results_dl19_top100.json")
    assert cands["query_id"].n_unique() == 43
    assert cands.group_by("query_id").len()["len"].to_list() == [100] * 43
    assert (cands["doc"].str.len_chars() > 0).all()
    qrels = read_qrels(dl19 / "qrels.dl19-passage.txt")
    assert qrels["query_id"].n_unique() == 43
    assert set(qrels["relevance"].unique().to_list()) == {0, 1, 2, 3}
    run = read_run(dl19 / "bm25_trec_run_dl19_top100.txt")
    assert run.height == 4300
    # The TREC run and the JSON are the same BM25 ranking.
    joined = cands.join(run, on=["query_id", "doc_id"])
    assert joined.height == 4300
    assert (joined["first_stage_rank"] == joined["rank"]).all()
    topics = read_topics(dl19 / "topics.dl19-passage.txt")
    assert set(topics) >= set(cands["query_id"].unique().to_list())
    assert topics["264014"] == "how long is life cycle of flea"


def test_beir_qrels(shared_data):
    qrels = read_beir_qrels(shared_data / "beir-scifact")
    assert qrels.height == 339
    assert qrels["query_id"].n_unique() == 300


def test_trec_round_trip(tmp_path):
    q = pl.DataFrame({"query_id": ["1", "1"], "doc_id": ["a", "b"], "relevance": [1, 0]},
                     schema={"query_id": pl.String, "doc_id": pl.String, "relevance": pl.Int32})
    write_qrels(q, tmp_path / "q.txt")
    assert read_qrels(tmp_path / "q.txt").to_dicts() == q.to_dicts()
    r = pl.DataFrame({"query_id": ["1", "1"], "doc_id": ["a", "b"], "rank": [1, 2], "score": [2.5, 1.0]})
    write_run(r, tmp_path / "r.txt")
    back = read_run(tmp_path / "r.txt")
    assert back["doc_id"].to_list() == ["a", "b"] and back["score"].to_list() == [2.5, 1.0]


@pytest.mark.parametrize(
    "reader, content, match",
    [
        (read_qrels, "1 0 a 1\n1 0 b\n", r"line 2: expected 4 columns"),
        (read_qrels, "1 0 a 1\n1 0 a 2\n", r"line 2: document 'a' judged twice"),
        (read_qrels, "1 0 a high\n", r"line 1: grade 'high' is not an integer"),
        (read_run, "1 Q0 a 1 2.0 t\n1 Q0 a 2 1.0 t\n", r"line 2: document 'a' listed twice"),
        (read_run, "1 Q0 a one 2.0 t\n", r"line 1: rank 'one' must be an integer"),
        (read_topics, "1\tfirst\n2 second\n", r"line 2: expected 'qid<TAB>query text'"),
        (read_topics, "1\tfirst\n1\tagain\n", r"line 2: query id '1' appears twice"),
    ],
)
def test_malformed_lines_name_file_and_line(tmp_path, reader, content, match):
    path = tmp_path / "input.txt"
    path.write_text(content)
    with pytest.raises(InputFormatError, match=match) as err:
        reader(path)
    assert str(path) in str(err.value)


def test_non_utf8_names_line(tmp_path):
    path = tmp_path / "qrels.txt"
    path.write_bytes(b"1 0 a 1\n1 0 b\xff 0\n")
    with pytest.raises(InputFormatError, match=r"qrels.txt, line 2: not valid UTF-8"):
        read_qrels(path)


def test_gzip_is_read_transparently(tmp_path):
    path = tmp_path / "qrels.txt.gz"
    with gzip.open(path, "wt") as fh:
        fh.write("1 0 a 1\n")
    assert read_qrels(path).height == 1


def _rank_llm(tmp_path, text):
    path = tmp_path / "cands.json"
    path.write_text(text)
    return path


def test_rank_llm_errors(tmp_path):
    hit = '{"content": "x", "qid": 1, "docid": "%s", "rank": %d, "score": 1.0}'
    dup = '[{"query": "q", "hits": [%s, %s]}]' % (hit % ("a", 1), hit % ("a", 2))
    with pytest.raises(InputFormatError, match=r"entry 0 hit 1: document 'a' appears twice"):
        read_rank_llm_json(_rank_llm(tmp_path, dup))
    with pytest.raises(InputFormatError, match=r"entry 0: query 'q' has no candidates"):
        read_rank_llm_json(_rank_llm(tmp_path, '[{"query": "q", "hits": []}]'))
    with pytest.raises(InputFormatError, match=r"line 2 column \d+: invalid JSON"):
        read_rank_llm_json(_rank_llm(tmp_path, '[{"query": "q",\n "hits": [}]'))
    missing = '[{"query": "q", "hits": [{"content": "x", "qid": 1, "rank": 1, "score": 1}]}]'
    with pytest.raises(InputFormatError, match=r"entry 0 hit 0: missing field\(s\) \['docid'\]"):
        read_rank_llm_json(_rank_llm(tmp_path, missing))
