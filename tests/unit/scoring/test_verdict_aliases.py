"""Verdict normalisation (METHODS.md v5) against the rule written out here a second time, word by
word: runs of ``_`` and ``-`` -> a space, upper-case, every other non-letter -> a space, spaces
collapsed; the whole reply an alias -> its class; else the classes of every alias found as whole
words: exactly one -> that class, none or several -> INVALID."""

from __future__ import annotations

import pytest

from presdep.scoring.verdict_reader import normalize_verdict, normalized_reply

# The v5 alias lists, copied from the text (not from the code under test).
ALIASES = {
    "SUPPORT": "SUPPORTED", "SUPPORTED": "SUPPORTED", "SUPPORTS": "SUPPORTED", "ENTAILMENT": "SUPPORTED",
    "ENTAILS": "SUPPORTED",
    "CONTRADICT": "REFUTED", "CONTRADICTED": "REFUTED", "CONTRADICTION": "REFUTED", "REFUTE": "REFUTED",
    "REFUTED": "REFUTED", "REFUTES": "REFUTED",
    "NEI": "NEI", "NOT ENOUGH INFO": "NEI", "NOT ENOUGH INFORMATION": "NEI", "INSUFFICIENT EVIDENCE": "NEI",
    "INSUFFICIENT INFORMATION": "NEI",
}


def v5_normalised(reply: str) -> str:
    """Character by character: a run of ``_``/``-`` is one space; then upper-case; then anything
    outside A-Z a space; then runs of spaces collapsed and the ends trimmed."""
    chars: list[str] = []
    for c in reply:
        if c in "_-":
            if not chars or chars[-1] != "\0":
                chars.append("\0")  # one mark per run of underscores and hyphens
        else:
            chars.append(c)
    upper = "".join(" " if c == "\0" else c for c in chars).upper()
    spaced = "".join(c if "A" <= c <= "Z" else " " for c in upper)
    return " ".join(w for w in spaced.split(" ") if w)


def v5_verdict(reply: str) -> str:
    text = v5_normalised(reply)
    if text in ALIASES:
        return ALIASES[text]
    words = text.split()
    classes = set()
    for alias, label in ALIASES.items():
        parts = alias.split()
        if any(words[i:i + len(parts)] == parts for i in range(len(words) - len(parts) + 1)):
            classes.add(label)
    return classes.pop() if len(classes) == 1 else "INVALID"


# Each reply with the class worked out by hand from the v5 text.
CASES = [
    ("SUPPORTED", "SUPPORTED"),
    ("supports", "SUPPORTED"),
    ("Entailment.", "SUPPORTED"),
    ("Verdict: **SUPPORTED**", "SUPPORTED"),
    ("REFUTED", "REFUTED"),
    ("Contradiction!", "REFUTED"),
    ("contradicts, i.e. REFUTES", "REFUTED"),  # CONTRADICTS is no alias; REFUTES is
    ("NOT ENOUGH INFO", "NEI"),
    ("not_enough-info.", "NEI"),
    ("NOT__ENOUGH--INFORMATION", "NEI"),  # runs of _ and - are one space
    ("insufficient-evidence", "NEI"),
    ("NEI (not enough information)", "NEI"),  # two aliases, one class
    ("supported_by_the evidence", "SUPPORTED"),
    ("Insufficient", "INVALID"),  # bare INSUFFICIENT is no alias
    ("INSUFFICIENT DATA", "INVALID"),
    ("contradicts", "INVALID"),  # CONTRADICTS is no alias
    ("SUPPORTED or REFUTED", "INVALID"),  # two classes
    ("Refutes; insufficient information", "INVALID"),  # two classes
    ("SUPPORTEDLY", "INVALID"),  # whole words only
    ("The claim is true", "INVALID"),
    ("", "INVALID"),
]


@pytest.mark.parametrize("reply, label", CASES)
def test_normalize_verdict_follows_the_v5_rule(reply, label):
    assert v5_verdict(reply) == label  # the port and the hand-worked class agree
    assert normalize_verdict(reply) == label


def test_the_three_replies_the_older_aliases_read_as_a_class_are_invalid():
    for reply in ("Insufficient", "INSUFFICIENT DATA", "contradicts"):
        assert normalize_verdict(reply) == "INVALID", reply


@pytest.mark.parametrize("reply, text", [("  not__enough--info!! ", "NOT ENOUGH INFO"),
                                         ("Verdict:\n**Refuted**", "VERDICT REFUTED"),
                                         ("supported_by-_the evidence 2", "SUPPORTED BY THE EVIDENCE")])
def test_the_normalised_text(reply, text):
    assert v5_normalised(reply) == text
    assert normalized_reply(reply) == text
