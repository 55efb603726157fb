"""Resample, presentation and draw counts are whole numbers within what their jobs can hold."""

import copy

import pytest
from config_errors import config_error

from presdep.config import SCHEMA_PATH, schema_defaults, validate_config
from presdep.config.bounds import COUNT_BOUNDS, MAX_PAIRED_RESAMPLES, MAX_PRESENTATIONS, MAX_RANK_RESAMPLES


@pytest.fixture
def config(default_config):
    return copy.deepcopy(default_config)


@pytest.mark.parametrize("section", ["stability", "contrasts", "pool_perturbation", "width", "context_decomposition"])
@pytest.mark.parametrize("value", [1e12, 2.5, 20000.0, "1e12"])
def test_a_resample_count_that_is_not_an_integer_is_refused_naming_its_key(config, section, value):
    config[section] = {"resamples": value}
    assert f"{section}.resamples: {value!r} is not of type 'integer'" in config_error(config)


@pytest.mark.parametrize("section,bound", [("stability", MAX_RANK_RESAMPLES), ("contrasts", MAX_PAIRED_RESAMPLES),
                                           ("pool_perturbation", MAX_PAIRED_RESAMPLES),
                                           ("width", MAX_PAIRED_RESAMPLES)])
def test_a_resample_count_above_its_bound_is_refused_and_one_at_it_accepted(config, section, bound):
    config[section] = {"resamples": 10**12}
    assert f"{section}.resamples: 1000000000000 is more than {bound:,}" in config_error(config)
    config[section] = {"resamples": bound}
    assert validate_config(config, SCHEMA_PATH)[section]["resamples"] == bound


def test_sane_resample_counts_pass(config):
    config["stability"] = {"resamples": 20000}
    config["contrasts"] = {"resamples": 20000}
    filled = validate_config(config, SCHEMA_PATH)
    assert (filled["stability"]["resamples"], filled["contrasts"]["resamples"]) == (20000, 20000)


def test_presentation_counts_are_bounded(config):
    config["protocol"]["M"] = MAX_PRESENTATIONS + 1
    config["datasets"]["synthetic"]["M"] = 10**9
    config["teachers"]["self"]["T"] = 10**6
    config["variants"]["bsc"]["bsc_k"] = 100
    config["variants"]["bsc"]["bsc_ensembles"] = 100
    message = config_error(config)
    assert f"protocol.M: {MAX_PRESENTATIONS + 1} is more than {MAX_PRESENTATIONS:,}" in message
    assert "datasets.synthetic.M: 1000000000 is more than" in message
    assert "teachers.self.T: 1000000 is more than" in message
    assert "variants.bsc.bsc_k x bsc_ensembles: 10000 is more than" in message


def test_the_context_bootstraps_draws_fit_their_memory(config):
    config["context_decomposition"] = {"resamples": MAX_PAIRED_RESAMPLES, "queries": 1000}
    assert "context_decomposition.resamples: 1,000,000 resamples x 1,000 queries need 14.9 GiB" in config_error(config)
    config["context_decomposition"] = {"resamples": MAX_PAIRED_RESAMPLES, "queries": 100}
    validate_config(config, SCHEMA_PATH)


def test_a_count_given_as_a_whole_float_is_refused(config):
    config["protocol"]["M"] = 2.0
    assert "protocol.M: 2.0 is not of type 'integer'" in config_error(config)


def test_every_resample_count_of_the_schema_has_a_bound():
    resample_keys = {path for path in schema_defaults(SCHEMA_PATH) if path.endswith(".resamples")}
    assert resample_keys and resample_keys <= set(COUNT_BOUNDS), sorted(resample_keys - set(COUNT_BOUNDS))
