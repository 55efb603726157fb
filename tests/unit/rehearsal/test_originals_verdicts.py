"""The rehearsal's stand-in for a catalogue entry's claim verdicts (``verdict_labels``).

Climate-FEVER's claims on the hub: one row per query of the entry's ranked stand-in, in the
published Parquet schema, read by the verdict reader as the fetch reads them, and pinned by the
build to the commit the local hub serves.
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from presdep.config import SCHEMA_PATH, load_workflow_config
from presdep.config.catalogue import CATALOGUE_PATH, load_catalogue
from presdep.config.catalogue_overrides import with_overrides
from presdep.data.fetch.common import read_rows
from presdep.data.trec import read_topics
from presdep.data.verdict_labels import read_verdict_labels
from presdep.rehearsal import build, git_repos
from presdep.rehearsal.originals import write_originals
from presdep.rehearsal.originals_rows import CLIMATE_FEVER_SCHEMA, climate_fever_rows
from presdep.rehearsal.originals_text import Vocab

SIZES = {"queries": 6, "docs_per_query": 10, "pool_rows": 40}
REPO_ID = "tdiggelm/climate_fever"
DATA = Path("hub/datasets/tdiggelm/climate_fever/data/test-00000-of-00001.parquet")
TOPICS = Path("anserini/topics-and-qrels/topics.beir-v1.0.0-climate-fever.test.tsv.gz")
# Climate-FEVER's hub schema, restated from its dataset card.
PUBLISHED_EVIDENCE = pa.struct([
    ("evidence_id", pa.string()), ("evidence_label", pa.int64()), ("article", pa.string()),
    ("evidence", pa.string()), ("entropy", pa.float32()), ("votes", pa.list_(pa.string()))])


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("originals")
    return root, write_originals(root, **SIZES)


def test_the_catalogue_names_the_stand_ins_repo() -> None:
    labels = yaml.safe_load(CATALOGUE_PATH.read_text(encoding="utf-8"))["datasets"]["climate-fever"]["verdict_labels"]
    assert (labels["kind"], labels["id"], labels["split"], labels["format"]) == \
        ("hf_datasets", REPO_ID, "test", "climate_fever")


def test_claims_read_as_verdict_labels_of_the_ranked_queries(written) -> None:
    root, _ = written
    labels = read_verdict_labels(root / DATA, "climate_fever")
    topics = read_topics(root / TOPICS)
    assert labels.height == SIZES["queries"] == len(topics)
    assert set(labels["query_id"]) == set(topics)
    assert dict(zip(labels["query_id"], labels["claim"])) == topics  # the claim is the query's text
    assert set(labels["gold"]) == {"SUPPORTED", "REFUTED", "NEI", "DISPUTED"}


def test_the_rows_have_the_published_schema(written) -> None:
    root, _ = written
    schema = pq.read_schema(root / DATA)
    assert schema.names == ["claim_id", "claim", "claim_label", "evidences"]
    assert (schema.field("claim_id").type, schema.field("claim").type) == (pa.string(), pa.string())
    assert schema.field("claim_label").type == pa.int64()
    assert schema.field("evidences").type == pa.list_(PUBLISHED_EVIDENCE)
    assert schema.remove_metadata() == CLIMATE_FEVER_SCHEMA


def test_evidences_agree_with_the_claims_verdict(written) -> None:
    root, _ = written
    rows = [r for _, r in read_rows(root / DATA)]
    for row in rows:
        evidence_labels = [e["evidence_label"] for e in row["evidences"]]
        assert len(evidence_labels) == 5 and set(evidence_labels) <= {0, 1, 2}, row["claim_id"]
        expected_present = {0: {0}, 1: {1}, 2: set(), 3: {0, 1}}[row["claim_label"]]
        assert expected_present <= set(evidence_labels), row["claim_id"]
        if row["claim_label"] == 2:
            assert set(evidence_labels) == {2}, f"{row['claim_id']}: a NOT_ENOUGH_INFO claim with deciding evidence"
        for e in row["evidences"]:
            votes = [v for v in e["votes"] if v is not None]
            assert len(e["votes"]) == 5 and len(votes) >= 2
            assert Counter(votes).most_common(1)[0][0] == ("SUPPORTS", "REFUTES", "NOT_ENOUGH_INFO")[e["evidence_label"]]
            assert e["entropy"] >= 0 and (e["entropy"] == 0) == (len(set(votes)) == 1)
            assert e["evidence_id"].startswith(e["article"] + ":")


def test_the_report_keeps_the_ranked_entry_and_adds_the_verdicts(written) -> None:
    root, report = written
    assert report["datasets"]["climate-fever"]["kind"] == "pyserini_prebuilt"
    verdicts = report["verdict_labels"]
    assert list(verdicts) == ["climate-fever"]
    entry = verdicts["climate-fever"]
    assert (entry["repo_id"], entry["config"], entry["split"]) == (REPO_ID, None, "test")
    assert entry["files"]["data"] == DATA.as_posix()
    assert entry["rows"]["rows"] == SIZES["queries"]
    assert set(entry["rows"]["labels"]) == {"SUPPORTS", "REFUTES", "NOT_ENOUGH_INFO", "DISPUTED"}
    assert sum(entry["rows"]["labels"].values()) == SIZES["queries"]
    readme = (root / "hub/datasets" / REPO_ID / "README.md").read_text()
    front = yaml.safe_load(readme.split("---\n")[1])
    assert front["configs"] == [{"config_name": "default", "data_files": [
        {"split": "test", "path": "data/test-00000-of-00001.parquet"}]}]


def test_the_hub_folder_loads_with_datasets(written, tmp_path: Path) -> None:
    import datasets  # a dependency of presdep (hf_datasets sources)
    root, _ = written
    ds = datasets.load_dataset(str(root / "hub/datasets" / REPO_ID), None, split="test", cache_dir=str(tmp_path / "c"))
    assert ds.num_rows == SIZES["queries"]
    assert ds.features["claim_label"].dtype == "int64"


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 9])
def test_every_class_once_there_are_four_claims(n: int) -> None:
    claims = {str(i): f"claim {i}" for i in range(n)}
    labels = [r["claim_label"] for r in climate_fever_rows(random.Random(n), Vocab(0), claims)]
    assert len(labels) == n
    if n >= 4:
        assert set(labels) == {0, 1, 2, 3}
    else:
        assert len(set(labels)) == n  # fewer claims than classes: no class twice


def test_the_claims_follow_the_seed(tmp_path: Path) -> None:
    a = write_originals(tmp_path / "a", queries=8, docs_per_query=3, seed=1, pool_rows=4)
    b = write_originals(tmp_path / "b", queries=8, docs_per_query=3, seed=2, pool_rows=4)
    for report in (a, b):
        assert set(report["verdict_labels"]["climate-fever"]["rows"]["labels"]) == \
            {"SUPPORTS", "REFUTES", "NOT_ENOUGH_INFO", "DISPUTED"}
    rows_a = pq.read_table(tmp_path / "a" / DATA).to_pylist()
    rows_b = pq.read_table(tmp_path / "b" / DATA).to_pylist()
    assert len(rows_a) == len(rows_b) == 8
    assert rows_a != rows_b


def test_the_pins_give_the_verdicts_the_stand_ins_commit(written, tmp_path: Path) -> None:
    root, _ = written
    (tmp_path / "originals").symlink_to(root, target_is_directory=True)
    pins: dict = {}
    commits = build._publish_datasets(tmp_path, pins)
    commit = git_repos.head(tmp_path / "hub", "datasets", REPO_ID)
    assert commits[REPO_ID] == commit and len(commit) == 40
    assert pins["climate-fever"] == {"verdict_labels": {"revision": commit}}, "the ranked source is not a hub source"
    cat = with_overrides(load_catalogue(), pins)
    assert cat["datasets"]["climate-fever"]["verdict_labels"] == {
        "kind": "hf_datasets", "id": REPO_ID, "split": "test", "revision": commit, "format": "climate_fever"}
    # The pins pass the config schema as a configfile's catalogue_overrides.
    config = {"protocol": {}, "variants": {"id": {"scorer": "identity"}}, "first_stage_row": False,
              "datasets": {"rm-bench": {"from_catalogue": True}}, "catalogue_overrides": pins}
    _, records = load_workflow_config(config, SCHEMA_PATH)
    assert records.catalogue_overrides["climate-fever"]["verdict_labels"]["revision"] == commit
