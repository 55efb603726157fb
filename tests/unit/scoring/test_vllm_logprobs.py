"""The vLLM readout's pure step: returned prompt logprobs -> P(grade), never a silent zero."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from presdep.scoring.vllm_backend import MissingGradeLogprob, grade_probs_from_logprobs

GRADE_IDS = (15, 16, 17, 18)  # token ids of "0".."3" in some vocabulary


def test_probabilities_are_the_softmax_over_the_four_grade_tokens():
    # vLLM returns Logprob objects (with .logprob) for the top-k tokens, other tokens included
    lp = {15: -2.0, 16: -1.0, 17: -0.5, 18: -3.0, 99: -0.1}
    entry = {k: SimpleNamespace(logprob=v, rank=1) for k, v in lp.items()}
    p = grade_probs_from_logprobs(entry, GRADE_IDS)
    # hand-worked: exp(l_g) / sum over the four grades (token 99 is not a grade)
    z = math.exp(-2.0) + math.exp(-1.0) + math.exp(-0.5) + math.exp(-3.0)
    assert p == pytest.approx((math.exp(-2.0) / z, math.exp(-1.0) / z, math.exp(-0.5) / z, math.exp(-3.0) / z))
    assert sum(p) == pytest.approx(1.0)
    assert grade_probs_from_logprobs({15: 0.0, 16: 0.0, 17: 0.0, 18: 0.0}, GRADE_IDS) == pytest.approx((0.25,) * 4)


def test_a_grade_token_missing_from_the_returned_logprobs_is_an_error_not_a_zero():
    entry = {15: -0.1, 16: -2.5, 18: -4.0, 99: -3.0}  # grade 2 fell outside the top k
    with pytest.raises(MissingGradeLogprob, match=r"prompt 3, slot 2: grade\(s\) \[2\] \(token ids \[17\]\).*top-20"):
        grade_probs_from_logprobs(entry, GRADE_IDS, where="prompt 3, slot 2", logprobs_k=20)
    with pytest.raises(MissingGradeLogprob, match=r"grade\(s\) \[0, 1, 2, 3\]"):
        grade_probs_from_logprobs(None, GRADE_IDS)
    with pytest.raises(MissingGradeLogprob, match="-inf"):
        grade_probs_from_logprobs({15: -math.inf, 16: -math.inf, 17: -math.inf, 18: -math.inf}, GRADE_IDS)
