"""`presdep bench ...` subcommands, each also from a split file given with --tasks."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from presdep.bench import core, suite
from presdep.cli import main


@pytest.fixture()
def small(tmp_path):
    tasks = [t for t in core.load_split() if t["item"] in ("arith-01", "order-02")]
    p = tmp_path / "small.jsonl"
    p.write_text("".join(json.dumps(t) + "\n" for t in tasks))
    return p, tasks


def test_list_show_score(capsys, small):
    path, tasks = small
    assert main(["bench", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 300 and lines[0] == "arith-01-v1\tarithmetic\tv1"
    assert main(["bench", "list", "--tasks", str(path), "--json", "--variant", "v2"]) == 0
    assert json.loads(capsys.readouterr().out) == {"tasks": [
        {"id": "arith-01-v2", "family": "arithmetic", "variant": "v2"},
        {"id": "order-02-v2", "family": "ordering", "variant": "v2"}]}
    assert main(["bench", "show", "order-02-v4", "--tasks", str(path)]) == 0
    shown = json.loads(capsys.readouterr().out)
    by_id = {t["id"]: t for t in tasks}
    assert shown["prompt"] == by_id["order-02-v4"]["prompt"] and "answer" not in shown
    assert main(["bench", "show", "order-02-v4", "--answer"]) == 0
    assert json.loads(capsys.readouterr().out)["answer"] == by_id["order-02-v4"]["answer"]
    assert main(["bench", "show", "arith-99-v1", "--tasks", str(path)]) == 2
    assert "unknown task id 'arith-99-v1'" in capsys.readouterr().err
    answer = tasks[0]["answer"]
    assert main(["bench", "score", "arith-01-v1", f"```\nAnswer: {answer} dollars\n```", "--tasks", str(path)]) == 0
    assert json.loads(capsys.readouterr().out) == {"id": "arith-01-v1", "score": 1, "extracted": f"{answer} dollars"}
    assert main(["bench", "score", "arith-01-v1", "3"]) == 0
    assert json.loads(capsys.readouterr().out)["score"] == 0


def test_card_provenance_index_entry(tmp_path, capsys, small):
    path, tasks = small
    assert main(["bench", "card", "--out", str(tmp_path / "card.svg"), "--tasks", str(path)]) == 0
    root = ET.parse(tmp_path / "card.svg").getroot()
    assert root.get("width") == "1200px" and root.get("height") == "630px"
    text = " ".join(t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text"))
    assert "10 tasks" in text and "2 items x 5 paraphrased prompts" in text
    capsys.readouterr()
    assert main(["bench", "provenance"]) == 0
    prov = json.loads(capsys.readouterr().out)
    import hashlib

    assert prov["sha256"] == hashlib.sha256(suite.PUBLIC_PATH.read_bytes()).hexdigest()
    assert prov["seed"] == suite.PUBLIC_SEED and prov["tasks"] == 300 and prov["items"] == 60
    assert main(["bench", "provenance", "--tasks", str(path)]) == 0
    prov = json.loads(capsys.readouterr().out)
    assert prov["tasks"] == 10 and prov["seed"] is None and prov["split"] == "small.jsonl"
    assert main(["bench", "index-entry", "--tasks", str(path)]) == 0
    entry = json.loads(capsys.readouterr().out)
    assert entry["splits"]["public"]["tasks"] == 10 and entry["metric"]["higherIsBetter"] is True
    assert set(entry["families"]) == set(suite.FAMILIES)


def test_generate_public_and_hidden(tmp_path, capsys):
    assert main(["bench", "generate", "--out", str(tmp_path / "p.jsonl")]) == 0
    assert (tmp_path / "p.jsonl").read_bytes() == suite.PUBLIC_PATH.read_bytes()
    assert main(["bench", "generate", "--hidden", "--out", str(tmp_path / "h")]) == 2
    assert "explicit private seed" in capsys.readouterr().err and not (tmp_path / "h").exists()
    assert main(["bench", "generate", "--seed", "5", "--out", str(tmp_path / "x.jsonl")]) == 2
    assert main(["bench", "generate", "--hidden", "--seed", "77", "--out", str(tmp_path / "h")]) == 0
    hidden = suite.read_split(tmp_path / "h" / "hidden.jsonl")
    assert all(t["id"].startswith("hid-") for t in hidden)
    capsys.readouterr()
    assert main(["bench", "list", "--tasks", str(tmp_path / "h" / "hidden.jsonl")]) == 0
    assert capsys.readouterr().out.startswith("hid-arith-01-v1\t")


def test_run_filters_and_repeats(tmp_path, capsys, small):
    path, _ = small
    assert main(["bench", "run", "--provider", "mock", "--seed", "4", "--repeats", "2", "--tasks", str(path),
                 "--family", "ordering", "--out", str(tmp_path / "r")]) == 0
    files = sorted(p.name for p in (tmp_path / "r").glob("*.json"))
    assert files == ["mock-s4-run0.json", "mock-s4-run1.json"]
    rep = json.loads((tmp_path / "r" / "mock-s4-run1.json").read_text())
    assert [t["id"] for t in rep["tasks"]] == [f"order-02-v{k}" for k in range(1, 6)]
    assert rep["seed"] == 1 and rep["summary"]["split"] == "small.jsonl"
    assert main(["bench", "run", "--provider", "mock", "--family", "nope", "--out", str(tmp_path / "r")]) == 2
    assert "no task matches" in capsys.readouterr().err
    assert main(["bench", "run", "--provider", "openai", "--out", str(tmp_path / "r"), "--limit", "1"]) == 2
    assert "needs a base URL" in capsys.readouterr().err


def test_run_without_the_key_variable_is_a_clear_setup_error(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("PRESDEP_BENCH_UNSET_KEY", raising=False)
    argv = ["bench", "run", "--provider", "openai", "--base-url", "http://127.0.0.1:9/v1", "--model", "m",
            "--api-key-env", "PRESDEP_BENCH_UNSET_KEY", "--limit", "1", "--out", str(tmp_path / "r")]
    assert main(argv) == 2
    assert "'PRESDEP_BENCH_UNSET_KEY' is not set" in capsys.readouterr().err
    assert not list((tmp_path / "r").glob("*.json"))


def test_a_rerun_refuses_to_overwrite_an_earlier_report(tmp_path, capsys, small):
    path, _ = small
    out = tmp_path / "r"
    argv = ["bench", "run", "--provider", "mock", "--seed", "4", "--tasks", str(path), "--out", str(out)]
    assert main(argv) == 0
    first = out / "mock-s4-run0.json"
    before = first.read_bytes()
    first.write_bytes(before.replace(b'"metric": "accuracy"', b'"metric": "kept"'))  # tell a rewrite apart
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert str(first) in err and "--overwrite" in err and "--out" in err, err
    assert b'"kept"' in first.read_bytes()  # untouched
    # With repeats, an existing later run is found before any run is made: nothing new is written.
    assert main([*argv, "--run", "1", "--repeats", "2"]) == 0
    (out / "mock-s4-run1.json").unlink()
    assert main([*argv, "--run", "1", "--repeats", "2"]) == 2
    assert not (out / "mock-s4-run1.json").exists() and str(out / "mock-s4-run2.json") in capsys.readouterr().err
    # --overwrite replaces the report, as asked.
    assert main([*argv, "--overwrite"]) == 0
    assert first.read_bytes() == before


def test_core_run_refuses_an_existing_report_unless_told(tmp_path):
    from presdep.bench.runner import ReportExists

    tasks = core.load_split()[:5]
    path = core.run("mock", tasks, out=tmp_path, seed=2)["path"]
    with pytest.raises(ReportExists, match="already exists") as err:
        core.run("mock", tasks, out=tmp_path, seed=2)
    assert err.value.path == path and isinstance(err.value, FileExistsError)
    assert core.run("mock", tasks, out=tmp_path, seed=2, overwrite=True)["path"] == path
    # A file name given as --out is guarded the same way.
    target = tmp_path / "mine.json"
    core.run("mock", tasks, out=target, seed=3)
    with pytest.raises(ReportExists):
        core.run("mock", tasks, out=target, seed=3)


def test_serve_and_mcp_options_reach_the_servers(monkeypatch):
    import presdep.bench.cli as bench_cli

    seen = {}
    monkeypatch.setattr(bench_cli, "serve", lambda port, **kw: seen.update(serve=(port, kw)))
    monkeypatch.setattr(bench_cli, "serve_stdio", lambda tasks, **kw: seen.update(mcp=kw))
    assert main(["bench", "serve", "8000", "--read-timeout", "2.5", "--max-stability-cost", "9"]) == 0
    assert seen["serve"][0] == 8000 and seen["serve"][1]["read_timeout_s"] == 2.5
    assert seen["serve"][1]["max_stability_cost"] == 9
    for command in (["bench", "mcp"], ["mcp"]):
        seen.pop("mcp", None)
        assert main([*command, "--max-stability-cost", "1234", "--max-concurrent-stability", "3"]) == 0
        assert seen["mcp"] == {"max_stability_cost": 1234, "max_concurrent_stability": 3}, command
    seen.pop("mcp")
    assert main(["mcp"]) == 0
    assert seen["mcp"]["max_stability_cost"] == bench_cli.DEFAULT_MAX_STABILITY_COST
