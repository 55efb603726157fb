"""Names that point at another entry of the config are refused at load, with the closest name."""

import copy

import pytest
from config_errors import config_error, load_error

from presdep.config import SCHEMA_PATH, load_workflow_config


@pytest.fixture
def config(default_config):
    return copy.deepcopy(default_config)


def test_a_misspelt_contrasts_base_is_refused_with_the_closest_variant(config):
    config["contrasts"] = {"base": "off_the_shelff"}
    message = load_error(config)
    assert "contrasts.base: 'off_the_shelff' is not a Table 1 variant of this config" in message
    assert "did you mean 'off_the_shelf'?" in message


def test_a_base_that_is_a_trained_row_or_a_control_is_refused(config):
    config["contrasts"] = {"base": "oc_sft"}
    assert "contrasts.base: 'oc_sft' is a trained variant" in load_error(config)
    config["contrasts"] = {"base": "round_robin"}
    config["variants"]["round_robin"]["table"] = "controls"
    assert "contrasts.base: 'round_robin' is not a Table 1 variant" in load_error(config)


def test_the_default_base_naming_no_variant_means_no_base_but_a_written_one_must_exist(config):
    del config["variants"]["off_the_shelf"], config["variants"]["capcal"]
    config.pop("figure1")
    filled, _ = load_workflow_config(config, SCHEMA_PATH)
    assert filled["contrasts"]["base"] is None
    config["contrasts"] = {"base": "off_the_shelf"}
    assert "contrasts.base: 'off_the_shelf' is not a Table 1 variant" in load_error(config)


def test_the_default_base_that_names_a_variant_is_kept(config):
    filled, _ = load_workflow_config(config, SCHEMA_PATH)
    assert filled["contrasts"]["base"] == "off_the_shelf"


def test_contrast_pairs_name_runnable_table1_labels(config):
    config["contrasts"] = {"pairs": [["OC-SFT", "Off the shelff"], ["OC-SFT", "Hosted chat model"]]}
    message = load_error(config)
    assert "contrasts.pairs.0.1: 'Off the shelff' is not a Table 1 row label of this config; " \
           "did you mean 'Off the shelf'?" in message
    assert "contrasts.pairs.1.1: 'Hosted chat model' is the label of a skipped row" in message


def test_a_ceiling_names_a_table1_dataset(config):
    config["contrasts"] = {"ceiling": {"synthetc": 0.9}}
    assert "contrasts.ceiling.synthetc: 'synthetc' is not a Table 1 dataset of this config; " \
           "did you mean 'synthetic'?" in load_error(config)


def test_discordance_rows_name_table1_labels(config):
    config["discordance"] = {"rows": ["CapCall", "OC-SFT"]}
    assert "discordance.rows.0: 'CapCall' is not a Table 1 row label of this config; did you mean 'CapCal'?" \
        in load_error(config)


def test_figure1_names_a_scoring_run_and_an_eval_dataset(config):
    config["figure1"] = {"variant": "oc_sft", "dataset": "synthetc"}
    message = load_error(config)
    assert "figure1.variant: 'oc_sft' is not a scoring run of this config" in message
    assert "did you mean 'oc_sft/seed42'?" in message
    assert "figure1.dataset: 'synthetc' is not an eval dataset of this config; did you mean 'synthetic'?" in message


def test_figure1_may_name_the_first_stage_row_the_load_adds(config):
    config["figure1"] = {"variant": "first_stage", "dataset": "synthetic"}
    del config["variants"]["bm25"]  # no identity row of its own: the load adds first_stage
    load_workflow_config(config, SCHEMA_PATH)


def test_capcal_reuses_an_existing_uncalibrated_run(config):
    config["variants"]["capcal"]["reuse_scores_of"] = "off_the_shelff"
    assert "variants.capcal.reuse_scores_of: 'off_the_shelff' is not a variant of this config; " \
           "did you mean 'off_the_shelf'?" in load_error(config)
    config["variants"]["capcal"]["reuse_scores_of"] = "oc_sft"
    assert "variants.capcal.reuse_scores_of: 'oc_sft' must be a runnable, untrained, uncalibrated variant (it " \
           "is trained)" in load_error(config)


@pytest.mark.parametrize("where,value,expected", [
    (("variants", "off_the_shelf", "model"), "smollm3",
     "variants.off_the_shelf.model: 'smollm3' is not a key of models; did you mean 'smollm2'?"),
    (("variants", "oc_sft", "student", "teacher"), "slef",
     "variants.oc_sft.student.teacher: 'slef' is not a key of teachers; did you mean 'self'?"),
    (("variants", "oc_sft", "student", "heldout"), "synthetic_heldot",
     "variants.oc_sft.student.heldout: 'synthetic_heldot' is not a key of datasets; did you mean 'synthetic_heldout'?"),
    (("teachers", "self", "model"), "smolm2",
     "teachers.self.model: 'smolm2' is not a key of models; did you mean 'smollm2'?"),
])
def test_the_older_name_checks_suggest_the_closest_name(config, where, value, expected):
    node = config
    for part in where[:-1]:
        node = node[part]
    node[where[-1]] = value
    assert expected in config_error(config)
