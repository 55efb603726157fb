"""jina-reranker-v3: the listwise reference reranker, through its own published code.

The model card's interface: ``AutoModel.from_pretrained(id, trust_remote_code=True,
revision=...)`` returns a ranking model whose ``rerank(query, documents)`` returns one
dict per document with its ``index`` (into ``documents``) and ``relevance_score``. The
query and all documents share one causal context, so the scores may depend on the
presented order: exactly what the protocol measures. The model's code runs as
published; the revision must be pinned (remote code at a moving revision is not a method).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from presdep.config.records import PromptSettings, ScoringRun
from presdep.contracts.errors import InvalidInput
from presdep.contracts.readouts import GradeReadout
from presdep.runtime.models import describe_model
from presdep.scoring.hf_load import load_hf


class JinaListwiseScorer:
    name = "jina_listwise"
    template_sha256 = None

    def __init__(self, model: Any, *, max_doc_chars: int | None = None, model_desc: Mapping[str, Any] | None = None):
        if not callable(getattr(model, "rerank", None)):
            raise TypeError(f"{type(model).__name__} has no rerank(query, documents): expected jina-reranker-v3's "
                            "published model code (trust_remote_code)")
        self.model = model
        self.max_doc_chars = max_doc_chars
        self.model_desc = dict(model_desc or {"class": type(model).__name__})

    def describe(self) -> dict:
        return {"scorer": self.name, "model": self.model_desc, "call": "model.rerank(query, documents)"}

    def score(self, query: str, docs: Sequence[str]) -> list[GradeReadout]:
        results = self.model.rerank(query, list(docs))
        scores: list[float | None] = [None] * len(docs)
        for r in results:
            try:
                i, s = int(r["index"]), float(r["relevance_score"])
            except (KeyError, TypeError, ValueError) as exc:
                raise InvalidInput(f"jina rerank returned {r!r}; expected a dict with 'index' and 'relevance_score'") from exc
            if not 0 <= i < len(docs) or scores[i] is not None:
                raise InvalidInput(f"jina rerank returned index {i} twice or outside 0..{len(docs) - 1}")
            scores[i] = s
        missing = [i for i, s in enumerate(scores) if s is None]
        if missing:
            raise InvalidInput(f"jina rerank returned no score for document(s) {missing} of {len(docs)}")
        return [GradeReadout(float(s), None) for s in scores]

    def score_prompts(self, prompts: Sequence[tuple[str, Sequence[str]]]) -> list[list[GradeReadout]]:
        return [self.score(q, d) for q, d in prompts]


def make_jina_listwise(run: ScoringRun, prompt: PromptSettings) -> JinaListwiseScorer:
    spec = run.model_entry()
    if not spec.get("trust_remote_code"):
        raise InvalidInput("jina_listwise runs the model's published code: set trust_remote_code: true on its "
                         f"models entry (and pin revision): {dict(spec)}")
    if spec.get("source") == "hf" and not spec.get("path") and not spec.get("revision"):
        raise InvalidInput(f"jina_listwise: pin the model's revision (remote code at a moving revision): {dict(spec)}")
    model, _ = load_hf(spec, "AutoModel", trust_remote_code=True)
    return JinaListwiseScorer(model, max_doc_chars=prompt.max_doc_chars, model_desc=describe_model(spec))


__all__ = ["JinaListwiseScorer", "make_jina_listwise"]
