"""A dataset path of the wrong kind (a directory where a file is read, a file where a folder is
read) is refused when the config is validated, naming every such path; a path that does not
exist yet (a rule writes it) passes."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from workflow_utils import REPO, scratch_workflow, snakemake

from presdep.config import SCHEMA_PATH, apply_replacing_sections, load_workflow_config, load_yaml
from presdep.config.paths import path_kind_problems
from presdep.config.records import Dataset, Protocol
from presdep.contracts.errors import ConfigError


def _config(datasets: dict) -> dict:
    return {"protocol": {}, "datasets": datasets, "variants": {"bm25": {"scorer": "identity"}}}


def _refused(config: dict) -> str:
    with pytest.raises(ConfigError) as info:
        load_workflow_config(config, SCHEMA_PATH)
    return str(info.value)


def test_a_directory_where_a_file_is_read_is_refused_naming_every_path(tmp_path: Path) -> None:
    d = tmp_path / "some_dir"
    d.mkdir()
    msg = _refused(_config({
        "x": {"task": "rerank", "candidates": {"format": "rank_llm_json", "path": str(d)},
              "qrels": {"format": "trec", "path": str(d)}},
        "y": {"task": "rerank",
              "candidates": {"format": "bm25", "corpus": {"format": "jsonl", "path": str(d)},
                             "topics": {"format": "tsv", "path": str(d)}},
              "qrels": {"format": "trec", "path": str(tmp_path / "not_yet.txt")}},
    }))
    assert msg.startswith("invalid workflow config:\n  ")
    assert f"datasets.x.candidates.path: {d} is a directory; expected a file (format rank_llm_json)" in msg
    assert f"datasets.x.qrels.path: {d} is a directory; expected a file (format trec)" in msg
    assert f"datasets.y.candidates.corpus.path: {d} is a directory; expected a file (format jsonl)" in msg
    assert f"datasets.y.candidates.topics.path: {d} is a directory; expected a file (format tsv)" in msg
    assert "not_yet" not in msg


def test_a_file_where_a_folder_is_read_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "scifact.jsonl"
    f.write_text("{}\n")
    msg = _refused(_config({"scifact": {"from_catalogue": True, "local_path": str(f)}}))
    assert f"datasets.scifact.local_path.beir: {f} is a file; expected a folder (local_path beir)" in msg


def test_local_path_files_and_index_folder_are_checked(tmp_path: Path) -> None:
    topics, qrels = tmp_path / "topics.txt", tmp_path / "qrels.txt"
    topics.write_text("1\tq\n")
    qrels.write_text("1 0 d 1\n")
    idx = tmp_path / "index"
    idx.write_text("not a folder")
    local = {"index": str(idx), "topics": str(tmp_path), "qrels": str(qrels)}
    protocol = Protocol.checked({"seed": 1, "M": 1, "B": 20, "max_doc_chars": 1200, "perturbations": []})
    dataset = Dataset.from_spec("dl19", {"task": "rerank", "role": "eval", "local_path": local}, protocol)
    assert path_kind_problems({"dl19": dataset}) == [
        f"datasets.dl19.local_path.index: {idx} is a file; expected a folder (local_path index)",
        f"datasets.dl19.local_path.topics: {tmp_path} is a directory; expected a file (local_path topics)",
    ]


def test_paths_that_do_not_exist_yet_and_beir_folders_pass(tmp_path: Path) -> None:
    beir = tmp_path / "beir"
    (beir / "qrels").mkdir(parents=True)
    (beir / "corpus.jsonl").write_text("")
    _, cfg = load_workflow_config(_config({
        "x": {"task": "rerank", "candidates": {"format": "rank_llm_json", "path": str(tmp_path / "later" / "c.json")},
              "qrels": {"format": "trec", "path": str(tmp_path / "later" / "q.txt")}},
        # beir reads a folder or its file: both kinds pass.
        "y": {"task": "rerank",
              "candidates": {"format": "bm25", "corpus": {"format": "beir", "path": str(beir)},
                             "topics": {"format": "beir", "path": str(beir / "corpus.jsonl")}},
              "qrels": {"format": "beir", "path": str(beir)}},
    }), SCHEMA_PATH)
    assert list(cfg.datasets) == ["x", "y"]


def test_the_embedded_default_and_the_paper_config_still_load() -> None:
    default = load_yaml(REPO / "workflow_config.yaml")
    load_workflow_config(copy.deepcopy(default), SCHEMA_PATH)
    from snakemake.utils import update_config  # Snakemake's own merge of a --configfile

    merged = yaml.safe_load((REPO / "workflow_config.yaml").read_text())
    update_config(merged, load_yaml(REPO / "configs" / "paper.yaml"))
    load_workflow_config(apply_replacing_sections(merged, [REPO / "configs" / "paper.yaml"]), SCHEMA_PATH)


def test_the_workflow_stops_before_any_job_on_a_directory_candidates_path(tmp_path: Path) -> None:
    work = scratch_workflow(tmp_path)
    (work / "some_dir").mkdir()
    tiny = (REPO / "tests" / "configs" / "tiny-default.yaml").read_text()
    old = "path: resources/datasets/synthetic/test/candidates.json}"
    assert old in tiny
    (work / "bad.yaml").write_text(tiny.replace(old, "path: some_dir/}", 1))
    proc = snakemake(work, "-n", "--cores", "1", "--configfile", "bad.yaml", timeout=300, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert ("datasets.synthetic.candidates.path: some_dir/ is a directory; "
            "expected a file (format rank_llm_json)") in out, out
    assert "Job stats" not in out and not (work / "results").exists(), out
