"""The jina-reranker-v3 stand-in of the wrapper's unit tests lives in the package, as one copy:
presdep/rehearsal/jina_standin_modeling.py (a stand-in for the model's own remote code, not
that code). tiny_jina_stub in scorers_tiny.py copies that file into a model directory as
``modeling.py``; this module keeps the old import name working."""

from presdep.rehearsal.jina_standin_modeling import StandInJinaForRanking

StubJinaForRanking = StandInJinaForRanking

__all__ = ["StandInJinaForRanking", "StubJinaForRanking"]
