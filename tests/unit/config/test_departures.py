"""Table 1's note names every non-paper protocol rule a config uses, and none for the paper's own."""

from __future__ import annotations

import copy
from pathlib import Path

from presdep.config import SCHEMA_PATH, load_workflow_config, load_yaml
from presdep.config.departures import departures

REPO = Path(__file__).resolve().parents[3]


def _cfg(raw):
    return load_workflow_config(raw, SCHEMA_PATH)[1]


def test_the_default_and_the_paper_use_only_paper_rules():
    assert departures(_cfg(load_yaml(REPO / "workflow_config.yaml"))) == []
    assert departures(_cfg(load_yaml(REPO / "configs" / "paper.yaml"))) == []


def test_each_named_option_is_reported():
    raw = copy.deepcopy(load_yaml(REPO / "workflow_config.yaml"))
    raw["datasets"]["synthetic"]["shuffle_rule"] = "per_query"
    raw["datasets"]["synthetic-qa"]["max_queries"] = 2
    raw["reader"]["answer_extraction"] = "lenient"
    raw["datasets"]["synthetic_train"]["max_queries"] = 2  # a training pool never reaches Table 1
    got = departures(_cfg(raw))
    assert len(got) == 3
    assert got[0].startswith("shuffles drawn per query") and got[0].endswith(": synthetic")
    assert got[1].endswith(": synthetic-qa (2)")
    assert "lenient extraction" in got[2]


def test_the_cyclic_design_is_named_as_itself_not_as_per_query_shuffles():
    raw = copy.deepcopy(load_yaml(REPO / "workflow_config.yaml"))
    raw["datasets"]["synthetic"]["shuffle_rule"] = "cyclic"
    got = departures(_cfg(raw))
    assert got == ["shuffles are the cyclic design (shuffle_rule cyclic: rotations inside fixed prompts), not "
                   "random.Random(m) of the first-stage list: synthetic"]


def test_the_datasets_whose_queries_share_their_permutations():
    """The contrasts and stability jobs say their intervals are conditional on these datasets' shared shuffles."""
    from presdep.config.departures import shared_permutation_datasets
    raw = copy.deepcopy(load_yaml(REPO / "workflow_config.yaml"))
    assert shared_permutation_datasets(_cfg(raw)) == ["synthetic", "synthetic-qa", "synthetic-resp"]
    raw["datasets"]["synthetic"]["shuffle_rule"] = "per_query"
    raw["datasets"]["synthetic-qa"]["shuffle_rule"] = "cyclic"
    assert shared_permutation_datasets(_cfg(raw)) == ["synthetic-qa", "synthetic-resp"]
