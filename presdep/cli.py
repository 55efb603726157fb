"""`presdep ...`: the workflow's functions outside Snakemake, for users with their own scorer output."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from presdep import __version__

# Modules that add subcommands through a `register(subparsers)` function.
_COMMAND_MODULES = (
    "presdep.bench.cli",
    "presdep.data.synthetic_cli",
    "presdep.metrics.cli",
    "presdep.stability_cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="presdep", description=__doc__)
    parser.add_argument("--version", action="version", version=f"presdep {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in _COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError) as exc:
        print(f"presdep {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
