"""The catalogue: the paper's exact populations and settings (METHODS.md v2), a fetch rule and a
converter test for every entry, and the expansion of `from_catalogue` config entries."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from presdep.config import SCHEMA_PATH, ConfigError, WorkflowConfig, load_workflow_config
from presdep.config.catalogue import (
    CatalogueError,
    expand_catalogue,
    layout,
    load_catalogue,
)

REPO = Path(__file__).resolve().parents[3]

# METHODS.md v2, "Populations" and "Training", restated.
RERANK = ["dl19", "dl20", "dl21", "dl22", "dl23", "touche2020", "fiqa", "nfcorpus", "arguana", "climate-fever",
          "trec-covid", "dbpedia-entity", "scifact", "signal1m", "trec-news", "robust04", "legal-a", "legal-b"]
QA = ["hotpotqa", "2wikimultihopqa", "musique"]
RESPONSE = {"rewardbench2": (2000, 8192), "nectar": (1500, 8192), "ppe-math": (2500, 12288),
            "ppe-mmlu-pro": (2500, 12288), "rm-bench": (1500, 8192)}
POOLS = ["msmarco-train", "hotpotqa-train", "ultrafeedback-train"]


@pytest.fixture(scope="module")
def cat() -> dict:
    return load_catalogue()


def test_populations_are_the_papers(cat: dict) -> None:
    ds = cat["datasets"]
    assert [k for k, e in ds.items() if e["population"] == "rerank"] == RERANK
    assert [k for k, e in ds.items() if e["population"] == "qa"] == QA
    assert [k for k, e in ds.items() if e["population"] == "response"] == list(RESPONSE)
    assert len(ds) == 18 + 3 + 5
    assert list(cat["training_pools"]) == POOLS
    assert {e["population"] for e in cat["training_pools"].values()} == {"training"}


def test_per_dataset_settings_follow_methods(cat: dict) -> None:
    ds = cat["datasets"]
    for cid in RERANK:
        assert ds[cid]["B"] == 20 and ds[cid]["task"] == "rerank"
        assert ds[cid]["max_doc_chars"] == (1200 if cid.startswith("dl") else 500), cid
    for cid in ("dl19", "dl20", "dl21", "dl22", "dl23"):
        fs = ds[cid]["first_stage"]
        assert (fs["run"], fs["k"], fs["k1"], fs["b"]) == ("bm25-default", 100, 0.9, 0.4)
    assert ds["dl19"]["first_stage"]["reference_ndcg10"] == 0.5058
    assert ds["dl20"]["first_stage"]["reference_ndcg10"] == 0.4796
    assert ds["dl19"]["source"]["index"] == ds["dl20"]["source"]["index"] == "msmarco-v1-passage"
    assert {ds[c]["source"]["index"] for c in ("dl21", "dl22", "dl23")} == {"msmarco-v2-passage"}
    for cid in RERANK[5:16]:
        assert ds[cid]["first_stage"]["run"] == "beir-flat", cid
        assert ds[cid]["source"]["index"].endswith(".flat"), cid
    for cid in QA:
        assert (ds[cid]["B"], ds[cid]["max_doc_chars"]) == (10, 1600)
        assert ds[cid]["selection"] == {"questions": 200, "paragraphs": 10, "supporting": 2}
        assert ds[cid]["first_stage"] == {"kind": "none"}
    for cid, (chars, length) in RESPONSE.items():
        assert (ds[cid]["B"], ds[cid]["max_doc_chars"], ds[cid]["max_length"]) == (4, chars, length), cid
    assert ds["ppe-math"]["responses_per_prompt"] == ds["ppe-mmlu-pro"]["responses_per_prompt"] == 8


def test_pools_carry_their_sampling(cat: dict) -> None:
    pools = cat["training_pools"]
    assert pools["msmarco-train"]["sampling"] == {"n": 30000, "seed": 42, "heldout": 500}  # 29,500 + 500
    assert pools["msmarco-train"]["first_stage"]["k"] == 100
    assert pools["hotpotqa-train"]["sampling"] == {"n": 30500, "seed": 42, "heldout": 500}
    assert pools["ultrafeedback-train"]["sampling"] == {"n": 30700, "seed": 42, "heldout": 500, "dev": 200}
    assert pools["ultrafeedback-train"]["grades"] == {"from": "overall_score", "thresholds": [4, 6, 8]}


def test_not_public_entries_say_what_to_supply(cat: dict) -> None:
    avail = {k: e["availability"] for k, e in cat["datasets"].items() if e["availability"] != "public"}
    assert avail == {"signal1m": "gated", "trec-news": "gated", "robust04": "gated",
                     "legal-a": "proprietary", "legal-b": "proprietary"}
    assert all(cat["datasets"][k]["supply"] for k in avail)


def test_bad_catalogue_names_entry_and_key(tmp_path: Path) -> None:
    bad = tmp_path / "c.yaml"
    bad.write_text("datasets:\n  x: {name: x, task: rerank}\ntraining_pools: {}\n")
    with pytest.raises(CatalogueError, match=r"datasets.x: missing 'population'"):
        load_catalogue(bad)


# ------------------------------------------------------------------ fetch rules and converter tests


def _local_forms(entry: dict) -> list[dict | None]:
    forms: list[dict | None] = [None]
    local = entry["source"]["local"]
    forms.append({k: "x" for k in local})
    return forms


def _rules() -> dict[str, str]:
    """rule name -> its block of rules/fetch.smk."""
    text = (REPO / "rules" / "fetch.smk").read_text()
    parts = re.split(r"^rule (\w+):", text, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2]))


RULE_OF_LAYOUT = {"ranked": "fetch_dataset", "qa": "fetch_dataset_qa", "beir": "fetch_dataset_beir",
                  "pool_ranked": "fetch_training_pool", "pool_qa": "fetch_training_pool_qa"}


def test_every_entry_has_a_fetch_rule(cat: dict) -> None:
    rules = _rules()
    for section, pool in (("datasets", False), ("training_pools", True)):
        for cid, entry in cat[section].items():
            for local in _local_forms(entry):
                kind = layout(entry, local, pool)
                rule = RULE_OF_LAYOUT[kind]
                assert rule in rules, f"{cid}: no rule {rule}"
                # The rule writes that layout's files (the ones the expansion points at), for its ids.
                assert f'fetch_outputs("{{catalogue_id}}", "{kind}")' in rules[rule], (cid, rule)
                assert f'catalogue_id=fetch_ids(FETCH_JOBS, "{kind}")' in rules[rule], (cid, rule)


def _converter_tests() -> set[str]:
    names = set()
    for path in (REPO / "tests").rglob("test_fetch_*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_converter_"):
                names.add(node.name.removeprefix("test_converter_"))
    return names


def test_every_entry_has_a_converter_test(cat: dict) -> None:
    tested = _converter_tests()

    def has(name: str) -> bool:
        return any(t == name or t.startswith(name + "_") for t in tested)

    for section in ("datasets", "training_pools"):
        for cid, entry in cat[section].items():
            src = entry["source"]
            assert has(src["converter"]), f"{cid}: no test_converter_{src['converter']}"
            local = src["local"]
            if "candidates" in local:
                assert has("rank_llm_json"), cid
            if "beir" in local:
                assert has("beir_folder"), cid
            if "path" in local and entry["task"] == "qa":
                for fmt in ("ircot_jsonl", "hotpotqa_json"):
                    assert has(fmt), cid


# ------------------------------------------------------------------ expansion


def _config(datasets: dict) -> dict:
    return {"protocol": {}, "datasets": datasets, "variants": {"bm25": {"scorer": "identity"}}}


def test_expansion_gives_an_ordinary_validated_entry() -> None:
    filled, cfg = load_workflow_config(_config({"dl19": {"from_catalogue": True, "max_queries": 7, "B": 10}}), SCHEMA_PATH)
    spec = filled["datasets"]["dl19"]
    assert (spec["candidates"]["format"], spec["candidates"]["path"]) == ("rank_llm_json", "resources/datasets/dl19/candidates.json")
    assert spec["qrels"] == {"format": "trec", "path": "resources/datasets/dl19/qrels.txt", "split": "test"}
    assert spec["from_catalogue"] == "dl19"
    proto = cfg.datasets["dl19"].protocol
    assert (proto.B, proto.max_doc_chars, proto.rubric) == (10, 1200, "relevance_v2")  # the config's B wins
    assert proto.instruction == "Given a web search query, retrieve relevant passages that answer the query"
    assert cfg.datasets["dl19"].max_queries == 7
    assert filled["skipped_datasets"] == {}


def test_local_beir_folder_uses_our_own_index(tmp_path: Path) -> None:
    filled, _ = load_workflow_config(_config({"scifact": {"from_catalogue": True, "local_path": str(tmp_path)}}), SCHEMA_PATH)
    cand = filled["datasets"]["scifact"]["candidates"]
    # A local copy is converted into its own source-keyed folder (and index): resources/datasets/scifact/local-<digest>/.
    folder = cand["corpus"]["path"].split("/")[3]
    assert re.fullmatch(r"local-[0-9a-f]{12}", folder)
    assert (cand["format"], cand["index"], cand["k"], cand["k1"], cand["b"]) == ("bm25", f"scifact-{folder}", 100, 0.9, 0.4)
    assert cand["corpus"]["path"] == f"resources/datasets/scifact/{folder}/beir/corpus.jsonl"
    assert filled["datasets"]["scifact"]["local_path"] == {"beir": str(tmp_path)}


def test_proprietary_and_gated_are_skipped_with_the_reason(tmp_path: Path) -> None:
    cfg = _config({"dl19": {"from_catalogue": True}, "legal-a": {"from_catalogue": True},
                   "robust04": {"from_catalogue": True, "local_path": str(tmp_path / "absent")}})
    filled, wc = load_workflow_config(cfg, SCHEMA_PATH)
    assert list(wc.datasets) == ["dl19"]
    assert filled["skipped_datasets"]["legal-a"].startswith("proprietary, not distributed; supply: The BM25 top-100")
    assert "local_path files absent" in filled["skipped_datasets"]["robust04"]


def test_supplied_proprietary_set_runs(tmp_path: Path) -> None:
    (tmp_path / "c.json").write_text("[]")
    (tmp_path / "q.txt").write_text("")
    local = {"candidates": str(tmp_path / "c.json"), "qrels": str(tmp_path / "q.txt")}
    filled, _ = load_workflow_config(_config({"legal-a": {"from_catalogue": True, "local_path": local}}), SCHEMA_PATH)
    assert re.fullmatch(r"resources/datasets/legal-a/local-[0-9a-f]{12}/candidates.json",
                        filled["datasets"]["legal-a"]["candidates"]["path"])


def test_pool_splits_and_roles() -> None:
    filled, wc = load_workflow_config(_config({
        "dl19": {"from_catalogue": True},
        "uf-train": {"from_catalogue": "ultrafeedback-train"},
        "uf-heldout": {"from_catalogue": "ultrafeedback-train", "role": "heldout"},
        "hp-heldout": {"from_catalogue": "hotpotqa-train", "pool_split": "heldout"},
    }) | {"reader": {"model": "m"}, "models": {"m": {"source": "local", "path": "x"}}}, SCHEMA_PATH)
    ds = filled["datasets"]
    assert ds["uf-train"]["candidates"]["path"] == "resources/datasets/ultrafeedback-train/train/candidates.json"
    assert (ds["uf-heldout"]["role"], ds["uf-heldout"]["candidates"]["path"]) == (
        "heldout", "resources/datasets/ultrafeedback-train/heldout/candidates.json")
    hp = ds["hp-heldout"]
    assert (hp["role"], hp["candidates"]["format"], hp["candidates"]["path"]) == (
        "heldout", "ircot_jsonl", "resources/datasets/hotpotqa-train/heldout/questions.jsonl")
    assert wc.eval_datasets == ["dl19"]


@pytest.mark.parametrize("spec,message", [
    ({"nope": {"from_catalogue": True}}, r"datasets.nope.from_catalogue: 'nope' is not a catalogue id \(2wikimultihopqa, arguana"),
    ({"dl19": {"from_catalogue": True, "local_path": "/absent/x"}}, r"datasets.dl19.local_path: give a mapping with"),
    ({"dl19": {"from_catalogue": True, "local_path": {"candidates": "/absent/c.json", "qrels": "/absent/q"}}},
     r"datasets.dl19.local_path: not found: /absent/c.json, /absent/q"),
    ({"dl19": {"from_catalogue": True, "candidates": {"format": "trec_run"}}}, r"datasets.dl19: \['candidates'\] come from"),
    ({"dl19": {"from_catalogue": True, "local_path": {"candidates": "a"}}}, r"datasets.dl19.local_path: keys \['candidates'\]"),
    ({"dl19": {"from_catalogue": True, "pool_split": "train"}}, r"datasets.dl19.pool_split: only training pools"),
    ({"scifact": {"from_catalogue": True, "local_path": {"candidates": "a", "qrels": "b"}}},
     r"datasets.scifact.local_path: keys \['candidates', 'qrels'\]; expected \['beir'\] or \{index, topics, qrels\}"),
    ({"musique": {"from_catalogue": True, "local_path": {"index": "a", "topics": "b", "qrels": "c"}}},
     r"datasets.musique.local_path: keys \['index', 'qrels', 'topics'\]; expected \['path'\]$"),
    ({"dl19": {"from_catalogue": True, "max_querys": 3}}, r"datasets.dl19.max_querys: unknown key; did you mean 'max_queries'"),
])
def test_bad_references_are_refused_by_path(spec: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_workflow_config(_config(spec), SCHEMA_PATH)


def test_irds_alternative_is_our_own_index_over_the_irds_corpus() -> None:
    from presdep.config.catalogue import fetch_jobs

    filled, _ = load_workflow_config(_config({"dl19": {"from_catalogue": True, "source": "irds"},
                                              "dl20": {"from_catalogue": True, "source": "irds"}}), SCHEMA_PATH)
    c19, c20 = filled["datasets"]["dl19"]["candidates"], filled["datasets"]["dl20"]["candidates"]
    assert c19["corpus"] == c20["corpus"] == {"format": "irds", "id": "msmarco-passage", "split": "test"}
    assert c19["index"] == c20["index"] == "msmarco-passage"  # one index for both
    assert c19["topics"]["id"] == "msmarco-passage/trec-dl-2019/judged"
    assert (c19["k"], c19["k1"], c19["b"]) == (100, 0.9, 0.4)
    assert filled["datasets"]["dl19"]["qrels"]["id"] == "msmarco-passage/trec-dl-2019/judged"
    assert fetch_jobs(WorkflowConfig.from_validated(filled).datasets) == {}  # nothing to fetch: ir_datasets serves the files
    with pytest.raises(ConfigError, match=r"datasets.rm-bench.source: irds needs"):
        load_workflow_config(_config({"rm-bench": {"from_catalogue": True, "source": "irds"}}), SCHEMA_PATH)


def test_expansion_is_idempotent_and_leaves_direct_entries_alone() -> None:
    direct = {"task": "rerank", "candidates": {"format": "rank_llm_json", "path": "a.json"}, "qrels": {"format": "trec", "path": "q"}}
    once = expand_catalogue(_config({"dl19": {"from_catalogue": True}, "mine": direct}))
    assert once["datasets"]["mine"] == direct
    assert expand_catalogue(once) == once
