"""``presdep bench ...``: the benchmark from the command line (every subcommand takes --tasks PATH)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from presdep.bench import core, suite
from presdep.bench.card import write_card
from presdep.bench.http_api import DEFAULT_MAX_BODY_BYTES, DEFAULT_READ_TIMEOUT_S, serve
from presdep.bench.limits import DEFAULT_MAX_CONCURRENT_STABILITY, DEFAULT_MAX_STABILITY_COST
from presdep.bench.mcp_server import serve_stdio
from presdep.bench.providers import model_id_for
from presdep.bench.runner import refuse_existing, report_path
from presdep.config import load_yaml
from presdep.contracts.errors import InvalidInput
from presdep.report.run_reports import MAX_FAILURE_SHARE
from presdep.training.hosted_net import HostedConfigError

DEFAULT_HIDDEN_DIR = Path("bench-hidden")  # git-ignored
EXIT_INCOMPLETE = 3  # a run report written but marked incomplete: too many failed requests


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tasks", type=Path, help="a split file (JSONL) instead of the shipped public split")


def _stability_limits(p: argparse.ArgumentParser, what: str) -> None:
    """The bounds of a stability request, the same for the HTTP route and the MCP tool."""
    p.add_argument("--max-stability-cost", type=int, default=DEFAULT_MAX_STABILITY_COST,
                   help=f"refuse {what} whose resamples x task rows exceed this "
                   f"(default {DEFAULT_MAX_STABILITY_COST}, about 2 s on 2 cores)")
    p.add_argument("--max-concurrent-stability", type=int, default=DEFAULT_MAX_CONCURRENT_STABILITY,
                   help=f"{what}s run at once; more are refused, to retry later "
                   f"(default {DEFAULT_MAX_CONCURRENT_STABILITY})")


def register(subparsers: Any) -> None:
    b = subparsers.add_parser("bench", help="the prompt-sensitivity benchmark: tasks, runs, grading, services",
                              description="Seeded reasoning tasks in five paraphrased prompt forms; runs write "
                              "JSON run reports for `presdep stability`.")
    sub = b.add_subparsers(dest="bench_command", required=True)

    p = sub.add_parser("list", help="task ids with family and variant")
    p.add_argument("--family")
    p.add_argument("--variant")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=_list)

    p = sub.add_parser("show", help="one task with its prompt")
    p.add_argument("id")
    p.add_argument("--answer", action="store_true", help="include the expected answer")
    p.set_defaults(func=_show)

    p = sub.add_parser("score", help="grade one answer: prints {id, score, extracted}")
    p.add_argument("id")
    p.add_argument("answer")
    p.set_defaults(func=_score)

    p = sub.add_parser("run", help="run a provider over the split and write run report(s)")
    p.add_argument("--provider", required=True, choices=["mock", "openai", "openrouter", "transformers"])
    p.add_argument("--out", type=Path, required=True, help="folder for <model>-run<k>.json")
    p.add_argument("--overwrite", action="store_true",
                   help="replace reports an earlier run wrote there (default: refuse, naming the file)")
    p.add_argument("--run", type=int, default=0, help="index of the first repeated run (default 0)")
    p.add_argument("--repeats", type=int, default=1, help="repeated runs to write (default 1)")
    p.add_argument("--limit", type=int, help="only the first N tasks (after filters)")
    p.add_argument("--family")
    p.add_argument("--variant")
    p.add_argument("--seed", type=int, default=0, help="mock: the mock model's seed (model id mock-s<seed>)")
    p.add_argument("--base-url", help="openai/openrouter: the endpoint")
    p.add_argument("--model", help="openai/openrouter: model name; transformers: a key of models: in --configfile")
    p.add_argument("--api-key-env", help="openai/openrouter: environment variable holding the key")
    p.add_argument("--cache-dir", type=Path, help="openai/openrouter: reply cache (default <out>/.cache)")
    p.add_argument("--concurrency", type=int, help="openai/openrouter: requests in flight (default: the schema's)")
    p.add_argument("--max-retries", type=int, help="openai/openrouter: transport retries (default: the schema's)")
    p.add_argument("--timeout", type=float, help="openai/openrouter: deadline per request, s (default: the schema's)")
    p.add_argument("--max-tokens", type=int, default=512, help="openai/openrouter: reply token limit")
    p.add_argument("--configfile", type=Path, default=Path("workflow_config.yaml"),
                   help="transformers: the config whose models: holds --model")
    p.add_argument("--model-dir", type=Path, help="transformers: a converted model folder (skips the fetch)")
    p.add_argument("--models-root", type=Path, default=Path("resources/models"),
                   help="transformers: where --model is fetched to once (default resources/models)")
    p.add_argument("--max-new-tokens", type=int, default=24, help="transformers: tokens per answer")
    p.add_argument("--batch-size", type=int, default=8, help="transformers: prompts per generate call")
    p.add_argument("--max-failure-share", type=float, default=MAX_FAILURE_SHARE,
                   help="above this share of failed requests the report is marked incomplete and the "
                        f"command exits {EXIT_INCOMPLETE} (default {MAX_FAILURE_SHARE})")
    p.set_defaults(func=_run)

    p = sub.add_parser("card", help="write the benchmark card (1200x630 SVG)")
    p.add_argument("--out", type=Path, default=Path("bench-card.svg"))
    p.set_defaults(func=_card)

    p = sub.add_parser("provenance", help="generator, seed, digest and counts of the split")
    p.set_defaults(func=lambda a: _print(_core().provenance(a.tasks)))

    p = sub.add_parser("index-entry", help="a machine-readable description of the benchmark")
    p.set_defaults(func=lambda a: _print(_core().index_entry(a.tasks)))

    p = sub.add_parser("generate", help="regenerate the public split, or write a hidden one with --seed")
    p.add_argument("--hidden", action="store_true", help="the hidden split (needs --seed)")
    p.add_argument("--seed", type=int, help="the private seed of the hidden split")
    p.add_argument("--out", type=Path, help=f"public: the JSONL file; hidden: a folder (default {DEFAULT_HIDDEN_DIR})")
    p.set_defaults(func=_generate)

    p = sub.add_parser("serve", help="serve the HTTP API (FastAPI + uvicorn)")
    p.add_argument("port", type=int)
    p.add_argument("--host", default="127.0.0.1", help="bind address (default loopback only)")
    p.add_argument("--token-env", default="PRESDEP_BENCH_TOKEN",
                   help="environment variable with a bearer token; unset = no token check")
    p.add_argument("--max-body-bytes", type=int, default=DEFAULT_MAX_BODY_BYTES,
                   help="refuse request bodies above this many bytes with 413, chunked ones too "
                   f"(default {DEFAULT_MAX_BODY_BYTES})")
    _stability_limits(p, "a /v1/stability request (413; 429 with Retry-After when busy)")
    p.add_argument("--read-timeout", type=float, default=DEFAULT_READ_TIMEOUT_S,
                   help="seconds a request may take to arrive whole (headers and body) from its first byte; "
                   f"slower ones get 408 and are closed (default {DEFAULT_READ_TIMEOUT_S:g})")
    p.set_defaults(func=_serve)

    p = sub.add_parser("mcp", help="serve the MCP tools over stdio")
    _stability_limits(p, "a score_stability call")
    p.set_defaults(func=lambda a: _mcp(a))

    for name, sp in sub.choices.items():
        _common(sp)

    # Agents' configs name the server command; `presdep mcp` is the short form of `presdep bench mcp`.
    top = subparsers.add_parser("mcp", help="the benchmark's MCP server over stdio (= presdep bench mcp)")
    top.set_defaults(func=_mcp)
    _stability_limits(top, "a score_stability call")
    _common(top)


def _core():
    return core


def _print(obj: Any) -> int:
    print(json.dumps(obj, indent=1))
    return 0


def _list(args) -> int:
    core = _core()
    rows = core.list_tasks(core.load_split(args.tasks), args.family, args.variant)
    if args.json:
        return _print({"tasks": rows})
    for r in rows:
        print(f"{r['id']}\t{r['family']}\t{r['variant']}")
    return 0


def _show(args) -> int:
    core = _core()
    try:
        return _print(core.get_task(core.load_split(args.tasks), args.id, with_answer=args.answer))
    except core.UnknownTask as exc:
        print(f"presdep bench show: error: {exc}", file=sys.stderr)
        return 2


def _score(args) -> int:
    core = _core()
    try:
        return _print(core.score(core.load_split(args.tasks), args.id, args.answer))
    except core.UnknownTask as exc:
        print(f"presdep bench score: error: {exc}", file=sys.stderr)
        return 2


def _provider_options(args) -> dict[str, Any]:
    if args.provider == "mock":
        return {"seed": args.seed}
    if args.provider in ("openai", "openrouter"):
        opts = {"base_url": args.base_url, "model": args.model, "cache_dir": args.cache_dir or args.out / ".cache",
                "concurrency": args.concurrency, "max_retries": args.max_retries, "timeout_s": args.timeout,
                "max_tokens": args.max_tokens}
        if args.api_key_env:
            opts["api_key_env"] = args.api_key_env
        return opts
    spec = None
    if args.model_dir is None:
        if not args.model:
            raise InvalidInput("--provider transformers needs --model KEY (of models: in --configfile) or --model-dir")
        models = load_yaml(args.configfile).get("models") or {}
        if args.model not in models:
            raise InvalidInput(f"{args.configfile}: models: has no key {args.model!r}; keys: {sorted(models)}")
        spec = models[args.model]
    return {"model_key": args.model or args.model_dir.name, "spec": spec, "model_dir": args.model_dir,
            "models_root": args.models_root,
            "max_new_tokens": args.max_new_tokens, "batch_size": args.batch_size}


def _run(args) -> int:
    core = _core()
    tasks = core.list_tasks(core.load_split(args.tasks), args.family, args.variant)
    full = {t["id"]: t for t in core.load_split(args.tasks)}
    chosen = [full[t["id"]] for t in tasks][: args.limit]
    if not chosen:
        raise InvalidInput("no task matches the filters")
    if args.repeats < 1:
        raise InvalidInput(f"--repeats must be >= 1, got {args.repeats}")
    split = "public" if args.tasks is None else args.tasks.name
    opts = _provider_options(args)
    runs = range(args.run, args.run + args.repeats)
    model_id = model_id_for(args.provider, **opts)
    if model_id is not None and not args.overwrite:  # every report refused before the first run is made
        refuse_existing([report_path(model_id, k, args.out) for k in runs])
    for k in runs:
        try:
            res = core.run(args.provider, chosen, out=args.out, run=k, split=split,
                           max_failure_share=args.max_failure_share, overwrite=args.overwrite, **opts)
        except HostedConfigError as exc:  # e.g. the key variable is unset: a setup error, not a failed task
            print(f"presdep bench run: error: {exc}", file=sys.stderr)
            return 2
        report, s = res["report"], res["report"]["summary"]
        t = s["totals"]
        if s["mean"] is None:
            print(f"{report['model']} run {k}: no request answered, failed {t['failed']} -> {res['path']}")
        else:
            lo, hi = s["interval95"]
            print(f"{report['model']} run {k}: {t['correct']}/{t['answered']} answered = {s['mean']:.3f} "
                  f"[{lo:.3f}, {hi:.3f}], failed {t['failed']} of {t['tasks']} -> {res['path']}")
        if report["incomplete"]:
            first = next(iter(s["errors"].items()), None)
            print(f"presdep bench run: error: {t['failed']} of {t['tasks']} requests failed "
                  f"({s['failureShare']:.1%} > {s['maxFailureShare']:.1%}); the report is marked incomplete "
                  f"and `presdep stability` will refuse it" + (f"; first error ({first[0]}): {first[1]}" if first else ""),
                  file=sys.stderr)
            return EXIT_INCOMPLETE
    return 0


def _card(args) -> int:
    core = _core()
    path = write_card(core.load_split(args.tasks), core.provenance(args.tasks), args.out)
    print(f"wrote {path}")
    return 0


def _generate(args) -> int:
    if args.hidden:
        path = suite.write_hidden_split(args.out or DEFAULT_HIDDEN_DIR, args.seed)
    else:
        if args.seed is not None:
            raise InvalidInput("the public split has a fixed seed; use --hidden --seed N for a private split")
        path = suite.write_public_split(args.out or suite.PUBLIC_PATH)
    print(f"wrote {path}")
    return 0


def _serve(args) -> int:
    serve(args.port, host=args.host, tasks_path=args.tasks, token_env=args.token_env,
          max_body_bytes=args.max_body_bytes, max_stability_cost=args.max_stability_cost,
          max_concurrent_stability=args.max_concurrent_stability, read_timeout_s=args.read_timeout)
    return 0


def _mcp(args) -> int:
    serve_stdio(args.tasks, max_stability_cost=args.max_stability_cost,
                max_concurrent_stability=args.max_concurrent_stability)
    return 0
