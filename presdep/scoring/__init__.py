"""Scorers: one interface, several families, a registry of capability records.

A scorer is any object with a ``name`` and
``score(query, docs) -> list[GradeReadout]`` (one readout per document, in input
order) plus a batched ``score_prompts([(query, docs), ...])``. Presentations,
the first-stage pass, chunking and resumable output are written once around it
(:mod:`presdep.scoring.run`), and every scorer that reads grade probabilities reads through
the run's read cache (:mod:`presdep.scoring.read_through`); CapCal recalibrates a stored run's probabilities
(:mod:`presdep.scoring.capcal`); BSC's averages are views (:mod:`presdep.contracts.views`).

Each registered name carries a :class:`Capabilities` record, so a variant asking
for something its scorer cannot do (an adapter, probabilities for CapCal, a batched
listwise prompt for BSC) is refused when the config is validated, before any job.
A user's own scorer is found through the ``presdep.scorers`` entry-point group
(package metadata): ``name = "module:factory"``, or named where it lives (``scorer:
"package.module:factory"`` or ``"path/to/file.py:factory"``, no install); the factory may carry a
``capabilities`` attribute (a :class:`Capabilities` or a mapping of its fields).
Heavy backends import lazily.
"""

from presdep.config.scorers import (
    BUILTIN,
    ENTRY_POINT_GROUP,
    REGISTRY,
    Capabilities,
    ScorerEntry,
    registry,
    scorer_entry,
    serves,
    variant_problems,
)
from presdep.contracts.readouts import GradeReadout, PromptScorer, Scorer
from presdep.contracts.tasks import TASKS
from presdep.scoring.factory import make_scorer

__all__ = ["TASKS", "PromptScorer", "GradeReadout", "Scorer", "Capabilities", "ScorerEntry", "BUILTIN", "REGISTRY", "ENTRY_POINT_GROUP",
           "registry", "scorer_entry", "variant_problems", "serves", "make_scorer"]
