"""The ordinary grading prompt cut into segments, for the PINE forward and its isolated control.

The chat-rendered prompt is split around its documents section: the prefix (everything up
to the first document line), one segment per document (its ``[i] text`` line, carrying the
``\\n`` that joins it to the next), the suffix (the rubric lines after the documents and the
assistant header), then the skeleton lines exactly as :class:`~presdep.scoring.template.
SkeletonBuilder` builds them. Each segment is tokenized on its own, so a segment's ids never
depend on its neighbours (with a tokenizer that merges across a boundary the concatenation
may differ from the one-pass prompt's ids; with one token per character it is identical).

The documents section is found by rendering the user message with a marker in its place and
splitting the chat text on it; a chat template that drops or repeats the marker is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from presdep.contracts.errors import InvalidInput
from presdep.scoring.template import SkeletonBuilder, prepare_doc

DOCUMENTS_MARKER = "<<presdep-documents-section>>"


@dataclass(frozen=True)
class SegmentedPrompt:
    """Token ids of one prompt, segment by segment.

    ``lines[i]`` is slot i's skeleton line (the ``\\n`` before it included, as the skeleton
    has it); ``read_offsets[i]`` is the read position inside that line (the token before
    its dummy grade).
    """

    prefix: list[int]
    documents: list[list[int]]
    suffix: list[int]
    lines: list[list[int]]
    read_offsets: list[int]

    def ids(self) -> list[int]:
        """Every segment in reading order: prefix, documents, suffix, skeleton lines."""
        out = list(self.prefix)
        for seg in (*self.documents, self.suffix, *self.lines):
            out += seg
        return out

    def read_positions(self) -> list[int]:
        """The read positions in :meth:`ids` (the ordinary one-pass layout)."""
        at = len(self.prefix) + sum(len(d) for d in self.documents) + len(self.suffix)
        out = []
        for line, off in zip(self.lines, self.read_offsets, strict=True):
            out.append(at + off)
            at += len(line)
        return out


def _document_line(label: int, text: str, max_doc_chars: int | None) -> str:
    body = prepare_doc(text, max_doc_chars)
    return f"[{label}] {body}" if body else f"[{label}]"  # as PromptTemplate.render writes it


def _chat_text(builder: SkeletonBuilder, messages: list[dict]) -> str:
    return builder.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                                 **builder.chat_template_kwargs)


def _around_documents(builder: SkeletonBuilder, query: str, docs: Sequence[str]) -> tuple[str, str]:
    """(chat text before the documents section, chat text after it)."""
    tpl = builder.template
    user = tpl.format_user(query, DOCUMENTS_MARKER, len(docs), builder.instruction or "")
    section = "\n".join(_document_line(i, d, builder.max_doc_chars) for i, d in enumerate(docs, start=1))
    # The marker stands exactly where render() writes the documents, or the cut would drift.
    if user.count(DOCUMENTS_MARKER) != 1 or user.replace(DOCUMENTS_MARKER, section) != tpl.render(
            query, docs, builder.max_doc_chars, builder.instruction):
        raise InvalidInput(f"template {tpl.name!r}: its user message does not hold the documents section once, "
                           "where a segmented prompt must cut it")
    system = [{"role": "system", "content": tpl.system}] if tpl.system else []
    text = _chat_text(builder, system + [{"role": "user", "content": user}])
    if text.count(DOCUMENTS_MARKER) != 1:
        name = getattr(builder.tokenizer, "name_or_path", type(builder.tokenizer).__name__)
        raise InvalidInput(f"the chat template of tokenizer {name!r} does not keep the user message's documents "
                           f"section verbatim (its marker {DOCUMENTS_MARKER!r} appears {text.count(DOCUMENTS_MARKER)} "
                           "times in the rendered chat), so the prompt cannot be cut into segments")
    before, after = text.split(DOCUMENTS_MARKER)
    return before, after


def _encode(builder: SkeletonBuilder, text: str) -> list[int]:
    return list(builder.tokenizer.encode(text, add_special_tokens=False))


def segment_prompt(builder: SkeletonBuilder, query: str, docs: Sequence[str]) -> SegmentedPrompt:
    """The ordinary prompt (labels ``[1]..[n]``, skeleton ``[i] Grade: 0`` lines) in segments."""
    if not docs:
        raise InvalidInput("a prompt needs at least one document")
    before, after = _around_documents(builder, query, docs)
    n = len(docs)
    texts = [_document_line(i, d, builder.max_doc_chars) + ("\n" if i < n else "")
             for i, d in enumerate(docs, start=1)]
    newline = _encode(builder, "\n")
    lines, offsets = [], []
    for i in range(1, n + 1):
        line = (newline if i > 1 else []) + builder.line_prefix(i)
        offsets.append(len(line) - 1)  # the token before the dummy grade predicts it
        lines.append(line + [builder.grade_ids[0]])
    return SegmentedPrompt(prefix=_encode(builder, before), documents=[_encode(builder, t) for t in texts],
                           suffix=_encode(builder, after), lines=lines, read_offsets=offsets)


def isolated_prompt(builder: SkeletonBuilder, query: str, docs: Sequence[str]) -> SegmentedPrompt:
    """The prompt of the isolated control: no segment depends on the slot it serves.

    Every document is shown under the label ``[1]`` and ends with a ``\\n`` (the last one's
    is taken from the start of the suffix when the suffix begins with one, else added), and every
    skeleton line reads ``[1] Grade: 0`` with no ``\\n`` before it (each stands where the
    first line of the ordinary skeleton stands).
    """
    if not docs:
        raise InvalidInput("a prompt needs at least one document")
    before, after = _around_documents(builder, query, docs)
    line = builder.line_prefix(1)
    return SegmentedPrompt(
        prefix=_encode(builder, before),
        documents=[_encode(builder, _document_line(1, d, builder.max_doc_chars) + "\n") for d in docs],
        suffix=_encode(builder, after[1:] if after.startswith("\n") else after),
        lines=[line + [builder.grade_ids[0]] for _ in docs],
        read_offsets=[len(line) - 1] * len(docs),
    )


__all__ = ["DOCUMENTS_MARKER", "SegmentedPrompt", "isolated_prompt", "segment_prompt"]
