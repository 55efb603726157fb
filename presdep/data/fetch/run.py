"""One fetch: a catalogue entry (+ an optional local path) -> converted files + manifest.json."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from presdep.contracts.errors import InvalidInput
from presdep.contracts.schemas import write_text_atomic
from presdep.data.fetch import qa, rerank, responses, sources
from presdep.data.fetch.common import (
    FetchError,
    Manifest,
    QARecord,
    RankedQuery,
    read_rows,
    sample_pool,
    select_paragraphs,
    sha256_paths,
    split_sampled,
    write_ircot,
    write_ranked,
)

log = logging.getLogger(__name__)

POOL_SPLITS = ("train", "dev", "heldout")


def detect_qa_format(path: str | Path) -> str:
    """Which QA original a file is, from its first record's keys."""
    for _, row in read_rows(path):
        if "question_id" in row and "contexts" in row:
            return "ircot_jsonl"
        if "paragraphs" in row:
            return "musique_jsonl"
        if "_id" in row:
            return "hotpotqa_json"
        if isinstance(row.get("context"), dict):
            return "hotpotqa_hf"
        raise FetchError(f"{path}: first record has keys {sorted(row)}; not a known QA format "
                         "(IRCoT JSONL, HotpotQA/2Wiki JSON, MuSiQue JSONL, HotpotQA HF rows)")
    raise FetchError(f"{path}: no records")


def _original(entry: Mapping[str, Any], local: Mapping[str, Any] | None, download_dir: Path) -> tuple[Path, dict]:
    """The original data file of a QA / response entry: the local copy, or a download."""
    source = entry["source"]
    if local:
        path = Path(local["path"])
        return path, {"local_path": str(path), "sha256": sha256_paths([path])}
    download_dir.mkdir(parents=True, exist_ok=True)
    if source["kind"] == "hf_datasets":
        return sources.hf_rows_file(source, download_dir)
    if source["kind"] == "url":
        return sources.url_file(source, download_dir)
    raise FetchError(f"source kind {source['kind']!r} cannot be downloaded; give local_path")


def qa_records(entry: Mapping[str, Any], local: Mapping[str, Any] | None, download_dir: Path) -> tuple[list[QARecord], dict, dict]:
    """The selected questions, the version read, and counts: read, dropped (another number of
    supporting paragraphs) and, with a selection, the questions kept with fewer paragraphs than
    its cap (they keep all they have: the count says how far the set is from the cap)."""
    path, version = _original(entry, local, download_dir)
    fmt = detect_qa_format(path) if local else entry["source"]["converter"]
    sel = entry.get("selection") or {}
    kept, seen, dropped = [], 0, 0
    for rec in qa.READERS[fmt](path):
        seen += 1
        if sel:
            rec = select_paragraphs(rec, int(sel["paragraphs"]), int(sel["supporting"]))
        if rec is None:
            dropped += 1
            continue
        kept.append(rec)
        if sel.get("questions") and len(kept) == int(sel["questions"]):
            break
    counts = {"read": seen, "dropped_other_geometry": dropped}
    if sel:
        counts["fewer_paragraphs"] = sum(len(r.paragraphs) < int(sel["paragraphs"]) for r in kept)
    return kept, {**version, "format": fmt}, counts


def ranked_queries(entry: Mapping[str, Any], local: Mapping[str, Any] | None, download_dir: Path) -> tuple[list[RankedQuery], dict]:
    source, fs = entry["source"], entry["first_stage"]
    if entry["task"] == "response":
        path, version = _original(entry, local, download_dir)
        return list(responses.READERS[source["converter"]](path, **_reader_args(entry))), version
    if local and "candidates" in local:
        version = {"local_path": dict(local), "sha256": sha256_paths([local["candidates"], local["qrels"]])}
        return rerank.rank_llm_local(local["candidates"], local["qrels"]), version
    if source["kind"] == "user_supplied" and not local:
        raise FetchError(f"{entry.get('name')}: user-supplied; {entry.get('supply', 'give local_path')}")
    if local and "index" in local:
        from presdep.data.trec import read_topics

        topics, grades = read_topics(local["topics"]), rerank.read_grades(local["qrels"])
        version = {"local_path": dict(local), "sha256": sha256_paths([local["topics"], local["qrels"]])}
        index = str(local["index"])
    else:
        topics, qrels_file = _pyserini_topics_qrels(source)
        grades = rerank.read_grades(qrels_file)
        version = {"pyserini_topics": source["topics"], "pyserini_qrels": source["qrels"],
                   "sha256": sha256_paths([qrels_file])}
        index = source["index"]
    if entry.get("sampling"):
        topics = {q: topics[q] for q in _sampled_ids([q for q in topics if q in grades], entry["sampling"])}
    queries, index_version = rerank.bm25_ranked(index, topics, grades, k=fs["k"], k1=fs["k1"], b=fs["b"],
                                                mirror=None if local else source.get("prebuilt_index"))
    return queries, {**version, **index_version, "first_stage": dict(fs)}


def _reader_args(entry: Mapping[str, Any]) -> dict:
    if entry["source"]["converter"] == "ppe":
        return {"k": int(entry.get("responses_per_prompt", 8))}
    if entry["source"]["converter"] == "ultrafeedback":
        return {"thresholds": tuple(entry["grades"]["thresholds"])}
    return {}


def _pyserini_topics_qrels(source: Mapping[str, Any]) -> tuple[dict[str, str], Path]:
    topics, qrels = source["topics"], source["qrels"]
    if isinstance(topics, Mapping):  # an ir_datasets id (MS MARCO train queries)
        from presdep.data import irds
        from presdep.data.trec import write_qrels

        t = irds.load_topics(topics["id"])
        path = Path("resources/downloads") / f"{qrels['id'].replace('/', '__')}.qrels"
        path.parent.mkdir(parents=True, exist_ok=True)
        write_qrels(irds.load_qrels(qrels["id"]), path)
        return t, path
    return rerank.pyserini_topics(topics), rerank.pyserini_qrels_file(qrels)


def _sampled_ids(ids: list, sampling: Mapping[str, Any]) -> list:
    return [ids[i] for i in sample_pool(len(ids), int(sampling["n"]), int(sampling["seed"]))]


def fetch(catalogue_id: str, entry: Mapping[str, Any], out_dir: str | Path, *, layout: str,
          local: Mapping[str, Any] | None = None, download_dir: str | Path = "resources/downloads") -> Manifest:
    """Write the entry's files under ``out_dir`` (layout ranked | qa | beir | pool_ranked | pool_qa) and its manifest.

    ``catalogue_id``: the id, or the fetch rules' folder key ``<id>/<local-digest>`` of a local
    copy (presdep.config.catalogue.fetch_key); the manifest records the two apart."""
    cid, _, folder = str(catalogue_id).partition("/")
    try:
        return _fetch(cid, entry, Path(out_dir), layout=layout, local=local, download_dir=Path(download_dir),
                      folder=folder or None)
    except FetchError as exc:  # the job's log names the dataset, not only a download path
        raise FetchError(f"{cid}: {exc}") from exc


# Source keys that describe a download: a local copy's manifest leaves them out (nothing was
# downloaded, and the catalogue's URL is not the address of whatever file was given).
_DOWNLOAD_KEYS = ("url", "sha256", "filename", "member")


def _manifest_source(source: Mapping[str, Any], local: Mapping[str, Any] | None) -> dict:
    drop = ("published_files", *(_DOWNLOAD_KEYS if local else ()))
    return {k: v for k, v in source.items() if k not in drop}


def _fetch(catalogue_id: str, entry: Mapping[str, Any], out_dir: Path, *, layout: str,
           local: Mapping[str, Any] | None, download_dir: Path, folder: str | None = None) -> Manifest:
    manifest = Manifest(catalogue_id, source=_manifest_source(entry["source"], local), folder=folder)
    if layout == "beir":
        if not local or "beir" not in local:
            raise FetchError(f"{catalogue_id}: the beir layout needs local_path: {{beir: <folder>}}")
        manifest.sha256 = sha256_paths([local["beir"]])
        manifest.version = {"local_path": dict(local)}
        manifest.rows = rerank.copy_beir_folder(local["beir"], out_dir / "beir")
    elif layout == "qa":
        records, manifest.version, counts = qa_records(entry, local, download_dir)
        manifest.sha256 = manifest.version.pop("sha256", {})
        manifest.rows = {**counts, **write_ircot(records, out_dir / "questions.jsonl")}
    elif layout == "ranked":
        queries, manifest.version = ranked_queries(entry, local, download_dir)
        manifest.sha256 = manifest.version.pop("sha256", {})
        manifest.rows = write_ranked(queries, out_dir / "candidates.json", out_dir / "qrels.txt")
    elif layout in ("pool_ranked", "pool_qa"):
        manifest.rows = _fetch_pool(entry, local, out_dir, download_dir, manifest)
    else:
        raise InvalidInput(f"unknown layout {layout!r}")
    manifest.files = sources.file_entries(entry["source"], manifest.sha256, manifest.version, local, manifest.notes)
    manifest.write(out_dir / "manifest.json")
    return manifest


def _fetch_pool(entry, local, out_dir: Path, download_dir: Path, manifest: Manifest) -> dict:
    sampling = entry["sampling"]
    if entry["task"] == "qa":
        records, manifest.version, counts = qa_records({**entry, "selection": {k: v for k, v in entry.get("selection", {}).items() if k != "questions"}},
                                                       local, download_dir)
        manifest.sha256 = manifest.version.pop("sha256", {})
        items: list = records
    else:
        # Reranking samples the judged query ids BEFORE BM25 (searching every train query
        # would be wasted), so its queries arrive already in sampled order.
        queries, manifest.version = ranked_queries(entry, local, download_dir)
        manifest.sha256 = manifest.version.pop("sha256", {})
        items, counts = queries, {}
    if entry["task"] == "rerank" and not (local and "candidates" in local):
        order = items
    else:
        order = [items[i] for i in sample_pool(len(items), int(sampling["n"]), int(sampling["seed"]))]
    parts = split_sampled(order, int(sampling["heldout"]), int(sampling.get("dev", 0)))
    rows = {"pool": len(items), **counts}
    for split in POOL_SPLITS:
        d = out_dir / split
        if entry["task"] == "qa":
            rows[split] = write_ircot(parts[split], d / "questions.jsonl") if parts[split] else _empty(d / "questions.jsonl")
        else:
            rows[split] = (write_ranked(parts[split], d / "candidates.json", d / "qrels.txt") if parts[split]
                           else _empty(d / "candidates.json", d / "qrels.txt"))
    return rows


def _empty(*paths: Path) -> dict:
    for p in paths:
        write_text_atomic(p, "[]\n" if p.suffix == ".json" else "")
    return {"queries": 0}


