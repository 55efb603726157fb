"""Wildcard constraints built from the config: a name matches only the names the config has."""

from __future__ import annotations

import re
from typing import Iterable

# A regex that matches nothing: the constraint of a wildcard whose config section is empty.
NOTHING = "(?!x)x"


def alternatives(names: Iterable[str]) -> str:
    """A wildcard regex matching exactly these names (and nothing when there are none)."""
    return "|".join(re.escape(n) for n in names) or NOTHING
