"""Building a scorer from its registered name (never guessed from a model name)."""

from __future__ import annotations

import importlib

from presdep.config.records import PromptSettings, ScoringRun
from presdep.config.scorers import scorer_entry
from presdep.contracts.errors import InvalidInput
from presdep.contracts.readouts import Scorer


def make_scorer(run: ScoringRun, prompt: PromptSettings) -> Scorer:
    """Build the scorer that ``run.scorer`` names: its registered factory gets ``(run, prompt)``."""
    entry = scorer_entry(run.scorer)
    if run.adapter and not entry.capabilities.adapter:
        raise InvalidInput(f"variant {run.name!r}: scorer {entry.name!r} lacks capability 'adapter'")
    module, func = entry.factory.split(":")
    return getattr(importlib.import_module(module), func)(run, prompt)
