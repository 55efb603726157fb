"""Where a run's protocol is not the paper's: one sentence per named non-paper rule it uses.

Table 1's note prints them (docs/methods/presentations.md: per-query shuffle seeds, the lenient answer
extraction and a seeded query sample are named options, never the paper's default), so a
table read on its own says which of its cells follow the released protocol.
"""

from __future__ import annotations

from presdep.config.records import WorkflowConfig


def departures(cfg: WorkflowConfig) -> list[str]:
    """Sentences naming each non-paper rule the evaluation datasets Table 1 averages use ([] = none;
    an alias, another dataset under other settings, is not among them)."""
    evals = {n: cfg.datasets[n] for n in cfg.table1_datasets}
    out = []
    per_query = sorted(n for n, d in evals.items() if d.protocol.shuffle_rule == "per_query")
    if per_query:
        out.append("shuffles drawn per query (shuffle_rule per_query), not random.Random(m) of the first-stage "
                   f"list: {', '.join(per_query)}")
    cyclic = sorted(n for n, d in evals.items() if d.protocol.shuffle_rule == "cyclic")
    if cyclic:
        out.append("shuffles are the cyclic design (shuffle_rule cyclic: rotations inside fixed prompts), not "
                   f"random.Random(m) of the first-stage list: {', '.join(cyclic)}")
    sampled = sorted(f"{n} ({d.max_queries})" for n, d in evals.items() if d.max_queries is not None)
    if sampled:
        out.append(f"a seeded sample of max_queries queries, not every judged query: {', '.join(sampled)}")
    if cfg.reader["answer_extraction"] != "paper" and any(d.task == "qa" for d in evals.values()):
        out.append("answers taken by the lenient extraction (any answer label, markdown removed), not the "
                   "paper's first line without 'Answer:'")
    return out


def shared_permutation_datasets(cfg: WorkflowConfig) -> list[str]:
    """Table 1's datasets whose queries share their M slot permutations (shuffle_rule paper or
    cyclic): an interval that resamples their queries is conditional on those permutations."""
    return sorted(n for n in cfg.table1_datasets if cfg.datasets[n].protocol.shuffle_rule != "per_query")
