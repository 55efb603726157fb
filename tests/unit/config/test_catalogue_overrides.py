"""catalogue_overrides: a config moves a source (URL, sha256, revision, prebuilt tarball), pins the
claims' verdicts to a hub commit and resizes a pool, and nothing else; a second --configfile merges into the first's datasets and variants."""

from __future__ import annotations

from pathlib import Path

import pytest

from presdep.config import SCHEMA_PATH, ConfigError, load_workflow_config
from presdep.config.catalogue import fetch_jobs, load_catalogue, verdict_label_jobs
from presdep.config.catalogue_overrides import OVERRIDABLE, with_overrides
from presdep.config.load import apply_replacing_sections
from presdep.config.record_values import thaw
from presdep.config.yaml_io import load_yaml

REPO = Path(__file__).resolve().parents[3]


def test_an_override_moves_the_source_and_keeps_the_rest() -> None:
    cat = load_catalogue()
    moved = with_overrides(cat, {"rm-bench": {"source": {"url": "http://127.0.0.1:1/c.json", "sha256": "a" * 64}},
                                 "msmarco-train": {"sampling": {"n": 24, "heldout": 6}}})
    src, old = moved["datasets"]["rm-bench"]["source"], cat["datasets"]["rm-bench"]["source"]
    assert (src["url"], src["sha256"]) == ("http://127.0.0.1:1/c.json", "a" * 64)
    assert {k: v for k, v in src.items() if k not in ("url", "sha256")} == \
        {k: v for k, v in old.items() if k not in ("url", "sha256")}
    assert moved["training_pools"]["msmarco-train"]["sampling"] == {"n": 24, "seed": 42, "heldout": 6}
    assert cat["datasets"]["rm-bench"]["source"]["url"].startswith("https://raw.githubusercontent.com/"), \
        "the loaded catalogue itself is not changed"


@pytest.mark.parametrize("change, message", [
    ({"nope": {"source": {"url": "x"}}}, r"catalogue_overrides.nope: not a catalogue id"),
    ({"rm-bench": {"source": {"converter": "other"}}}, r"rm-bench.source: \['converter'\] cannot change"),
    ({"rm-bench": {"instruction": {"x": 1}}}, r"rm-bench.instruction: only"),
    ({"rm-bench": {"sampling": {"n": 3}}}, r"rm-bench.sampling: the catalogue entry has no sampling"),
    ({"climate-fever": {"verdict_labels": {"id": "other/claims"}}}, r"climate-fever.verdict_labels: \['id'\] cannot change"),
    ({"rm-bench": {"verdict_labels": {"revision": "a" * 40}}}, r"rm-bench.verdict_labels: the catalogue entry has no"),
])
def test_what_cannot_change_is_refused_by_name(change, message) -> None:
    with pytest.raises(ConfigError, match=message):
        with_overrides(load_catalogue(), change)


def test_the_fetch_job_reads_the_moved_source(tmp_path: Path) -> None:
    config = {"protocol": {}, "variants": {"id": {"scorer": "identity"}}, "first_stage_row": False,
              "datasets": {"rm-bench": {"from_catalogue": True}},
              "catalogue_overrides": {"rm-bench": {"source": {"url": "http://127.0.0.1:9/chat.json"}}}}
    _, records = load_workflow_config(config, SCHEMA_PATH)
    jobs = fetch_jobs(records.datasets, overrides=records.catalogue_overrides)
    assert jobs["rm-bench"]["entry"]["source"]["url"] == "http://127.0.0.1:9/chat.json"
    assert fetch_jobs(records.datasets)["rm-bench"]["entry"]["source"]["url"].startswith("https://")


def test_an_override_pins_the_verdict_labels_and_keeps_the_rest() -> None:
    cat = load_catalogue()
    moved = with_overrides(cat, {"climate-fever": {"verdict_labels": {"revision": "b" * 40}}})
    labels, old = moved["datasets"]["climate-fever"]["verdict_labels"], cat["datasets"]["climate-fever"]["verdict_labels"]
    assert labels["revision"] == "b" * 40 and old["revision"] is None
    assert {k: v for k, v in labels.items() if k != "revision"} == {k: v for k, v in old.items() if k != "revision"}
    assert moved["datasets"]["climate-fever"]["source"] == cat["datasets"]["climate-fever"]["source"]


def test_the_verdict_labels_job_reads_the_pinned_revision() -> None:
    config = {"protocol": {}, "variants": {"id": {"scorer": "identity"}}, "first_stage_row": False,
              "datasets": {"climate-fever": {"from_catalogue": True}},
              "catalogue_overrides": {"climate-fever": {"verdict_labels": {"revision": "c" * 40}}}}
    _, records = load_workflow_config(config, SCHEMA_PATH)
    pinned = with_overrides(load_catalogue(), thaw(records.catalogue_overrides))
    jobs = verdict_label_jobs(records.datasets, ["climate-fever"], pinned)
    assert jobs["climate-fever"]["revision"] == "c" * 40
    assert jobs["climate-fever"]["id"] == "tdiggelm/climate_fever"
    assert verdict_label_jobs(records.datasets, ["climate-fever"])["climate-fever"]["revision"] is None


def test_the_schema_closes_the_override_block() -> None:
    config = {"protocol": {}, "variants": {"id": {"scorer": "identity"}}, "datasets": {"rm-bench": {"from_catalogue": True}},
              "catalogue_overrides": {"rm-bench": {"source": {"sha256": "not-hex"}}}}
    with pytest.raises(ConfigError, match="sha256"):
        load_workflow_config(config, SCHEMA_PATH)
    config["catalogue_overrides"] = {"climate-fever": {"verdict_labels": {"format": "verdicts_jsonl"}}}
    with pytest.raises(ConfigError, match=r"\['format'\] cannot change"):
        load_workflow_config(config, SCHEMA_PATH)


def test_the_schema_block_names_exactly_the_overridable_keys() -> None:
    block = load_yaml(SCHEMA_PATH)["properties"]["catalogue_overrides"]["additionalProperties"]
    assert block["additionalProperties"] is False
    assert {part: set(spec["properties"]) for part, spec in block["properties"].items()} == \
        {part: set(keys) for part, keys in OVERRIDABLE.items()}
    assert all(spec["additionalProperties"] is False for spec in block["properties"].values())


def test_a_second_configfile_merges_into_the_first_files_sections(tmp_path: Path) -> None:
    """paper.yaml replaces the default's datasets and variants; rehearsal.yaml only resizes them."""
    default = load_yaml(REPO / "workflow_config.yaml")
    merged = apply_replacing_sections(default, [REPO / "configs" / "paper.yaml", REPO / "configs" / "rehearsal.yaml"])
    paper = load_yaml(REPO / "configs" / "paper.yaml")
    assert list(merged["datasets"]) == list(paper["datasets"])
    assert list(merged["variants"]) == list(paper["variants"])
    assert merged["datasets"]["dl19"] == {"from_catalogue": True, "max_queries": 4}
    student = merged["variants"]["oc_sft_rerank"]["student"]
    assert student["lambda"] == paper["variants"]["oc_sft_rerank"]["student"]["lambda"]
    assert student["seeds"] == [42, 43, 44] and student["steps"] == 2
    assert merged["variants"]["off_the_shelf"]["scorer"] == "transformers"
    assert merged["variants"]["jina_reranker_v3"] == paper["variants"]["jina_reranker_v3"]
