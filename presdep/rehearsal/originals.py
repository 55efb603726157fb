"""Synthetic stand-ins for every catalogue source, written in the source's ORIGINAL published format.

:func:`write_originals` writes, under one folder, what the loopback servers and client caches of
a rehearsal hold, so that presdep's own fetch code (presdep.data.fetch) reads them exactly as it
reads the real sources:

- ``hub/datasets/<org>/<name>/``: the content of a Hugging Face dataset repository per
  ``hf_datasets`` source and per ``verdict_labels`` source (Parquet data files in the published
  schema, and a README.md whose ``configs:`` front matter maps each config and split to its files);
- ``files/<name>``: each ``url`` source's download (zips laid out as the releases are);
- ``local/<catalogue id>/``: the files a user-supplied entry's ``local:`` spec asks for (a BEIR
  folder, or rank_llm JSON candidates with TREC qrels);
- ``lucene/<index>/docs.jsonl``: a pyserini JsonCollection per prebuilt index, to be indexed;
- ``anserini/topics-and-qrels/``: the topics and qrels files Anserini keeps in its cache;
- ``ir_datasets/msmarco-passage/train/``: MS MARCO's train queries and qrels where ir_datasets
  caches them.

Text is deterministic pseudo-English. Each ranked query owns three invented key words that
appear nowhere else, and its documents carry them in proportion to their grade (every key for
the best, one key for an unjudged distractor), so BM25 over a collection ranks each query's
judged relevant documents at its top. The invented words are consonant-vowel syllables closed
by n, m or k, which no Porter rule rewrites and no stopword list holds, so Lucene's English
analyzer keeps them apart. Same arguments, same bytes: every random choice comes from a
generator seeded by (seed, what it is for), JSON keys are sorted, Parquet, gzip and zip carry
no clock.

Helpers: originals_text (words, writers), originals_ranked (collections, ranked sets), originals_rows (rows).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa

from presdep.config.catalogue import load_catalogue
from presdep.config.query_lists import QueryList
from presdep.contracts.schemas import write_bytes_atomic, write_text_atomic
from presdep.rehearsal.originals_ranked import (
    BEIR_GRADED,
    Collection,
    RankedSet,
    anserini_qrels_file,
    anserini_topics_file,
    beir_set,
    bm25_order,
    qrels_lines,
    ranked_set,
    topics_tsv,
)
from presdep.rehearsal.originals_rows import (
    CLAIM_CLASSES,
    CLIMATE_FEVER_SCHEMA,
    HOTPOTQA_SCHEMA,
    NECTAR_SCHEMA,
    REWARDBENCH2_SCHEMA,
    ULTRAFEEDBACK_SCHEMA,
    climate_fever_rows,
    hotpotqa_rows,
    musique_rows,
    nectar_rows,
    ppe_rows,
    ppe_schema,
    rewardbench2_rows,
    rm_bench_rows,
    twowiki_rows,
    ultrafeedback_rows,
)
from presdep.rehearsal.originals_text import (
    Vocab,
    gzip_bytes,
    json_text,
    jsonl_text,
    seeded_rng,
    write_parquet,
    zip_bytes,
)

# --------------------------------------------------------------------------- the catalogue walk


_SPLIT_FILE = "{split}-00000-of-00001.parquet"


def _hf_folder(config: str | None) -> str:
    return config or "data"


def _url_filename(source: Mapping[str, Any]) -> str:
    return source.get("filename") or source["url"].split("?")[0].rstrip("/").split("/")[-1]


def _readme(repo_id: str, configs: Mapping[str, Mapping[str, str]]) -> str:
    lines = ["---", "configs:"]
    for config in sorted(configs):
        lines += [f"- config_name: {config}", "  data_files:"]
        for split in sorted(configs[config]):
            lines += [f"  - split: {split}", f"    path: {configs[config][split]}"]
    lines += ["---", "", f"# {repo_id} (synthetic)", "",
              "Invented rows in the published schema of this dataset, for an offline rehearsal. Not the real data.", ""]
    return "\n".join(lines)


class _Writer:
    def __init__(self, root: Path, *, queries: int, docs_per_query: int, seed: int, pool_rows: int) -> None:
        if queries < 1 or docs_per_query < 2 or pool_rows < 1:
            raise ValueError("need queries >= 1, docs_per_query >= 2 and pool_rows >= 1")
        self.root, self.queries, self.dpq, self.seed, self.pool_rows = Path(root), queries, docs_per_query, seed, pool_rows
        self.vocab = Vocab(seed)
        self.catalogue = load_catalogue()
        self.collections: dict[str, Collection] = {}  # prebuilt index -> documents
        self.hf: dict[str, dict[str, dict[str, pa.Table]]] = {}  # repo id -> config -> split -> rows
        self.topics: dict[str, dict[str, str]] = {}  # ranked catalogue id -> query id -> query text
        self.report: dict[str, Any] = {"params": {"queries": queries, "docs_per_query": docs_per_query, "seed": seed,
                                                  "pool_rows": pool_rows},
                                       "datasets": {}, "training_pools": {}, "indexes": {}}

    def rel(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()

    def rng(self, *what: object) -> random.Random:
        return seeded_rng(self.seed, *what)

    # ----------------------------------------------------------------- ranked

    def _list_ids(self, entry: Mapping[str, Any], n: int | None) -> list[str]:
        name = entry.get("shuffle_queries")
        if not name:
            return []
        ids = list(QueryList(name, sha256=self.catalogue["query_lists"][name]["sha256"]).ids())
        return ids if n is None else ids[:n]

    def _qids(self, cid: str, entry: Mapping[str, Any], *, full_list: bool) -> list[str]:
        """A DL set's whole fixed list; else the list's first ``queries`` ids, topped up with new ones."""
        qids = self._list_ids(entry, None if full_list else self.queries)
        want = len(qids) if full_list and qids else self.queries
        rng = self.rng(cid, "qids")
        while len(qids) < want:
            q = f"{cid}-q{len(qids) + 1:03d}" if entry["source"]["kind"] == "user_supplied" else str(rng.randrange(1, 10**6))
            if q not in qids:
                qids.append(q)
        return qids

    def _collection(self, index: str) -> Collection:
        if index not in self.collections:
            self.collections[index] = Collection(index if index.startswith("msmarco") else beir_set(index))
        return self.collections[index]

    def _topics_qrels(self, source: Mapping[str, Any], ranked: RankedSet) -> dict[str, str]:
        folder = self.root / "anserini" / "topics-and-qrels"
        topics, qrels = folder / anserini_topics_file(source["topics"]), folder / anserini_qrels_file(source["qrels"])
        text = topics_tsv(ranked.topics)
        if topics.name.endswith(".gz"):
            write_bytes_atomic(topics, gzip_bytes(text))
        else:
            write_text_atomic(topics, text)
        # DL19's published qrels name the iteration Q0; the later DL and the BEIR files write 0.
        write_text_atomic(qrels, qrels_lines(ranked.grades, "Q0" if source["qrels"] == "dl19-passage" else "0"))
        return {"topics": self.rel(topics), "qrels": self.rel(qrels)}

    def pyserini(self, section: str, cid: str, entry: Mapping[str, Any]) -> dict:
        source = entry["source"]
        index = source["index"]
        coll = self._collection(index)
        rng = self.rng(cid, "ranked")
        if isinstance(source["topics"], Mapping):  # an ir_datasets id: MS MARCO's train queries
            if source["topics"].get("id") != "msmarco-passage/train/judged" or index != "msmarco-v1-passage":
                raise ValueError(f"{cid}: no original writer for ir_datasets topics {source['topics']!r}")
            taken: set[str] = set()
            for other in ("dl19", "dl20"):
                taken |= set(self._list_ids(self.catalogue["datasets"].get(other, {}), None))
            qids: list[str] = []
            while len(qids) < self.pool_rows:
                q = str(rng.randrange(1, 1_200_000))
                if q not in taken:
                    taken.add(q)
                    qids.append(q)
            ranked = ranked_set(rng, self.vocab, coll, qids, docs_per_query=self.dpq, plan="train")
            folder = self.root / "ir_datasets" / "msmarco-passage" / "train"
            write_text_atomic(folder / "queries.tsv", topics_tsv(ranked.topics))
            # qrels.train.tsv as MS MARCO publishes it: tab-separated TREC columns.
            write_text_atomic(folder / "qrels", qrels_lines(ranked.grades, "0", "\t"))
            files = {"topics": self.rel(folder / "queries.tsv"), "qrels": self.rel(folder / "qrels")}
        else:
            dl = index.startswith("msmarco")
            qids = self._qids(cid, entry, full_list=dl)
            if dl:
                plan: int | str = 3
            else:
                plan = 2 if beir_set(index) in BEIR_GRADED else 1
            ranked = ranked_set(rng, self.vocab, coll, qids, docs_per_query=self.dpq, plan=plan,
                                unjudged_topics=2 if dl else 0, titles=not dl)
            files = self._topics_qrels(source, ranked)
            self.topics[cid] = ranked.topics
        files["index"] = self.rel(self.root / "lucene" / index / "docs.jsonl")
        return {"kind": source["kind"], "files": files, "index": index,
                "rows": {"topics": len(ranked.topics), "judged": len(ranked.grades),
                         "judgements": sum(map(len, ranked.grades.values())),
                         "documents": sum(map(len, ranked.docs.values()))}}

    def user_supplied(self, section: str, cid: str, entry: Mapping[str, Any]) -> dict:
        source, local = entry["source"], entry["source"].get("local") or {}
        rng = self.rng(cid, "ranked")
        folder = self.root / "local" / cid
        if local.get("beir") == "folder":
            coll = Collection(beir_set(source["index"]))
            ranked = ranked_set(rng, self.vocab, coll, self._qids(cid, entry, full_list=False),
                                docs_per_query=self.dpq, plan=2 if coll.style in BEIR_GRADED else 1, titles=True)
            write_text_atomic(folder / "corpus.jsonl", jsonl_text(
                {"_id": d, "title": t, "text": x, "metadata": {}} for d, (t, x) in coll.docs.items()))
            write_text_atomic(folder / "queries.jsonl", jsonl_text(
                {"_id": q, "text": t, "metadata": {}} for q, t in ranked.topics.items()))
            write_text_atomic(folder / "qrels" / "test.tsv", "query-id\tcorpus-id\tscore\n" + "".join(
                f"{q}\t{d}\t{g}\n" for q, dg in ranked.grades.items() for d, g in dg.items()))
            files = {"beir": self.rel(folder)}
            self.topics[cid] = ranked.topics
            if source.get("topics") and source.get("qrels"):  # Anserini's copies, for a machine that has them
                files.update(self._topics_qrels(source, ranked))
            rows = {"documents": len(coll.docs), "queries": len(ranked.topics),
                    "judgements": sum(map(len, ranked.grades.values()))}
        elif local.get("candidates") == "rank_llm_json":
            coll = Collection(cid)
            qids = self._qids(cid, entry, full_list=False)
            ranked = ranked_set(rng, self.vocab, coll, qids, docs_per_query=self.dpq, plan=3)
            texts = {d: x for d, (_, x) in coll.docs.items()}
            entries = []
            for q in qids:
                mine = {d: texts[d] for d in ranked.docs[q]}
                order = bm25_order(mine, ranked.topics[q])
                order += [(d, 0.0) for d in ranked.docs[q] if d not in dict(order)]
                entries.append({"query": ranked.topics[q], "hits": [
                    {"content": texts[d], "qid": q, "docid": d, "rank": r, "score": round(s, 4)}
                    for r, (d, s) in enumerate(order, start=1)]})
            write_text_atomic(folder / "candidates.json", json_text(entries) + "\n")
            write_text_atomic(folder / "qrels.txt", qrels_lines(ranked.grades))
            files = {"candidates": self.rel(folder / "candidates.json"), "qrels": self.rel(folder / "qrels.txt")}
            self.topics[cid] = ranked.topics
            rows = {"queries": len(entries), "candidates": sum(len(e["hits"]) for e in entries),
                    "judgements": sum(map(len, ranked.grades.values()))}
        else:
            raise ValueError(f"{section}.{cid}: no original writer for user-supplied local spec {local!r}")
        return {"kind": "user_supplied", "files": files, "rows": rows}

    # ----------------------------------------------------------------- rows (hub and url)

    def _rows(self, section: str, cid: str, entry: Mapping[str, Any]) -> tuple[list[dict], pa.Schema | None]:
        conv = entry["source"]["converter"]
        rng = self.rng(cid, "rows")
        n = self.pool_rows if section == "training_pools" else self.queries
        sel = entry.get("selection") or {}
        supporting = int(sel.get("supporting", 2))
        if conv == "hotpotqa_hf":
            return hotpotqa_rows(rng, self.vocab, n, max(10, int(sel.get("paragraphs", 10))), supporting), HOTPOTQA_SCHEMA
        if conv == "twowiki_json":
            return twowiki_rows(rng, self.vocab, n, max(10, int(sel.get("paragraphs", 10))), supporting), None
        if conv == "musique_jsonl":
            return musique_rows(rng, self.vocab, n, max(20, int(sel.get("paragraphs", 20))), supporting), None
        if conv == "rewardbench2":
            return rewardbench2_rows(rng, self.vocab, n), REWARDBENCH2_SCHEMA
        if conv == "nectar":
            return nectar_rows(rng, self.vocab, n), NECTAR_SCHEMA
        if conv == "ppe":
            k = int(entry.get("responses_per_prompt", 8))
            mmlu = "mmlu" in entry["source"]["id"].lower()
            return ppe_rows(rng, self.vocab, n, k, mmlu), ppe_schema(k, mmlu)
        if conv == "ultrafeedback":
            thresholds = tuple(entry.get("grades", {}).get("thresholds", (4, 6, 8)))
            return ultrafeedback_rows(rng, self.vocab, n, thresholds), ULTRAFEEDBACK_SCHEMA
        if conv == "rm_bench_json":
            return rm_bench_rows(rng, self.vocab, n), None
        raise ValueError(f"{section}.{cid}: no original writer for converter {conv!r}")

    def _hub_split(self, where: str, source: Mapping[str, Any], rows: list[dict], schema: pa.Schema) -> dict:
        """Queue ``rows`` as one split of a hub dataset repo; the report's files and location of it."""
        config, split = source.get("config"), source["split"]
        splits = self.hf.setdefault(source["id"], {}).setdefault(config or "default", {})
        if split in splits:
            raise ValueError(f"{where}: {source['id']} {config or 'default'}/{split} is written twice")
        splits[split] = pa.Table.from_pylist(rows, schema=schema)
        path = self.root / "hub" / "datasets" / source["id"] / _hf_folder(config) / _SPLIT_FILE.format(split=split)
        return {"kind": "hf_datasets", "files": {"repo": self.rel(self.root / "hub" / "datasets" / source["id"]),
                                                 "data": self.rel(path)},
                "repo_id": source["id"], "config": config, "split": split, "rows": {"rows": len(rows)}}

    def hf_datasets(self, section: str, cid: str, entry: Mapping[str, Any]) -> dict:
        source = entry["source"]
        rows, schema = self._rows(section, cid, entry)
        if schema is None:
            raise ValueError(f"{section}.{cid}: converter {source['converter']!r} has no Parquet schema here")
        return self._hub_split(f"{section}.{cid}", source, rows, schema)

    def verdict_labels(self, cid: str, entry: Mapping[str, Any]) -> dict:
        """The claims' gold verdicts, one row per query of the entry's ranked stand-in (claim id = query id)."""
        source = entry["verdict_labels"]
        if source.get("kind") != "hf_datasets" or source.get("format") != "climate_fever":
            raise ValueError(f"datasets.{cid}.verdict_labels: no original writer for {source!r}")
        if cid not in self.topics:
            raise ValueError(f"datasets.{cid}.verdict_labels: the entry has no ranked stand-in to take claims from")
        rows = climate_fever_rows(self.rng(cid, "verdicts"), self.vocab, self.topics[cid])
        out = self._hub_split(f"datasets.{cid}.verdict_labels", source, rows, CLIMATE_FEVER_SCHEMA)
        labels = Counter(CLAIM_CLASSES[r["claim_label"]] for r in rows)
        out["rows"]["labels"] = dict(sorted(labels.items()))
        return out

    def url(self, section: str, cid: str, entry: Mapping[str, Any]) -> dict:
        source = entry["source"]
        rows, _ = self._rows(section, cid, entry)
        name = _url_filename(source)
        path = self.root / "files" / name
        conv = source["converter"]
        if conv == "twowiki_json":
            body = json_text(rows) + "\n"
        elif conv == "rm_bench_json":
            body = json_text(rows, indent=4) + "\n"  # RM-Bench's data files are indented by 4
        else:
            body = jsonl_text(rows)
        member = source.get("member")
        if member:
            # The releases' zips hold their files in a folder; the fetch finds a member by name suffix.
            folder = {"data_ids_april7.zip": "data_ids_april7", "musique_v1.0.zip": "data"}.get(name, Path(name).stem)
            write_bytes_atomic(path, zip_bytes({f"{folder}/{member}": body}))
        else:
            write_text_atomic(path, body)
        return {"kind": "url", "files": {"download": self.rel(path), **({"member": member} if member else {})},
                "rows": {"rows": len(rows)}}

    # ----------------------------------------------------------------- finish

    def write_hub(self) -> None:
        for repo_id, configs in sorted(self.hf.items()):
            base = self.root / "hub" / "datasets" / repo_id
            layout: dict[str, dict[str, str]] = {}
            for config, splits in configs.items():
                for split, table in splits.items():
                    rel = f"{_hf_folder(None if config == 'default' else config)}/{_SPLIT_FILE.format(split=split)}"
                    write_parquet(base / rel, table)
                    layout.setdefault(config, {})[split] = rel
            write_text_atomic(base / "README.md", _readme(repo_id, layout))

    def write_lucene(self) -> None:
        for index, coll in sorted(self.collections.items()):
            ids = list(coll.docs)
            self.rng(index, "order").shuffle(ids)  # no id order marks a query's documents
            beir = not index.startswith("msmarco")
            lines = []
            for d in ids:
                title, text = coll.docs[d]
                if beir:
                    # pyserini's BEIR flat indexes show "title\ntext" (rerank.raw_text); contents says the same.
                    lines.append({"id": d, "contents": f"{title}\n{text}" if title else text, "title": title, "text": text})
                else:
                    lines.append({"id": d, "contents": text})
            path = self.root / "lucene" / index / "docs.jsonl"
            write_text_atomic(path, jsonl_text(lines))
            self.report["indexes"][index] = {"path": self.rel(path), "docs": len(lines)}


def write_originals(root: Path, *, queries: int = 6, docs_per_query: int = 10, seed: int = 0, pool_rows: int = 40) -> dict:
    """Write every catalogue source's synthetic original under ``root``; what was written, as JSON-ready data.

    ``queries``: prompts or questions per evaluation set (TREC DL sets: their whole fixed query
    list); ``pool_rows``: rows of each training pool; ``docs_per_query``: documents per ranked query.
    """
    w = _Writer(Path(root), queries=queries, docs_per_query=docs_per_query, seed=seed, pool_rows=pool_rows)
    handlers = {"pyserini_prebuilt": w.pyserini, "user_supplied": w.user_supplied, "hf_datasets": w.hf_datasets,
                "url": w.url}
    for section in ("datasets", "training_pools"):
        for cid, entry in w.catalogue[section].items():
            kind = entry["source"]["kind"]
            if kind not in handlers:
                raise ValueError(f"{section}.{cid}: no original writer for source kind {kind!r}")
            w.report[section][cid] = handlers[kind](section, cid, entry)
    # After the ranked sets, whose queries are the claims; a key of its own, so the per-section
    # reports keep one source per catalogue id.
    w.report["verdict_labels"] = {cid: w.verdict_labels(cid, entry) for cid, entry in w.catalogue["datasets"].items()
                                  if entry.get("verdict_labels")}
    w.write_hub()
    w.write_lucene()
    return w.report
