"""The three rubric templates: structure of METHODS.md, hashes, per-dataset instruction, users' own files."""

from __future__ import annotations

import hashlib
from importlib import resources

import pytest

from presdep.scoring.template import load_template

RUBRICS = {
    # name: (query label, items label, default instruction, a phrase of grade 3's meaning)
    "relevance_v2": ("Query", "Documents",
                     "Given a web search query, retrieve relevant passages that answer the query", "directly and completely"),
    "answer_support_v2": ("Query", "Documents",
                          "Given a multi-hop question, identify passages that support answering the question",
                          "directly contains the facts needed"),
    "response_quality_v2": ("Prompt", "Responses",
                            "Given a user prompt, rate candidate assistant responses by overall quality", "excellent"),
}


@pytest.mark.parametrize("name", sorted(RUBRICS))
def test_rubric_structure(name):
    qlabel, ilabel, instruction, top = RUBRICS[name]
    t = load_template(name)
    assert t.name == name
    data = resources.files("presdep.scoring").joinpath("templates", f"{name}.yaml").read_bytes()
    assert t.sha256 == hashlib.sha256(data).hexdigest()
    # The system message names the grader's role and asks for one fixed integer grade per item.
    assert t.system and "0, 1, 2 or 3" in t.system and "explain" in t.system
    lines = t.render("what  is\nx", ["first  doc", "", "third"], max_doc_chars=None).split("\n")
    # METHODS.md order: Instruction, query label, blank, items label, items, blank, task
    # sentence, the line announcing one grade per item, grades 3..0, output form.
    assert lines[0] == f"Instruction: {instruction}"
    assert lines[1] == f"{qlabel}: what is x"
    assert lines[2] == "" and lines[3] == f"{ilabel}:"
    assert lines[4:7] == ["[1] first doc", "[2]", "[3] third"]
    assert lines[7] == ""
    assert lines[8]  # the task sentence
    assert "one integer grade per" in lines[9]
    assert [ln[:4] for ln in lines[10:14]] == ["3 = ", "2 = ", "1 = ", "0 = "]
    assert top in lines[10]
    assert "[<id>] Grade: <0|1|2|3>" in lines[14] and "[1] to [3]" in lines[14]
    assert len(lines) == 15
    msgs = t.messages("q", ["d"], instruction="Custom instruction")
    assert [m["role"] for m in msgs] == ["system", "user"]
    assert msgs[1]["content"].startswith("Instruction: Custom instruction\n")


def test_answer_support_grades_support_not_topicality():
    assert "not topical similarity" in load_template("answer_support_v2").render("q", ["d"])


def test_three_rubrics_differ_and_cut_documents():
    hashes = {load_template(n).sha256 for n in RUBRICS}
    assert len(hashes) == 3
    msg = load_template("relevance_v2").render("q", ["abcdef  ghij"], max_doc_chars=7)
    assert "[1] abcdef \n" in msg and "ghij" not in msg  # collapsed, then cut to 7 characters


def test_users_own_rubric_file(tmp_path):
    src = resources.files("presdep.scoring").joinpath("templates", "relevance_v2.yaml").read_text()
    own = tmp_path / "legal.yaml"
    own.write_text(src.replace("name: relevance", "name: legal_relevance").replace("Query", "Legal query"))
    t = load_template(str(own))
    assert t.name == "legal_relevance_v2" and t.sha256 == hashlib.sha256(own.read_bytes()).hexdigest()
    assert "\nLegal query: q\n" in t.render("q", ["d"])
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nversion: 1\n")
    with pytest.raises(ValueError, match=r"bad.yaml: rubric template lacks key\(s\)"):
        load_template(str(bad))
    grades = tmp_path / "grades.yaml"
    grades.write_text(src.replace("  0: the document is not relevant to the query\n", ""))
    with pytest.raises(ValueError, match="exactly the grades 3, 2, 1 and 0"):
        load_template(str(grades))
    with pytest.raises(FileNotFoundError, match="nope.yaml"):
        load_template(str(tmp_path / "nope.yaml"))
    with pytest.raises(FileNotFoundError, match="not found in presdep/scoring/templates"):
        load_template("no_such_rubric")
