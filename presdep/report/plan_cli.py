"""``presdep plan --configfile CONFIG``: every training job's micro-batch and predicted GPU peak."""

from __future__ import annotations

import argparse
import json
import sys

from presdep.report.plan import format_table, load_config, plan_training


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "plan", help="check that every training job of a config fits its GPU, before submitting it",
        description="Reads the config as the workflow does (workflow_config.yaml, then each --configfile) and "
                    "prints, per train_student job, the micro-batch budget in padded tokens, the prompts per "
                    "micro-batch at the training dataset's prompt cap (max_length), the peak memory the "
                    "memory model predicts for a full micro-batch, and the GPU memory the profile or config "
                    "requests. Exits 1 when a job cannot fit.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--configfile", action="append", default=[], required=True,
                   help="a config file, as given to snakemake (repeatable, later files merge in)")
    p.add_argument("--profile", action="append", default=[],
                   help="a Snakemake profile folder whose set-resources.train_student names the GPU model "
                        "(repeatable, later profiles win)")
    p.add_argument("--gpu-mem-gb", type=float, help="GPU memory in GiB, overriding the profiles")
    p.add_argument("--base", default="workflow_config.yaml", help="the embedded default the config merges into")
    p.add_argument("--resources", default="resources", help="where fetched models are (their config.json)")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.set_defaults(func=_run)


def _run(args) -> int:
    cfg = load_config(args.configfile, base=args.base)
    jobs = plan_training(cfg, profiles=args.profile, resources=args.resources, gpu_mem_gb=args.gpu_mem_gb)
    if args.json:
        json.dump({"jobs": [j.as_dict() for j in jobs]}, sys.stdout, indent=1)
        print()
    else:
        print(format_table(jobs) if jobs else "no train_student jobs in this config")
        sources = sorted({j.memory_source for j in jobs if j.gpu_gib is not None} |
                         {f"GPU: {j.gpu_source}" for j in jobs if j.gpu_gib is not None})
        for line in sources:
            print(f"  {line}")
    bad = [j for j in jobs if not j.fits]
    for j in bad:
        print(f"presdep plan: {j.job} does not fit: {j.why}", file=sys.stderr)
    return 1 if bad else 0
