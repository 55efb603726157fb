"""An example presdep scorer plug-in: a document's score is the number of query words it contains,
plus a fraction in [0, 1) from the hash of its text (ties broken by content, never by position).

presdep finds it by the entry point ``wordcount`` of the ``presdep.scorers`` group; the
factory's ``capabilities`` tell the config check what it can do.
"""

import hashlib

from presdep.scoring import GradeReadout


def _fraction(text):
    return int(hashlib.sha256(text.encode("utf-8")).hexdigest()[:8], 16) / 16**8


class WordCountScorer:
    name = "wordcount"

    def describe(self):
        return {"scorer": self.name, "model": None}

    def score(self, query, docs):
        words = set(query.lower().split())
        return [GradeReadout(sum(w in words for w in d.lower().split()) + _fraction(d), None) for d in docs]

    def score_prompts(self, prompts):
        return [self.score(q, d) for q, d in prompts]


def make_wordcount(run, prompt):
    """The registry calls a factory with the scoring run's record and the dataset's prompt settings."""
    return WordCountScorer()


make_wordcount.capabilities = {"order_invariant": True, "needs_model": False, "tasks": ["rerank", "qa"]}
