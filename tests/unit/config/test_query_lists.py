"""The paper's fixed query lists: shipped, pinned by sha256, read by the catalogue entries, strict on format."""

from __future__ import annotations

import hashlib
from pathlib import Path

import polars as pl
import pytest
from records_tiny import fixture_dataset

from presdep.candidates.fixtures import build_fixture
from presdep.config import SCHEMA_PATH, load_workflow_config, load_yaml
from presdep.config.catalogue import CatalogueError, load_catalogue
from presdep.config.query_lists import LISTS_DIR, QueryList
from presdep.contracts.errors import InputFormatError
from presdep.contracts.schemas import read_metadata

REPO = Path(__file__).resolve().parents[3]
RERANK_WITH_LIST = ["dl19", "dl20", "dl21", "dl22", "dl23", "touche2020", "fiqa", "nfcorpus", "arguana",
                    "climate-fever", "trec-covid", "dbpedia-entity", "scifact", "signal1m", "trec-news", "robust04"]


def test_every_shipped_list_matches_its_pin_and_names_where_it_was_published():
    lists = load_catalogue()["query_lists"]
    assert sorted(lists) == sorted([*RERANK_WITH_LIST, "nectar"])
    for name, entry in lists.items():
        data = (LISTS_DIR / f"{name}.txt").read_bytes()
        assert hashlib.sha256(data).hexdigest() == entry["sha256"], name  # independent of QueryList.ids()
        assert len(data.decode().splitlines()) == entry["ids"], name
        assert entry["published"]["repository"] == "thomsonreuters/presentation-dependence"
        assert len(entry["published"]["commit"]) == 40
    assert lists["nectar"]["ids"] == 434 and max(e["ids"] for n, e in lists.items() if n != "nectar") == 100


def test_the_dl19_list_is_exactly_the_43_judged_queries(shared_data):
    qrels = (shared_data / "trec-dl19" / "qrels.dl19-passage.txt").read_text().split("\n")
    judged = {line.split()[0] for line in qrels if line.strip()}
    assert len(judged) == 43
    assert set(QueryList(name="dl19", sha256=load_catalogue()["query_lists"]["dl19"]["sha256"]).ids()) == judged


def test_the_paper_config_shuffles_each_listed_collection_on_its_list():
    _, cfg = load_workflow_config(load_yaml(REPO / "configs" / "paper.yaml"), SCHEMA_PATH)
    lists = load_catalogue()["query_lists"]
    # An alias (alias_of: another dataset under other settings) carries its dataset's list.
    aliases = {n: d.spec["alias_of"] for n, d in cfg.datasets.items() if d.spec.get("alias_of")}
    assert all(cfg.datasets[n].protocol.shuffle_queries == cfg.datasets[a].protocol.shuffle_queries
               for n, a in aliases.items())
    listed = {n: d.protocol.shuffle_queries for n, d in cfg.datasets.items()
              if d.protocol.shuffle_queries and n not in aliases}
    assert len(listed) >= 13  # the gated signal1m, trec-news and robust04 may be skipped without local copies
    assert sorted(listed) == sorted(n for n in RERANK_WITH_LIST if n in cfg.datasets)
    for name, ql in listed.items():
        assert (ql.name, ql.sha256) == (name, lists[name]["sha256"])
    assert all(d.protocol.shuffle_rule == "paper" for d in cfg.datasets.values())


@pytest.mark.parametrize("text, where", [
    ("q1\n\nq2\n", "line 2"), ("q1\nq2\nq1\n", "line 3"), ("q1\n q2\n", "line 2"), ("\ufeffq1\n", "line 1"), ("", "whole file"),
])
def test_a_malformed_list_is_refused_with_its_line(tmp_path, text, where):
    f = tmp_path / "mine.txt"
    f.write_text(text, encoding="utf-8")
    with pytest.raises(InputFormatError, match=f"mine.txt, {where}"):
        QueryList.from_spec({"path": str(f)}, where="t").ids()


def test_a_changed_list_is_refused_by_its_pin(tmp_path):
    f = tmp_path / "mine.txt"
    f.write_text("q1\nq2\n")
    pin = hashlib.sha256(b"q1\nq2\n").hexdigest()
    assert QueryList.from_spec({"path": str(f), "sha256": pin}, where="t").ids() == ("q1", "q2")
    f.write_text("q1\nq3\n")
    with pytest.raises(InputFormatError, match=f"mine.txt, whole file: sha256 {pin}"):
        QueryList.from_spec({"path": str(f), "sha256": pin}, where="t").ids()
    with pytest.raises(ValueError, match="exactly one of 'list'"):
        QueryList.from_spec({"list": "dl19", "path": str(f)}, where="datasets.x.shuffle_queries")


def test_a_catalogue_entry_naming_an_unknown_list_is_refused(tmp_path):
    text = (REPO / "presdep" / "config" / "catalogue.yaml").read_text()
    bad = tmp_path / "catalogue.yaml"
    bad.write_text(text.replace("shuffle_queries: fiqa ", "shuffle_queries: fiqa-typo "))
    with pytest.raises(CatalogueError, match="fiqa: shuffle_queries 'fiqa-typo' is not in query_lists"):
        load_catalogue(bad)


def test_the_fixture_records_the_list_and_a_sample_keeps_listed_queries_first(shared_data, tmp_path):
    cfg = {"task": "rerank",
           "candidates": {"format": "rank_llm_json", "path": str(shared_data / "trec-dl19/bm25_retrieve_results_dl19_top100.json")},
           "qrels": {"format": "trec", "path": str(shared_data / "trec-dl19/qrels.dl19-passage.txt")}}
    lst = tmp_path / "three.txt"
    lst.write_text("1112341\n1114819\n19335\n")
    pin = hashlib.sha256(lst.read_bytes()).hexdigest()
    ds = fixture_dataset("dl19", {**cfg, "max_queries": 5}, seed=4401,
                         shuffle_queries={"path": str(lst), "sha256": pin})
    build_fixture(ds, tmp_path / "c.parquet", tmp_path / "q.parquet")
    kept = set(pl.read_parquet(tmp_path / "c.parquet")["query_id"].unique().to_list())
    assert len(kept) == 5 and {"1112341", "1114819", "19335"} <= kept
    meta = read_metadata(tmp_path / "c.parquet")["shuffle_queries"]
    assert (meta["name"], meta["sha256"], meta["ids"], meta["in_fixture"], meta["absent"]) == ("three", pin, 3, 3, [])


def test_a_population_list_keeps_only_its_queries_in_every_pass(shared_data, tmp_path):
    """population_queries (Nectar's deduplicated prompts in the catalogue): the fixture holds the listed
    queries only; ids absent from the data are named in the metadata."""
    cfg = {"task": "rerank",
           "candidates": {"format": "rank_llm_json", "path": str(shared_data / "trec-dl19/bm25_retrieve_results_dl19_top100.json")},
           "qrels": {"format": "trec", "path": str(shared_data / "trec-dl19/qrels.dl19-passage.txt")}}
    lst = tmp_path / "pop.txt"
    lst.write_text("1112341\n19335\nnot-a-query\n")
    spec = {**cfg, "population_queries": {"path": str(lst), "sha256": hashlib.sha256(lst.read_bytes()).hexdigest()}}
    build_fixture(fixture_dataset("dl19", spec, seed=4401), tmp_path / "c.parquet", tmp_path / "q.parquet")
    assert sorted(pl.read_parquet(tmp_path / "c.parquet")["query_id"].unique().to_list()) == ["1112341", "19335"]
    assert sorted(pl.read_parquet(tmp_path / "q.parquet")["query_id"].unique().to_list()) == ["1112341", "19335"]
    meta = read_metadata(tmp_path / "c.parquet")["population_queries"]
    assert (meta["ids"], meta["of"], meta["absent"]) == (3, 43, ["not-a-query"])
    lst.write_text("nope\n")
    spec["population_queries"]["sha256"] = hashlib.sha256(b"nope\n").hexdigest()
    with pytest.raises(InputFormatError, match="none of its 1 ids is here"):
        build_fixture(fixture_dataset("dl19", spec, seed=4401), tmp_path / "c2.parquet", tmp_path / "q2.parquet")
