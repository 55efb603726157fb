"""``presdep preflight --configfile C [--profile P]``: one GPU node checked before the matrix.

With ``--local`` the checks run here, in this Python. Without it they run as the workflow's
``preflight`` rule through the given profiles (Snakemake submits it as the cluster's
``train_student`` jobs are submitted, with their resources), and this command then prints
the bill priced at the rates the node measured beside the assumed one.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

from presdep.config.yaml_io import load_yaml
from presdep.contracts.atomic_files import write_text_atomic
from presdep.contracts.errors import ConfigError
from presdep.preflight.measured_rates import rates_of
from presdep.preflight.micro_jobs import MicroJob, reader_micro_job, score_micro_job, train_micro_job
from presdep.preflight.stack import check_envs, stack_report
from presdep.report.plan import TRAINING_RULE, load_config, plan_training
from presdep.report.plan_rates import Rates, load_rates
from presdep.report.plan_stages import plan_bill
from presdep.training.micro_batches import GIB

RULE = "preflight"


def register(subparsers) -> None:
    p = subparsers.add_parser(
        RULE, help="check one GPU node (its software, memory and rates) before the matrix runs",
        description=__doc__, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--configfile", action="append", default=[], required=True,
                   help="a config file, as given to snakemake (repeatable, later files merge in)")
    p.add_argument("--profile", action="append", default=[],
                   help="a Snakemake profile folder (repeatable): the node is reached through it, and its "
                        f"set-resources.{TRAINING_RULE} are the preflight job's")
    p.add_argument("--local", action="store_true", help="run the checks here instead of through the profile")
    p.add_argument("--gpu-mem-gb", type=float, help="the node's GPU memory in GiB (default: what CUDA reports)")
    p.add_argument("--out", help="the rates file (default: <results>/preflight/rates.json)")
    p.add_argument("--base", default="workflow_config.yaml", help="the embedded default the config merges into")
    p.add_argument("--resources", default="resources", help="where fetched models are (resources/models/<name>)")
    p.add_argument("--results", default="results", help="the workflow's results folder")
    p.add_argument("--envs", default="envs", help="the folder of the workflow's environment files")
    p.add_argument("--snakemake", default="snakemake", help="the snakemake to submit the preflight job with")
    p.set_defaults(func=_run)


def default_out(cfg: Any, results: str) -> Path:
    return Path(results) / cfg.name / RULE / "rates.json" if cfg.name else Path(results) / RULE / "rates.json"


def _run(args) -> int:
    cfg = load_config(args.configfile, base=args.base)
    out = Path(args.out) if args.out else default_out(cfg, args.results)
    if not args.local:
        rc = submit(args, out)
        if rc:
            return rc
    else:
        rc = check_node(args, cfg, out)
        if rc:
            return rc
    print_bills(cfg, out, args.results, args.resources)
    return 0


def node_gpu_gib(override: float | None) -> tuple[float | None, str]:
    if override:
        return override, "--gpu-mem-gb"
    import torch

    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        return props.total_memory / GIB, f"{props.name} (CUDA device 0)"
    return None, "no CUDA device"


def check_node(args, cfg: Any, out: Path) -> int:
    """The four checks in order; a job predicted not to fit stops before any micro-job runs."""
    checks = check_envs(args.envs)
    print("1. software, against each environment's pins:")
    for line in stack_report(checks) or [f"  no environment files under {args.envs}"]:
        print(f"  {line}")
    gib, source = node_gpu_gib(args.gpu_mem_gb)
    plans = plan_training(cfg, profiles=[], resources=args.resources, gpu_mem_gb=gib)
    print(f"2. GPU memory: {'-' if gib is None else f'{gib:.1f} GiB'} ({source}) against the plan's training jobs:")
    bad = [p for p in plans if not p.fits]
    for p in plans:
        peak = "-" if p.predicted_peak_gib is None else f"{p.predicted_peak_gib:.1f} GiB"
        print(f"  {p.job}: predicted peak {peak}, {'fits' if p.fits else 'DOES NOT FIT'} ({p.why})")
    if bad:
        for p in bad:
            print(f"presdep preflight: {p.job} does not fit this node: {p.why}", file=sys.stderr)
        return 1
    print("3. one micro-job per GPU rule family, with the config's own models:")
    jobs, failed = run_micro_jobs(cfg, Path(args.resources), plans)
    rates = rates_of(jobs, cfg, Path(args.resources))
    record = {"rates": rates, "preflight": {
        "configfiles": list(args.configfile), "node_gpu_gib": gib, "node_gpu_source": source,
        "stack": {env: [r.line() for r in rows if not r.ok] for env, rows in checks.items()},
        "micro_jobs": [j.as_dict() for j in jobs], "failed": failed,
        "training_plan": [p.as_dict() for p in plans]}}
    write_text_atomic(out, json.dumps(record, indent=1, default=str) + "\n")
    print(f"4. measured rates written to {out} (presdep plan --rates {out})")
    for family, why in failed.items():
        print(f"presdep preflight: the {family} micro-job failed: {why}", file=sys.stderr)
    return 1 if failed else 0


def run_micro_jobs(cfg: Any, resources: Path, plans) -> tuple[list[MicroJob], dict[str, str]]:
    runs: dict[str, Callable[[], MicroJob | None]] = {
        "score": lambda: score_micro_job(cfg, resources),
        "train": lambda: train_micro_job(cfg, resources, plans),
        "reader": lambda: reader_micro_job(cfg, resources)}
    jobs, failed = [], {}
    for family, run in runs.items():
        try:
            job = run()
        except Exception as exc:  # noqa: BLE001 - every family is tried; the failure is the finding
            failed[family] = f"{type(exc).__name__}: {exc}"
            continue
        if job is None:
            print(f"  {family}: none in this config")
            continue
        rate = f"{job.tokens_per_s:,.0f} prompt tokens/s" if job.tokens_per_s else f"{job.seconds:.2f} s"
        print(f"  {family}: {job.what} on {job.device}: {rate}")
        jobs.append(job)
    return jobs, failed


def profile_resources(profiles: list[str]) -> list[str]:
    """``--set-resources`` giving the preflight job each profile's ``train_student`` resources."""
    merged: dict[str, Any] = {}
    for folder in profiles:
        path = Path(folder) / "config.yaml"
        if not path.is_file():
            raise ConfigError(f"profile {folder}: no config.yaml there")
        merged.update(((load_yaml(path) or {}).get("set-resources") or {}).get(TRAINING_RULE) or {})
    return [f"{RULE}:{k}={v}" if isinstance(v, int) and not isinstance(v, bool) else f"{RULE}:{k}={str(v)!r}"
            for k, v in merged.items()]


def submit(args, out: Path) -> int:
    """The preflight rule's one job through the profiles; its rates file comes back to ``out``."""
    exe = shutil.which(args.snakemake)
    if exe is None:
        raise ConfigError(f"no {args.snakemake!r} on PATH to submit the preflight job with (or pass --local)")
    cmd = [exe, *[a for p in args.profile for a in ("--profile", p)],
           *[a for c in args.configfile for a in ("--configfile", c)], "--forcerun", RULE]
    extra = profile_resources(args.profile)
    if extra:
        cmd += ["--set-resources", *extra]
    cmd += ["--", str(out)]
    print("submitting:", " ".join(cmd))
    rc = subprocess.run(cmd, check=False).returncode
    if rc:
        print(f"presdep preflight: the preflight job failed (snakemake exit {rc}); its log is under "
              f"logs/{RULE}/", file=sys.stderr)
    return rc


def print_bills(cfg: Any, out: Path, results: str, resources: str) -> None:
    measured = plan_bill(cfg, load_rates(out), results=results, resources=resources)
    assumed = plan_bill(cfg, Rates(), results=results, resources=resources)
    print(f"\nGPU-hours per stage, at the assumed rates and at the rates measured ({out}):")
    width = max([len(r.name) for r in assumed.stages] + [5])
    print(f"  {'stage'.ljust(width)}  {'assumed':>10}  {'measured':>10}")
    for a, m in zip([*assumed.stages, assumed.total], [*measured.stages, measured.total]):
        print(f"  {a.name.ljust(width)}  {a.gpu_hours:>10,.2f}  {m.gpu_hours:>10,.2f}")


__all__ = ["check_node", "default_out", "profile_resources", "register", "submit"]
