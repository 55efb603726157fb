"""QA answers: SQuAD normalisation, exact match, token F1 and the answer flip rate.

Normalisation is the official SQuAD evaluation script's: lower case, remove
punctuation (string.punctuation), remove the articles a/an/the as whole words,
collapse whitespace. Token F1 follows the SQuAD v2.0 script: when either side
normalises to no tokens, F1 = 1 if both do and 0 otherwise. HotpotQA's rule on
top: when either side normalises to "yes", "no" or "noanswer" and the two differ,
F1 = 0 (a "yes" must not earn partial credit against "yes it is"). With several
gold answers, EM and F1 take the maximum over them. Answer flip =
(M - count of the most common normalised answer) / M, 0 when M = 1.
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from collections.abc import Iterable, Sequence

from presdep.contracts.errors import InvalidInput

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCT = set(string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD answer normalisation."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _golds(gold: str | Iterable[str]) -> list[str]:
    golds = [gold] if isinstance(gold, str) else list(gold)
    if not golds:
        raise InvalidInput("at least one gold answer is needed")
    return golds


def exact_match(prediction: str, gold: str | Iterable[str]) -> float:
    """1.0 if the normalised prediction equals a normalised gold answer, else 0.0."""
    pred = normalize_answer(prediction)
    return float(any(pred == normalize_answer(g) for g in _golds(gold)))


def _f1_one(pred_tokens: list[str], gold_tokens: list[str]) -> float:
    if not pred_tokens or not gold_tokens:
        return float(pred_tokens == gold_tokens)
    same = sum((Counter(pred_tokens) & Counter(gold_tokens)).values())
    if same == 0:
        return 0.0
    precision = same / len(pred_tokens)
    recall = same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


_SPECIAL = frozenset({"yes", "no", "noanswer"})


def _f1_pair(pred: str, gold: str) -> float:
    if (pred in _SPECIAL or gold in _SPECIAL) and pred != gold:
        return 0.0
    return _f1_one(pred.split(), gold.split())


def f1_score(prediction: str, gold: str | Iterable[str]) -> float:
    """Token F1 between the normalised prediction and the best gold answer."""
    pred = normalize_answer(prediction)
    return max(_f1_pair(pred, normalize_answer(g)) for g in _golds(gold))


def answer_flip(answers: Sequence[str]) -> float:
    """(M - count of the most common normalised answer) / M.

    One answer (M = 1) gives 0 (the answer cannot have flipped; docs/methods/answer-flip.md); no
    answer at all gives NaN.
    """
    m = len(answers)
    if m == 0:
        return math.nan
    top = Counter(normalize_answer(a) for a in answers).most_common(1)[0][1]
    return (m - top) / m
