"""The dataset catalogue (presdep/config/catalogue.yaml): load, check, and expand config entries.

A config names a catalogue entry with ``datasets: {<id>: {from_catalogue: true}}`` (or
``{<name>: {from_catalogue: <id>}}``). :func:`expand_catalogue` turns it into an ordinary
dataset entry whose files are the outputs of the fetch rules (rules/fetch.smk) under
``resources/datasets/<id>/``; the closed config schema then validates it like any other.
Settings the config gives (max_queries, B, max_doc_chars, M, instruction, rubric, role, ...)
win over the catalogue's. Entries that are not public and have no local copy are removed
from ``datasets`` and listed in ``skipped_datasets`` with the reason, so tables can name them.

The fetched files are keyed by their source, not only by the id (:func:`fetch_key`): the
catalogue's own source (a download) is converted into ``resources/datasets/<id>/``, a local
copy into ``resources/datasets/<id>/local-<digest>/`` (:func:`local_key`), so two configs (or
two datasets of one config) that give one entry different local files each keep their own
conversion and never re-fetch each other's.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from presdep.config.catalogue_overrides import with_overrides
from presdep.config.query_lists import QueryList
from presdep.config.records import Dataset, thaw
from presdep.config.run_names import similar_names
from presdep.config.wildcards import alternatives
from presdep.config.yaml_io import parse_yaml
from presdep.contracts.errors import InvalidInput, PresdepError
from presdep.runtime.text_files import read_text_file

CATALOGUE_PATH = Path(__file__).with_name("catalogue.yaml")
DATASETS_DIR = "resources/datasets"
ENTRY_KEYS = ("name", "task", "population", "source", "first_stage", "instruction", "rubric",
              "max_doc_chars", "max_length", "B", "licence", "availability", "sizes")
# What `presdep plan` prices an entry by before its candidates exist (null: not known here); a
# training pool's query counts come from its sampling, so it gives no `queries`.
SIZE_KEYS = ("depth", "doc_chars", "query_chars", "source")
QUERY_LIST_KEYS = ("shuffle_queries", "population_queries")
SOURCE_KINDS = ("pyserini_prebuilt", "hf_datasets", "url", "irds", "user_supplied")
AVAILABILITY = ("public", "gated", "proprietary")
POPULATIONS = {"rerank": "rerank", "qa": "qa", "response": "response"}
# Keys of a config entry that steer the expansion itself (all in the config schema).
CATALOGUE_KEYS = ("from_catalogue", "local_path", "pool_split", "source")
# What a local_path may name, per layout family.
LOCAL_KEYS = {"ranked": ("candidates", "qrels"), "index": ("index", "topics", "qrels"), "beir": ("beir",), "file": ("path",)}


class CatalogueError(PresdepError, ValueError):
    """The catalogue or a config's reference to it is wrong; the message names the entry and key."""


def load_catalogue(path: str | Path = CATALOGUE_PATH) -> dict[str, dict]:
    """``{"datasets": {...}, "training_pools": {...}, "query_lists": {...}}``, every entry checked
    (each shipped query list against its sha256 and id count)."""
    data = parse_yaml(read_text_file(path), path) or {}
    problems = []
    lists = data.get("query_lists") or {}
    if not isinstance(lists, dict):
        problems.append(f"{path}: 'query_lists' must be a mapping of name -> {{sha256, ids, published}}")
        lists = {}
    for name, entry in lists.items():
        problems += [f"{path}: query_lists.{name}: {p}" for p in check_query_list(name, entry)]
    for section in ("datasets", "training_pools"):
        if not isinstance(data.get(section), dict):
            problems.append(f"{path}: '{section}' must be a mapping of id -> entry")
            continue
        for cid, entry in data[section].items():
            problems += [f"{path}: {section}.{cid}: {p}" for p in check_entry(entry, pool=section == "training_pools")]
            for key in QUERY_LIST_KEYS:
                named = entry.get(key) if isinstance(entry, Mapping) else None
                if named is not None and named not in lists:
                    problems.append(f"{path}: {section}.{cid}: {key} {named!r} is not in query_lists ({sorted(lists)})")
    if problems:
        raise CatalogueError("invalid catalogue:\n  " + "\n  ".join(problems))
    return {"datasets": data["datasets"], "training_pools": data["training_pools"], "query_lists": lists}


def check_query_list(name: str, entry: Any) -> list[str]:
    """A shipped list: its file exists, matches its sha256 and holds ``ids`` distinct ids."""
    if not isinstance(entry, Mapping) or not {"sha256", "ids", "published"} <= set(entry):
        return ["needs sha256, ids and published {repository, path, commit}"]
    try:
        ids = QueryList(name=name, sha256=entry["sha256"]).ids()
    except PresdepError as exc:
        return [str(exc)]
    return [] if len(ids) == entry["ids"] else [f"the file holds {len(ids)} ids, the catalogue says {entry['ids']}"]


def check_entry(entry: Mapping[str, Any], *, pool: bool) -> list[str]:
    if not isinstance(entry, Mapping):
        return ["expected a mapping"]
    out = [f"missing '{k}'" for k in ENTRY_KEYS if k not in entry]
    if out:
        return out
    if entry["task"] not in POPULATIONS:
        out.append(f"task {entry['task']!r} is not one of {list(POPULATIONS)}")
    expected_pop = "training" if pool else POPULATIONS.get(entry["task"])
    if entry["population"] != expected_pop:
        out.append(f"population {entry['population']!r}, expected {expected_pop!r}")
    src = entry["source"]
    if src.get("kind") not in SOURCE_KINDS:
        out.append(f"source.kind {src.get('kind')!r} is not one of {list(SOURCE_KINDS)}")
    if "converter" not in src or "local" not in src:
        out.append("source needs 'converter' and 'local' (what a local_path must give)")
    if src.get("kind") == "hf_datasets" and not {"id", "split", "revision"} <= set(src):
        out.append("source (hf_datasets) needs id, split and revision (null when not yet pinned)")
    if src.get("kind") == "url" and not {"url", "sha256"} <= set(src):
        out.append("source (url) needs url and sha256 (null when not yet pinned)")
    if src.get("kind") == "pyserini_prebuilt" and not {"index", "topics", "qrels"} <= set(src):
        out.append("source (pyserini_prebuilt) needs index, topics and qrels")
    if entry["availability"] not in AVAILABILITY:
        out.append(f"availability {entry['availability']!r} is not one of {list(AVAILABILITY)}")
    elif entry["availability"] != "public" and not entry.get("supply"):
        out.append(f"availability {entry['availability']} needs 'supply' (what the user must provide)")
    for key in ("max_doc_chars", "max_length", "B"):
        if not isinstance(entry[key], int) or entry[key] < 1:
            out.append(f"{key} must be a positive integer, got {entry[key]!r}")
    labels = entry.get("verdict_labels")
    if labels is not None and (entry["task"] != "rerank" or not isinstance(labels, Mapping)
                               or labels.get("kind") != "hf_datasets"
                               or not {"id", "split", "revision", "format"} <= set(labels)):
        out.append("verdict_labels (reranking entries only) needs kind hf_datasets, id, split, revision and format")
    k_input = entry.get("k_input")
    if k_input is not None and (not isinstance(k_input, int) or k_input < 1
                                or k_input > entry["first_stage"].get("k", k_input)):
        out.append(f"k_input {k_input!r} must be a positive integer no deeper than first_stage.k")
    if pool and not {"n", "seed", "heldout"} <= set(entry.get("sampling") or {}):
        out.append("a training pool needs sampling: {n, seed, heldout}")
    return out + check_sizes(entry["sizes"], pool=pool)


def check_sizes(sizes: Any, *, pool: bool) -> list[str]:
    """``sizes``: {queries (not for a pool), depth, doc_chars, query_chars, source}; counts are
    positive integers or null (unknown), the source a sentence."""
    want = SIZE_KEYS if pool else ("queries", *SIZE_KEYS)
    if not isinstance(sizes, Mapping) or set(sizes) != set(want):
        got = sorted(sizes) if isinstance(sizes, Mapping) else sizes
        return [f"sizes needs exactly {list(want)}, got {got!r}"]
    out = [f"sizes.{k} must be a positive integer or null, got {sizes[k]!r}" for k in want
           if k != "source" and sizes[k] is not None and (not isinstance(sizes[k], int) or sizes[k] < 1)]
    if sizes["depth"] is None:
        out.append("sizes.depth must be known (the candidates per query the first stage gives)")
    if not isinstance(sizes["source"], str) or len(sizes["source"]) < 10:
        out.append("sizes.source must say where the figures come from")
    return out


def lookup(catalogue: Mapping[str, Mapping], cid: str) -> tuple[dict, bool]:
    """(entry, is_training_pool) of a catalogue id."""
    if cid in catalogue["datasets"]:
        return dict(catalogue["datasets"][cid]), False
    if cid in catalogue["training_pools"]:
        return dict(catalogue["training_pools"][cid]), True
    raise KeyError(cid)


def layout(entry: Mapping[str, Any], local: Mapping[str, Any] | None, pool: bool) -> str:
    """Which fetch rule writes the entry: pool_ranked | pool_qa | qa | beir | ranked."""
    if pool:
        return "pool_qa" if entry["task"] == "qa" else "pool_ranked"
    if entry["task"] == "qa":
        return "qa"
    if local and "beir" in local:
        return "beir"
    return "ranked"


def _size(path: Path) -> int | None:
    if path.is_dir():
        return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    return path.stat().st_size if path.exists() else None


def local_key(local: Mapping[str, Any]) -> str:
    """The subfolder of a local copy's fetch: ``local-`` and 12 hex digits of sha256 over what
    ``local_path`` names (each key, its path as written, normalised, and its size in bytes; a
    folder: its files' total). Paths and sizes, not contents: cheap at every dry run, while
    Snakemake still re-fetches when a named file is newer than the conversion."""
    parts = [[key, os.path.normpath(str(local[key])), _size(Path(str(local[key])))] for key in sorted(local)]
    return "local-" + hashlib.sha256(json.dumps(parts).encode("utf-8")).hexdigest()[:12]


def fetch_key(cid: str, local: Mapping[str, Any] | None) -> str:
    """Where under resources/datasets/ a fetch writes: ``<id>`` for the catalogue's own source,
    ``<id>/local-<digest>`` for a local copy (the fetch rules' ``catalogue_id`` wildcard)."""
    return f"{cid}/{local_key(local)}" if local else cid


def verdict_labels_outputs(cid: str) -> dict[str, str]:
    """The claims' gold verdicts the ``fetch_verdict_labels`` rule writes for catalogue id ``cid``."""
    d = f"{DATASETS_DIR}/{cid}"
    return {"labels": f"{d}/verdict_labels.parquet", "manifest": f"{d}/verdict_labels.manifest.json"}


def fetch_outputs(cid: str, kind: str) -> dict[str, str]:
    """The files the fetch rule of ``kind`` writes for catalogue id (or :func:`fetch_key`) ``cid``."""
    d = f"{DATASETS_DIR}/{cid}"
    if kind == "ranked":
        return {"candidates": f"{d}/candidates.json", "qrels": f"{d}/qrels.txt", "manifest": f"{d}/manifest.json"}
    if kind == "qa":
        return {"questions": f"{d}/questions.jsonl", "manifest": f"{d}/manifest.json"}
    if kind == "beir":
        return {"corpus": f"{d}/beir/corpus.jsonl", "queries": f"{d}/beir/queries.jsonl",
                "qrels": f"{d}/beir/qrels/test.tsv", "manifest": f"{d}/manifest.json"}
    if kind in ("pool_ranked", "pool_qa"):
        out = {"manifest": f"{d}/manifest.json"}
        for split in ("train", "dev", "heldout"):
            if kind == "pool_qa":
                out[f"{split}_questions"] = f"{d}/{split}/questions.jsonl"
            else:
                out[f"{split}_candidates"] = f"{d}/{split}/candidates.json"
                out[f"{split}_qrels"] = f"{d}/{split}/qrels.txt"
        return out
    raise InvalidInput(f"unknown fetch layout {kind!r}")


def _local(name: str, entry: Mapping[str, Any], value: Any) -> dict | None:
    """A config's local_path as a mapping (a plain string is the one file or folder the entry takes)."""
    if value is None:
        return None
    wanted = entry["source"]["local"]
    if isinstance(value, str):
        if list(wanted) == ["beir"]:
            return {"beir": value}
        if list(wanted) == ["path"]:
            return {"path": value}
        raise CatalogueError(f"datasets.{name}.local_path: give a mapping with {sorted(wanted)} "
                             f"(or {{index, topics, qrels}} for a local Lucene index)")
    local = dict(value)
    allowed = [set(wanted)] + ([set(LOCAL_KEYS["index"])] if entry["task"] == "rerank" else [])
    if set(local) not in allowed:
        raise CatalogueError(f"datasets.{name}.local_path: keys {sorted(local)}; expected {sorted(wanted)}"
                             + (" or {index, topics, qrels}" if entry["task"] == "rerank" else ""))
    return local


def _missing(local: Mapping[str, Any]) -> list[str]:
    return [str(p) for p in local.values() if not Path(p).exists()]


def skip_reason(entry: Mapping[str, Any], local: Mapping[str, Any] | None) -> str | None:
    """Why a non-public entry cannot run here (None when it can, or when it is public)."""
    if entry["availability"] == "public":
        return None
    supply = " ".join(str(entry.get("supply", "")).split())
    if local is None:
        return f"{entry['availability']}, not distributed; supply: {supply}"
    missing = _missing(local)
    if missing:
        return f"{entry['availability']}; local_path files absent: {', '.join(missing)}; supply: {supply}"
    return None


def _query_lists(entry: Mapping[str, Any], lists: Mapping[str, Any]) -> dict:
    """The entry's fixed lists as dataset keys: ``shuffle_queries`` (the queries whose shuffles are
    scored) and ``population_queries`` (the only queries evaluated), each ``{list, sha256}``."""
    return {key: {"list": entry[key], "sha256": lists[entry[key]]["sha256"]}
            for key in QUERY_LIST_KEYS if entry.get(key)}


def _expanded(cid: str, entry: Mapping[str, Any], kind: str, split: str | None,
              local: Mapping[str, Any] | None = None) -> dict:
    out: dict[str, Any] = {
        "task": entry["task"], "B": entry["B"], "max_doc_chars": entry["max_doc_chars"],
        "instruction": entry["instruction"], "rubric": entry["rubric"],
    }
    key = fetch_key(cid, local)
    d = f"{DATASETS_DIR}/{key}" + (f"/{split}" if split else "")
    if kind == "beir":
        fs = entry["first_stage"]
        # The index is keyed by the source too: another BEIR folder is another corpus.
        index = key.replace("/", "-")
        out["candidates"] = {"format": "bm25", "index": index, "k": fs["k"], "k1": fs["k1"], "b": fs["b"],
                             "corpus": {"format": "beir", "path": f"{d}/beir/corpus.jsonl"},
                             "topics": {"format": "beir", "path": f"{d}/beir/queries.jsonl"}}
        out["qrels"] = {"format": "beir", "path": f"{d}/beir/qrels/test.tsv"}
    elif entry["task"] == "qa":
        out["candidates"] = {"format": "ircot_jsonl", "path": f"{d}/questions.jsonl"}
    else:
        out["candidates"] = {"format": "rank_llm_json", "path": f"{d}/candidates.json"}
        out["qrels"] = {"format": "trec", "path": f"{d}/qrels.txt"}
    return out


def _irds_expanded(entry: Mapping[str, Any], alt: Mapping[str, Any]) -> dict:
    """The ir_datasets alternative: our own Lucene index over the irds corpus (rules/retrieval.smk),
    one index per corpus (DL19 and DL20 share msmarco-passage), the catalogue's BM25 settings."""
    fs = entry["first_stage"]
    return {"task": entry["task"], "B": entry["B"], "max_doc_chars": entry["max_doc_chars"],
            "instruction": entry["instruction"], "rubric": entry["rubric"],
            "candidates": {"format": "bm25", "index": alt["corpus"].replace("/", "_"), "k": fs["k"], "k1": fs["k1"],
                           "b": fs["b"], "corpus": {"format": "irds", "id": alt["corpus"]},
                           "topics": {"format": "irds", "id": alt["id"]}},
            "qrels": {"format": "irds", "id": alt["id"]}}


def _already_expanded(spec: Mapping[str, Any]) -> bool:
    return isinstance(spec.get("from_catalogue"), str) and "candidates" in spec


def expand_catalogue(config: Mapping[str, Any], catalogue: Mapping[str, Mapping] | None = None) -> dict:
    """A copy of ``config`` with every ``from_catalogue`` dataset expanded (or moved to skipped_datasets)."""
    config = copy.deepcopy(dict(config))
    datasets = config.get("datasets")
    if not isinstance(datasets, dict) or not any(
            isinstance(s, dict) and s.get("from_catalogue") and not _already_expanded(s) for s in datasets.values()):
        return config
    catalogue = with_overrides(catalogue or load_catalogue(), config.get("catalogue_overrides"))
    skipped = dict(config.get("skipped_datasets") or {})
    out: dict[str, Any] = {}
    problems: list[str] = []
    for name, spec in datasets.items():
        if not (isinstance(spec, dict) and spec.get("from_catalogue")) or _already_expanded(spec):
            out[name] = spec
            continue
        cid = name if spec["from_catalogue"] is True else str(spec["from_catalogue"])
        try:
            entry, pool = lookup(catalogue, cid)
        except KeyError:
            ids = sorted([*catalogue["datasets"], *catalogue["training_pools"]])
            hint = similar_names(cid, ids).strip()
            problems.append(f"datasets.{name}.from_catalogue: {cid!r} is not a catalogue id ({', '.join(ids)})"
                            f"{'; ' + hint if hint else ''}")
            continue
        clash = [k for k in ("candidates", "qrels", "task") if k in spec]
        if clash:
            problems.append(f"datasets.{name}: {clash} come from the catalogue entry {cid!r}; remove them "
                            "(or declare the files directly without from_catalogue)")
            continue
        try:
            local = _local(name, entry, spec.get("local_path"))
        except CatalogueError as exc:
            problems.append(str(exc))
            continue
        reason = skip_reason(entry, local)
        if reason:
            skipped[name] = reason
            continue
        if local and entry["availability"] == "public" and _missing(local):
            problems.append(f"datasets.{name}.local_path: not found: {', '.join(_missing(local))}")
            continue
        split = None
        if pool:
            split = spec.get("pool_split") or ("heldout" if spec.get("role") == "heldout" else "train")
        elif "pool_split" in spec:
            problems.append(f"datasets.{name}.pool_split: only training pools have splits; {cid!r} is a dataset")
            continue
        kind = layout(entry, local, pool)
        if spec.get("source") == "irds":
            alt = entry["source"].get("alternative")
            if not alt or alt.get("kind") != "irds" or local is not None:
                problems.append(f"datasets.{name}.source: irds needs a catalogue entry with an ir_datasets "
                                f"alternative and no local_path ({cid!r} has {alt or 'none'})")
                continue
            expanded = _irds_expanded(entry, alt)
        else:
            expanded = _expanded(cid, entry, "beir" if kind == "beir" else "ranked_or_qa", split, local)
        if pool:
            expanded["role"] = "train" if split == "train" else "heldout"
        expanded.update(_query_lists(entry, catalogue.get("query_lists") or {}))
        if entry.get("k_input"):  # fetched deeper than the pool (the pool perturbation's replacement)
            expanded["k_input"] = entry["k_input"]
        if entry.get("verdict_labels"):  # a config's own verdict_labels (a local copy) replaces these
            expanded["verdict_labels"] = {"path": verdict_labels_outputs(cid)["labels"],
                                          "format": entry["verdict_labels"]["format"]}
        expanded.update({k: v for k, v in spec.items() if k not in ("from_catalogue", "local_path")})
        expanded["from_catalogue"] = cid
        if local is not None:
            expanded["local_path"] = local
        out[name] = expanded
    if problems:
        from presdep.contracts.errors import ConfigError

        raise ConfigError("invalid workflow config:\n  " + "\n  ".join(problems))
    config["datasets"] = out
    config["skipped_datasets"] = skipped
    return config


def fetch_jobs(datasets: Mapping[str, Dataset], catalogue: Mapping[str, Mapping] | None = None,
               overrides: Mapping[str, Any] | None = None) -> dict[str, dict]:
    """:func:`fetch_key` -> {catalogue_id, layout, entry, local} for the dataset records of a validated
    config (plain data: each job is a rule's params), with the config's ``catalogue_overrides`` applied.
    The key is the catalogue id itself unless a local copy is given."""
    catalogue = with_overrides(catalogue or load_catalogue(), thaw(overrides))
    jobs: dict[str, dict] = {}
    for dataset in datasets.values():
        spec = dataset.spec
        cid = spec.get("from_catalogue")
        if not isinstance(cid, str) or spec.get("source") == "irds":  # irds: rules/retrieval.smk does the work
            continue
        entry, pool = lookup(catalogue, cid)
        local = thaw(spec.get("local_path"))
        jobs[fetch_key(cid, local)] = {"catalogue_id": cid, "layout": layout(entry, local, pool), "entry": entry,
                                       "local": local}
    return jobs


def verdict_label_jobs(datasets: Mapping[str, Dataset], wanted: Iterable[str],
                       catalogue: Mapping[str, Mapping] | None = None,
                       overrides: Mapping[str, Any] | None = None) -> dict[str, dict]:
    """catalogue id -> its ``verdict_labels`` source (the config's ``catalogue_overrides`` applied), for
    the ``wanted`` datasets that read the catalogue's fetched claims (not a config's own labels file)."""
    catalogue = with_overrides(catalogue or load_catalogue(), thaw(overrides))
    jobs = {}
    for name in wanted:
        spec = datasets[name].spec
        cid = spec.get("from_catalogue")
        if isinstance(cid, str) and spec.get("verdict_labels", {}).get("path") == verdict_labels_outputs(cid)["labels"]:
            jobs[cid] = thaw(lookup(catalogue, cid)[0]["verdict_labels"])
    return jobs


def fetch_ids(jobs: Mapping[str, Mapping[str, Any]], *kinds: str) -> str:
    """A wildcard constraint matching the fetch keys (catalogue ids, ``<id>/local-<digest>`` for a
    local copy) fetched with one of ``kinds`` (nothing if none)."""
    return alternatives(cid for cid, job in jobs.items() if job["layout"] in kinds)


def fetch_local_inputs(jobs: Mapping[str, Mapping[str, Any]], cid: str) -> list[str]:
    """The local original files a fetch reads (so the workflow tracks them)."""
    return sorted(str(p) for p in (jobs[cid]["local"] or {}).values())
