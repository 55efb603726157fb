"""`presdep synthetic OUT_DIR`: write the synthetic collection outside the workflow."""

from __future__ import annotations

import argparse

from presdep.data.synthetic import SyntheticSpec, generate


def register(subparsers) -> None:
    p = subparsers.add_parser("synthetic", help="generate the synthetic collection (rank_llm JSON + TREC qrels/topics)")
    p.add_argument("out_dir")
    p.add_argument("--seed", type=int, default=13)
    p.add_argument("--candidates", type=int, default=20)
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    for split, folder in generate(SyntheticSpec(seed=args.seed, candidates=args.candidates), args.out_dir).items():
        print(f"{split}: {folder}")
    return 0
