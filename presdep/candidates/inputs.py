"""The local files a dataset's fixture is built from, named by their config keys.

The workflow makes each one an input of the rules that read it (``build_fixture``, and for
a BM25 dataset ``build_index`` and ``retrieve``), so editing a passage in the corpus or a
topic in the topics file re-runs what depends on it instead of leaving the old results
standing. A job's input error is prefixed with the same config key
(:mod:`presdep.runtime.job_errors`), so the message says which entry to fix.

A BEIR folder counts as the files read inside it (an edit inside a folder does not change
the folder's own time stamp); an ir_datasets id is no file (ir_datasets keeps its cache).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from presdep.config.paths import QUERY_LIST_KEYS
from presdep.config.records import Dataset
from presdep.data.beir import beir_qrels_path
from presdep.data.corpus import beir_corpus_file, beir_queries_file


class DatasetFile(NamedTuple):
    name: str  # the rule input's name
    key: str  # the config key that names it, e.g. datasets.dl19.candidates.corpus.path
    path: str


def _beir_files(folder: str, stem: str, split: str | None) -> list[str]:
    """The files a BEIR reader opens for ``folder`` (the path itself when it is a file, absent, or a
    folder without the file: its reader then says what is missing)."""
    if not Path(folder).is_dir():
        return [folder]
    try:
        found = [str(beir_corpus_file(folder) if stem == "corpus" else beir_queries_file(folder))]
    except FileNotFoundError:
        return [folder]
    qrels = beir_qrels_path(folder, split) if stem == "queries" and split else None
    if qrels is not None and qrels.is_file():
        found.append(str(qrels))  # the judged queries of the split are kept (read_beir_queries)
    return found


def _source_files(name: str, key: str, source: Any, stem: str) -> Iterator[DatasetFile]:
    if not isinstance(source, Mapping) or source.get("format") == "irds" or not source.get("path"):
        return
    where = f"{key}.path"
    if source.get("format") == "beir":
        for i, path in enumerate(_beir_files(str(source["path"]), stem, source.get("split"))):
            yield DatasetFile(name if i == 0 else f"{name}_{i}", where, path)
    else:
        yield DatasetFile(name, where, str(source["path"]))


def corpus_files(dataset: str, candidates: Mapping[str, Any]) -> list[str]:
    """The corpus files of a dataset's ``candidates`` entry (a BM25 index is built from them)."""
    return [f.path for f in _source_files("corpus", f"datasets.{dataset}.candidates.corpus",
                                          candidates.get("corpus"), "corpus")]


def topics_files(dataset: str, candidates: Mapping[str, Any]) -> list[str]:
    return [f.path for f in _source_files("topics", f"datasets.{dataset}.candidates.topics",
                                          candidates.get("topics"), "queries")]


def dataset_files(dataset: str, spec: Mapping[str, Any]) -> list[DatasetFile]:
    """Every local file the dataset's config entry names for its fixture, in config order."""
    where = f"datasets.{dataset}"
    cands = spec.get("candidates") or {}
    out: list[DatasetFile] = []
    if cands.get("path"):
        out.append(DatasetFile("candidates_src", f"{where}.candidates.path", str(cands["path"])))
    if cands.get("run"):
        out.append(DatasetFile("run", f"{where}.candidates.run", str(cands["run"])))
    out += _source_files("corpus", f"{where}.candidates.corpus", cands.get("corpus"), "corpus")
    out += _source_files("topics", f"{where}.candidates.topics", cands.get("topics"), "queries")
    qrels = spec.get("qrels") or {}
    if qrels.get("path") and qrels.get("format") != "irds":
        path = str(qrels["path"])
        if qrels.get("format") == "beir":
            path = str(beir_qrels_path(path, qrels["split"]))  # validated: the schema fills split
        out.append(DatasetFile("qrels_src", f"{where}.qrels.path", path))
    for key in QUERY_LIST_KEYS:
        lst = spec.get(key)
        if isinstance(lst, Mapping) and lst.get("path"):
            out.append(DatasetFile(key, f"{where}.{key}.path", str(lst["path"])))
    return out


def file_keys(dataset: str, spec: Mapping[str, Any]) -> dict[str, str]:
    """{path: config key} of the dataset's files, for naming the key in a job's input error."""
    keys = {f.path: f.key for f in dataset_files(dataset, spec)}
    local = spec.get("local_path")
    if isinstance(local, Mapping):
        keys.update({str(p): f"datasets.{dataset}.local_path.{k}" for k, p in local.items() if p})
    elif isinstance(local, str):
        keys[local] = f"datasets.{dataset}.local_path"
    return keys


# Folders whose files the workflow writes itself (synthetic and fetched data, results): a path
# there may not exist yet. Any other file a dataset names is the user's and must exist.
WORKFLOW_WRITTEN = ("resources/", "results/")


def missing_files(datasets: Mapping[str, Dataset]) -> list[str]:
    """One line per user file a dataset names that does not exist, with its config key."""
    problems = []
    for name, dataset in datasets.items():
        for f in dataset_files(name, dataset.spec):
            if not f.path.startswith(WORKFLOW_WRITTEN) and not Path(f.path).exists():
                problems.append(f"{f.key}: {f.path} does not exist (paths are relative to the workflow's folder, "
                                f"{Path.cwd()})")
    return problems
