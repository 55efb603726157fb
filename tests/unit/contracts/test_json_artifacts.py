"""JSON artifacts: written canonical with a digest, read back only as written.

A changed byte anywhere (a damaged disk, a copy, a hand edit, whitespace included) is a
SchemaError naming the file and how to rebuild it, never a raw decoding error; a file of an
older presdep (no digest) is read with one warning. The damage sweeps over every artifact
kind are in test_read_errors.py.
"""

from __future__ import annotations

import hashlib
import json
import logging

import pytest

from presdep.contracts.errors import InvalidInput, SchemaError
from presdep.contracts.json_artifacts import (
    DIGEST_FIELD,
    canonical_json,
    read_json_artifact,
    write_json_artifact,
)
from presdep.contracts.schemas import REBUILD_HINT

DOC = {"t_star": 0.4375, "name": "naïve ✓", "queries": ["q1", "q2"], "nested": {"b": [1, 2.5, None], "a": True},
       "steps": {2: 0.5}}
LOGGER = "presdep.contracts.json_artifacts"


def test_written_canonical_with_a_digest_and_read_back(tmp_path):
    path = write_json_artifact(tmp_path / "sub" / "a.json", DOC)
    raw = path.read_bytes()
    stored = json.loads(raw)
    back = read_json_artifact(path, "test artifact")
    assert back == json.loads(json.dumps(DOC)) and DIGEST_FIELD not in back  # int keys read back as strings
    assert raw == canonical_json(stored) and raw.isascii()
    assert stored[DIGEST_FIELD] == hashlib.sha256(canonical_json(back)).hexdigest()
    assert [p.name for p in path.parent.iterdir()] == ["a.json"]  # atomic: no temporary left


def test_what_json_cannot_hold_is_refused_on_write(tmp_path):
    with pytest.raises(InvalidInput, match="NaN"):
        write_json_artifact(tmp_path / "a.json", {"x": float("nan")})
    with pytest.raises(InvalidInput, match=DIGEST_FIELD):
        write_json_artifact(tmp_path / "a.json", {DIGEST_FIELD: "0" * 64})
    with pytest.raises(InvalidInput, match="object"):
        write_json_artifact(tmp_path / "a.json", [1, 2])  # type: ignore[arg-type]
    assert not (tmp_path / "a.json").exists()
    # default= as in json.dumps: what it turns values into is what is digested and read back
    path = write_json_artifact(tmp_path / "b.json", {"p": tmp_path}, default=str)
    assert read_json_artifact(path, "test artifact") == {"p": str(tmp_path)}


def _refused(path, *words):
    with pytest.raises(SchemaError) as err:
        read_json_artifact(path, "test artifact")
    msg = str(err.value)
    assert msg.startswith(f"{path}: test artifact: ") and REBUILD_HINT in msg and "\n" not in msg, msg
    for w in words:
        assert w in msg, msg
    return msg


def test_edits_of_every_kind_are_refused_naming_the_file(tmp_path):
    path = write_json_artifact(tmp_path / "a.json", DOC)
    good = path.read_bytes()
    path.write_bytes(good.replace(b"0.4375", b"0.4376"))  # a value edited by hand
    _refused(path, "content digest mismatch", "edited by hand")
    path.write_bytes(good.replace(b'\n "name"', b'\n  "name"'))  # whitespace only: the same content
    _refused(path, "not the form presdep writes")
    path.write_bytes(good.replace(b"0.4375", b"4.375e-1"))  # the same number, other bytes
    _refused(path, "not the form presdep writes")
    path.write_bytes(good[:-40])  # torn
    _refused(path, "not valid JSON", "line ")
    path.write_bytes(good.replace(b'"name"', b'"n\xffme"'))  # not UTF-8: not a raw UnicodeDecodeError
    _refused(path, "not UTF-8", "damaged")
    path.write_bytes(b"[1, 2]")
    _refused(path, "holds a JSON list, expected an object")
    path.write_bytes(good.replace(DIGEST_FIELD.encode(), b"presdep_sha257"))  # the field's name damaged
    _refused(path, "its digest field is named 'presdep_sha257'")
    digest = json.loads(good)[DIGEST_FIELD]
    path.write_bytes(good.replace(digest.encode(), b"x" * 64))
    _refused(path, "not a SHA-256")
    path.write_bytes(good.replace(b'"t_star": 0.4375', b'"t_star": 1e999'))
    _refused(path, "out of range")
    with pytest.raises(FileNotFoundError):
        read_json_artifact(tmp_path / "absent.json", "test artifact")


def test_a_key_given_twice_is_refused(tmp_path):
    path = tmp_path / "a.json"
    path.write_text('{"t_star": 0.5, "t_star": 0.9}')
    _refused(path, "'t_star' appears twice")


def test_an_older_file_without_a_digest_is_read_with_one_warning(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger=LOGGER)
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"t_star": 0.5}, indent=1))
    assert read_json_artifact(path, "test artifact") == {"t_star": 0.5}
    assert read_json_artifact(path, "test artifact") == {"t_star": 0.5}
    (msg,) = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert str(path) in msg and "without a presdep content digest" in msg and "re-run the rule" in msg
