"""Checks of the appendix programs' config blocks against the datasets and rows they name (the
schema checks each block's shape; these check what it refers to)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from presdep.config.cross_refs import unknown_name
from presdep.config.run_names import similar_names
from presdep.config.scorers import find_scorer


def width_problems(width: Mapping[str, Any], specs: Mapping[str, Any]) -> list[str]:
    """Each width pair is a dataset and its alias with B = 1."""
    out = []
    for native, alias in width["pairs"].items():
        spec = specs.get(alias)
        if native not in specs:
            out.append(unknown_name("width.pairs", native, specs, "a dataset of this config"))
        elif spec is None or spec.get("alias_of") != native:
            out.append(f"width.pairs.{native}: {alias!r} must be a dataset with alias_of: {native}")
        elif spec.get("B") != 1:
            out.append(f"width.pairs.{native}: the alias {alias!r} must set B: 1 (it has {spec.get('B')!r})")
    return out


def _reranking_problems(block: str, names: Sequence[str], specs: Mapping[str, Any], what: str,
                        need: tuple[str, str] | None = None) -> list[str]:
    """Each named dataset exists and is a reranking eval dataset (with the key ``need`` names, if any)."""
    out = []
    for name in names:
        spec = specs.get(name)
        if spec is None:
            out.append(unknown_name(f"{block}.datasets", name, specs, "a dataset of this config"))
        elif spec["task"] != "rerank" or spec["role"] != "eval":
            out.append(f"{block}.datasets: {name!r} is a {spec['role']} {spec['task']} dataset; "
                       f"{what} reads reranking eval datasets")
        elif need is not None and need[0] not in spec:
            out.append(f"{block}.datasets: {name!r} has no {need[0]} ({need[1]})")
    return out


def verdict_reader_problems(verdict: Mapping[str, Any], reader: Mapping[str, Any], specs: Mapping[str, Any],
                            models: Mapping[str, Any]) -> list[str]:
    """The verdict reader's datasets must be reranking eval sets with labels, and it needs a model."""
    out = _reranking_problems("verdict_reader", verdict["datasets"], specs, "the verdict reader",
                              need=("verdict_labels", "each claim's gold verdict"))
    model = verdict.get("model", reader.get("model"))
    if verdict["datasets"] and model is None:
        out.append("verdict_reader.model: give a key of models (or set reader.model)")
    elif model is not None and model not in models:
        out.append(unknown_name("verdict_reader.model", model, models, "a key of models"))
    return out


def pool_problems(pool: Mapping[str, Any], specs: Mapping[str, Any], labels: set[str]) -> list[str]:
    """The pool perturbation reads reranking eval datasets; its contrasts name Table 1 labels."""
    out = _reranking_problems("pool_perturbation", pool["datasets"], specs, "the pool perturbation")
    for a, b in pool["contrasts"]:
        unknown = sorted({a, b} - labels)
        if unknown:
            close = "".join(similar_names(x, sorted(labels)) for x in unknown).strip()
            out.append(f"pool_perturbation.contrasts: {unknown} are not row labels of this config"
                       f"{'; ' + close if close else ''} ({sorted(labels)})")
    return out


def context_ready(entry: Mapping[str, Any]) -> bool:
    """A row the context decomposition can read: untrained, uncalibrated, one pass, a scorer that
    reads selected slots (or first-stage ranks, where every arm is alike)."""
    entry_of = find_scorer(entry.get("scorer"))
    if entry_of is None or entry.get("skip"):
        return False
    caps = entry_of.capabilities
    # ``entry`` has passed the schema: calibration and bsc_k are filled.
    return (not (entry.get("student") or entry.get("adapter")) and entry["calibration"] == "none"
            and entry["bsc_k"] == 1 and (caps.slot_reads or caps.reads == "ids"))


def context_problems(context: Mapping[str, Any], specs: Mapping[str, Any], entries: Mapping[str, Any]) -> list[str]:
    """The context decomposition reads reranking eval datasets with rows :func:`context_ready` admits
    (``entries``: the variants table as the schema filled it, before its records are built)."""
    out = _reranking_problems("context_decomposition", context["datasets"], specs, "the context decomposition")
    for name in context["variants"]:
        if name not in entries:
            out.append(unknown_name("context_decomposition.variants", name, entries, "a variant of this config"))
        elif not context_ready(entries[name]):
            out.append(f"context_decomposition.variants: {name!r} is not an untrained, uncalibrated, single-pass "
                       "row whose scorer reads selected slots (capability slot_reads)")
    return out


def render_problems(render: Mapping[str, Any], specs: Mapping[str, Any], entries: Mapping[str, Any],
                    default_rubric: str | None = None) -> list[str]:
    """The render perturbations read reranking eval datasets with rows that read a prompt's render
    (the rows :func:`context_ready` admits, less the identity row); a paraphrase or scale needs the
    relevance rubric, whose variants are shipped."""
    out = _reranking_problems("render_perturbations", render["datasets"], specs, "the render perturbations")
    needs_rubric = [k for k in render["kinds"] if k in ("rubric_paraphrase", "scale")]
    for name in render["datasets"]:
        rubric = (specs.get(name) or {}).get("rubric") or default_rubric
        if needs_rubric and rubric not in (None, "relevance_v2"):
            out.append(f"render_perturbations.datasets: {name!r} uses the rubric {rubric!r}; {needs_rubric} are "
                       "shipped for relevance_v2 only (drop them from kinds, or use that rubric)")
    for name in render["variants"]:
        entry = entries.get(name)
        if entry is None:
            out.append(unknown_name("render_perturbations.variants", name, entries, "a variant of this config"))
        elif not context_ready(entry) or not find_scorer(entry["scorer"]).capabilities.slot_reads:
            out.append(f"render_perturbations.variants: {name!r} is not an untrained, uncalibrated, single-pass "
                       "row whose scorer reads a prompt's render (capability slot_reads)")
    return out


__all__ = ["context_problems", "context_ready", "pool_problems", "render_problems", "verdict_reader_problems",
           "width_problems"]
