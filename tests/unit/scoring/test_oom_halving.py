"""A score batch that runs out of GPU memory is halved and retried, on the CPU by injection.

The error is torch's own (``torch.cuda.OutOfMemoryError``), raised by a pre-hook on the
decoder for batches above a size. Done when the scores equal an uninterrupted read at the
smaller batch size, bit for bit; only the out-of-memory error is retried.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scorers_tiny import tiny_llama

from presdep.scoring.backends import TransformersScorer, read_halving

WORDS = "water boils lower altitude pressure kettle steam mountain sea level degrees cooking".split()
# 8 prompts of different lengths: two batches of 4, then of 2 after the halving.
PROMPTS = [(f"question {q} " + "about it " * q, [" ".join(WORDS[(q + k) % len(WORDS)] for k in range(3 + q)),
                                               f"short {q}"]) for q in range(8)]


@pytest.fixture(scope="module")
def tiny(smollm2_model_dir):
    return tiny_llama(smollm2_model_dir)


class Injected:
    """Raises ``error`` from the decoder for every batch of more than ``above`` prompts; notes each batch size."""

    def __init__(self, model, above, error=torch.cuda.OutOfMemoryError):
        self.above, self.error, self.sizes = above, error, []
        self.handle = model.get_decoder().register_forward_pre_hook(self, with_kwargs=True)

    def __call__(self, module, args, kwargs):
        n = kwargs["input_ids"].shape[0]
        self.sizes.append(n)
        if n > self.above:
            raise self.error("CUDA out of memory. Tried to allocate 1.00 GiB (injected)")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.handle.remove()


def scorer(tiny, batch_size):
    model, tok = tiny
    return TransformersScorer(model, tok, max_doc_chars=60, batch_size=batch_size, model_identity={"test": "oom"})


def test_a_batch_that_runs_out_is_halved_and_scores_as_the_smaller_batch_size(tiny, caplog):
    want = scorer(tiny, 2).slot_probs(PROMPTS)
    sc = scorer(tiny, 4)
    with Injected(tiny[0], above=2) as inject, caplog.at_level("WARNING", logger="presdep.scoring.backends"):
        got = sc.slot_probs(PROMPTS)
    assert all(np.array_equal(g, w) for g, w in zip(got, want, strict=True))
    # One halving; the rest of the job reads at the size that fitted.
    assert inject.sizes == [4, 2, 2, 2, 2] and (sc.oom_cap, sc.oom_halvings) == (2, 1)
    assert sc.prompts_read == len(PROMPTS)  # the failed read is not counted as read
    [line] = [r.getMessage() for r in caplog.records]
    assert "out of GPU memory reading 4 prompts" in line and "batch halved to 2 prompts" in line
    # Rows are independent: the full-size read agrees to float rounding.
    full = scorer(tiny, 4).slot_probs(PROMPTS)
    assert all(np.allclose(g, f, atol=1e-6) for g, f in zip(got, full, strict=True))


def test_a_prompt_that_runs_out_alone_reraises_naming_its_tokens(tiny):
    sc = scorer(tiny, 4)
    with Injected(tiny[0], above=0) as inject, pytest.raises(torch.OutOfMemoryError,
                                                             match=r"transformers scorer: out of GPU memory reading "
                                                                   r"one prompt of \d+ tokens alone") as err:
        sc.slot_probs(PROMPTS)
    assert inject.sizes == [4, 2, 1] and isinstance(err.value.__cause__, torch.OutOfMemoryError)


def test_other_runtime_errors_are_not_retried(tiny):
    with Injected(tiny[0], above=0, error=RuntimeError) as inject, pytest.raises(RuntimeError, match="injected"):
        scorer(tiny, 4).slot_probs(PROMPTS)
    assert inject.sizes == [4]


def test_read_halving_splits_until_a_part_fits_and_keeps_the_size():
    reads = []

    def read(part):
        if len(part) > 3:
            raise torch.cuda.OutOfMemoryError("injected")
        reads.append(part)

    cap, halvings = read_halving(list(range(8)), read, cap=None, tokens=lambda i: 10, where="t")
    assert reads == [[0, 1], [2, 3], [4, 5], [6, 7]] and (cap, halvings) == (2, 3)
    reads.clear()
    assert read_halving([8, 9, 10], read, cap=cap, tokens=lambda i: 10, where="t") == (2, 0)
    assert reads == [[8, 9], [10]]
