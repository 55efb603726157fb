"""The hosted reply cache's entries carry a digest over the reply and the request it answers."""

from __future__ import annotations

import json
import logging

from presdep.contracts.json_artifacts import DIGEST_FIELD
from presdep.training.hosted_cache import ReplyCache, request_key

REQUEST = {"endpoint": "https://api.example.test/v1/chat/completions", "attempt": 0,
           "body": {"model": "teacher-1", "messages": [{"role": "user", "content": "grade [1] and [2]"}]}}
ENTRY = {"content": "[1] Grade: 3\n[2] Grade: 0", "prompt_tokens": 40, "completion_tokens": 9, "request": REQUEST}
LOGGER = "presdep.training.hosted_cache"


def test_an_edited_grade_is_set_aside_and_asked_again(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger=LOGGER)
    cache, key = ReplyCache(tmp_path), request_key(REQUEST)
    cache.put(key, ENTRY)
    path = cache.path(key)
    assert DIGEST_FIELD in json.loads(path.read_text()) and cache.get(key, REQUEST) == ENTRY
    path.write_text(path.read_text().replace("Grade: 3", "Grade: 2"))  # still valid JSON of the right shape
    assert cache.get(key, REQUEST) is None and path.with_name(path.name + ".bad").exists()
    assert "content digest mismatch" in caplog.text and path.name in caplog.text


def test_an_older_entry_without_a_digest_is_used_with_one_warning(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger=LOGGER)
    cache, key = ReplyCache(tmp_path), request_key(REQUEST)
    path = cache.path(key)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(ENTRY, sort_keys=True))  # as the older presdep wrote it (paid for: kept)
    other = {**REQUEST, "attempt": 1}
    cache.path(request_key(other)).parent.mkdir(exist_ok=True)
    cache.path(request_key(other)).write_text(json.dumps({**ENTRY, "request": other}, sort_keys=True))
    assert cache.get(key, REQUEST) == ENTRY and cache.get(request_key(other), other) == {**ENTRY, "request": other}
    (msg,) = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert "without a content digest" in msg and str(tmp_path) in msg
