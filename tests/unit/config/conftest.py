"""The embedded default config, read once for the config tests."""

import pytest
from workflow_utils import REPO

from presdep.config import load_yaml


@pytest.fixture(scope="module")
def default_config():
    return load_yaml(REPO / "workflow_config.yaml")
