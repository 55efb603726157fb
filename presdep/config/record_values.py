"""The value helpers every config record shares: frozen mappings and tuples, thawed back to plain data.

Records hold the validated config frozen (:func:`_freeze`: read-only mappings, tuples), so no
job can change a setting another job reads; :func:`thaw` gives plain dicts and lists again for
rule params and JSON metadata. :func:`_is_int` is the integer check of the records' ``checked``
constructors (a bool is not an integer).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any


def _freeze(value: Any) -> Any:
    if isinstance(value, Mapping):
        return MappingProxyType({k: _freeze(v) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    return value


def thaw(value: Any) -> Any:
    """Plain dicts and lists again (for rule params and JSON metadata)."""
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [thaw(v) for v in value]
    return value


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


__all__ = ["thaw"]
