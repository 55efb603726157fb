"""What a failed call to the Hugging Face hub raises: OSError (requests, HfHubHTTPError), ValueError
(the hub client's own checks) and the httpx transport errors (a refused connection, a timeout),
which derive from neither. Caught where a fetch turns them into one clear error."""

from __future__ import annotations

import importlib


def hub_errors() -> tuple[type[BaseException], ...]:
    """The exception types a hub call may raise for a transport or server reason."""
    found: list[type[BaseException]] = [OSError, ValueError]
    for name in ("httpx2", "httpx"):  # huggingface_hub speaks HTTP through one of them
        try:
            found.append(importlib.import_module(name).HTTPError)
        except (ImportError, AttributeError):
            continue
    return tuple(found)
