"""A job's torch thread count, set without importing torch before the job needs it."""

from __future__ import annotations

import os
import sys

# What torch reads for its intra-op thread count when it loads (the count set_num_threads sets).
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


def limit_torch_threads(threads: int | None) -> None:
    """``torch.set_num_threads(threads)`` where torch is loaded; else the variables torch reads when
    it loads, so a job answered from its caches never imports it. ``None`` or 0: unchanged."""
    if not threads:
        return
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(int(threads))
        return
    for name in THREAD_VARIABLES:
        os.environ[name] = str(int(threads))
