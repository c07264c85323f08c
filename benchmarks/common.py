"""What every benchmark shares: the commit it measured, and percentiles as the house reports them.

    from common import git_sha, percentiles      # benchmarks/ is the script's folder on sys.path
    out = {"bench": "call", "git": git_sha(), "v2v_ms": percentiles(v2v)}
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def git_sha() -> str:
    """The short commit of the checkout, "+dirty" when the tree has changes; "unknown" outside git."""
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                             text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return sha + ("+dirty" if dirty else "")


def percentiles(values, *, digits: int = 1, count: bool = True) -> dict[str, float | int | None]:
    """p50/p95/p99 of ``values`` (None entries skipped), rounded, with the sample count ``n``."""
    v = np.array([x for x in values if x is not None], dtype=float)
    out: dict[str, float | int | None] = {f"p{q}": (round(float(np.percentile(v, q)), digits) if v.size else None)
                                          for q in (50, 95, 99)}
    if count:
        out["n"] = int(v.size)
    return out
