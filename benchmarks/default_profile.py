"""Where a workflow run's time went, from its own records.

Reads an existing results tree (run it from the workflow's directory, or pass --root):

- ``results/benchmarks/<rule>/**.tsv`` (each rule's ``benchmark:``): wall and CPU seconds per
  rule and job count;
- ``logs/score/**.log``: the ``profile {json}`` line each score job logs (prompts asked and
  read by the model, prompts another concurrent job read while this one waited, tokens,
  tokens per second, start-up / model load / forward seconds);
- the read cache's hits and misses (``cache_hits`` / ``cache_misses`` of those profile lines)
  and the answer cache's (the ``answer cache {json}`` line of each ``logs/read_answers`` and
  ``logs/read_verdicts`` log), summed into the run's hit rates. (The outputs themselves carry
  no counters: they depend on what earlier and concurrent jobs read.)

    python benchmarks/default_profile.py [--root DIR] [--json OUT]
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from pathlib import Path

from presdep.scoring.frozen_reader import ANSWER_CACHE_MARK

PROFILE_MARK = "profile "


def _num(x: str | None) -> float | None:
    try:
        v = float(x)  # Snakemake writes "-" where it measured nothing
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def rule_times(bench_dir: Path) -> dict[str, dict]:
    """Per rule: jobs, wall seconds and CPU seconds summed over its benchmark files."""
    out: dict[str, dict] = {}
    for tsv in sorted(bench_dir.rglob("*.tsv")):
        rule = tsv.relative_to(bench_dir).parts[0]
        if rule == tsv.name:  # a file directly under results/benchmarks belongs to no rule
            continue
        with open(tsv, newline="") as f:
            rows = list(csv.DictReader(f, delimiter="\t"))
        if not rows or "s" not in rows[0]:
            raise ValueError(f"{tsv}: not a Snakemake benchmark file (expected a header with 's' and 'cpu_time')")
        r = out.setdefault(rule, {"jobs": 0, "wall_s": 0.0, "cpu_s": 0.0, "cpu_unknown": 0})
        # Several rows when a rule ran with `benchmark: repeat(...)`: their mean is one job.
        wall = [_num(row.get("s")) for row in rows]
        cpu = [_num(row.get("cpu_time")) for row in rows]
        r["jobs"] += 1
        r["wall_s"] += sum(w for w in wall if w is not None) / len(rows)
        if any(c is None for c in cpu):
            r["cpu_unknown"] += 1
        r["cpu_s"] += sum(c for c in cpu if c is not None) / len(rows)
    return out


def _last_json_lines(log_dir: Path, mark: str) -> list[dict]:
    """The last ``<mark>{json}`` line of every log under ``log_dir`` that has one, with its job."""
    out = []
    for log in sorted(log_dir.rglob("*.log")):
        last = None
        for line in log.read_text(errors="replace").splitlines():
            at = line.find(mark + "{")
            if at >= 0:
                last = line[at + len(mark):]
        if last is None:
            continue
        try:
            rec = json.loads(last)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{log}: unreadable {mark.strip()} line ({exc})") from None
        rec["job"] = str(log.relative_to(log_dir).with_suffix(""))
        out.append(rec)
    return out


def score_profiles(log_dir: Path) -> list[dict]:
    """The last ``profile`` line of every score job log (one per finished job)."""
    return _last_json_lines(log_dir, PROFILE_MARK)


def cache_counts(records: list[dict], hits_key: str, misses_key: str) -> dict:
    """Hits and misses of a cache summed over the jobs whose log records them."""
    used = [r for r in records if r.get(hits_key) is not None]
    hits, misses = sum(int(r[hits_key]) for r in used), sum(int(r[misses_key]) for r in used)
    total = hits + misses
    return {"jobs": len(used), "hits": hits, "misses": misses, "hit_rate": hits / total if total else None}


def _sum(rows: list[dict], key: str) -> float | None:
    vals = [r[key] for r in rows if r.get(key) is not None]
    return sum(vals) if vals else None


def _fmt(x, spec: str = ".1f") -> str:
    return "-" if x is None else format(x, spec)


def report(root: Path) -> dict:
    rules = rule_times(root / "results" / "benchmarks")
    jobs = score_profiles(root / "logs" / "score")
    answers = [r for kind in ("read_answers", "read_verdicts")
               for r in _last_json_lines(root / "logs" / kind, ANSWER_CACHE_MARK)]
    model_jobs = [j for j in jobs if j.get("prompts")]
    forward, tokens = _sum(model_jobs, "forward_s"), _sum(model_jobs, "tokens_read")
    scoring = {
        "jobs": len(jobs), "model_jobs": len(model_jobs),
        "prompts": _sum(model_jobs, "prompts"), "prompts_read": _sum(model_jobs, "prompts_read"),
        "waited_for_other_job": _sum(model_jobs, "waited_for_other_job"),
        "tokens_read": tokens, "startup_s": _sum(jobs, "startup_s"), "model_load_s": _sum(jobs, "model_load_s"),
        "forward_s": forward, "tokens_per_s": (tokens / forward) if tokens and forward else None,
        "per_job": jobs,
    }
    return {"rules": rules, "total_wall_s": sum(r["wall_s"] for r in rules.values()), "scoring": scoring,
            "read_cache": cache_counts(jobs, "cache_hits", "cache_misses"),
            "answer_cache": cache_counts(answers, "hits", "misses")}


def render(rep: dict) -> str:
    lines = ["| rule | jobs | wall s | CPU s |", "|---|---|---|---|"]
    for name, r in sorted(rep["rules"].items(), key=lambda kv: -kv[1]["wall_s"]):
        lines.append(f"| {name} | {r['jobs']} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} |")
    lines.append(f"| **all** | {sum(r['jobs'] for r in rep['rules'].values())} | {rep['total_wall_s']:.1f} | "
                 f"{sum(r['cpu_s'] for r in rep['rules'].values()):.1f} |")
    s = rep["scoring"]
    lines += ["", ("| score job | dtype | prompts | read by model | read by another job | tokens read | tok/s "
                   "| start-up s | load s | forward s |"), "|---|---|---|---|---|---|---|---|---|---|"]
    for j in s["per_job"]:
        lines.append(f"| {j['job']} | {j.get('dtype') or '-'} | {j.get('prompts') or '-'} | {_fmt(j.get('prompts_read'), 'd')} | "
                     f"{_fmt(j.get('waited_for_other_job'), 'd')} | "
                     f"{_fmt(j.get('tokens_read'), 'd')} | {_fmt(j.get('tokens_per_s'), '.0f')} | "
                     f"{_fmt(j.get('startup_s'))} | {_fmt(j.get('model_load_s'))} | {_fmt(j.get('forward_s'))} |")
    lines.append(f"| **all** | | {_fmt(s['prompts'], '.0f')} | {_fmt(s['prompts_read'], '.0f')} | "
                 f"{_fmt(s['waited_for_other_job'], '.0f')} | {_fmt(s['tokens_read'], '.0f')} | "
                 f"{_fmt(s['tokens_per_s'], '.0f')} | {_fmt(s['startup_s'])} | {_fmt(s['model_load_s'])} | {_fmt(s['forward_s'])} |")
    lines.append("")
    for key, jobs in (("read_cache", "score"), ("answer_cache", "reading")):
        c = rep[key]
        rate = "-" if c["hit_rate"] is None else f"{100 * c['hit_rate']:.1f}%"
        lines.append(f"{key.replace('_', ' ')}: {c['hits']} hits, {c['misses']} misses over {c['jobs']} {jobs} jobs "
                     f"(hit rate {rate})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, default=Path.cwd(), help="the workflow's directory (holds results/benchmarks, logs, results)")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures as JSON here")
    args = ap.parse_args(argv)
    if not (args.root / "results" / "benchmarks").is_dir():
        sys.exit(f"no results/benchmarks under {args.root}: run the workflow there first, or pass --root")
    rep = report(args.root)
    print(render(rep))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rep, indent=2, sort_keys=True) + "\n")
    return rep


if __name__ == "__main__":
    main()
