"""Building a scorer from its registered name or spec (never guessed from a model name)."""

from __future__ import annotations

import importlib
import inspect
from typing import Any, Callable, Mapping

from presdep.config.records import PromptSettings, ScoringRun
from presdep.config.scorer_specs import is_spec
from presdep.config.scorers import scorer_entry
from presdep.contracts.errors import InvalidInput
from presdep.contracts.readouts import Scorer
from presdep.scoring.identified import IdentifiedScorer


def make_scorer(run: ScoringRun, prompt: PromptSettings) -> Scorer:
    """Build the scorer that ``run.scorer`` names: its factory gets ``(run, prompt)`` and, as
    keyword arguments, the variant's ``options`` it accepts (:func:`option_keywords`).

    A scorer named by a spec, or given options, is wrapped so that its ``describe()`` (and a
    read cache's identity) names the spec, its file's sha256 and the options."""
    entry = scorer_entry(run.scorer)
    if run.adapter and not entry.capabilities.adapter:
        raise InvalidInput(f"variant {run.name!r}: scorer {entry.name!r} lacks capability 'adapter'")
    factory = entry.loaded or _registered_factory(entry.factory)
    options = run.options
    scorer = factory(run, prompt, **option_keywords(factory, options))
    if is_spec(run.scorer) or options:
        return IdentifiedScorer(scorer, {**entry.identity, "options": options})
    return scorer


def option_keywords(factory: Callable[..., Any], options: Mapping[str, Any]) -> dict[str, Any]:
    """The options a factory takes as keyword arguments: all of them when it has ``**kwargs``, else
    those named by its parameters after ``(run, prompt)``; the rest reach it as ``run.setting(key)``."""
    if not options:
        return {}
    try:
        params = list(inspect.signature(factory).parameters.values())
    except (TypeError, ValueError):  # no signature to read (a builtin): options via run.setting only
        return {}
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return dict(options)
    named = {p.name for p in params[2:] if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                       inspect.Parameter.KEYWORD_ONLY)}
    return {k: v for k, v in options.items() if k in named}


def _registered_factory(path: str) -> Callable[..., Any]:
    module, func = path.split(":")
    return getattr(importlib.import_module(module), func)
