"""shuffle_rule cyclic through the scoring path: a Latin design inside fixed prompts, so a pure-slot
scorer's slot share is exactly 1 and the identity scorer's 0 (docs/methods/presentations.md)."""

import polars as pl
import pytest
from scorers_tiny import VARIANT, score_then_metrics

from presdep.contracts.readouts import GradeReadout
from presdep.scoring.backends import IdentityScorer

B = 3


class PureSlot:
    """score = f(slot): what the prompt's position says, never the document."""

    name = "pure_slot"
    template_sha256 = "pure-slot"

    def score_prompts(self, prompts):
        return [[GradeReadout([2.0, 0.5, 0.0][s]) for s, _ in enumerate(docs)] for _, docs in prompts]


@pytest.mark.parametrize("chunking", ["contiguous", "round_robin"])
@pytest.mark.parametrize("scorer", [PureSlot(), IdentityScorer()], ids=["pure_slot", "identity"])
def test_the_cyclic_design_puts_every_candidate_in_every_slot_once(tmp_path, chunking, scorer):
    proto = {"seed": 13, "M": B, "B": B, "perturbations": ["random_shuffle"], "max_doc_chars": 200,
             "shuffle_rule": "cyclic"}
    scores, metrics = score_then_metrics(tmp_path, {**VARIANT, "chunking": chunking, "scorer": scorer.name}, proto,
                                         "rerank", scorer=scorer)
    shuffled = scores.filter(pl.col("perturbation") == "random_shuffle")
    assert shuffled.group_by("query_id", "doc_id", "slot").len()["len"].unique().to_list() == [1]
    assert shuffled.group_by("query_id", "doc_id").len()["len"].unique().to_list() == [B]
    agg = metrics.filter(pl.col("query_id").is_null() & (pl.col("perturbation") == "random_shuffle"))
    value = dict(zip(agg["metric"], agg["value"]))
    if isinstance(scorer, PureSlot):
        assert value["var_share_slot"] == pytest.approx(1.0, abs=1e-9)
        assert value["slot_p_value"] == pytest.approx(0.001)
    else:
        assert value["var_share_slot"] == pytest.approx(0.0, abs=1e-12)
        assert value["slot_p_value"] == 1.0
