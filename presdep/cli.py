"""`presdep ...`: the workflow's functions outside Snakemake, for users with their own scorer output."""

from __future__ import annotations

import argparse
import logging
import sys

from presdep import __version__
from presdep.bench import cli as bench_cli
from presdep.contracts.errors import PresdepError
from presdep.data import synthetic_cli
from presdep.metrics import cli as metrics_cli
from presdep.preflight import cli as preflight_cli
from presdep.rehearsal import cli as rehearsal_cli
from presdep.report import export_cli, plan_cli, stability_cli

# Modules that add subcommands through a `register(subparsers)` function (imported at the
# top, so the layering contract sees that the command line sits above them all).
_COMMAND_MODULES = (bench_cli, synthetic_cli, metrics_cli, stability_cli, export_cli, plan_cli, rehearsal_cli,
                    preflight_cli)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="presdep", description=__doc__)
    parser.add_argument("--version", action="version", version=f"presdep {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for module in _COMMAND_MODULES:
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    # The project's own errors and a missing input file are told to the user in one line;
    # anything else is a bug and keeps its traceback.
    except (PresdepError, FileNotFoundError) as exc:
        print(f"presdep {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
