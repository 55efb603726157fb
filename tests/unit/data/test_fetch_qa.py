"""QA converters: hand-made files in each source's published schema -> IRCoT JSONL the fixture reads."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from fetch_helpers import SHARED_DATA, fetch_catalogue_entry, requires_file

from presdep.contracts.errors import InputFormatError
from presdep.data.fetch.common import FetchError
from presdep.data.fetch.run import detect_qa_format, fetch
from presdep.data.hotpotqa import read_hotpotqa_ircot

CATALOGUE_SELECTION = {"questions": 2, "paragraphs": 4, "supporting": 2}


def _entry(converter: str, **extra) -> dict:
    return {"task": "qa", "source": {"kind": "url", "converter": converter, "local": {"path": "x"}},
            "first_stage": {"kind": "none"}, "selection": CATALOGUE_SELECTION, **extra}


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _convert(tmp_path: Path, path: Path, converter: str) -> tuple:
    out = tmp_path / "out"
    manifest = fetch("x", _entry(converter), out, layout="qa", local={"path": str(path)})
    return read_hotpotqa_ircot(out / "questions.jsonl"), manifest


# HotpotQA on the Hugging Face hub (hotpotqa/hotpot_qa, distractor): context and
# supporting_facts are column dicts, not the original lists of pairs.
HF_ROWS = [
    {"id": "5a8b57f25542995d1e6f1371", "question": "Were Scott Derrickson and Ed Wood of the same nationality?",
     "answer": "yes", "type": "comparison", "level": "hard",
     "supporting_facts": {"title": ["Scott Derrickson", "Ed Wood"], "sent_id": [0, 0]},
     "context": {"title": ["Ed Wood (film)", "Scott Derrickson", "Woodson, Arkansas", "Ed Wood", "Tyler Bates"],
                 "sentences": [["Ed Wood is a 1994 film.", " It stars Johnny Depp."], ["Scott Derrickson is American."],
                               ["Woodson is a town."], ["Ed Wood was an American filmmaker."], ["Tyler Bates composes."]]}},
    {"id": "q-three", "question": "Three supporting?", "answer": "no", "type": "bridge", "level": "easy",
     "supporting_facts": {"title": ["A", "B", "C"], "sent_id": [0, 0, 0]},
     "context": {"title": ["A", "B", "C"], "sentences": [["a"], ["b"], ["c"]]}},
    {"id": "q2", "question": "Second?", "answer": "Paris", "type": "bridge", "level": "medium",
     "supporting_facts": {"title": ["P2", "P1"], "sent_id": [1, 0]},
     "context": {"title": ["P1", "P2", "P3"], "sentences": [["one."], ["two", "three"], ["four."]]}},
    {"id": "q3", "question": "Past the first 2 eligible", "answer": "x", "type": "bridge", "level": "hard",
     "supporting_facts": {"title": ["X", "Y"], "sent_id": [0, 0]},
     "context": {"title": ["X", "Y"], "sentences": [["x"], ["y"]]}},
]


def test_converter_hotpotqa_hf(tmp_path: Path) -> None:
    qa_set, manifest = _convert(tmp_path, _jsonl(tmp_path / "validation.jsonl", HF_ROWS), "hotpotqa_hf")
    # Hand-worked: question 2 has 3 supporting paragraphs (dropped); the first 2 eligible kept.
    assert qa_set.candidates["query_id"].unique(maintain_order=True).to_list() == ["5a8b57f25542995d1e6f1371", "q2"]
    first = qa_set.candidates.filter(qa_set.candidates["query_id"] == "5a8b57f25542995d1e6f1371")
    # 2 supporting (positions 1 and 3) + the first 2 non-supporting (positions 0 and 2), original order.
    assert first["doc"].to_list() == ["Ed Wood (film): Ed Wood is a 1994 film. It stars Johnny Depp.",
                                      "Scott Derrickson: Scott Derrickson is American.",
                                      "Woodson, Arkansas: Woodson is a town.", "Ed Wood: Ed Wood was an American filmmaker."]
    rel = qa_set.qrels.filter(qa_set.qrels["query_id"] == "5a8b57f25542995d1e6f1371").sort("doc_id")["relevance"].to_list()
    assert rel == [0, 1, 0, 1]
    assert qa_set.gold.sort("query_id")["answer"].to_list() == ["yes", "Paris"]
    # Question q2 has 3 paragraphs, fewer than the selection's cap of 4: kept whole, and the manifest says so.
    assert manifest.rows == {"read": 3, "dropped_other_geometry": 1, "fewer_paragraphs": 1, "questions": 2,
                             "paragraphs": 7, "paragraphs_per_question": {"min": 3, "max": 4}, "duplicate_texts": {"sets": 0, "duplicates": 0}}
    assert detect_qa_format(tmp_path / "validation.jsonl") == "hotpotqa_hf"


def _original_rows() -> list[dict]:
    return [
        {"_id": "5a7a06935542990198eaf050", "question": "Which magazine was started first?", "answer": "Arthur's Magazine",
         "type": "comparison", "level": "medium",
         "supporting_facts": [["Arthur's Magazine", 0], ["First for Women", 0]],
         "context": [["Radio City (Indian radio station)", ["Radio City is India's first private FM station."]],
                     ["Arthur's Magazine", ["Arthur's Magazine (1844-1846) was an American literary periodical", "."]],
                     ["First for Women", ["First for Women is a woman's magazine."]]]},
    ]


def test_converter_hotpotqa_json(tmp_path: Path) -> None:
    path = tmp_path / "hotpot_dev_distractor_v1.json"
    path.write_text(json.dumps(_original_rows()), encoding="utf-8")
    qa_set, _ = _convert(tmp_path, path, "hotpotqa_json")
    assert qa_set.candidates["doc"].to_list() == [
        "Radio City (Indian radio station): Radio City is India's first private FM station.",
        "Arthur's Magazine: Arthur's Magazine (1844-1846) was an American literary periodical.",
        "First for Women: First for Women is a woman's magazine."]
    assert qa_set.qrels.sort("doc_id")["relevance"].to_list() == [0, 1, 1]
    assert detect_qa_format(path) == "hotpotqa_json"


def test_converter_twowiki_json(tmp_path: Path) -> None:
    # 2WikiMultihopQA dev.json: HotpotQA's layout plus "type" and "evidences" triples.
    rows = [{"_id": "8813f87c0bdd11eba7f7acde48001122", "type": "compositional",
             "question": "Who is the mother of the director of film Polish-Russian War (Film)?",
             "context": [["Maheen Khan", ["Maheen Khan is a Pakistani fashion designer."]],
                         ["Polish-Russian War (film)", ["Polish-Russian War is a 2009 film.", " Directed by Xawery Zulawski."]],
                         ["Xawery Zulawski", ["Xawery Zulawski is the son of Malgorzata Braunek."]]],
             "supporting_facts": [["Polish-Russian War (film)", 1], ["Xawery Zulawski", 0]],
             "evidences": [["Polish-Russian War", "director", "Xawery Zulawski"], ["Xawery Zulawski", "mother", "Malgorzata Braunek"]],
             "answer": "Malgorzata Braunek"},
            {"_id": "four", "type": "bridge_comparison", "question": "Four hops?", "answer": "no",
             "context": [["A", ["a"]], ["B", ["b"]], ["C", ["c"]], ["D", ["d"]]],
             "supporting_facts": [["A", 0], ["B", 0], ["C", 0], ["D", 0]], "evidences": []}]
    path = tmp_path / "dev.json"
    path.write_text(json.dumps(rows), encoding="utf-8")
    qa_set, manifest = _convert(tmp_path, path, "twowiki_json")
    assert qa_set.candidates["query_id"].unique().to_list() == ["8813f87c0bdd11eba7f7acde48001122"]
    assert qa_set.qrels.sort("doc_id")["relevance"].to_list() == [0, 1, 1]
    assert qa_set.gold["answer"].to_list() == ["Malgorzata Braunek"]
    assert manifest.rows["dropped_other_geometry"] == 1


def test_converter_musique_jsonl(tmp_path: Path) -> None:
    paragraphs = [{"idx": i, "title": f"T{i}", "paragraph_text": f"text {i}", "is_supporting": i in (5, 1)} for i in range(8)]
    rows = [{"id": "2hop__460946_294723", "paragraphs": paragraphs, "question": "Who is the spouse of the Green performer?",
             "question_decomposition": [{"id": 460946, "question": "Green >> performer", "answer": "Steve Hillage", "paragraph_support_idx": 1},
                                        {"id": 294723, "question": "#1 >> spouse", "answer": "Miquette Giraudy", "paragraph_support_idx": 5}],
             "answer": "Miquette Giraudy", "answer_aliases": ["M. Giraudy"], "answerable": True},
            {"id": "2hop__unanswerable", "paragraphs": paragraphs, "question": "?", "question_decomposition": [],
             "answer": "", "answer_aliases": [], "answerable": False}]
    path = _jsonl(tmp_path / "musique_ans_v1.0_dev.jsonl", rows)
    qa_set, manifest = _convert(tmp_path, path, "musique_jsonl")
    # Supporting 1 and 5 + the first two others (0 and 2), in the original order.
    assert qa_set.candidates["doc"].to_list() == ["T0: text 0", "T1: text 1", "T2: text 2", "T5: text 5"]
    assert qa_set.qrels.sort("doc_id")["relevance"].to_list() == [0, 1, 0, 1]
    assert sorted(qa_set.gold["answer"].to_list()) == ["M. Giraudy", "Miquette Giraudy"]
    assert manifest.rows["read"] == 1  # the unanswerable question is not MuSiQue-Ans


def test_converter_ircot_jsonl(tmp_path: Path) -> None:
    row = {"question_id": "5ab3b0bf5542992ade7c6e39", "question_text": "What year did Guns N Roses perform a promo?",
           "level": "hard", "type": "bridge",
           "answers_objects": [{"number": "", "date": {"day": "", "month": "", "year": ""}, "spans": ["1999"]}],
           "contexts": [{"idx": 0, "title": "A", "paragraph_text": "pa", "is_supporting": True},
                        {"idx": 1, "title": "B", "paragraph_text": "pb", "is_supporting": False},
                        {"idx": 2, "title": "C", "paragraph_text": "pc", "is_supporting": True}]}
    path = _jsonl(tmp_path / "dev_subsampled.jsonl", [row])
    qa_set, _ = _convert(tmp_path, path, "ircot_jsonl")
    assert qa_set.candidates["doc"].to_list() == ["A: pa", "B: pb", "C: pc"]
    assert qa_set.gold["answer"].to_list() == ["1999"]
    assert detect_qa_format(path) == "ircot_jsonl"


def test_bad_qa_files_name_file_and_row(tmp_path: Path) -> None:
    bad = dict(HF_ROWS[0], supporting_facts={"title": ["Nowhere"], "sent_id": [0]})
    with pytest.raises(InputFormatError, match=r"validation.jsonl, line 1: supporting fact title 'Nowhere'"):
        _convert(tmp_path, _jsonl(tmp_path / "validation.jsonl", [bad]), "hotpotqa_hf")
    with pytest.raises(FetchError, match="not a known QA format"):
        detect_qa_format(_jsonl(tmp_path / "other.jsonl", [{"foo": 1}]))


REAL = SHARED_DATA / "hotpotqa-dev200" / "hotpotqa_dev200.jsonl"


@requires_file(REAL, "real HotpotQA dev 200")
def test_real_hotpotqa_dev200_through_the_catalogue_entry(tmp_path: Path) -> None:
    out = tmp_path / "out"
    manifest = fetch_catalogue_entry("hotpotqa", REAL, out, layout="qa")
    qa_set = read_hotpotqa_ircot(out / "questions.jsonl")
    assert qa_set.candidates["query_id"].n_unique() == manifest.rows["questions"]
    assert manifest.rows["questions"] + manifest.rows["dropped_other_geometry"] == manifest.rows["read"] == 200
    # Every kept question has exactly 2 supporting paragraphs and at most 10 in all.
    per_q = qa_set.qrels.group_by("query_id").agg(sup=pl.col("relevance").sum(), n=pl.len())
    assert set(per_q["sup"].to_list()) == {2} and max(per_q["n"].to_list()) <= 10
    # Measured on this file: all 200 questions have their 10 paragraphs (2,000 in all).
    assert (manifest.rows["paragraphs"], manifest.rows["paragraphs_per_question"], manifest.rows["fewer_paragraphs"]) == (
        2000, {"min": 10, "max": 10}, 0)


def test_release_zip_is_verified_and_its_member_converted(tmp_path: Path) -> None:
    """The url route, offline: a file:// URL to a zip laid out as MuSiQue's release, sha256 pinned."""
    import hashlib
    import zipfile

    paragraphs = [{"idx": i, "title": f"T{i}", "paragraph_text": f"p{i}", "is_supporting": i < 2} for i in range(3)]
    row = {"id": "2hop__1", "paragraphs": paragraphs, "question": "q?", "question_decomposition": [],
           "answer": "a", "answer_aliases": [], "answerable": True}
    archive = tmp_path / "musique_v1.0.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("data/musique_ans_v1.0_dev.jsonl", json.dumps(row) + "\n")
        zf.writestr("data/musique_full_v1.0_dev.jsonl", "")
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    source = {"kind": "url", "converter": "musique_jsonl", "url": archive.as_uri(), "filename": "musique_v1.0.zip",
              "member": "musique_ans_v1.0_dev.jsonl", "sha256": digest, "local": {"path": "x"}}
    entry = {"task": "qa", "source": source, "first_stage": {"kind": "none"}, "selection": CATALOGUE_SELECTION}
    out = tmp_path / "out"
    manifest = fetch("musique", entry, out, layout="qa", download_dir=tmp_path / "dl")
    assert manifest.sha256 == {"musique_v1.0.zip": digest} and manifest.version["pinned"] is True
    assert read_hotpotqa_ircot(out / "questions.jsonl").gold["answer"].to_list() == ["a"]
    (tmp_path / "dl" / "musique_v1.0.zip").write_bytes(b"tampered")
    with pytest.raises(FetchError, match="does not match the catalogue's pinned"):
        fetch("musique", entry, tmp_path / "out2", layout="qa", download_dir=tmp_path / "dl")
