"""The paper's GPU bill in the cluster guide, generated from ``presdep plan``.

``docs/guide/cluster.md`` holds, between ``<!-- bill:start -->`` and ``<!-- bill:end -->``, the
per-stage and per-rule bill of ``configs/paper.yaml``: the catalogue's sizes (never this
machine's files, so every checkout renders the same page) and the assumed rates of
:mod:`presdep.report.plan_rates`. ``python -m presdep.report.plan_guide`` rewrites the block
(``--check`` only reports a stale page); tests/unit/report/test_plan_stages.py fails when the
committed page is stale. ``presdep plan --markdown`` prints the same for any config.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Sequence

from presdep.report.guide import REPO, GuideError, regenerate, replace_block
from presdep.report.plan_rates import Rates, assumptions
from presdep.report.plan_stages import Bill, Row, cells, legend_of, plan_bill

CLUSTER_PAGE = Path("docs/guide/cluster.md")
PAPER = Path("configs/paper.yaml")
BLOCK = "bill"
REGENERATE = "python -m presdep.report.plan_guide"
RATES_NOTE = ("Rates (prompt tokens/s is the effective rate: prompt tokens over GPU seconds, generation "
              "included):")
COUNTING = (
    ("prompt tokens: characters / 4 of the template, query and documents (each cut at max_doc_chars; from the "
     "catalogue min(mean length, max_doc_chars)), + 17 chat-template tokens a prompt, + 8 a skeleton line"),
    ("FLOPs: `presdep.runtime.flops` at each prompt's mean length; a LoRA step x3 (x4 checkpointed); the "
     "logprobs path adds the full-vocabulary head at every position"),
)
HEAD = ("jobs", "on a GPU", "prompts", "model inputs read", "prompt tokens", "FLOPs", "GPU-hours",
        "prompt tokens/s", "rate")


def _table(first: str, rows: Sequence[tuple[str, Row]], total: Row, legend: dict[str, int]) -> list[str]:
    lines = [f"| {first} | " + " | ".join(HEAD) + " |", "|---|" + "---:|" * (len(HEAD) - 1) + "---|"]
    for name, row in rows:
        lines.append(f"| {name} | " + " | ".join(cells(row, legend)) + " |")
    lines.append("| **total** | " + " | ".join(f"**{c}**" if i == 6 else c
                                                  for i, c in enumerate(cells(total, legend))) + " |")
    return lines


def bill_markdown(b: Bill, rates: Rates, config: str) -> str:
    """The bill as Markdown: stages, rules, where each rate comes from, what is assumed and exact."""
    legend = legend_of([*b.rules, *b.stages])
    intro = (f"From `presdep plan --configfile {config} --markdown` before any candidates file exists (the "
             f"catalogue's dataset sizes) at the rates below; `{REGENERATE}` regenerates it.")
    out = [intro, ""]
    out += _table("stage", [(s.name, s) for s in b.stages], b.total, legend) + [""]
    out += _table("rule", [(f"{r.stage}: `{r.name}`", r) for r in b.rules], b.total, legend) + [""]
    out += [RATES_NOTE, "", *(f"{i}. {s}" for s, i in legend.items()), ""]
    out += ["Assumed:", "", *(f"- {a}" for a in assumptions(rates)), *(f"- {n}" for n in COUNTING), ""]
    out += ["What the prompt counts rest on (tokens are always estimated), per stage:", ""]
    out += [f"- {s.name}: {s.source}" for s in b.stages if s.jobs]
    unknown = [u for r in b.rules for u in r.unknown]
    if unknown:
        out += [f"- not counted: {len(unknown)} job(s) with no size or no model shape"]
    return "\n".join(out) + "\n"


def render(root: str | Path = REPO) -> str:
    """The cluster guide under ``root`` with its bill block regenerated; nothing is written."""
    from presdep.report.plan import load_config

    root = Path(root)
    page = root / CLUSTER_PAGE
    if not page.is_file():
        raise GuideError(f"{page}: missing; it holds the hand-written prose around the bill")
    cfg = load_config([root / PAPER], base=root / "workflow_config.yaml")
    rates = Rates()
    body = bill_markdown(plan_bill(cfg, rates, results=None, resources=None), rates, str(PAPER))
    return replace_block(page.read_text(encoding="utf-8"), BLOCK, body, str(CLUSTER_PAGE))


def stale(root: str | Path = REPO) -> bool:
    return (Path(root) / CLUSTER_PAGE).read_text(encoding="utf-8") != render(root)


def main(argv: list[str] | None = None) -> int:
    return regenerate(argv, prog=REGENERATE, name=REGENERATE, pages=lambda root: {CLUSTER_PAGE: render(root)},
                      description=f"Rewrite the paper's GPU bill in {CLUSTER_PAGE} from presdep plan.")


if __name__ == "__main__":
    sys.exit(main())
