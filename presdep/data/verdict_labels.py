"""Gold claim verdicts (the verdict reader's labels) -> the ``verdict_labels`` table.

Formats, as published:

- ``climate_fever``: Climate-FEVER's claims (Diggelmann et al. 2020), either the release's JSONL
  (``climate-fever.jsonl``: ``claim_id``, ``claim``, ``claim_label`` as a name) or the Hugging Face
  rows of ``tdiggelm/climate_fever`` (Parquet, ``claim_label`` a class index in the published
  order SUPPORTS, REFUTES, NOT_ENOUGH_INFO, DISPUTED). BEIR's Climate-FEVER queries are these
  claims under the same ids, so ``claim_id`` is the query id.
- ``verdicts_jsonl``: one object per line, ``{"query_id": ..., "label": ...}``, for a user's own
  claims; the label is one of the names below.

Labels become the reader's three classes, SUPPORTED, REFUTED and NEI, plus DISPUTED (kept, so the
reader can exclude and count it). Any other label is an error naming the file and the row.

:func:`fetch_verdict_labels` downloads a catalogue entry's claims (the hub's rows kept as they come,
beside a manifest), checked to read as labels before the file is put in place, so a wrong or damaged
download fails in the fetch, naming the row, not in the reader's job.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import polars as pl

from presdep.contracts.errors import InputFormatError, cut
from presdep.contracts.schemas import atomic_write
from presdep.data.fetch.common import FetchError, Manifest, need, read_rows
from presdep.data.fetch.sources import hf_rows_file
from presdep.data.guards import check_id

VERDICT_CLASSES = ("SUPPORTED", "REFUTED", "NEI")
DISPUTED = "DISPUTED"
# Climate-FEVER's ClassLabel order on the hub (its dataset card).
CLIMATE_FEVER_CLASSES = ("SUPPORTS", "REFUTES", "NOT_ENOUGH_INFO", "DISPUTED")
GOLD_NAMES = {
    "SUPPORTS": "SUPPORTED", "SUPPORTED": "SUPPORTED",
    "REFUTES": "REFUTED", "REFUTED": "REFUTED",
    "NOT_ENOUGH_INFO": "NEI", "NOT ENOUGH INFO": "NEI", "NEI": "NEI",
    "DISPUTED": DISPUTED,
}
VERDICT_LABEL_FORMATS = ("climate_fever", "verdicts_jsonl")


def _gold(path: Path, where: str, value: object) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        if not 0 <= value < len(CLIMATE_FEVER_CLASSES):
            raise InputFormatError(path, where, f"claim_label class index {value} is outside 0..3 "
                                                f"({', '.join(CLIMATE_FEVER_CLASSES)})")
        value = CLIMATE_FEVER_CLASSES[value]
    label = GOLD_NAMES.get(" ".join(str(value).strip().upper().split()))
    if label is None:
        raise InputFormatError(path, where, f"unknown verdict label {value!r}; expected one of {sorted(GOLD_NAMES)}")
    return label


def _claim_id(path: Path, where: str, value: object, key: str) -> str:
    """A claim id checked as a document id is (a claim id is the query id the reader joins on):
    text or an integer, not empty, no control character, at most 512 characters."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise InputFormatError(path, where, f"{key} must be a string or an integer, got "
                                            f"{'null' if value is None else type(value).__name__} {cut(value)}")
    text = str(value).strip()
    if not text:
        raise InputFormatError(path, where, f"{key} is empty")
    return check_id(path, where, text, "claim id")


def read_verdict_labels(path: str | Path, fmt: str) -> pl.DataFrame:
    """``query_id``, ``claim``, ``gold`` (SUPPORTED | REFUTED | NEI | DISPUTED), one row per claim."""
    path = Path(path)
    if fmt not in VERDICT_LABEL_FORMATS:
        raise InputFormatError(path, "format", f"unknown verdict label format {fmt!r}; expected one of {VERDICT_LABEL_FORMATS}")
    if not path.is_file():
        raise FileNotFoundError(f"verdict labels file {path} not found")
    id_key, label_key = ("claim_id", "claim_label") if fmt == "climate_fever" else ("query_id", "label")
    rows: dict[str, tuple[str, str]] = {}
    for where, row in read_rows(path):
        need(path, where, row, (id_key, label_key), "claim")
        qid = _claim_id(path, where, row[id_key], id_key)
        if qid in rows:
            raise InputFormatError(path, where, f"claim {qid!r} is labelled twice")
        rows[qid] = (str(row.get("claim") or ""), _gold(path, where, row[label_key]))
    if not rows:
        raise InputFormatError(path, "file", "no claims")
    return pl.DataFrame({"query_id": list(rows), "claim": [c for c, _ in rows.values()],
                         "gold": [g for _, g in rows.values()]})


def fetch_verdict_labels(catalogue_id: str, source: Mapping[str, Any], labels_out: str | Path,
                         manifest_out: str | Path, download_dir: str | Path = "resources/downloads") -> Manifest:
    """Download ``source`` (kind hf_datasets), check it, write it to ``labels_out`` and its manifest."""
    if source.get("kind") != "hf_datasets":
        raise FetchError(f"{catalogue_id}: verdict_labels of kind {source.get('kind')!r}; only hf_datasets is fetched "
                         "(give a local file as datasets.<name>.verdict_labels instead)")
    rows_file, version = hf_rows_file(source, download_dir)
    try:
        labels = read_verdict_labels(rows_file, source["format"])
    except ValueError as exc:
        raise FetchError(f"{catalogue_id}: the downloaded claims do not read as {source['format']} labels: {exc}") from exc
    atomic_write(Path(labels_out), lambda tmp: shutil.copyfile(rows_file, tmp))
    manifest = Manifest(catalogue_id, source=dict(source), version={k: v for k, v in version.items() if k != "sha256"},
                        sha256=version.get("sha256", {}),
                        rows={"claims": labels.height, **{g: int(n) for g, n in labels["gold"].value_counts().iter_rows()}})
    manifest.write(manifest_out)
    return manifest


__all__ = ["CLIMATE_FEVER_CLASSES", "DISPUTED", "VERDICT_CLASSES", "VERDICT_LABEL_FORMATS", "fetch_verdict_labels",
           "read_verdict_labels"]
