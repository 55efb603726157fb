"""Every YAML the project reads is read strictly: a key given twice in one mapping is an error
naming the file, the key and both lines (PyYAML's safe_load keeps the last one silently)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from workflow_utils import REPO, scratch_workflow, snakemake

from presdep.config import SCHEMA_PATH, load_workflow_config, load_yaml
from presdep.config.catalogue import CATALOGUE_PATH, load_catalogue
from presdep.config.load import apply_replacing_sections, check_config_files
from presdep.config.yaml_io import parse_yaml
from presdep.contracts.errors import InputFormatError, PresdepError
from presdep.scoring.template import load_template

NESTED = """\
datasets:
  x:
    task: rerank
    candidates: {format: trec, path: run.txt}
    task: qa
"""


def _refused(tmp_path: Path, text: str, name: str = "bad.yaml") -> tuple[Path, InputFormatError]:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(InputFormatError) as info:
        load_yaml(path)
    return path, info.value


def test_a_repeated_top_level_key_is_refused_with_file_key_and_both_lines(tmp_path):
    path, err = _refused(tmp_path, "protocol: {M: 2}\nmodel_threads: 1\n\nprotocol: {M: 3}\n")
    assert str(err) == f"{path}, line 1 and line 4: key 'protocol' appears twice in one mapping"
    assert err.path == str(path) and err.where == "line 1 and line 4"
    assert isinstance(err, PresdepError) and isinstance(err, ValueError)


def test_a_repeated_nested_key_is_refused_with_both_lines(tmp_path):
    path, err = _refused(tmp_path, NESTED)
    assert str(err) == f"{path}, line 3 and line 5: key 'task' appears twice in one mapping"
    assert yaml.safe_load(NESTED)["datasets"]["x"]["task"] == "qa"  # what used to happen, silently


def test_flow_style_and_non_string_keys_are_checked_too(tmp_path):
    _, err = _refused(tmp_path, "a: {k: 1, j: 2, k: 3}\n")
    assert "line 1 and line 1: key 'k' appears twice" in str(err)
    _, err = _refused(tmp_path, "grades:\n  3: a\n  2: b\n  3: c\n")
    assert "line 2 and line 4: key 3 appears twice" in str(err)
    # Different keys to YAML stay different: '1' (a string) and 1 (an int).
    assert parse_yaml("'1': a\n1: b\n") == {"1": "a", 1: "b"}


def test_parse_yaml_names_the_source_it_is_given():
    with pytest.raises(InputFormatError, match=r"^relevance_v9\.yaml, line 1 and line 2: key 'name' appears twice"):
        parse_yaml("name: a\nname: b\n", "relevance_v9.yaml")


def test_merge_keys_load_and_an_explicit_key_overrides_the_merged_one():
    text = """\
defaults: &d {kind: pyserini_bm25, k: 100, b: 0.4}
other: &o {k: 5, extra: 1}
first_stage: {<<: *d, k: 10, reference_ndcg10: 0.5}
block:
  <<: *d
  b: 0.7
both: {<<: [*d, *o]}
nested: &n {<<: *d, k: 20}
again: {<<: *n}
"""
    data = parse_yaml(text, "merge.yaml")
    assert data["first_stage"] == {"kind": "pyserini_bm25", "k": 10, "b": 0.4, "reference_ndcg10": 0.5}
    assert list(data["first_stage"]) == ["kind", "k", "b", "reference_ndcg10"]  # PyYAML's key order
    assert data["block"] == {"kind": "pyserini_bm25", "k": 100, "b": 0.7}
    assert data["both"] == {"kind": "pyserini_bm25", "k": 100, "b": 0.4, "extra": 1}  # the earlier mapping wins
    assert data["nested"]["k"] == 20 and data["again"]["k"] == 20  # a merge of a merge keeps the override
    assert data["defaults"] == {"kind": "pyserini_bm25", "k": 100, "b": 0.4}  # the anchor itself is untouched


def test_a_duplicate_inside_a_merged_mapping_or_two_merge_keys_are_refused():
    with pytest.raises(InputFormatError, match=r"line 1 and line 1: key 'q' appears twice"):
        parse_yaml("x: {<<: &m {q: 1, q: 2}}\n", "m.yaml")
    with pytest.raises(InputFormatError, match=r"line 3 and line 4: key '<<' appears twice"):
        parse_yaml("a: &a {k: 1}\nb:\n  <<: *a\n  <<: *a\n", "m.yaml")


def test_every_shipped_yaml_loads_strictly_and_as_before():
    shipped = [CATALOGUE_PATH, SCHEMA_PATH, REPO / "workflow_config.yaml",
               *sorted((REPO / "presdep" / "scoring" / "templates").glob("*.yaml")),
               *sorted((REPO / "configs").rglob("*.yaml")), *sorted((REPO / "tests" / "configs").rglob("*.yaml"))]
    assert len(shipped) > 6
    for path in shipped:
        assert load_yaml(path) == yaml.safe_load(path.read_text()), path
    assert load_catalogue()["datasets"]
    for template in ("relevance_v2", "answer_support_v2", "response_quality_v2"):
        assert load_template.__wrapped__(template).system
    load_workflow_config(apply_replacing_sections(load_yaml(REPO / "workflow_config.yaml"), []), SCHEMA_PATH)


def test_the_callers_read_strictly(tmp_path):
    """The catalogue, a user's rubric template and a --configfile (the replacing sections) refuse a duplicate."""
    bad = tmp_path / "catalogue.yaml"
    bad.write_text(CATALOGUE_PATH.read_text() + "\nquery_lists: {}\n")
    with pytest.raises(InputFormatError, match=r"catalogue\.yaml, line \d+ and line \d+: key 'query_lists' appears twice"):
        load_catalogue(bad)
    rubric = tmp_path / "mine.yaml"
    rubric.write_text((REPO / "presdep/scoring/templates/relevance_v2.yaml").read_text() + "\nversion: 9\n")
    with pytest.raises(InputFormatError, match=r"mine\.yaml, line \d+ and line \d+: key 'version' appears twice"):
        load_template.__wrapped__(str(rubric))
    user = tmp_path / "user.yaml"
    user.write_text(NESTED)
    with pytest.raises(InputFormatError, match=r"user\.yaml, line 3 and line 5: key 'task'"):
        apply_replacing_sections({}, [user])
    with pytest.raises(InputFormatError, match=r"user\.yaml, line 3 and line 5: key 'task'"):
        check_config_files([REPO / "workflow_config.yaml", user])


def _dry_run_refuses(work: Path, *args: str, file: str, key: str, lines: tuple[int, int]) -> None:
    proc = snakemake(work, "-n", "--cores", "1", *args, timeout=300, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert f"{file}, line {lines[0]} and line {lines[1]}: key '{key}' appears twice in one mapping" in out, out
    assert "Job stats" not in out and not (work / "results").exists(), out


def test_the_workflow_stops_before_any_job_on_a_duplicate_key(tmp_path):
    work = scratch_workflow(tmp_path)
    # A --configfile (Snakemake's own YAML reading keeps the last `task:` silently).
    tiny = (REPO / "tests" / "configs" / "tiny-default.yaml").read_text()
    bad = tiny.replace("  synthetic:\n    task: rerank\n", "  synthetic:\n    task: rerank\n    task: qa\n", 1)
    assert bad != tiny
    (work / "bad.yaml").write_text(bad)
    line = bad.splitlines().index("    task: qa") + 1
    _dry_run_refuses(work, "--configfile", "bad.yaml", file="bad.yaml", key="task", lines=(line - 1, line))
    # The embedded default itself, which no presdep code read before.
    default = (work / "workflow_config.yaml").read_text()
    threads = next(i for i, l in enumerate(default.splitlines(), 1) if re.match(r"model_threads:", l))
    (work / "workflow_config.yaml").write_text(default + "model_threads: 2\n")
    last = len((work / "workflow_config.yaml").read_text().splitlines())
    _dry_run_refuses(work, file="workflow_config.yaml", key="model_threads", lines=(threads, last))
