"""The readers' guards (ids, grades, ranks, scores) and what a mixed-up file is said to look like."""

from __future__ import annotations

import json
import logging

import pytest

from presdep.contracts.errors import InputFormatError, cut
from presdep.data.beir import read_beir_qrels
from presdep.data.corpus import iter_corpus, read_queries
from presdep.data.guards import MAX_GRADE, MAX_ID_CHARS
from presdep.data.rank_llm import read_rank_llm_json
from presdep.data.trec import read_qrels, read_run, read_topics


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _error(reader, path, *args, **kwargs) -> str:
    with pytest.raises(InputFormatError) as err:
        result = reader(path, *args, **kwargs)
        if not isinstance(result, (dict, list)) and hasattr(result, "__next__"):
            list(result)
    message = str(err.value)
    assert str(path) in message and "\n" not in message
    return message


def test_cut_keeps_short_values_and_shortens_long_ones():
    assert cut("a") == "'a'" and cut(7) == "7"
    long = cut("x" * 1_500_000)
    assert long.startswith("'xxx") and long.endswith("... (1,500,000 characters)") and len(long) < 120


@pytest.mark.parametrize("grade, says", [(2**31 - 1, "above the maximum 65535"), (MAX_GRADE + 1, "above the maximum"),
                                         (2**31, "above the maximum"), (2**70, "above the maximum"),
                                         (-(2**31) - 1, "32-bit")])
def test_qrels_grade_outside_the_bounds_is_an_error_with_its_line(tmp_path, grade, says):
    """2**31 - 1 fitted Int32 and ran the metrics out of memory (trec_eval: a counter per grade level)."""
    path = _write(tmp_path, "qrels.txt", f"1 0 a 1\n1 0 b {grade}\n")
    assert f"line 2: grade {grade} " in _error(read_qrels, path) and says in _error(read_qrels, path)
    beir = _write(tmp_path, "test.tsv", f"query-id\tcorpus-id\tscore\n1\ta\t{grade}\n")
    assert "line 2: grade " in _error(read_beir_qrels, beir)


def test_the_largest_grade_is_kept(tmp_path):
    path = _write(tmp_path, "qrels.txt", f"1 0 a 1\n1 0 b {MAX_GRADE}\n")
    assert read_qrels(path)["relevance"].to_list() == [1, MAX_GRADE]


def test_negative_grades_are_kept_and_said_once_per_file(tmp_path, caplog):
    path = _write(tmp_path, "qrels.txt", "1 0 a 1\n1 0 b -1\n1 0 c -2\n2 0 d 0\n")
    with caplog.at_level(logging.WARNING):
        qrels = read_qrels(path)
    assert qrels["relevance"].to_list() == [1, -1, -2, 0]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert str(path) in warnings[0] and "2 judgement(s) have a negative grade (first: line 2)" in warnings[0]


@pytest.mark.parametrize("rank", [str(2**31), str(2**63), str(-(2**31) - 1)])
def test_run_rank_outside_int32_is_an_error(tmp_path, rank):
    path = _write(tmp_path, "run.trec", f"1 Q0 a 1 2.0 t\n1 Q0 b {rank} 1.0 t\n")
    assert "line 2: rank " in _error(read_run, path)


@pytest.mark.parametrize("score", ["inf", "-inf", "1e400", "nan", "NaN", "-Infinity"])
def test_run_score_must_be_finite(tmp_path, score):
    path = _write(tmp_path, "run.trec", f"1 Q0 a 1 2.0 t\n1 Q0 b 2 {score} t\n")
    message = _error(read_run, path)
    assert f"line 2: score {score!r} is not a finite number" in message


@pytest.mark.parametrize("score", ["NaN", "Infinity", "1e400", '"inf"'])
def test_rank_llm_score_must_be_finite(tmp_path, score):
    path = _write(tmp_path, "cands.json",
                  '[{"query": "q", "hits": [{"content": "x", "qid": 1, "docid": "a", "rank": 1, '
                  '"score": %s}]}]' % score)
    assert "entry 0 hit 0: score " in _error(read_rank_llm_json, path)


def test_rank_llm_rank_outside_int32(tmp_path):
    path = _write(tmp_path, "cands.json", json.dumps(
        [{"query": "q", "hits": [{"content": "x", "qid": 1, "docid": "a", "rank": 2**63, "score": 1.0}]}]))
    assert "entry 0 hit 0: rank 9223372036854775808 is outside the 32-bit" in _error(read_rank_llm_json, path)


BIG = "d" * 5_000_000  # a 5 MB id: the message must show a prefix and the size, never the id


def _id_cases(tmp_path, bad: str):
    """(reader, path, args) for every reader of ids, each file with ``bad`` as an id on line 2 / entry 0."""
    rl = [{"query": "q", "hits": [{"content": "x", "qid": 1, "docid": bad, "rank": 1, "score": 1.0}]}]
    return [
        (read_run, _write(tmp_path, "run.trec", f"1 Q0 a 1 2.0 t\n1 Q0 {bad} 2 1.0 t\n"), ()),
        (read_qrels, _write(tmp_path, "qrels.txt", f"1 0 a 1\n1 0 {bad} 1\n"), ()),
        (read_beir_qrels, _write(tmp_path, "test.tsv", f"query-id\tcorpus-id\tscore\n{bad}\ta\t1\n"), ()),
        (read_topics, _write(tmp_path, "topics.txt", f"1\tfirst\n{bad}\tsecond\n"), ()),
        (read_queries, _write(tmp_path, "queries.jsonl", '{"_id": "1", "text": "t"}\n' + json.dumps(
            {"_id": bad, "text": "t"}) + "\n"), ("jsonl",)),
        (iter_corpus, _write(tmp_path, "corpus.jsonl", '{"id": "1", "contents": "t"}\n' + json.dumps(
            {"id": bad, "contents": "t"}) + "\n"), ("jsonl",)),
        (iter_corpus, _write(tmp_path, "collection.tsv", f"1\tone\n{bad}\ttwo\n"), ("tsv",)),
        (iter_corpus, _write(tmp_path, "docs.trec",
                             f"<DOC><DOCNO>1</DOCNO>x</DOC>\n<DOC><DOCNO>{bad}</DOCNO>y</DOC>\n"), ("trec",)),
        (iter_corpus, _write(tmp_path, "rl.json", json.dumps(rl)), ("rank_llm_json",)),
        (read_rank_llm_json, tmp_path / "rl.json", ()),
    ]


def test_a_huge_id_is_refused_and_never_echoed(tmp_path):
    for reader, path, args in _id_cases(tmp_path, BIG):
        message = _error(reader, path, *args)
        assert f"longer than {MAX_ID_CHARS} characters" in message, (reader, path)
        assert "(5,000,000 characters)" in message and len(message) < 500, (reader, path)
        assert "line 2" in message or "entry 0 hit 0" in message, message


@pytest.mark.parametrize("bad", ["a\x00b", "a\x01b", "a\x7fb"])
def test_an_id_with_a_control_character_is_refused(tmp_path, bad):
    for reader, path, args in _id_cases(tmp_path, bad):
        message = _error(reader, path, *args)
        assert "contains the control character" in message, (reader, path, message)


def test_an_id_at_the_limit_is_kept(tmp_path):
    ok = "d" * MAX_ID_CHARS
    path = _write(tmp_path, "run.trec", f"1 Q0 {ok} 1 2.0 t\n")
    assert read_run(path)["doc_id"].to_list() == [ok]


RUN_LINE = "264014 Q0 5611210 1 15.22 Anserini"
QRELS_LINE = "264014 0 5611210 2"


@pytest.mark.parametrize("reader, name, content, args, says", [
    (read_rank_llm_json, "cands.json", f"{RUN_LINE}\n", (), "this looks like a TREC run (qid Q0 docid rank score tag): "
     "use format: trec_run with run: {path}"),
    (read_topics, "topics.txt", f"{QRELS_LINE}\n", (),
     "this looks like TREC qrels (qid 0 docid grade): use it as qrels"),
    (read_topics, "topics.txt", QRELS_LINE.replace(" ", "\t") + "\n", (), "this looks like TREC qrels"),
    (read_qrels, "qrels.txt", f"{RUN_LINE}\n", (), "this looks like a TREC run"),
    (read_qrels, "qrels.txt", "264014\thow long is life cycle\n", (), "this looks like tab-separated id<TAB>text"),
    (read_qrels, "qrels.txt", "1\tthree word topic\n", (), "grade 'topic' is not an integer; this looks like "
     "tab-separated id<TAB>text"),
    (read_qrels, "qrels.txt", "query-id\tcorpus-id\tscore\n", (), "this looks like BEIR qrels"),
    (read_beir_qrels, "test.tsv", f"{QRELS_LINE}\n", (), "this looks like TREC qrels"),
    (read_run, "run.trec", f"{QRELS_LINE}\n", (), "this looks like TREC qrels"),
    (read_run, "run.trec", '[{"query": "q", "hits": []}]\n', (), "are format: rank_llm_json with path: {path}"),
    (iter_corpus, "collection.tsv", '{"id": "1", "contents": "x"}\n', ("tsv",), "this looks like JSON lines"),
    (iter_corpus, "collection.tsv", "<DOC>\n", ("tsv",), "this looks like TREC SGML documents"),
    (iter_corpus, "corpus.jsonl", "1\tsome passage\n", ("jsonl",), "this looks like tab-separated id<TAB>text (topics "
     "or a passage collection): use format: tsv"),
    (read_queries, "queries.jsonl", "1\tsome query\n", ("jsonl",), "use format: tsv"),
    (iter_corpus, "collection.tsv", QRELS_LINE.replace(" ", "\t") + "\n", ("tsv",), "this looks like TREC qrels"),
])
def test_a_mixed_up_file_says_what_it_looks_like(tmp_path, reader, name, content, args, says):
    path = _write(tmp_path, name, content)
    message = _error(reader, path, *args)
    assert says.format(path=path) in message, message


@pytest.mark.parametrize("reader, args", [(read_qrels, ()), (read_run, ()), (read_topics, ()),
                                          (iter_corpus, ("jsonl",)), (iter_corpus, ("tsv",))])
def test_a_beir_folder_given_as_a_file(tmp_path, reader, args):
    folder = tmp_path / "scifact"
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text('{"_id": "1", "title": "", "text": "x"}\n', encoding="utf-8")
    message = _error(reader, folder, *args)
    assert "path: is a folder, expected a file; this looks like a BEIR folder" in message
    assert "use format: beir" in message


def test_the_real_files_mixed_up_say_what_they_are(shared_data):
    """DL19's qrels (whose second column is Q0) as topics, its run as qrels, its topics as qrels."""
    dl19 = shared_data / "trec-dl19"
    assert "this looks like TREC qrels" in _error(read_topics, dl19 / "qrels.dl19-passage.txt")
    assert "this looks like a TREC run" in _error(read_qrels, dl19 / "bm25_trec_run_dl19_top100.txt")
    assert "this looks like tab-separated id<TAB>text" in _error(read_qrels, dl19 / "topics.dl19-passage.txt")
    run = dl19 / "bm25_trec_run_dl19_top100.txt"
    assert f"use format: trec_run with run: {run}" in _error(read_rank_llm_json, run)
