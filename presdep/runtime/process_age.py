"""How long this process has existed, to the kernel's clock tick (10 ms).

psutil's create_time adds the start tick to /proc/stat's boot time, which is whole seconds: its
age of a process is off by up to a second, the size of a job's whole start-up when the job forks
from a warm worker. Here both ends come from the same clock (the start tick and /proc/uptime)."""

from __future__ import annotations

import os

_STARTTIME_FIELD = 19  # field 22 of /proc/<pid>/stat, counted after the ")" closing its name


def process_age_s() -> float | None:
    """Seconds since this process started (a fork counts from the fork); None off Linux."""
    try:
        with open("/proc/self/stat") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[_STARTTIME_FIELD])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None
