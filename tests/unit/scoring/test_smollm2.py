"""The real embedded-default model (SmolLM2-135M-Instruct): slot bias and CapCal."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[3]
GRADES = np.arange(4)
PRIOR_QUERIES = ["what is the capital of france", "how do vaccines work", "who wrote hamlet"]
EVAL_QUERIES = ["best way to learn python", "why is the sky blue", "what causes inflation"]
B = 5


@pytest.fixture(scope="module")
def smollm2_dir(smollm2_model_dir) -> Path:
    return smollm2_model_dir


@pytest.fixture(scope="module")
def scorer(smollm2_dir):
    from presdep.runtime.models import load_model
    from presdep.scoring.backends import TransformersScorer

    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    model, tok = load_model(smollm2_dir, device="cpu")
    return TransformersScorer(model, tok, max_doc_chars=200, batch_size=3, model_desc={"name": "smollm2"})


def test_grade_tokens_and_one_pass_on_real_model(scorer):
    from presdep.scoring.readout import grade_probs

    assert scorer.grade_ids == (32, 33, 34, 35)
    docs = ["Paris is the capital of France.", "Bananas are yellow.", "France's capital city is Paris."]
    one = scorer.slot_probs([("capital of france", docs)])[0]
    p = scorer.build("capital of france", docs)
    with torch.inference_mode():
        logits = scorer.model(input_ids=torch.tensor([p.ids])).logits[0]
    ref = grade_probs(logits[p.read_positions][:, list(scorer.grade_ids)]).numpy()
    np.testing.assert_allclose(one, ref, atol=1e-4)


def test_slot_bias_and_capcal(scorer):
    from presdep.scoring.capcal import calibrate_probs, probe_probs

    prior = np.mean(probe_probs(scorer, [(q, [""] * B) for q in PRIOR_QUERIES]), axis=0)
    held = np.stack(scorer.slot_probs([(q, [""] * B) for q in EVAL_QUERIES]))  # [queries, B, 4]
    raw = (held @ GRADES).mean(axis=0)
    # The model grades by slot: first and last slots differ on content-free prompts.
    assert abs(raw[0] - raw[-1]) > 0.2, raw
    cal = np.stack([calibrate_probs(p, prior) for p in held]) @ GRADES
    spread_raw, spread_cal = np.ptp(raw), np.ptp(cal.mean(axis=0))
    # CapCal (prior from other probe queries) reduces the slot-to-slot spread.
    assert spread_cal < 0.8 * spread_raw, (raw, cal.mean(axis=0))


def test_slot_bias_on_real_passages(scorer, shared_data):
    import json

    data = json.loads((shared_data / "trec-dl19" / "bm25_retrieve_results_dl19_top100.json").read_text())
    prompts = [(e["query"], [h["content"] for h in e["hits"][:B]]) for e in data[:3]]
    eg = np.stack(scorer.slot_probs(prompts)) @ GRADES
    assert abs(eg[:, 0].mean() - eg[:, -1].mean()) > 0.2, eg.mean(axis=0)
