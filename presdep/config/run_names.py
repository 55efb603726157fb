"""What a config's ``name`` may be: not a file or folder an unnamed run writes under results/.

A named run writes under ``results/<name>/``; an unnamed one (the embedded default) writes its
outputs directly under ``results/``. A name equal to one of those (``scores``,
``position_profile.svg``) would put one run's results inside the other's. The list is checked
against every ``{RESULTS}/...`` output of the rules by a test, so a new output cannot be missed.
"""

from __future__ import annotations

import difflib

# Everything an unnamed run writes directly under results/ (rules/*.smk, the hosted reply cache,
# the report and its README).
RESERVED_RUN_NAMES = frozenset({
    "answers", "bench", "benchmarks", "cache", "ledger", "metrics", "models", "scores", "silver", "stability",
    "thresholds", "bsc_curve.csv", "contrasts.csv", "contrasts.md", "discordance.csv", "discordance.md",
    "matched", "matched_retention.csv", "matched_retention.md", "verdicts", "verdict_metrics",
    "verdict_flip.csv", "verdict_flip.md",
    "controls.csv", "controls.md", "controls_counts.csv", "width.csv", "width.md",
    "pool", "pool_metrics", "pool_perturbation.csv", "pool_perturbation.md", "pool_contrasts.csv",
    "context", "context_metrics", "context_decomposition.csv", "context_decomposition.md",
    "render", "render_metrics", "render_perturbations.csv", "render_perturbations.md", "preflight",
    "figure1.png", "figure1.svg", "position_profile.png",
    "position_profile.svg", "README.md", "report.html", "table1.csv", "table1.md", "table1_counts.csv",
})


def run_name_problem(name: object) -> str | None:
    """The one-line problem with a config's ``name`` (None when it is usable)."""
    if name not in RESERVED_RUN_NAMES:
        return None
    stem = str(name).split(".")[0]
    return (f"name: {name!r} is what an unnamed run writes as results/{name}, so the two runs' results would "
            f"mix; choose another name, e.g. {stem + '-run'!r} (taken: {', '.join(sorted(RESERVED_RUN_NAMES))})")


def similar_names(word: str, known: list[str]) -> str:
    """'did you mean X? ' for a close match of ``word`` among ``known`` (or '')."""
    close = difflib.get_close_matches(word, known, n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}? " if close else ""
