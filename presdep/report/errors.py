"""The report stage's errors: both are :class:`~presdep.contracts.errors.PresdepError` and
keep their ValueError base, so callers that caught ValueError still do."""

from __future__ import annotations

from presdep.contracts.errors import PresdepError


class StabilityError(PresdepError, ValueError):
    """Input to the stability analysis is unusable; the message says which and why."""


class ReportError(PresdepError, ValueError):
    """A run report is malformed; the message names the file and the offending entry."""
