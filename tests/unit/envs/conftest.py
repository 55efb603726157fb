"""The environment checks: envs/resolve.py is a script beside the env files, not part of presdep,
so the tests load it by path."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


def load_resolve():
    name = "presdep_envs_resolve"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, REPO / "envs" / "resolve.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # before exec: its dataclasses look their module up
        spec.loader.exec_module(module)
    return sys.modules[name]


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "registry: resolves against the package index with pip (skips only where it cannot be reached)")


def pytest_generate_tests(metafunc):
    # One test per env file and install path, named after it.
    if "target_name" in metafunc.fixturenames:
        metafunc.parametrize("target_name", [t.name for t in load_resolve().targets()])


@pytest.fixture(scope="session")
def resolve():
    return load_resolve()
