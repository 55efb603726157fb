"""Config values that name another entry of the config: each must exist, or the config is refused
with the key's path and the closest name (the schema checks shapes, not names).

:func:`unknown_name` is the one message for a name that is not there; the other checks of names
(models, teachers, program datasets) use it too. The checks here cover the decision programs
around Table 1 (``contrasts``, ``discordance``), ``figure1`` and CapCal's ``reuse_scores_of``:
a name there that matched nothing used to give an empty table, or to fail only in the job.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from presdep.config.run_names import similar_names


def unknown_name(path: str, value: Any, known: Iterable[Any], what: str) -> str:
    """``<path>: 'x' is not <what>; did you mean 'y'? (['y', 'z'])``."""
    names = sorted(str(k) for k in known)
    hint = similar_names(str(value), names).strip()
    return f"{path}: {value!r} is not {what}{'; ' + hint if hint else ''} ({names})"


def _table1(entries: Mapping[str, Any]) -> dict[str, Any]:
    """The variants the Table 1 programs read (the contrasts and discordance jobs get no others)."""
    return {n: v for n, v in entries.items() if v["table"] == "table1"}


def _label(name: str, entry: Mapping[str, Any]) -> str:
    return entry.get("label", name)


def contrasts_base(filled: Mapping[str, Any], given: Mapping[str, Any]) -> str | None:
    """The base of the contrasts: the config's ``contrasts.base``; None (no base row) when the config
    leaves it unset and no variant has the schema's default name. A base the config names is
    checked by :func:`cross_ref_problems`."""
    base = filled["contrasts"]["base"]
    said = "base" in (given.get("contrasts") or {})
    return base if said or base in filled["variants"] else None


def _base_problems(base: str | None, entries: Mapping[str, Any]) -> list[str]:
    if base is None:
        return []
    table1 = _table1(entries)
    if base not in table1:
        return [unknown_name("contrasts.base", base, table1, "a Table 1 variant of this config (a variants key)")]
    if table1[base].get("student"):
        return [f"contrasts.base: {base!r} is a trained variant; the base is the untrained row the trained "
                "rows are contrasted with (e.g. off_the_shelf)"]
    return []


def _label_problems(path: str, labels: Iterable[str], entries: Mapping[str, Any], *, runnable: bool) -> list[str]:
    """Each of ``labels`` is the label of a Table 1 row (of a runnable one where ``runnable``)."""
    table1 = _table1(entries)
    every = {_label(n, v) for n, v in table1.items()}
    usable = {_label(n, v) for n, v in table1.items() if not (runnable and v.get("skip"))}
    out = []
    for i, label in enumerate(labels):
        where = f"{path}.{i}"
        if label in usable:
            continue
        if label in every:
            out.append(f"{where}: {label!r} is the label of a skipped row (its variant sets skip); it has no "
                       "values to compare")
        else:
            out.append(unknown_name(where, label, usable, "a Table 1 row label of this config"))
    return out


def _contrasts_problems(contrasts: Mapping[str, Any], base: str | None, entries: Mapping[str, Any],
                        specs: Mapping[str, Any]) -> list[str]:
    out = _base_problems(base, entries)
    if contrasts["pairs"] != "paper":
        for i, pair in enumerate(contrasts["pairs"]):
            out += _label_problems(f"contrasts.pairs.{i}", pair, entries, runnable=True)
    table1_datasets = [n for n, d in specs.items() if d["role"] == "eval" and not d.get("alias_of")]
    out += [unknown_name(f"contrasts.ceiling.{name}", name, table1_datasets, "a Table 1 dataset of this config")
            for name in contrasts["ceiling"] if name not in table1_datasets]
    return out


def _figure1_problems(figure1: Mapping[str, Any] | None, entries: Mapping[str, Any],
                      specs: Mapping[str, Any]) -> list[str]:
    """Figure 1's example is a scoring run (a trained one with its seed) on an eval dataset."""
    if not figure1:
        return []
    missing = [k for k in ("variant", "dataset") if k not in figure1]
    if missing:
        return [f"figure1: needs {missing} (a scoring run and an eval dataset of this config)"]
    runs = [name if not v.get("student") else f"{name}/seed{s}"
            for name, v in entries.items() if not v.get("skip")
            for s in (v["student"]["seeds"] if v.get("student") else [None])]
    evals = [n for n, d in specs.items() if d["role"] == "eval"]
    out = []
    if figure1["variant"] not in runs:
        out.append(unknown_name("figure1.variant", figure1["variant"], runs,
                                "a scoring run of this config (a trained variant's run carries its seed)"))
    if figure1["dataset"] not in evals:
        out.append(unknown_name("figure1.dataset", figure1["dataset"], evals, "an eval dataset of this config"))
    return out


def _reuse_problems(entries: Mapping[str, Any]) -> list[str]:
    """CapCal recalibrates the stored probabilities of a runnable, untrained, uncalibrated variant."""
    out = []
    for name, v in entries.items():
        source = v.get("reuse_scores_of")
        if v["calibration"] != "capcal" or v.get("skip") or source is None:
            continue
        where = f"variants.{name}.reuse_scores_of"
        entry = entries.get(source)
        if entry is None:
            out.append(unknown_name(where, source, entries, "a variant of this config"))
        elif entry.get("skip") or entry.get("student") or entry["calibration"] != "none":
            out.append(f"{where}: {source!r} must be a runnable, untrained, uncalibrated variant (it is "
                       f"{'skipped' if entry.get('skip') else 'trained' if entry.get('student') else 'calibrated'})")
    return out


def cross_ref_problems(config: Mapping[str, Any], given: Mapping[str, Any]) -> list[str]:
    """The names of the validated ``config`` (defaults filled) that point at nothing (``given``: the
    config as written, which says whether a default was chosen)."""
    variants, datasets = config["variants"], config["datasets"]
    out = _contrasts_problems(config["contrasts"], contrasts_base(config, given), variants, datasets)
    rows = config["discordance"].get("rows")
    if rows:
        out += _label_problems("discordance.rows", rows, variants, runnable=False)
    out += _figure1_problems(config.get("figure1"), variants, datasets)
    out += _reuse_problems(variants)
    return out


__all__ = ["contrasts_base", "cross_ref_problems", "unknown_name"]
