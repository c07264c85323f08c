"""What every benchmark shares: the commit it measured, percentiles as the house reports them,
and where a recording's sound ends.

    from common import git_sha, percentiles      # benchmarks/ is the script's folder on sys.path
    out = {"bench": "call", "git": git_sha(), "v2v_ms": percentiles(v2v)}
    sound_end_s(pcm, 8000)                       # seconds into pcm, or None for a silent one
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


def sound_end_s(pcm: np.ndarray, rate_hz: int) -> float | None:
    """Where a recording's sound ends: the end of its last 8 ms quarter louder than a quarter of
    the way from its noise floor to its speech level (10th and 90th percentiles of the quarters'
    levels) and than -50 dBFS, the rule ``pipeline.vad.SpeechEdges`` places edges by, over the
    whole recording (give it without added silence). None for a silent one."""
    from pipeline.vad import LEVEL_FLOOR_DBFS, LEVEL_SPLIT

    quarter = rate_hz * 8 // 1000
    n = pcm.size // quarter
    if not n:
        return None
    power = (pcm[: n * quarter].astype(np.float64).reshape(n, quarter) ** 2).mean(axis=1)
    levels = 10.0 * np.log10(power + 1.0) - 90.3
    noise, speech = np.percentile(levels, 10), np.percentile(levels, 90)
    loud = np.flatnonzero(levels >= max(noise + LEVEL_SPLIT * (speech - noise), LEVEL_FLOOR_DBFS))
    return (int(loud[-1]) + 1) * quarter / rate_hz if loud.size else None


def percentiles(values, *, digits: int = 1, count: bool = True) -> dict[str, float | int | None]:
    """p50/p95/p99 of ``values`` (None entries skipped), rounded, with the sample count ``n``."""
    v = np.array([x for x in values if x is not None], dtype=float)
    out: dict[str, float | int | None] = {f"p{q}": (round(float(np.percentile(v, q)), digits) if v.size else None)
                                          for q in (50, 95, 99)}
    if count:
        out["n"] = int(v.size)
    return out
