"""The cores this process may use: what sizes the admission cap (``pipeline.capacity``) and the
engines' worker pools."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["usable_cores"]


def usable_cores() -> float:
    """The cores this process may run on: its CPU affinity, bounded by a cgroup v2 CPU quota
    (``/sys/fs/cgroup/cpu.max``, a container's limit) when there is one."""
    try:
        cores = float(len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        cores = float(os.cpu_count() or 1)
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            cores = min(cores, max(0.1, int(quota) / int(period)))
    except (OSError, ValueError):
        pass
    return cores
