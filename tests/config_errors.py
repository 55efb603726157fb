"""The message a config fails validation with."""

import pytest

from presdep.config import SCHEMA_PATH, ConfigError, validate_config


def config_error(config) -> str:
    with pytest.raises(ConfigError) as info:
        validate_config(config, SCHEMA_PATH)
    return str(info.value)
