"""What the services (HTTP and MCP) share to stay bounded: the cost and concurrency of a
stability request, error messages capped in length, and reports analysed without naming
a server-side file.

A stability request costs resamples x task rows (every task of every report, failed ones
included); above ``max_cost`` it is refused before any work (:class:`StabilityTooCostly`:
HTTP 413, an MCP tool error), and beyond ``max_concurrent`` requests at once the next is
refused (:class:`StabilityBusy`: HTTP 429 with ``Retry-After``, an MCP tool error).
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
import threading
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from presdep.bench import core
from presdep.contracts.errors import PresdepError
from presdep.report.bootstrap import DEFAULT_RESAMPLES

# Cost of a stability request = resamples x (task rows over all reports). Measured on 2 cores
# (another job running): 10 reports x 300 tasks x 2000 resamples (6e6) took 0.1 s warm; 50 x 300 x
# 20000 (3e8) 1.4 s; 10 x 10000 x 2000 (2e8) 0.9 s: 2-7 ns a unit once warm. 3e8 bounds one request
# to about 2 s and admits 50 reports of the 300-task public split at the schema's 20000 resamples.
DEFAULT_MAX_STABILITY_COST = 300_000_000
DEFAULT_MAX_CONCURRENT_STABILITY = 2  # one per core of a small machine; more wait (429) instead
STABILITY_RETRY_AFTER_S = 2  # about one request at the cost limit
MESSAGE_LIMIT = 500
"""Most characters of an error message a service returns, the cut marker included."""


def cap_message(message: str, limit: int = MESSAGE_LIMIT) -> str:
    """``message`` whole, or cut to ``limit`` characters ending in a marker that says so."""
    if len(message) <= limit:
        return message
    marker = f" … [message cut: {len(message)} characters in all]"
    return message[: limit - len(marker)] + marker


class StabilityTooCostly(PresdepError, ValueError):
    """A stability request above the cost limit; the message says what to lower."""


class UnusableReports(PresdepError, ValueError):
    """Reports a service received that cannot be analysed (together); the message says which and why."""


class StabilityBusy(PresdepError, RuntimeError):
    """As many stability requests as allowed are already running; retry after ``retry_after_s``."""

    retry_after_s = STABILITY_RETRY_AFTER_S


def _rows(report: Any) -> int:
    tasks = report["tasks"] if isinstance(report, Mapping) else report.tasks
    return len(tasks)


def stability_cost(reports: Sequence[Any], resamples: int | None) -> int:
    """Resamples x task rows (every task, failed ones included): what one analysis costs.

    ``reports`` are mappings (MCP arguments) or objects with ``.tasks`` (HTTP request models).
    """
    return (DEFAULT_RESAMPLES if resamples is None else resamples) * sum(_rows(r) for r in reports)


def check_stability_cost(reports: Sequence[Any], resamples: int | None, limit: int) -> int:
    """The request's cost; StabilityTooCostly when it is above ``limit``."""
    cost = stability_cost(reports, resamples)
    if cost > limit:
        rows = sum(_rows(r) for r in reports)
        used = DEFAULT_RESAMPLES if resamples is None else resamples
        raise StabilityTooCostly(f"stability request costs {cost} (resamples {used} x {rows} task rows), over the "
                                 f"limit of {limit}; lower 'resamples' or send fewer reports or tasks")
    return cost


def first_non_finite(value: Any, where: str = "") -> tuple[str, float] | None:
    """(path, number) of the first NaN or infinity in decoded JSON, paths as ``reports/0/tasks/3/score``."""
    stack: list[tuple[str, Any]] = [(where, value)]
    while stack:  # iterative: a deeply nested request must not exhaust the recursion limit
        path, v = stack.pop()
        if isinstance(v, float) and not math.isfinite(v):
            return path or "arguments", v
        if isinstance(v, Mapping):
            stack.extend((f"{path}/{k}" if path else str(k), x) for k, x in reversed(list(v.items())))
        elif isinstance(v, (list, tuple)):
            stack.extend((f"{path}/{i}" if path else str(i), x) for i, x in reversed(list(enumerate(v))))
    return None


def _report_file(i: int) -> str:
    return f"report{i:03d}.json"


def _without_server_paths(message: str, folder: str) -> str:
    """``message`` with every file of ``folder`` named by its place in the request (``reports[1]``)."""
    for d in {folder, os.path.realpath(folder)}:
        message = re.sub(re.escape(d + os.sep) + r"report(\d{3})\.json",
                         lambda m: f"reports[{int(m.group(1))}]", message)
        message = message.replace(d + os.sep, "").replace(d, "")
    return message


def stability_of_reports(reports: Iterable[Mapping[str, Any]], *, seed: int | None = None,
                         resamples: int | None = None, lower_is_better: bool | None = None) -> dict[str, Any]:
    """The stability analysis of in-memory run reports (what a service receives).

    The reports are written to a private temporary folder for the analysis; its error
    messages (ValueError) name a report by its place in the request, ``reports[1]``, never
    a server-side file, and are capped at MESSAGE_LIMIT characters.
    """
    with tempfile.TemporaryDirectory(prefix="presdep-service-") as d:
        paths = []
        for i, rep in enumerate(reports):
            p = Path(d) / _report_file(i)
            p.write_text(json.dumps(rep, allow_nan=False), encoding="utf-8")
            paths.append(p)
        try:
            return core.stability(paths, seed=seed, resamples=resamples, lower_is_better=lower_is_better)
        except ValueError as exc:  # ReportError, StabilityError: the reports are unusable
            raise UnusableReports(cap_message(_without_server_paths(str(exc), d))) from None


class StabilityGate:
    """The cost and concurrency bounds of stability requests, one per server."""

    def __init__(self, max_cost: int = DEFAULT_MAX_STABILITY_COST,
                 max_concurrent: int = DEFAULT_MAX_CONCURRENT_STABILITY):
        if max_cost < 1:
            raise ValueError(f"max_stability_cost must be >= 1, got {max_cost}")
        if max_concurrent < 1:
            raise ValueError(f"max_concurrent_stability must be >= 1, got {max_concurrent}")
        self.max_cost = max_cost
        self.max_concurrent = max_concurrent
        self._slots = threading.BoundedSemaphore(max_concurrent)

    def run(self, reports: Sequence[Mapping[str, Any]], *, seed: int | None = None, resamples: int | None = None,
            lower_is_better: bool | None = None) -> dict[str, Any]:
        """Check the cost, take a slot (or refuse), then analyse; the slot comes back on any outcome."""
        check_stability_cost(reports, resamples, self.max_cost)
        if not self._slots.acquire(blocking=False):
            raise StabilityBusy(f"{self.max_concurrent} stability request(s) already running; "
                                f"retry after {STABILITY_RETRY_AFTER_S} s")
        try:
            return stability_of_reports(reports, seed=seed, resamples=resamples, lower_is_better=lower_is_better)
        finally:
            self._slots.release()

