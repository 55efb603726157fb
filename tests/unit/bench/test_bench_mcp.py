"""`presdep bench mcp` as a subprocess, every tool driven through the MCP SDK's own stdio client."""

from __future__ import annotations

import json
import sys

import anyio
import pytest

from presdep.bench import core

EXPECTED_TOOLS = {"list_tasks", "get_task", "score_answer", "run_benchmark", "score_stability", "get_provenance"}


def _closed_everywhere(schema, where="schema"):
    """Every object in a JSON schema is closed (additionalProperties: false)."""
    if isinstance(schema, dict):
        if schema.get("type") == "object" or "properties" in schema:
            assert schema.get("additionalProperties") is False, where
        for k, v in schema.items():
            _closed_everywhere(v, f"{where}/{k}")
    elif isinstance(schema, list):
        for i, v in enumerate(schema):
            _closed_everywhere(v, f"{where}/{i}")


async def _session_run(fn, tasks_path=None, command=("bench", "mcp")):
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    args = ["-m", "presdep.cli", *command] + (["--tasks", str(tasks_path)] if tasks_path else [])
    params = StdioServerParameters(command=sys.executable, args=args)
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            return await fn(session)


def _json(result):
    assert not result.is_error, result.content[0].text
    data = json.loads(result.content[0].text)
    assert result.structured_content == data
    return data


def test_every_tool_through_the_stdio_client():
    tasks = core.load_split()
    t = next(x for x in tasks if x["id"] == "order-04-v3")

    async def drive(s):
        out = {}
        listed = await s.list_tools()
        out["tools"] = {tool.name: tool.input_schema for tool in listed.tools}
        out["all"] = _json(await s.call_tool("list_tasks", {}))
        out["seq"] = _json(await s.call_tool("list_tasks", {"family": "sequence", "variant": "v2"}))
        out["task"] = _json(await s.call_tool("get_task", {"id": t["id"]}))
        out["right"] = _json(await s.call_tool("score_answer", {"id": t["id"], "answer": t["answer"]}))
        out["wrong"] = _json(await s.call_tool("score_answer", {"id": t["id"], "answer": "no idea"}))
        out["unknown"] = await s.call_tool("get_task", {"id": "nope-v1"})
        out["extra"] = await s.call_tool("score_answer", {"id": t["id"], "answer": "1", "hint": "x"})
        out["badprov"] = await s.call_tool("run_benchmark", {"provider": "openai"})
        runs = [_json(await s.call_tool("run_benchmark", {"provider": "mock", "seed": sd, "run": r}))
                for sd, r in [(1, 0), (1, 1), (2, 0)]]
        out["runs"] = runs
        slim = [{k: rep[k] for k in ("model", "seed", "higherIsBetter", "metric", "tasks")} for rep in runs]
        out["stab"] = _json(await s.call_tool("score_stability", {"reports": slim, "seed": 3, "resamples": 300}))
        out["prov"] = _json(await s.call_tool("get_provenance", {}))
        return out

    out = anyio.run(_session_run, drive)
    assert set(out["tools"]) == EXPECTED_TOOLS
    for name, schema in out["tools"].items():
        assert schema["type"] == "object", name
        _closed_everywhere(schema, name)
    assert len(out["all"]["tasks"]) == 300
    assert [x["id"] for x in out["seq"]["tasks"]] == [f"seq-{i:02d}-v2" for i in range(1, 11)]
    assert out["task"]["prompt"] == t["prompt"] and "answer" not in out["task"]
    assert out["right"]["score"] == 1 and out["wrong"]["score"] == 0
    assert out["unknown"].is_error and "unknown task id 'nope-v1'" in out["unknown"].content[0].text
    assert out["extra"].is_error and "hint" in out["extra"].content[0].text
    assert out["badprov"].is_error and "mock" in out["badprov"].content[0].text
    assert [r["model"] for r in out["runs"]] == ["mock-s1", "mock-s1", "mock-s2"]
    assert out["runs"][0]["summary"]["totals"]["tasks"] == 300
    # The server's mock run equals the library's.
    assert out["runs"][1]["tasks"] == core.run("mock", tasks, seed=1, run=1)["report"]["tasks"]
    st = out["stab"]
    assert st["sharedItems"] == 60 and sum(st["probabilityFirst"].values()) == pytest.approx(1.0)
    assert st["tierLevel"] == 0.95 and sorted(v for tier in st["tiers"] for v in tier) == sorted(st["variants"])
    assert set(st["rankUB"]) == set(st["tier"]) == set(st["variants"])
    assert st["promptSensitivity"]["promptVariants"] == ["v1", "v2", "v3", "v4", "v5"]
    assert out["prov"]["tasks"] == 300 and out["prov"]["seed"] == 20250617


def test_mcp_with_a_split_file(tmp_path):
    tasks = core.load_split()[:10]
    split = tmp_path / "small.jsonl"
    split.write_text("".join(json.dumps(x) + "\n" for x in tasks))

    async def drive(s):
        listed = _json(await s.call_tool("list_tasks", {}))
        run = _json(await s.call_tool("run_benchmark", {"provider": "mock", "limit": 4}))
        return listed, run

    # The short form agents' configs use: `presdep mcp` is `presdep bench mcp`.
    listed, run = anyio.run(_session_run, drive, split, ("mcp",))
    assert [x["id"] for x in listed["tasks"]] == [x["id"] for x in tasks]
    assert len(run["tasks"]) == 4 and run["summary"]["split"] == "small.jsonl"


# --- error messages never echo a huge value -------------------------------------------------

HUGE = 5_000_000


def test_a_huge_id_gives_a_short_error_naming_tool_field_and_length():
    from presdep.bench.mcp_server import MESSAGE_LIMIT, ToolError, call_tool, make_handlers

    with pytest.raises(ToolError) as err:
        call_tool(make_handlers(), "get_task", {"id": "x" * HUGE})
    msg = str(err.value)
    assert len(msg) <= MESSAGE_LIMIT
    assert msg.startswith("get_task: invalid id: 'xxx") and f"({HUGE:,} characters)" in msg and "too long" in msg

    # An unknown tool's name is shortened the same way.
    with pytest.raises(ToolError) as err:
        call_tool(make_handlers(), "t" * HUGE, {})
    assert len(str(err.value)) <= MESSAGE_LIMIT and f"({HUGE:,} characters)" in str(err.value)


def test_every_tool_error_message_is_capped_with_a_marker():
    from presdep.bench.mcp_server import MESSAGE_LIMIT, ToolError, call_tool

    def noisy(args):
        raise ValueError("bad: " + "z" * 10_000)

    with pytest.raises(ToolError) as err:
        call_tool({"get_task": noisy}, "get_task", {"id": "a"})
    msg = str(err.value)
    assert len(msg) == MESSAGE_LIMIT and msg.startswith("get_task: bad: zzz")
    assert msg.endswith(f"[message cut: {len('get_task: bad: ') + 10_000} characters in all]")
    # A huge property name (jsonschema quotes it in "was unexpected") is capped too.
    with pytest.raises(ToolError) as err:
        call_tool({"get_task": noisy}, "get_task", {"id": "a", "k" * HUGE: 1})
    assert len(str(err.value)) == MESSAGE_LIMIT and "message cut" in str(err.value)
    # Short messages stay whole.
    assert str(ToolError("short")) == "short"


def test_a_huge_id_through_a_real_session():
    from presdep.bench.mcp_server import MESSAGE_LIMIT

    async def drive(s):
        return await s.call_tool("get_task", {"id": "x" * HUGE})

    result = anyio.run(_session_run, drive)
    text = result.content[0].text
    assert result.is_error and len(text) <= MESSAGE_LIMIT
    assert text.startswith("get_task: invalid id:") and f"({HUGE:,} characters)" in text


# --- malformed JSON-RPC lines get JSON-RPC error replies ----------------------------------------


class _RawServer:
    """`presdep mcp` as a subprocess spoken to line by line; every read has a timeout."""

    def __init__(self, tmp_path, extra=()):
        import queue
        import subprocess
        import threading

        self._stderr = open(tmp_path / "stderr.txt", "w+b")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen([sys.executable, "-m", "presdep.cli", "mcp", *extra], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self._stderr)
        self.lines: queue.Queue[bytes] = queue.Queue()
        threading.Thread(target=lambda: [self.lines.put(x) for x in self.proc.stdout], daemon=True).start()

    def send(self, line: str | bytes) -> None:
        self.proc.stdin.write(line if isinstance(line, bytes) else line.encode())
        self.proc.stdin.flush()

    def reply(self, timeout: float = 30.0) -> dict:
        import queue

        try:
            return json.loads(self.lines.get(timeout=timeout))
        except queue.Empty:
            self._stderr.seek(0)
            raise AssertionError(f"no reply within {timeout} s; stderr: {self._stderr.read()[-2000:]!r}") from None

    def close(self) -> int:
        self.proc.stdin.close()
        try:
            return self.proc.wait(timeout=30)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            self._stderr.close()


def _initialize(rid):
    return json.dumps({"jsonrpc": "2.0", "id": rid, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}) + "\n"


def _assert_error(reply, code, rid):
    assert reply["jsonrpc"] == "2.0" and "result" not in reply, reply
    assert "id" in reply and reply["id"] == rid, reply
    assert reply["error"]["code"] == code, reply
    assert reply["error"]["message"] == {-32700: "Parse error", -32600: "Invalid Request"}[code]


def test_malformed_lines_get_json_rpc_errors_and_the_server_keeps_serving(tmp_path):
    srv = _RawServer(tmp_path)
    try:
        srv.send("this is not json\n")
        _assert_error(srv.reply(), -32700, None)
        # A blank line is no message and gets no reply: the next reply answers the next line.
        srv.send("\n")
        srv.send('{"jsonrpc": "2.0", "id": 7, "method": 5}\n')
        _assert_error(srv.reply(), -32600, 7)
        srv.send("[1,2]\n")
        _assert_error(srv.reply(), -32600, None)
        srv.send("42\n")
        _assert_error(srv.reply(), -32600, None)
        srv.send('{"jsonrpc": "2.0", "id": "s-1", "method": "tools/list", "params": [1]}\n')
        _assert_error(srv.reply(), -32600, "s-1")
        srv.send('{"jsonrpc": "2.0", "id": true, "params": {}}\n')  # no method; a boolean is no valid id
        _assert_error(srv.reply(), -32600, None)
        srv.send(b'{"jsonrpc": "2.0", "id": 3, \xff\xfe\n')  # not UTF-8, and truncated
        _assert_error(srv.reply(), -32700, None)

        # After all that, the handshake and a request still work, and errors keep coming after it.
        srv.send(_initialize(8))
        init = srv.reply()
        assert init["id"] == 8 and init["result"]["serverInfo"]["name"] == "presdep-bench", init
        srv.send('{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
        srv.send("{oops\n")
        _assert_error(srv.reply(), -32700, None)
        srv.send('{"jsonrpc": "2.0", "id": 9, "method": "tools/list"}\n')
        listed = srv.reply()
        assert listed["id"] == 9 and {t["name"] for t in listed["result"]["tools"]} == EXPECTED_TOOLS
    finally:
        rc = srv.close()
    assert rc == 0  # stdin closed: the server ends cleanly


def test_error_reply_unit():
    import mcp_types
    import pydantic

    from presdep.bench.mcp_wire import DETAIL_LIMIT, error_reply

    def reply_to(line):
        with pytest.raises(pydantic.ValidationError) as err:
            mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False)
        return error_reply(err.value)

    assert reply_to("   \n") is None
    r = reply_to("{")
    assert (r.id, r.error.code) == (None, -32700)
    assert json.loads(r.model_dump_json(by_alias=True, exclude_unset=True))["id"] is None
    r = reply_to('{"jsonrpc": "2.0", "id": 7, "method": 5}')
    assert (r.id, r.error.code) == (7, -32600) and "method" in r.error.data["detail"]
    r = reply_to('{"jsonrpc": "2.0", "method": ' + json.dumps({"k": "v" * 10_000}) + "}")
    assert (r.id, r.error.code) == (None, -32600) and len(r.error.data["detail"]) <= DETAIL_LIMIT
    # Any other transport exception is a line that could not be read.
    r = error_reply(UnicodeDecodeError("utf-8", b"\xff", 0, 1, "bad"))
    assert (r.id, r.error.code) == (None, -32700)


def test_score_stability_takes_failed_tasks_and_refuses_an_incomplete_run():
    from presdep.bench.mcp_server import ToolError, call_tool, make_handlers

    handlers = make_handlers()
    ids = [f"q{i}" for i in range(40)]
    good = {"model": "a", "tasks": [{"id": i, "score": 1} for i in ids]}
    one_failed = {"model": "b", "tasks": [{"id": ids[0], "score": None, "failed": True}]
                  + [{"id": i, "score": 0} for i in ids[1:]]}
    out = call_tool(handlers, "score_stability", {"reports": [good, one_failed], "resamples": 20})
    assert out["sharedRows"] == 39  # the failed task leaves the bootstrap; it is not a 0
    with pytest.raises(ToolError, match=r"1 of 40 requests failed \(marked incomplete\)"):
        call_tool(handlers, "score_stability", {"reports": [good, {**one_failed, "incomplete": True}],
                                                "resamples": 20})
    with pytest.raises(ToolError, match="invalid reports/0/tasks/0/score"):
        call_tool(handlers, "score_stability", {"reports": [{"model": "a", "tasks": [{"id": "x", "score": 2}]}]})


def test_score_stability_carries_rank_ub_and_tiers_like_the_http_route():
    from fastapi.testclient import TestClient

    from presdep.bench import http_api
    from presdep.bench.mcp_server import call_tool, make_handlers

    # Constant scores per model: 1.0 - 0.0 = 1 on every task (separable), two identical 1.0 rows (not).
    reports = [{"model": m, "tasks": [{"id": f"t{i}", "score": s} for i in range(30)]}
               for m, s in {"good": 1.0, "also-good": 1.0, "bad": 0.0}.items()]
    out = call_tool(make_handlers(), "score_stability", {"reports": reports, "seed": 2, "resamples": 200})
    assert out["tierLevel"] == 0.95 and out["tiers"] == [["also-good", "good"], ["bad"]]
    assert out["rankUB"] == {"also-good": 1, "good": 1, "bad": 3}
    assert out["tier"] == {"also-good": 1, "good": 1, "bad": 2}
    r = TestClient(http_api.create_app()).post("/v1/stability", json={"reports": reports, "seed": 2, "resamples": 200})
    assert r.status_code == 200 and r.json() == json.loads(json.dumps(out))  # one JSON builder behind both


# --- ids JSON-RPC forbids, non-finite numbers, the stability cost ------------------------------------


def _handshake(srv, rid=1):
    srv.send(_initialize(rid))
    assert srv.reply()["id"] == rid
    srv.send('{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')


def test_a_request_with_an_id_that_is_no_string_or_integer_gets_invalid_request(tmp_path):
    srv = _RawServer(tmp_path)
    try:
        _handshake(srv)
        for rid in ('{"a": 1}', "[1]", "true", "null", "1.5"):
            srv.send('{"jsonrpc": "2.0", "id": %s, "method": "tools/list"}\n' % rid)
            reply = srv.reply(timeout=10)
            _assert_error(reply, -32600, None)
            assert "id" in reply["error"]["data"]["detail"], reply
        # The same request with a valid id is answered.
        srv.send('{"jsonrpc": "2.0", "id": "ok", "method": "tools/list"}\n')
        assert srv.reply()["id"] == "ok"
    finally:
        assert srv.close() == 0


def test_invalid_id_reply_unit():
    from presdep.bench.mcp_wire import invalid_id_reply

    assert invalid_id_reply('{"jsonrpc": "2.0", "id": 3, "method": "ping"}') is None
    assert invalid_id_reply('{"jsonrpc": "2.0", "id": "x", "method": "ping"}') is None
    assert invalid_id_reply('{"jsonrpc": "2.0", "method": "notifications/initialized"}') is None
    assert invalid_id_reply("not json") is None  # the transport's own parse error answers it
    r = invalid_id_reply('{"jsonrpc": "2.0", "id": {"k": "' + "v" * 10_000 + '"}, "method": "ping"}')
    assert (r.id, r.error.code, r.error.message) == (None, -32600, "Invalid Request")
    assert "an object" in r.error.data["detail"] and "v" * 100 not in r.error.data["detail"]


def tempfile_prefix():
    import tempfile

    return tempfile.gettempdir()


def _two_reports(score):
    ids = [f"q{i}-v1" for i in range(6)]
    a = {"model": "a", "tasks": [{"id": i, "score": 1} for i in ids]}
    b = {"model": "b", "tasks": [{"id": i, "score": 0} for i in ids]}
    b["tasks"][3]["score"] = score
    return [a, b]


@pytest.mark.parametrize("number, shown", [(float("nan"), "NaN"), (float("inf"), "Infinity"),
                                           (float("-inf"), "-Infinity")])
def test_a_non_finite_score_is_named_by_its_place_not_by_a_server_file(number, shown):
    from presdep.bench.mcp_server import ToolError, call_tool, make_handlers

    with pytest.raises(ToolError) as err:
        call_tool(make_handlers(), "score_stability", {"reports": _two_reports(number), "resamples": 10})
    msg = str(err.value)
    assert msg.startswith("score_stability: invalid reports/1/tasks/3/score: ") and shown in msg, msg
    assert "/tmp" not in msg and ".json" not in msg and tempfile_prefix() not in msg, msg


def test_analysis_errors_name_reports_by_place():
    from presdep.bench.mcp_server import ToolError, call_tool, make_handlers

    a, _ = _two_reports(0)
    with pytest.raises(ToolError) as err:  # one model, the same seed twice: a clash between two files
        call_tool(make_handlers(), "score_stability", {"reports": [{**a, "seed": 0}, {**a, "seed": 0}]})
    msg = str(err.value)
    assert "seed 0 appears in both reports[0] and reports[1]" in msg, msg
    assert tempfile_prefix() not in msg and "presdep-" not in msg, msg


def test_a_nan_line_through_the_real_server_gets_a_plain_tool_error(tmp_path):
    srv = _RawServer(tmp_path)
    try:
        _handshake(srv)
        reports = json.dumps(_two_reports(0.5)).replace("0.5", "NaN")
        srv.send('{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "score_stability", '
                 '"arguments": {"reports": %s, "resamples": 10}}}\n' % reports)
        reply = srv.reply()
        text = reply["result"]["content"][0]["text"]
        assert reply["result"]["isError"] is True and "reports/1/tasks/3/score" in text and "NaN" in text, reply
        assert tempfile_prefix() not in text, text
    finally:
        srv.close()


def test_score_stability_is_bounded_like_the_http_route():
    from presdep.bench import http_api, mcp_server
    from presdep.bench.mcp_server import ToolError, call_tool, make_handlers

    tasks = core.load_split()
    reports = [{k: rep[k] for k in ("model", "seed", "tasks")}
               for rep in (core.run("mock", tasks, seed=1, run=r)["report"] for r in (0, 1))]  # 600 task rows
    assert mcp_server.DEFAULT_MAX_STABILITY_COST == http_api.DEFAULT_MAX_STABILITY_COST
    handlers = make_handlers(max_stability_cost=500_000)
    with pytest.raises(ToolError) as err:
        call_tool(handlers, "score_stability", {"reports": reports, "resamples": 1000})
    msg = str(err.value)
    for part in ("600000", "500000", "resamples 1000", "600 task rows", "lower 'resamples'"):
        assert part in msg, (part, msg)
    # The HTTP route says the same of the same request: one computation, one message.
    from fastapi.testclient import TestClient

    client = TestClient(http_api.create_app(max_stability_cost=500_000))
    r = client.post("/v1/stability", json={"reports": reports, "resamples": 1000})
    assert r.status_code == 413 and msg == f"score_stability: {r.json()['detail']}"
    with pytest.raises(ToolError, match=str(600 * 2000)):  # no resamples: the default 2000
        call_tool(handlers, "score_stability", {"reports": reports})
    out = call_tool(handlers, "score_stability", {"reports": reports, "resamples": 800, "seed": 1})
    assert out["resamples"] == 800


def test_the_mcp_command_line_sets_the_cost_limit(tmp_path):
    srv = _RawServer(tmp_path, extra=["--max-stability-cost", "100"])
    try:
        _handshake(srv)
        reports = json.dumps(_two_reports(0))  # 12 task rows x 10 resamples = 120 > 100
        srv.send('{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "score_stability", '
                 '"arguments": {"reports": %s, "resamples": 10}}}\n' % reports)
        reply = srv.reply()
        assert reply["result"]["isError"] is True and "over the limit of 100" in reply["result"]["content"][0]["text"]
    finally:
        srv.close()
