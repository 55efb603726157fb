"""The versioned grading prompt and the token-level answer skeleton.

The exact prompt text is part of the method: it lives in one package file
(``presdep/templates/<name>.txt``) and its sha256 goes into every output's
metadata. The skeleton ``[i] Grade: 0`` is built from token ids, so every read
position (the token just before a dummy grade) is exact by construction.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any, Mapping, Sequence

DEFAULT_TEMPLATE = "grade_prompt_v1"
GRADES = ("0", "1", "2", "3")
DUMMY_GRADE = "0"


def prepare_doc(text: str, max_doc_chars: int | None) -> str:
    """Collapse all whitespace runs to one space, strip, cut to ``max_doc_chars``."""
    out = " ".join(str(text).split())
    return out[:max_doc_chars] if max_doc_chars is not None else out


@dataclass(frozen=True)
class PromptTemplate:
    name: str
    text: str
    sha256: str

    def render(self, query: str, docs: Sequence[str], max_doc_chars: int | None = None) -> str:
        """The user message: instruction, query and the ``[i]``-tagged documents."""
        lines = []
        for i, d in enumerate(docs, start=1):
            body = prepare_doc(d, max_doc_chars)
            lines.append(f"[{i}] {body}" if body else f"[{i}]")
        return self.text.format(query=prepare_doc(query, None), documents="\n".join(lines), n=len(docs))


@lru_cache(maxsize=None)
def load_template(name: str = DEFAULT_TEMPLATE) -> PromptTemplate:
    try:
        data = resources.files("presdep").joinpath("templates", f"{name}.txt").read_bytes()
    except FileNotFoundError:
        raise FileNotFoundError(f"prompt template {name!r} not found in presdep/templates/") from None
    return PromptTemplate(name=name, text=data.decode("utf-8"), sha256=hashlib.sha256(data).hexdigest())


class GradeTokenError(ValueError):
    """The tokenizer cannot represent the grades 0..3 as four distinct single tokens."""


def grade_token_ids(tokenizer: Any) -> tuple[int, int, int, int]:
    """Token ids of "0".."3"; refuse a tokenizer where they are not single, distinct tokens."""
    ids = []
    for g in GRADES:
        toks = tokenizer.encode(g, add_special_tokens=False)
        if len(toks) != 1:
            raise GradeTokenError(
                f"grade string {g!r} is {len(toks)} tokens {toks} in tokenizer "
                f"{getattr(tokenizer, 'name_or_path', type(tokenizer).__name__)!r}; the one-pass "
                "readout needs each of '0','1','2','3' to be exactly one token"
            )
        ids.append(int(toks[0]))
    if len(set(ids)) != 4:
        raise GradeTokenError(f"grade tokens are not distinct: {dict(zip(GRADES, ids))}")
    return tuple(ids)  # type: ignore[return-value]


@dataclass
class PromptIds:
    """Token ids of prompt + skeleton, and the read position of each slot."""

    ids: list[int]
    read_positions: list[int]
    n_prompt_tokens: int = 0
    meta: dict = field(default_factory=dict)


class SkeletonBuilder:
    """Builds ``chat(user message) + [1] Grade: 0\\n[2] Grade: 0 ...`` from token ids."""

    def __init__(
        self,
        tokenizer: Any,
        template: PromptTemplate | None = None,
        max_doc_chars: int | None = None,
        chat_template_kwargs: Mapping[str, Any] | None = None,
    ):
        if getattr(tokenizer, "chat_template", None) is None:
            raise ValueError(
                f"tokenizer {getattr(tokenizer, 'name_or_path', '?')!r} has no chat template; "
                "the readout applies the model's chat template to the grading instruction"
            )
        self.tokenizer = tokenizer
        self.template = template or load_template()
        self.max_doc_chars = max_doc_chars
        # Qwen3-style templates read enable_thinking; others ignore unknown kwargs.
        self.chat_template_kwargs = {"enable_thinking": False, **dict(chat_template_kwargs or {})}
        self.grade_ids = grade_token_ids(tokenizer)
        self._newline = self._encode("\n")
        self._prefix_cache: dict[int, list[int]] = {}

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def line_prefix(self, i: int) -> list[int]:
        # The space before the grade belongs to the prefix: " 0" is two tokens in
        # SmolLM2, and the grade itself must be one token.
        if i not in self._prefix_cache:
            self._prefix_cache[i] = self._encode(f"[{i}] Grade: ")
        return self._prefix_cache[i]

    def prompt_ids(self, query: str, docs: Sequence[str]) -> list[int]:
        user = self.template.render(query, docs, self.max_doc_chars)
        text = self.tokenizer.apply_chat_template(
            [{"role": "user", "content": user}],
            tokenize=False,
            add_generation_prompt=True,
            **self.chat_template_kwargs,
        )
        # The chat template already wrote any BOS; do not add special tokens twice.
        return self._encode(text)

    def skeleton(self, n_slots: int) -> tuple[list[int], list[int]]:
        """Skeleton ids and read positions relative to the skeleton start."""
        ids: list[int] = []
        reads: list[int] = []
        for i in range(1, n_slots + 1):
            if i > 1:
                ids += self._newline
            ids += self.line_prefix(i)
            reads.append(len(ids) - 1)  # the token before the dummy grade predicts it
            ids.append(self.grade_ids[0])
        return ids, reads

    def build(self, query: str, docs: Sequence[str]) -> PromptIds:
        if not docs:
            raise ValueError("a prompt needs at least one document")
        head = self.prompt_ids(query, docs)
        skel, reads = self.skeleton(len(docs))
        off = len(head)
        return PromptIds(ids=head + skel, read_positions=[off + r for r in reads], n_prompt_tokens=off)
