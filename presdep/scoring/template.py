"""The versioned grading prompts and the token-level answer skeleton.

The exact prompt text is part of the method: each rubric (relevance, answer
support, response quality) is one package file (``presdep/scoring/templates/<name>.yaml``)
or a user's own file, and its sha256 goes into every output's metadata. The skeleton ``[i] Grade: 0`` is built from token ids, so every read
position (the token just before a dummy grade) is exact by construction.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Mapping, Sequence

from presdep.config.yaml_io import parse_yaml
from presdep.contracts.errors import InvalidInput, PresdepError
from presdep.contracts.readouts import SlotRequest
from presdep.contracts.render_variants import SCALES, Scale, scale_named
from presdep.runtime.text_files import decode_utf8

DEFAULT_TEMPLATE = "relevance_v2"
GRADES = ("0", "1", "2", "3")
DUMMY_GRADE = "0"
_RUBRIC_KEYS = ("name", "version", "default_instruction", "system", "query_label", "items_label",
                "task", "grade_intro", "grades", "output_form")
# The output form's "[1] to [{n}]" names the first and last label shown (a relabelled prompt's are
# not 1 and n); with numeric labels it renders to the same text.
_LABEL_RANGE = "[1] to [{n}]"


def _join_documents(lines: Sequence[str], separator: str) -> str:
    """The documents' block: one ``[label] text`` line each, set apart as ``separator`` says
    (presdep.contracts.render_variants.SEPARATORS; newline is the canonical prompt)."""
    if separator == "newline":
        return "\n".join(lines)
    if separator == "dash":
        return "\n---\n".join(lines)
    if separator == "hash":
        return "\n###\n".join(lines)
    if separator == "xml":
        return "\n".join(f"<document>{line}</document>" for line in lines)
    if separator == "passage":
        return "\n".join(f"Passage {k}:\n{line}" for k, line in enumerate(lines, 1))
    raise InvalidInput(f"unknown separator {separator!r}")


def prepare_doc(text: str, max_doc_chars: int | None) -> str:
    """Collapse all whitespace runs to one space, strip, cut to ``max_doc_chars``."""
    out = " ".join(str(text).split())
    return out[:max_doc_chars] if max_doc_chars is not None else out


@dataclass(frozen=True)
class PromptTemplate:
    """A grading prompt: an optional system message and a user-message format string
    with the fields {instruction}, {query}, {documents} and {n}."""

    name: str
    user: str
    sha256: str
    system: str | None = None
    default_instruction: str | None = None
    scale: str = "0-3"  # a name of presdep.contracts.render_variants.SCALES

    @property
    def grade_scale(self) -> Scale:
        return SCALES[self.scale]

    def render(self, query: str, docs: Sequence[str], max_doc_chars: int | None = None,
               instruction: str | None = None, labels: Sequence[int | str] | None = None,
               separator: str = "newline", label_range: tuple[str, str] | None = None) -> str:
        """The user message: instruction, query and the ``[i]``-tagged documents (``labels``, default
        1..len(docs), are the tags they show: a slot request's need not start at 1), set apart by
        ``separator``; ``label_range`` is the first and last label the output form names (1 and n)."""
        lines = []
        for i, d in zip(labels or range(1, len(docs) + 1), docs, strict=True):
            body = prepare_doc(d, max_doc_chars)
            lines.append(f"[{i}] {body}" if body else f"[{i}]")
        instr = instruction if instruction is not None else self.default_instruction
        return self.format_user(query, _join_documents(lines, separator), len(docs), instr, label_range)

    def format_user(self, query: str, documents: str, n: int, instruction: str | None,
                    label_range: tuple[str, str] | None = None) -> str:
        """The user message around a documents block already written (``n`` documents in it)."""
        first, last = label_range or ("1", str(n))
        return self.user.format(query=prepare_doc(query, None), documents=documents, n=n, first=first, last=last,
                                instruction=prepare_doc(instruction or "", None))

    def messages(self, query: str, docs: Sequence[str], max_doc_chars: int | None = None,
                 instruction: str | None = None, labels: Sequence[int | str] | None = None,
                 separator: str = "newline", label_range: tuple[str, str] | None = None) -> list[dict]:
        """Chat messages: the system message (when the template has one), then the user message."""
        user = {"role": "user", "content": self.render(query, docs, max_doc_chars, instruction, labels, separator,
                                                       label_range)}
        return ([{"role": "system", "content": self.system}] if self.system else []) + [user]


def _literal(text: str) -> str:
    return " ".join(str(text).split()).replace("{", "{{").replace("}", "}}")


def _grade_lines(grades: Any, scale: Scale, where: str) -> list[tuple[str, str]]:
    """(grade, meaning) lines, highest first. The 0-3 scale describes each grade; another scale
    describes some of its grades, its lowest and highest among them."""
    if scale.name == "0-3":
        if not isinstance(grades, dict) or sorted(str(g) for g in grades) != list(scale.tokens):
            raise InvalidInput(f"{where}: 'grades' must describe exactly the grades 3, 2, 1 and 0; got {grades!r}")
    elif (not isinstance(grades, dict) or not {str(g) for g in grades} <= set(scale.tokens)
          or not {scale.tokens[0], scale.tokens[-1]} <= {str(g) for g in grades}):
        raise InvalidInput(f"{where}: 'grades' must describe grades of the scale {scale.name} {list(scale.tokens)}, "
                           f"its lowest and highest among them; got {grades!r}")
    text = {str(g): v for g, v in grades.items()}
    return [(g, text[g]) for g in reversed(scale.tokens) if g in text]


def _rubric_user(spec: dict, where: str) -> str:
    """The user-message format string of a rubric, in the order docs/methods/readout.md gives."""
    scale = scale_named(spec.get("scale"), where)
    lines = _grade_lines(spec["grades"], scale, where)
    output_form = _literal(spec["output_form"]).replace("{{n}}", "{n}").replace(_LABEL_RANGE, "[{first}] to [{last}]")
    return "\n".join([
        "Instruction: {instruction}",
        f"{_literal(spec['query_label'])}: {{query}}",
        "",
        f"{_literal(spec['items_label'])}:",
        "{documents}",
        "",
        _literal(spec["task"]),
        _literal(spec["grade_intro"]),
        *(f"{g} = {_literal(meaning)}" for g, meaning in lines),
        output_form,
    ])


def _parse(name: str, data: bytes, where: str) -> PromptTemplate:
    # The digest is of the text without a byte-order mark: the same template saved by a
    # Windows editor is the same template (and keeps its cache identity).
    text = decode_utf8(data, where)
    sha = hashlib.sha256(text.encode("utf-8")).hexdigest()
    if where.endswith(".txt"):
        # A plain user-message template (no system message, no instruction line).
        return PromptTemplate(name=name, user=text, sha256=sha)
    spec = parse_yaml(text, where)
    if not isinstance(spec, dict):
        raise InvalidInput(f"{where}: a rubric template is a YAML mapping with keys {list(_RUBRIC_KEYS)}")
    missing = [k for k in _RUBRIC_KEYS if k not in spec]
    if missing:
        raise InvalidInput(f"{where}: rubric template lacks key(s) {missing}; expected {list(_RUBRIC_KEYS)}")
    return PromptTemplate(name=f"{spec['name']}_v{spec['version']}", user=_rubric_user(spec, where), sha256=sha,
                          system=" ".join(str(spec["system"]).split()),
                          default_instruction=" ".join(str(spec["default_instruction"]).split()),
                          scale=scale_named(spec.get("scale"), where).name)


@lru_cache(maxsize=None)
def load_template(name: str = DEFAULT_TEMPLATE) -> PromptTemplate:
    """A template shipped in ``presdep/scoring/templates/`` (by name, e.g. ``relevance_v2``) or a
    user's own file (a path ending in .yaml, .yml or .txt)."""
    if name.endswith((".yaml", ".yml", ".txt")):
        path = Path(name)
        if not path.is_file():
            raise FileNotFoundError(f"prompt template file {name!r} not found")
        return _parse(path.stem, path.read_bytes(), str(path))
    folder = resources.files("presdep.scoring").joinpath("templates")
    for ext in (".yaml", ".txt"):
        f = folder.joinpath(name + ext)
        if f.is_file():
            return _parse(name, f.read_bytes(), name + ext)
    raise FileNotFoundError(f"prompt template {name!r} not found in presdep/scoring/templates/ (give a name there or "
                            "a path to a .yaml rubric)")


class GradeTokenError(PresdepError, ValueError):
    """The tokenizer cannot represent a scale's grades as distinct single tokens."""


def grade_token_ids(tokenizer: Any, grades: Sequence[str] = GRADES) -> tuple[int, ...]:
    """Token ids of the grades ("0".."3" by default); refuse a tokenizer where they are not single,
    distinct tokens. A word grade (the four-word scale) is read at its first token."""
    ids = []
    for g in grades:
        toks = tokenizer.encode(g, add_special_tokens=False)
        if g.isalpha() and toks:
            toks = toks[:1]
        if len(toks) != 1:
            raise GradeTokenError(
                f"grade string {g!r} is {len(toks)} tokens {toks} in tokenizer "
                f"{getattr(tokenizer, 'name_or_path', type(tokenizer).__name__)!r}; the one-pass "
                f"readout needs each of {list(grades)} to be exactly one token"
            )
        ids.append(int(toks[0]))
    if len(set(ids)) != len(ids):
        raise GradeTokenError(f"grade tokens are not distinct: {dict(zip(grades, ids))}")
    return tuple(ids)


@dataclass
class PromptIds:
    """Token ids of prompt + skeleton, and the read position of each slot."""

    ids: list[int]
    read_positions: list[int]
    n_prompt_tokens: int = 0
    meta: dict = field(default_factory=dict)
    # The grade tokens read, where a render's scale is not the scorer's own (None: the scorer's).
    grade_ids: tuple[int, ...] | None = None


class SkeletonBuilder:
    """Builds ``chat(system, user message) + [1] Grade: 0\\n[2] Grade: 0 ...`` from token ids."""

    def __init__(
        self,
        tokenizer: Any,
        template: PromptTemplate | None = None,
        max_doc_chars: int | None = None,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        instruction: str | None = None,
    ):
        if getattr(tokenizer, "chat_template", None) is None:
            raise InvalidInput(
                f"tokenizer {getattr(tokenizer, 'name_or_path', '?')!r} has no chat template; "
                "the readout applies the model's chat template to the grading instruction"
            )
        self.tokenizer = tokenizer
        self.template = template or load_template()
        if self.template.scale != "0-3":
            raise InvalidInput(f"rubric {self.template.name!r} declares the scale {self.template.scale}: a scorer's own "
                               "rubric reads the grades 0-3 (another scale is a render perturbation's variant)")
        self.max_doc_chars = max_doc_chars
        # None: the rubric's default instruction (the dataset's instruction overrides it, a paraphrase too).
        self.explicit_instruction = instruction
        self.instruction = instruction if instruction is not None else self.template.default_instruction
        # Qwen3-style templates read enable_thinking; others ignore unknown kwargs.
        self.chat_template_kwargs = {"enable_thinking": False, **dict(chat_template_kwargs or {})}
        self.grade_ids = grade_token_ids(tokenizer)
        self._newline = self._encode("\n")
        self._prefix_cache: dict[str, list[int]] = {}
        self._scale_ids: dict[str, tuple[tuple[int, ...], list[int]]] = {}

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def line_prefix(self, i: int | str) -> list[int]:
        # The space before the grade belongs to the prefix: " 0" is two tokens in
        # SmolLM2, and the grade itself must be one token.
        key = str(i)
        if key not in self._prefix_cache:
            self._prefix_cache[key] = self._encode(f"[{key}] Grade: ")
        return self._prefix_cache[key]

    def scale_ids(self, scale: Scale) -> tuple[tuple[int, ...], list[int]]:
        """(grade token ids, placeholder ids) of a scale in this tokenizer."""
        if scale.name not in self._scale_ids:
            self._scale_ids[scale.name] = (grade_token_ids(self.tokenizer, scale.tokens), self._encode(scale.placeholder))
        return self._scale_ids[scale.name]

    def prompt_ids(self, query: str, docs: Sequence[str], labels: Sequence[int | str] | None = None,
                   template: PromptTemplate | None = None, separator: str = "newline",
                   label_range: tuple[str, str] | None = None) -> list[int]:
        template = template or self.template
        instruction = self.explicit_instruction if self.explicit_instruction is not None else template.default_instruction
        text = self.tokenizer.apply_chat_template(
            template.messages(query, docs, self.max_doc_chars, instruction, labels, separator, label_range),
            tokenize=False,
            add_generation_prompt=True,
            **self.chat_template_kwargs,
        )
        # The chat template already wrote any BOS; do not add special tokens twice.
        return self._encode(text)

    def skeleton(self, n_slots: int, line_labels: Sequence[str] | None = None,
                 placeholder: Sequence[int] | None = None) -> tuple[list[int], list[int]]:
        """Skeleton ids and read positions relative to the skeleton start: line i is
        ``[label] Grade: <placeholder>`` (labels 1..n and the grade 0 unless given)."""
        ids: list[int] = []
        reads: list[int] = []
        fill = list(placeholder) if placeholder is not None else [self.grade_ids[0]]
        for i in range(1, n_slots + 1):
            if i > 1:
                ids += self._newline
            ids += self.line_prefix(line_labels[i - 1] if line_labels is not None else i)
            reads.append(len(ids) - 1)  # the token before the placeholder grade predicts the grade
            ids += fill
        return ids, reads

    def build(self, query: str, docs: Sequence[str]) -> PromptIds:
        if not docs:
            raise InvalidInput("a prompt needs at least one document")
        head = self.prompt_ids(query, docs)
        skel, reads = self.skeleton(len(docs))
        off = len(head)
        return PromptIds(ids=head + skel, read_positions=[off + r for r in reads], n_prompt_tokens=off)

    def build_request(self, prompt: "SlotRequest | tuple[str, Sequence[str]]") -> PromptIds:
        """An ordinary ``(query, docs)`` prompt, or a :class:`SlotRequest`: its documents under their
        labels (the rubric's item count is the documents shown, as in an ordinary prompt), its
        skeleton lines, read at the lines it names only, on the surface its render gives."""
        if not isinstance(prompt, SlotRequest):
            return self.build(*prompt)
        render = prompt.render
        if render is None:
            head = self.prompt_ids(prompt.query, prompt.docs, prompt.labels)
            skel, reads = self.skeleton(prompt.lines)
            grade_ids = None
        else:
            template = load_template(render.template) if render.template else self.template
            names = render.line_labels or tuple(str(i) for i in range(1, prompt.lines + 1))
            head = self.prompt_ids(prompt.query, prompt.docs, [names[x - 1] for x in prompt.labels], template,
                                   render.separator, render.label_range)
            own = template.scale == self.template.scale
            grade_ids, placeholder = (None, None) if own else self.scale_ids(template.grade_scale)
            skel, reads = self.skeleton(prompt.lines, names, placeholder)
        off = len(head)
        return PromptIds(ids=head + skel, read_positions=[off + reads[line - 1] for line in prompt.read],
                         n_prompt_tokens=off, grade_ids=grade_ids)


def request_scale(prompt: Any, template: PromptTemplate) -> Scale:
    """The scale a request is read on: its render's rubric's, else the scorer's ``template``'s."""
    render = getattr(prompt, "render", None)
    if render is not None and render.template:
        return load_template(render.template).grade_scale
    return template.grade_scale
