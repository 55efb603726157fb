"""The deterministic grader: one model answer against one task's expected answer.

Steps, in order:

1. Code fences are removed (their content is kept).
2. If the text holds a JSON object, the last one that parses is used: its ``answer``
   value (or ``final_answer`` / ``result``; or its only value) becomes the answer text.
3. Otherwise, the text after the last ``answer:`` / ``answer is`` / ``final answer``
   label, when there is one; else the whole text.
4. ``number`` tasks: currency signs, thousands separators and trailing units are
   ignored; the LAST number of the answer text is compared numerically
   (|x - expected| <= 1e-9).
   ``list`` tasks (orderings of named options): the option names are read in order
   of first appearance from the last line that names every option (else from the
   whole answer text), case-insensitively; all must be present, in the expected order.

Known limits: a stray number after the real answer is read instead of it ("57
apples, not 3" reads 3); numbers written as words are not read; an answer that
names every option in prose in the right order passes.
"""

from __future__ import annotations

import json
import re
from typing import Any, Mapping

from presdep.contracts.errors import InvalidInput

_FENCE = re.compile(r"```[A-Za-z0-9_+-]*[ \t]*\n?(.*?)```", re.S)
_LABEL = re.compile(r"(?:final\s+answer|answer)\s*(?:is|:|=)\s*", re.I)
# A number: thousands groups or plain digits, optional decimals; not glued to letters/digits before it.
_NUMBER = re.compile(r"(?<![\w.])-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")
_ANSWER_KEYS = ("answer", "final_answer", "result")


def strip_fences(text: str) -> str:
    return _FENCE.sub(lambda m: m.group(1), text)


def _json_objects(text: str) -> list[Any]:
    """Every JSON object that parses from some '{' of the text, in order of where it starts."""
    dec = json.JSONDecoder()
    found = []
    for m in re.finditer(r"\{", text):
        try:
            obj, _ = dec.raw_decode(text, m.start())
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict):
            found.append((m.start(), obj))
    return [obj for _, obj in found]


def _from_json(obj: Mapping[str, Any]) -> str | None:
    for key in _ANSWER_KEYS:
        for k, v in obj.items():
            if k.lower() == key:
                return _as_text(v)
    if len(obj) == 1:
        return _as_text(next(iter(obj.values())))
    return None


def _as_text(v: Any) -> str:
    if isinstance(v, list):
        return ", ".join(_as_text(x) for x in v)
    return v if isinstance(v, str) else json.dumps(v)


def answer_text(response: str) -> str:
    """The part of a response that holds the answer (steps 1-3 above)."""
    text = strip_fences(response or "")
    objs = _json_objects(text)
    # The object that starts last and names an answer wins (a corrected answer follows the first).
    for obj in reversed(objs):
        got = _from_json(obj)
        if got is not None:
            return got
    labels = list(_LABEL.finditer(text))
    if labels:
        return text[labels[-1].end():]
    return text


def parse_number(text: str) -> float | None:
    """The last number in ``text``; currency, thousands separators and units ignored."""
    found = _NUMBER.findall(text.replace("\u2212", "-"))
    if not found:
        return None
    return float(found[-1].replace(",", ""))


def parse_order(text: str, options: list[str]) -> list[str]:
    """Options in order of first appearance (case-insensitive, whole words)."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    pats = {o: re.compile(rf"\b{re.escape(o)}\b", re.I) for o in options}
    full = [ln for ln in lines if all(p.search(ln) for p in pats.values())]
    where = full[-1] if full else text
    pos = {o: m.start() for o, p in pats.items() if (m := p.search(where))}
    return sorted(pos, key=pos.get)


def score_answer(task: Mapping[str, Any], response: str | None) -> int:
    """1 if ``response`` answers ``task`` correctly, else 0."""
    if response is None or not str(response).strip():
        return 0
    text = answer_text(str(response))
    kind = task["answer_type"]
    if kind == "number":
        got = parse_number(text)
        return int(got is not None and abs(got - float(task["answer"])) <= 1e-9)
    if kind == "list":
        expected = [x.strip() for x in task["answer"].split(",")]
        return int(parse_order(text, list(task["options"])) == expected)
    raise InvalidInput(f"task {task.get('id')!r}: unknown answer_type {kind!r}; expected 'number' or 'list'")
