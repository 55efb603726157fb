"""A leading UTF-8 byte-order mark is dropped by every text reader and said once in the log.

Oracle: the real file read without the mark (and, for qrels and runs, the file split by
hand here); the copy with ``EF BB BF`` prepended must give exactly the same table.
"""

from __future__ import annotations

import gzip
import logging
from pathlib import Path

import polars as pl
import pytest

from presdep.contracts.errors import InputFormatError
from presdep.data.beir import read_beir_qrels
from presdep.data.corpus import iter_corpus, read_beir_queries, read_jsonl_queries
from presdep.data.hotpotqa import read_hotpotqa
from presdep.data.rank_llm import read_rank_llm_json
from presdep.data.responses import read_rm_bench
from presdep.data.text_input import json_list, json_records, text_lines
from presdep.data.trec import read_qrels, read_run, read_topics

BOM = b"\xef\xbb\xbf"
NOTE = "starts with a UTF-8 byte-order mark; ignored"


def _with_bom(src: Path, dst: Path) -> Path:
    """``src`` with a BOM before its first byte (inside the gzip stream for .gz files)."""
    if src.suffix == ".gz":
        with gzip.open(src, "rb") as fh:
            data = fh.read()
        dst.write_bytes(gzip.compress(BOM + data))
    else:
        dst.write_bytes(BOM + src.read_bytes())
    return dst


def _bom_notes(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and NOTE in r.getMessage()]


def test_dl19_qrels_with_bom_are_the_same_table(shared_data, tmp_path, caplog):
    src = shared_data / "trec-dl19/qrels.dl19-passage.txt"
    # Oracle, by hand: whitespace-split 'qid 0 docid grade' lines of the original.
    rows = [line.split() for line in src.read_text(encoding="utf-8").splitlines() if line.strip()]
    oracle = pl.DataFrame(
        {"query_id": [r[0] for r in rows], "doc_id": [r[2] for r in rows], "relevance": [int(r[3]) for r in rows]},
        schema={"query_id": pl.String, "doc_id": pl.String, "relevance": pl.Int32},
    )
    assert oracle.height == 9260 and oracle["query_id"][0] == "19335"
    original = read_qrels(src)
    assert original.equals(oracle)
    assert _bom_notes(caplog) == []

    bommed = _with_bom(src, tmp_path / "qrels.dl19-passage.txt")
    got = read_qrels(bommed)
    assert got.equals(oracle)
    assert not got["query_id"].str.starts_with("\ufeff").any()
    assert _bom_notes(caplog) == [f"{bommed}: {NOTE}"]


def test_dl19_run_with_bom_is_the_same_table(shared_data, tmp_path, caplog):
    src = shared_data / "trec-dl19/bm25_trec_run_dl19_top100.txt"
    rows = [line.split() for line in src.read_text(encoding="utf-8").splitlines() if line.strip()]
    oracle = pl.DataFrame(
        {"query_id": [r[0] for r in rows], "doc_id": [r[2] for r in rows],
         "rank": [int(r[3]) for r in rows], "score": [float(r[4]) for r in rows]},
        schema={"query_id": pl.String, "doc_id": pl.String, "rank": pl.Int32, "score": pl.Float64},
    )
    assert oracle.height == 4300
    assert read_run(src).equals(oracle)
    bommed = _with_bom(src, tmp_path / "run.txt")
    assert read_run(bommed).equals(oracle)
    assert _bom_notes(caplog) == [f"{bommed}: {NOTE}"]


def _beir_folder(shared: Path, dst: Path, bom_in: set[str]) -> Path:
    """A copy of the SciFact BEIR folder, with a BOM in the files named in ``bom_in``."""
    (dst / "qrels").mkdir(parents=True)
    for rel in ("corpus.jsonl.gz", "queries.jsonl", "qrels/test.tsv"):
        if rel in bom_in:
            _with_bom(shared / "beir-scifact" / rel, dst / rel)
        else:
            (dst / rel).write_bytes((shared / "beir-scifact" / rel).read_bytes())
    return dst


def test_beir_folder_with_bom_everywhere_reads_the_same(shared_data, tmp_path, caplog):
    src = shared_data / "beir-scifact"
    every = {"corpus.jsonl.gz", "queries.jsonl", "qrels/test.tsv"}
    bommed = _beir_folder(shared_data, tmp_path / "scifact", every)

    # qrels/test.tsv: the BOM sits before the header; kept, the header would be read as a judgement.
    assert read_beir_qrels(bommed).equals(read_beir_qrels(src))
    assert read_beir_qrels(bommed).height == 339
    # queries.jsonl: the first line's object would not parse as JSON with the mark kept.
    assert read_beir_queries(bommed) == read_beir_queries(src)
    assert read_jsonl_queries(bommed / "queries.jsonl") == read_jsonl_queries(src / "queries.jsonl")
    # corpus.jsonl.gz: the mark inside the gzip stream.
    docs = list(iter_corpus(bommed, "beir"))
    assert docs == list(iter_corpus(src, "beir")) and len(docs) == 5183

    notes = _bom_notes(caplog)
    assert sorted(notes) == sorted(f"{bommed / rel}: {NOTE}" for rel in every)  # once per file, however often read


def test_rank_llm_json_with_bom(shared_data, tmp_path, caplog):
    src = shared_data / "trec-dl19/bm25_retrieve_results_dl19_top100.json"
    bommed = _with_bom(src, tmp_path / "dl19.json")
    got = read_rank_llm_json(bommed)
    assert got.equals(read_rank_llm_json(src)) and got.height == 4300
    assert _bom_notes(caplog) == [f"{bommed}: {NOTE}"]


def test_topics_with_bom(shared_data, tmp_path, caplog):
    src = shared_data / "trec-dl19/topics.dl19-passage.txt"
    bommed = _with_bom(src, tmp_path / "topics.txt")
    got = read_topics(bommed)
    assert got == read_topics(src) and len(got) == 43
    assert not any(q.startswith("\ufeff") for q in got)
    assert _bom_notes(caplog) == [f"{bommed}: {NOTE}"]


def _same_frames(a, b) -> bool:
    return all((x is None and y is None) or x.equals(y) for x, y in zip(a, b, strict=True))


def test_qa_jsonl_and_response_json_with_bom(shared_data, tmp_path, caplog):
    qa = shared_data / "hotpotqa-dev200/hotpotqa_dev200.jsonl"
    qa_bom = _with_bom(qa, tmp_path / "hotpotqa.jsonl")
    assert _same_frames(read_hotpotqa(qa_bom, "ircot_jsonl"), read_hotpotqa(qa, "ircot_jsonl"))
    rm = shared_data / "rm-bench/chat_filtered.json"
    rm_bom = _with_bom(rm, tmp_path / "chat.json")
    assert _same_frames(read_rm_bench(rm_bom), read_rm_bench(rm))
    assert sorted(_bom_notes(caplog)) == sorted([f"{qa_bom}: {NOTE}", f"{rm_bom}: {NOTE}"])


def test_bom_helpers_small_files(tmp_path, caplog):
    f = tmp_path / "rows.jsonl"
    f.write_bytes(BOM + b'{"a": 1}\n{"a": 2}\n')
    assert [o for _, o in json_records(f)] == [{"a": 1}, {"a": 2}]
    g = tmp_path / "list.json"
    g.write_bytes(BOM + b"[1, 2]")
    assert json_list(g, "numbers") == [1, 2]
    # Only a LEADING mark is dropped; one inside the text is the user's data and stays.
    h = tmp_path / "t.txt"
    h.write_bytes(b"a\n\xef\xbb\xbfb\n")
    assert list(text_lines(h)) == [(1, "a"), (2, "\ufeffb")]
    assert sorted(_bom_notes(caplog)) == sorted([f"{f}: {NOTE}", f"{g}: {NOTE}"])


@pytest.mark.parametrize("mark", [b"\xff\xfe", b"\xfe\xff"])
def test_utf16_file_is_refused_as_not_utf8(tmp_path, mark):
    f = tmp_path / "qrels.txt"
    f.write_bytes(mark + "1 0 a 1\n".encode("utf-16-le" if mark == b"\xff\xfe" else "utf-16-be"))
    with pytest.raises(InputFormatError, match=r"qrels\.txt, line 1: UTF-8 text, not a UTF-16 byte-order mark"):
        read_qrels(f)


# -------------------------------------------------- the readers outside presdep.data


def test_yaml_config_with_bom_reads_the_same_and_stays_strict(tmp_path, caplog):
    from presdep.config.yaml_io import load_yaml

    text = "datasets:\n  - dl19\nprotocol:\n  M: 5\n"
    plain, bommed = tmp_path / "a.yaml", tmp_path / "b.yaml"
    plain.write_text(text, encoding="utf-8")
    bommed.write_bytes(BOM + text.encode())
    assert load_yaml(bommed) == load_yaml(plain) == {"datasets": ["dl19"], "protocol": {"M": 5}}
    assert _bom_notes(caplog) == [f"{bommed}: {NOTE}"]
    dup = tmp_path / "dup.yaml"
    dup.write_bytes(BOM + b"a: 1\nb: 2\na: 3\n")  # the mark shifts nothing: the lines are still 1 and 3
    with pytest.raises(InputFormatError, match=r"line 1 and line 3: key 'a' appears twice"):
        load_yaml(dup)


def test_prompt_template_with_bom_is_the_same_template(tmp_path, caplog):
    from presdep.scoring.template import load_template

    text = "Query: {query}\nGrade each passage 0-3.\n"
    plain, bommed = tmp_path / "plain.txt", tmp_path / "bommed.txt"
    plain.write_text(text, encoding="utf-8")
    bommed.write_bytes(BOM + text.encode())
    a, b = load_template(str(plain)), load_template(str(bommed))
    assert b.user == a.user == text and not b.user.startswith("\ufeff")
    assert b.sha256 == a.sha256  # same text, same identity in the caches
    assert _bom_notes(caplog) == [f"{bommed}: {NOTE}"]
    rubric = tmp_path / "rubric.yaml"
    rubric.write_bytes(BOM + b"name: x\n")
    with pytest.raises(ValueError, match="rubric template lacks key"):  # parsed (not a BOM error) and checked
        load_template(str(rubric))


def test_run_report_and_bench_split_with_bom(tmp_path, caplog):
    import json

    from presdep.bench.suite import PUBLIC_PATH, read_split
    from presdep.report.run_reports import read_report

    doc = {"model": "m", "tasks": [{"id": "q1", "score": 0.5}]}
    rep = tmp_path / "r.json"
    rep.write_bytes(BOM + json.dumps(doc).encode())
    assert read_report(rep).tasks == [("report", "q1", 0.5)]
    split = _with_bom(PUBLIC_PATH, tmp_path / "public.jsonl")
    assert read_split(split) == read_split(PUBLIC_PATH)
    assert _bom_notes(caplog) == [f"{rep}: {NOTE}", f"{split}: {NOTE}"]
    rep.write_bytes(b'{"model": "m", "tasks": [{"id": "q\xff", "score": 1}]}')
    with pytest.raises(ValueError, match=r"r\.json, line 1: not valid UTF-8 \(byte 34"):
        read_report(rep)
