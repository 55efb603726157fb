"""The light_rules setting: its schema and the refusal of a profile that still groups a light rule."""

from __future__ import annotations

import copy

import pytest

from presdep.config import SCHEMA_PATH, ConfigError, load_workflow_config
from presdep.config.light_rules import check_light_rules_ungrouped


def _load(config):
    return load_workflow_config(config, SCHEMA_PATH)[1]


def test_light_rules_default_to_the_cluster_and_take_local(default_config):
    assert _load(copy.deepcopy(default_config)).light_rules == "cluster"
    assert _load({**copy.deepcopy(default_config), "light_rules": "local"}).light_rules == "local"


def test_an_unknown_place_is_refused_with_the_key_named(default_config):
    with pytest.raises(ConfigError, match="light_rules"):
        _load({**copy.deepcopy(default_config), "light_rules": "login"})


def test_a_grouped_light_rule_is_refused_and_names_its_group():
    with pytest.raises(ConfigError) as err:
        check_light_rules_ungrouped(("metrics", "thresholds", "matched_reference"),
                                    {"metrics": "small_cpu", "score": "models", "thresholds": "small_cpu"})
    message = str(err.value)
    assert "metrics (group small_cpu), thresholds (group small_cpu)" in message
    assert "matched_reference" not in message and "score" not in message
    assert "take them out of the profile's groups" in message


def test_groups_of_other_rules_pass():
    check_light_rules_ungrouped(("metrics", "thresholds"), {"score": "models", "fetch_model": "fetch"})
    check_light_rules_ungrouped(("metrics",), {})
