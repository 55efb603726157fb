"""The kinds of the dataset entries' paths, checked when the config is validated (before any job).

A ``candidates: {format: rank_llm_json, path: some_dir/}`` used to pass ``snakemake -n`` and
die inside its job with a bare ``IsADirectoryError``. Each path a dataset entry names is
checked here against the kind its reader takes:

- a path that does not exist (yet) passes: the synthetic datasets' files and the catalogue's
  ``resources/datasets/<id>/`` files are written by their rules, and a missing input is
  Snakemake's to report;
- a path that exists and is the wrong kind is an error: a directory where a file is read, a
  file where a folder is read.

Which kind each format reads (see the readers in :mod:`presdep.data` and
:mod:`presdep.candidates.fixtures`):

- ``candidates.path``: a file for every format that has one (rank_llm_json, ircot_jsonl,
  hotpotqa_json, rm_bench_json, responses_jsonl); ``candidates.run`` (trec_run): a file;
- corpus / topics sources (``candidates.corpus``, ``candidates.topics``): ``jsonl``, ``tsv``,
  ``trec`` and ``rank_llm_json`` a file; ``beir`` either (a BEIR folder or its corpus/queries file); ``irds``
  has an id, no path;
- ``qrels.path``: ``trec`` a file; ``beir`` either (a BEIR folder or its qrels TSV);
  ``irds`` has an id;
- ``local_path``: ``index`` and ``beir`` folders, the other keys (candidates, qrels, topics,
  path) files (:data:`presdep.config.catalogue.LOCAL_KEYS`);
- ``shuffle_queries.path`` / ``population_queries.path``: files of query ids.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from presdep.config.catalogue import LOCAL_KEYS
from presdep.config.records import Dataset
from presdep.contracts.errors import ConfigError

FILE, FOLDER = "file", "folder"

# format -> the kind its path must be; None: a folder or a file (both are read).
CANDIDATES_PATH = {"rank_llm_json": FILE, "ircot_jsonl": FILE, "hotpotqa_json": FILE,
                   "rm_bench_json": FILE, "responses_jsonl": FILE}
SOURCE_PATH = {"beir": None, "jsonl": FILE, "tsv": FILE, "trec": FILE, "rank_llm_json": FILE}  # corpus / topics
QRELS_PATH = {"trec": FILE, "beir": None}
LOCAL_PATH = {key: FOLDER if key in ("index", "beir") else FILE for keys in LOCAL_KEYS.values() for key in keys}
QUERY_LIST_KEYS = ("shuffle_queries", "population_queries")


def _expected(name: str, spec: Mapping[str, Any]) -> Iterator[tuple[str, Any, str | None, str]]:
    """(YAML path, path, expected kind, what reads it) for each path the dataset entry names."""
    where = f"datasets.{name}"
    cands = spec.get("candidates") or {}
    fmt = cands.get("format")
    labels = spec.get("verdict_labels")
    if isinstance(labels, Mapping) and "path" in labels:
        yield f"{where}.verdict_labels.path", labels["path"], FILE, f"verdict labels ({labels.get('format')})"
    if "path" in cands:
        yield f"{where}.candidates.path", cands["path"], CANDIDATES_PATH.get(fmt, FILE), f"format {fmt}"
    if "run" in cands:
        yield f"{where}.candidates.run", cands["run"], FILE, f"format {fmt}"
    for key in ("corpus", "topics"):
        source = cands.get(key)
        if isinstance(source, Mapping) and "path" in source:
            sfmt = source.get("format")
            yield f"{where}.candidates.{key}.path", source["path"], SOURCE_PATH.get(sfmt), f"format {sfmt}"
    qrels = spec.get("qrels") or {}
    if "path" in qrels:
        qfmt = qrels.get("format")
        yield f"{where}.qrels.path", qrels["path"], QRELS_PATH.get(qfmt), f"format {qfmt}"
    local = spec.get("local_path")
    if isinstance(local, Mapping):
        for key, path in local.items():
            yield f"{where}.local_path.{key}", path, LOCAL_PATH.get(key), f"local_path {key}"
    for key in QUERY_LIST_KEYS:
        lst = spec.get(key)
        if isinstance(lst, Mapping) and "path" in lst:
            yield f"{where}.{key}.path", lst["path"], FILE, "a file of query ids"


def _problem(yaml_path: str, path: Any, kind: str | None, what: str) -> str | None:
    if kind is None or not isinstance(path, (str, Path)) or not str(path):
        return None
    p = Path(path)
    if kind == FILE and p.is_dir():
        return f"{yaml_path}: {path} is a directory; expected a file ({what})"
    if kind == FOLDER and p.exists() and not p.is_dir():
        found = "a file" if p.is_file() else "not a directory"
        return f"{yaml_path}: {path} is {found}; expected a folder ({what})"
    return None


def path_kind_problems(datasets: Mapping[str, Dataset]) -> list[str]:
    """One line per existing path of the wrong kind, in config order (a missing path is none)."""
    problems = []
    for name, dataset in datasets.items():
        for expected in _expected(name, dataset.spec):
            problem = _problem(*expected)
            if problem and problem not in problems:
                problems.append(problem)
    return problems


def check_path_kinds(datasets: Mapping[str, Dataset]) -> None:
    """:class:`ConfigError` listing every dataset path that exists and is the wrong kind.

    Relative paths are taken from the current directory (the workflow's working directory).
    """
    problems = path_kind_problems(datasets)
    if problems:
        raise ConfigError("invalid workflow config:\n  " + "\n  ".join(problems))


__all__ = ["check_path_kinds", "path_kind_problems"]
