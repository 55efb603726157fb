"""Config errors say what works: a run name an unnamed run already uses, a scorer typo, a cache
folder that is a file, a user's file that is not there, each named by its key."""

import re
from types import SimpleNamespace

import pytest
from config_errors import config_error as _error
from workflow_utils import REPO

from presdep.candidates.inputs import dataset_files, file_keys, missing_files
from presdep.config.run_names import RESERVED_RUN_NAMES


def test_the_reserved_run_names_are_exactly_what_an_unnamed_run_writes_under_results():
    """Every `{RESULTS}/<first part>` a rule writes (other than a dataset's own folder) is reserved."""
    written = set()
    for smk in (REPO / "rules").glob("*.smk"):
        written |= set(re.findall(r"\{RESULTS\}/([A-Za-z0-9_.-]+)", smk.read_text()))
    written |= {"cache"}  # HOSTED_CACHE = results/cache/hosted
    assert written - RESERVED_RUN_NAMES == set(), "a new output under results/ must be a reserved run name"


@pytest.mark.parametrize("name", ["scores", "position_profile.svg", "table1.csv"])
def test_a_run_name_an_unnamed_run_writes_is_refused_in_plain_words(default_config, name):
    msg = _error({**default_config, "name": name})
    assert f"name: {name!r} is what an unnamed run writes as results/{name}" in msg
    assert "choose another name" in msg and "should not be valid" not in msg


def test_a_scorer_typo_gets_the_closest_registered_name(default_config):
    variants = {**default_config["variants"], "bm25": {"label": "x", "scorer": "identiti"}}
    msg = _error({**default_config, "variants": variants})
    assert "variants.bm25.scorer: unknown scorer 'identiti'; did you mean 'identity'?" in msg


def test_a_cache_folder_that_is_a_file_is_refused_before_any_job(default_config, tmp_path):
    plain = tmp_path / "cache.txt"
    plain.write_text("not a folder")
    msg = _error({**default_config, "read_cache": {"dir": str(plain)}})
    assert f"read_cache.dir: {plain} is a file; expected a folder" in msg


def _own(tmp_path):
    (tmp_path / "beir" / "qrels").mkdir(parents=True)
    for name in ("beir/corpus.jsonl.gz", "beir/queries.jsonl", "beir/qrels/test.tsv", "run.txt", "ids.txt"):
        (tmp_path / name).write_text("")
    return {
        "task": "rerank",
        "candidates": {"format": "trec_run", "run": str(tmp_path / "run.txt"),
                       "corpus": {"format": "beir", "path": str(tmp_path / "beir")},
                       "topics": {"format": "beir", "path": str(tmp_path / "beir"), "split": "test"}},
        "qrels": {"format": "beir", "path": str(tmp_path / "beir"), "split": "test"},
        "shuffle_queries": {"path": str(tmp_path / "ids.txt")},
        "local_path": {"candidates": str(tmp_path / "x.json")},
    }


def test_every_file_a_dataset_names_is_listed_with_its_key(tmp_path):
    spec = _own(tmp_path)
    files = {(f.name, f.key, f.path) for f in dataset_files("mine", spec)}
    b = tmp_path / "beir"
    assert files == {
        ("run", "datasets.mine.candidates.run", str(tmp_path / "run.txt")),
        ("corpus", "datasets.mine.candidates.corpus.path", str(b / "corpus.jsonl.gz")),
        ("topics", "datasets.mine.candidates.topics.path", str(b / "queries.jsonl")),
        ("topics_1", "datasets.mine.candidates.topics.path", str(b / "qrels/test.tsv")),
        ("qrels_src", "datasets.mine.qrels.path", str(b / "qrels/test.tsv")),
        ("shuffle_queries", "datasets.mine.shuffle_queries.path", str(tmp_path / "ids.txt")),
    }
    assert file_keys("mine", spec)[str(tmp_path / "x.json")] == "datasets.mine.local_path.candidates"
    irds = {"task": "rerank", "candidates": {"format": "bm25", "corpus": {"format": "irds", "id": "msmarco-passage"},
                                             "topics": {"format": "irds", "id": "msmarco-passage/trec-dl-2019"}},
            "qrels": {"format": "irds", "id": "msmarco-passage/trec-dl-2019"}}
    assert dataset_files("dl19", irds) == [], "an ir_datasets id is no file"


def test_a_missing_user_file_is_named_by_its_key_and_workflow_files_may_not_exist_yet(tmp_path):
    spec = _own(tmp_path)
    (tmp_path / "run.txt").unlink()
    synthetic = {"task": "rerank", "candidates": {"format": "rank_llm_json", "path": "resources/datasets/s/c.json"},
                 "qrels": {"format": "trec", "path": "resources/datasets/s/q.txt"}}
    records = {name: SimpleNamespace(spec=s) for name, s in (("mine", spec), ("synthetic", synthetic))}
    problems = missing_files(records)
    assert len(problems) == 1 and problems[0].startswith(f"datasets.mine.candidates.run: {tmp_path / 'run.txt'} does not exist")
