"""The project's errors: every one derives from :class:`PresdepError`.

Callers that report problems to a person (the CLI, the workflow's scripts) catch the
base class; each subclass also keeps the built-in base it always had (ValueError,
RuntimeError, ...), so code that caught those still works.
"""

from __future__ import annotations

from pathlib import Path


class PresdepError(Exception):
    """Base of every error presdep raises on purpose (bad input, bad config, a failed stage)."""


class ConfigError(PresdepError, ValueError):
    """The config does not match its schema; the message lists every problem by YAML path."""


class SchemaError(PresdepError, ValueError):
    """A table does not match its Parquet contract."""


class InputFormatError(PresdepError, ValueError):
    """A user-supplied file does not have the expected format."""

    def __init__(self, path: str | Path, where: str, problem: str):
        self.path = str(path)
        self.where = where
        super().__init__(f"{path}, {where}: {problem}")


class InvalidInput(PresdepError, ValueError):
    """An argument or input value outside what the function accepts; the message says what was expected."""


class StabilityError(PresdepError, ValueError):
    """Input to the stability analysis is unusable; the message says which and why."""


class ReportError(PresdepError, ValueError):
    """A run report is malformed; the message names the file and the offending entry."""
