"""``presdep plan --configfile CONFIG``: each training job's micro-batch and predicted GPU peak, and
the config's bill per stage and per rule (prompts, prompt tokens, FLOPs, GPU-hours)."""

from __future__ import annotations

import argparse
import json
import sys

from presdep.report.plan import format_table, load_config, plan_training
from presdep.report.plan_rates import assumptions, load_rates
from presdep.report.plan_stages import format_bill, plan_bill


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "plan", help="what a config will ask of the GPUs: training memory per job, GPU-hours per stage",
        description="Reads the config as the workflow does (workflow_config.yaml, then each --configfile) and "
                    "prints, per train_student job, the micro-batch budget in padded tokens, the prompts per "
                    "micro-batch at the training dataset's prompt cap (max_length), the peak memory the "
                    "memory model predicts for a full micro-batch, and the GPU memory the profile or config "
                    "requests; then, per stage and per rule of results/table1.csv, the jobs, the prompts as "
                    "the code lays them out (exact from the candidates files under --results, else from the "
                    "catalogue's sizes), their tokens, FLOPs and GPU-hours at the --rates of a "
                    "benchmarks/gpu.py run or at stated assumed rates. Exits 1 when a job cannot fit.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--configfile", action="append", default=[], required=True,
                   help="a config file, as given to snakemake (repeatable, later files merge in)")
    p.add_argument("--profile", action="append", default=[],
                   help="a Snakemake profile folder whose set-resources.train_student names the GPU model "
                        "(repeatable, later profiles win)")
    p.add_argument("--gpu-mem-gb", type=float, help="GPU memory in GiB, overriding the profiles")
    p.add_argument("--base", default="workflow_config.yaml", help="the embedded default the config merges into")
    p.add_argument("--resources", default="resources", help="where fetched models are (their config.json)")
    p.add_argument("--results", default="results",
                   help="where the fixtures are (<results>/<dataset>/candidates.parquet; a named config's under "
                        "<results>/<name>/): their prompt counts are exact")
    p.add_argument("--rates", help="a benchmarks/gpu.py JSON whose 'rates' price the GPU work (else assumed rates)")
    p.add_argument("--json", action="store_true", help="print the plan as JSON: jobs, stages, rules, total")
    p.add_argument("--markdown", action="store_true", help="print the bill as Markdown (the cluster guide's form)")
    p.set_defaults(func=_run)


def _run(args) -> int:
    cfg = load_config(args.configfile, base=args.base)
    rates = load_rates(args.rates)
    jobs = plan_training(cfg, profiles=args.profile, resources=args.resources, gpu_mem_gb=args.gpu_mem_gb)
    b = plan_bill(cfg, rates, results=args.results, resources=args.resources)
    if args.json:
        json.dump({"jobs": [j.as_dict() for j in jobs], "stages": [s.as_dict("stage") for s in b.stages],
                   "rules": [r.as_dict("rule") for r in b.rules], "total": b.total.as_dict("total"),
                   "assumed": assumptions(rates), "work": list(b.work)}, sys.stdout, indent=1)
        print()
    elif args.markdown:
        from presdep.report.plan_guide import bill_markdown

        print(bill_markdown(b, rates, " --configfile ".join(args.configfile)), end="")
    else:
        print(format_table(jobs) if jobs else "no train_student jobs in this config")
        sources = sorted({j.memory_source for j in jobs if j.gpu_gib is not None} |
                         {f"GPU: {j.gpu_source}" for j in jobs if j.gpu_gib is not None})
        for line in sources:
            print(f"  {line}")
        print()
        print(format_bill(b, assumptions(rates)))
    bad = [j for j in jobs if not j.fits]
    for j in bad:
        print(f"presdep plan: {j.job} does not fit: {j.why}", file=sys.stderr)
    return 1 if bad else 0
