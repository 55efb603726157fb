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
