"""The message a config fails validation (or its whole load) with."""

import pytest

from presdep.config import SCHEMA_PATH, ConfigError, load_workflow_config, validate_config


def config_error(config) -> str:
    with pytest.raises(ConfigError) as info:
        validate_config(config, SCHEMA_PATH)
    return str(info.value)


def load_error(config) -> str:
    """The message a config fails its load with (validation, names, bounds and feasibility)."""
    with pytest.raises(ConfigError) as info:
        load_workflow_config(config, SCHEMA_PATH)
    return str(info.value)
