"""The hosted providers against a loopback fake OpenAI-compatible server (with faults), and a real
offline transformers run of SmolLM2 on a small slice."""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time

import pytest
from fault_server import JSONHandler, LoopbackServer

from presdep.bench import core
from presdep.bench.grader import score_answer
from presdep.cli import main as presdep_main

SECRET = "sk-bench-test-" + hashlib.sha256(b"not a real key").hexdigest()[:20]
KEY_ENV = "PRESDEP_BENCH_TEST_KEY"


class FakeEndpoint(LoopbackServer):
    """Answers each prompt with its expected answer; ``faults`` maps a task id to per-attempt actions:
    ``429`` (Retry-After), ``500``, ``timeout`` (late reply), ``truncated`` (half a body), ``401``,
    ``always500``. Attempts are counted per task id."""

    def __init__(self, tasks, faults, port: int = 0):
        self.by_prompt = {t["prompt"]: t for t in tasks}
        self.faults = faults
        self.lock = threading.Lock()
        self.attempts: dict[str, int] = {}
        self.auth: set[str] = set()
        self.requests = 0
        server = self

        class Handler(JSONHandler):

            def do_POST(self):
                req = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                content = req["messages"][-1]["content"]
                task = next(t for p, t in server.by_prompt.items() if content.startswith(p))
                with server.lock:
                    server.requests += 1
                    server.auth.add(self.headers.get("Authorization", ""))
                    a = server.attempts.get(task["id"], 0)
                    server.attempts[task["id"]] = a + 1
                plan = server.faults.get(task["id"], [])
                action = plan[a] if a < len(plan) else ("always500" if plan and plan[-1] == "always500" else "ok")
                if action == "429":
                    return self._send(429, b'{"error": {"message": "slow down"}}', [("Retry-After", "0.01")])
                if action in ("500", "always500"):
                    return self._send(500, b'{"error": {"message": "boom"}}')
                if action == "401":
                    return self._send(401, b'{"error": {"message": "invalid api key"}}')
                if action == "timeout":
                    time.sleep(1.0)
                return self._send_chat(req["model"], f"Let me think.\nAnswer: {task['answer']}", usage=(50, 5),
                                       truncated=action == "truncated", completion_id="c1")

        self._serve(Handler, port)


FAST = {"max_retries": 3, "timeout_s": 0.5, "base_delay_s": 0.001, "max_delay_s": 0.05, "concurrency": 3}


def test_openai_run_with_faults_then_a_free_cached_rerun(tmp_path, monkeypatch, caplog):
    tasks = core.load_split()[::25]  # 12 tasks over every family
    ids = [t["id"] for t in tasks]
    faults = {ids[0]: ["429", "500"], ids[1]: ["timeout"], ids[2]: ["truncated"], ids[3]: ["always500"]}
    monkeypatch.setenv(KEY_ENV, SECRET)
    with FakeEndpoint(tasks, faults) as srv, caplog.at_level("DEBUG"):
        res = core.run("openai", tasks, out=tmp_path / "runs", base_url=srv.url, model="fake-1",
                       api_key_env=KEY_ENV, cache_dir=tmp_path / "cache", **FAST)
        first_requests, port = srv.requests, srv.httpd.server_address[1]
    rep = res["report"]
    s = rep["summary"]
    assert rep["model"] == "fake-1"
    # Transient faults were retried into right answers; the permanent one is a counted failure.
    assert s["failedIds"] == [ids[3]]
    assert s["totals"] == {"tasks": 12, "answered": 11, "correct": 11, "failed": 1}
    assert "gave up after 4 attempts" in s["errors"][ids[3]] and "500" in s["errors"][ids[3]]
    # The failed request is recorded as a failure, not as a wrong answer.
    assert [x["score"] for x in rep["tasks"]] == [None if i == ids[3] else 1 for i in ids]
    assert [x.get("failed", False) for x in rep["tasks"]] == [i == ids[3] for i in ids]
    assert s["mean"] == 1.0 and rep["incomplete"] is True  # 1 of 12 failed: above the 5% share
    assert srv.attempts[ids[0]] == 3 and srv.attempts[ids[3]] == 4
    assert srv.auth == {f"Bearer {SECRET}"}
    written = (tmp_path / "runs" / "fake-1-run0.json").read_text()
    assert SECRET not in written and SECRET not in caplog.text
    assert s["provider"]["stats"]["retries"] >= 6
    assert first_requests == 12 + 2 + 1 + 1 + 3  # one per task, plus every retry
    # Re-run on the same cache (same endpoint): only the failed prompt is asked again, and now it is answered.
    with FakeEndpoint(tasks, {}, port=port) as srv2:
        again = core.run("openai", tasks, base_url=srv2.url, model="fake-1", api_key_env=KEY_ENV,
                         cache_dir=tmp_path / "cache", **FAST)
        assert srv2.requests == 1 and srv2.attempts == {ids[3]: 1}
    assert again["report"]["summary"]["totals"] == {"tasks": 12, "answered": 12, "correct": 12, "failed": 0}
    assert again["report"]["incomplete"] is False


def test_openai_cached_run_needs_no_key(tmp_path, monkeypatch):
    tasks = core.load_split()[:5]
    monkeypatch.setenv(KEY_ENV, SECRET)
    with FakeEndpoint(tasks, {}) as srv:
        url = srv.url
        core.run("openai", tasks, base_url=url, model="fake-1", api_key_env=KEY_ENV, cache_dir=tmp_path / "c", **FAST)
        assert srv.requests == 5
        monkeypatch.delenv(KEY_ENV)
        res = core.run("openai", tasks, base_url=url, model="fake-1", api_key_env=KEY_ENV,
                       cache_dir=tmp_path / "c", **FAST)
        assert srv.requests == 5  # nothing sent
    assert res["report"]["summary"]["totals"]["correct"] == 5
    assert res["report"]["summary"]["provider"]["stats"]["cache_hits"] == 5


def test_unauthorised_endpoint_stops_after_the_first_refusal(tmp_path, monkeypatch):
    tasks = core.load_split()[:6]
    monkeypatch.setenv(KEY_ENV, SECRET)
    with FakeEndpoint(tasks, {t["id"]: ["401"] * 3 for t in tasks}) as srv:
        res = core.run("openai", tasks, base_url=srv.url, model="fake-1", api_key_env=KEY_ENV,
                       cache_dir=tmp_path / "c", **{**FAST, "concurrency": 1})
        assert srv.requests == 1
    s = res["report"]["summary"]
    assert s["totals"]["failed"] == 6 and all("401" in e for e in s["errors"].values())
    assert s["mean"] is None and s["interval95"] is None and res["report"]["incomplete"] is True


def test_hosted_provider_settings_are_checked(tmp_path, monkeypatch):
    from presdep.bench.hosted_provider import OPENROUTER_URL, HostedProvider

    with pytest.raises(ValueError, match="needs a base URL"):
        HostedProvider("openai", model="m", cache_dir=tmp_path)
    with pytest.raises(ValueError, match=r"unknown setting\(s\) \['api_key'\]"):
        HostedProvider("openai", base_url="http://x/v1", model="m", cache_dir=tmp_path, api_key="sk")
    p = HostedProvider("openrouter", model="meta/llama", cache_dir=tmp_path)
    d = p.describe()
    assert d["base_url"] == OPENROUTER_URL and d["api_key_env"] == "OPENROUTER_API_KEY" and d["provider"] == "openrouter"
    monkeypatch.delenv("OPENROUTER_API_KEY", raising=False)
    with pytest.raises(Exception, match="OPENROUTER_API_KEY"):  # a setup error, before any request
        p.answer(core.load_split()[:1])


@pytest.mark.slow
def test_transformers_run_of_smollm2_offline(smollm2_model_dir, tmp_path, monkeypatch):
    import torch

    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    tasks = core.load_split()
    slice_ = [t for t in tasks if t["variant"] == "v1" and t["item"].endswith("-01")]  # one per family
    assert len(slice_) == 6
    split = tmp_path / "slice.jsonl"
    split.write_text("".join(json.dumps(t) + "\n" for t in slice_))
    cfg = tmp_path / "config.yaml"
    cfg.write_text("models:\n  smol: {source: local, path: /not/fetched/again}\n")
    # The model of `models:` is found where a previous fetch left it (<models-root>/<key>).
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "smol").symlink_to(smollm2_model_dir, target_is_directory=True)
    argv = ["bench", "run", "--provider", "transformers", "--tasks", str(split), "--model", "smol",
            "--configfile", str(cfg), "--models-root", str(tmp_path / "models"), "--max-new-tokens", "12",
            "--batch-size", "6", "--out", str(tmp_path / "runs")]
    assert presdep_main(argv) == 0
    rep = json.loads((tmp_path / "runs" / "smol-run0.json").read_text())
    s = rep["summary"]
    assert rep["model"] == "smol" and s["totals"]["tasks"] == 6 and s["totals"]["failed"] == 0
    assert s["provider"]["spec"] == {"source": "local", "path": "/not/fetched/again"}
    assert all(isinstance(a, str) and a for a in s["answers"].values())
    by_id = {t["id"]: t for t in slice_}
    assert [x["score"] for x in rep["tasks"]] == [score_answer(by_id[x["id"]], s["answers"][x["id"]])
                                                   for x in rep["tasks"]]
    # Greedy decoding: a second run gives the same answers.
    argv[-1] = str(tmp_path / "runs2")
    assert presdep_main(argv) == 0
    rep2 = json.loads((tmp_path / "runs2" / "smol-run0.json").read_text())
    assert rep2["summary"]["answers"] == s["answers"]


def test_transformers_model_key_must_exist_in_models(tmp_path, capsys):
    cfg = tmp_path / "config.yaml"
    cfg.write_text("models:\n  smollm2: {source: local, path: /nowhere}\n")
    assert presdep_main(["bench", "run", "--provider", "transformers", "--model", "nope", "--configfile", str(cfg),
                         "--out", str(tmp_path)]) == 2
    assert "models: has no key 'nope'" in capsys.readouterr().err
