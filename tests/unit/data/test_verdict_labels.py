"""Gold claim verdicts in Climate-FEVER's published forms and the generic JSONL."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from presdep.contracts.errors import InputFormatError
from presdep.data.verdict_labels import read_verdict_labels


def test_climate_fever_release_jsonl(tmp_path):
    path = tmp_path / "climate-fever.jsonl"
    rows = [{"claim_id": "0", "claim": "Global warming is driving polar bears toward extinction",
             "claim_label": "SUPPORTS", "evidences": []},
            {"claim_id": "5", "claim": "The sun has gone into lockdown", "claim_label": "NOT_ENOUGH_INFO", "evidences": []},
            {"claim_id": "6", "claim": "x", "claim_label": "REFUTES", "evidences": []},
            {"claim_id": "9", "claim": "y", "claim_label": "DISPUTED", "evidences": []}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    labels = read_verdict_labels(path, "climate_fever")
    assert labels["query_id"].to_list() == ["0", "5", "6", "9"]
    assert labels["gold"].to_list() == ["SUPPORTED", "NEI", "REFUTED", "DISPUTED"]


def test_climate_fever_hub_parquet_class_indices(tmp_path):
    path = tmp_path / "test-00000-of-00001.parquet"
    pq.write_table(pa.table({"claim_id": ["1", "2", "3", "4"], "claim": ["a", "b", "c", "d"],
                             "claim_label": pa.array([0, 1, 2, 3], pa.int64())}), path)
    assert read_verdict_labels(path, "climate_fever")["gold"].to_list() == ["SUPPORTED", "REFUTED", "NEI", "DISPUTED"]
    pq.write_table(pa.table({"claim_id": ["1"], "claim": ["a"], "claim_label": pa.array([7], pa.int64())}), path)
    with pytest.raises(InputFormatError, match=r"row 0: claim_label class index 7"):
        read_verdict_labels(path, "climate_fever")


def test_verdicts_jsonl_errors_name_the_line(tmp_path):
    path = tmp_path / "labels.jsonl"
    path.write_text('{"query_id": "q1", "label": "supported"}\n{"query_id": "q2", "label": "maybe"}\n', encoding="utf-8")
    with pytest.raises(InputFormatError, match=r"labels.jsonl, line 2: unknown verdict label 'maybe'"):
        read_verdict_labels(path, "verdicts_jsonl")
    path.write_text('{"query_id": "q1", "label": "REFUTED"}\n{"query_id": "q1", "label": "NEI"}\n', encoding="utf-8")
    with pytest.raises(InputFormatError, match=r"line 2: claim 'q1' is labelled twice"):
        read_verdict_labels(path, "verdicts_jsonl")
    path.write_text('{"qid": "q1", "label": "NEI"}\n', encoding="utf-8")
    with pytest.raises(InputFormatError, match=r"line 1: claim lacks \['query_id'\]"):
        read_verdict_labels(path, "verdicts_jsonl")


@pytest.mark.parametrize("claim_id, message", [
    (None, r"line 2: query_id must be a string or an integer, got null"),
    (["q"], r"line 2: query_id must be a string or an integer, got list"),
    (True, r"line 2: query_id must be a string or an integer, got bool"),
    ("", r"line 2: query_id is empty"),
    ("  ", r"line 2: query_id is empty"),
    ("q\x00x", r"line 2: claim id .* contains the control character '\\x00'"),
    ("q" * 5_000_000, r"line 2: claim id .* is longer than 512 characters"),
])
def test_claim_ids_are_checked_like_document_ids(tmp_path, claim_id, message):
    """A null id used to become the claim 'None'; empty, NUL and 5 MB ids were kept as ids."""
    path = tmp_path / "labels.jsonl"
    rows = [{"query_id": "q1", "label": "NEI"}, {"query_id": claim_id, "label": "REFUTED"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    with pytest.raises(InputFormatError, match=message):
        read_verdict_labels(path, "verdicts_jsonl")


def test_integer_claim_ids_read_as_text(tmp_path):
    path = tmp_path / "labels.jsonl"
    path.write_text('{"query_id": 7, "label": "NEI"}\n{"query_id": " q8 ", "label": "REFUTED"}\n', encoding="utf-8")
    assert read_verdict_labels(path, "verdicts_jsonl")["query_id"].to_list() == ["7", "q8"]
