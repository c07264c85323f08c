"""Hold audio: sound all through (no silence a caller could take for a dropped call), seamless
when it loops, and the two patterns apart."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.audio.hold import HoldLoop, hold_pattern


@pytest.mark.parametrize("kind, longest_quiet_s", [("music", 0.1), ("tone", 0.6)])
def test_never_quiet_for_long(kind, longest_quiet_s):
    pcm = np.concatenate([HoldLoop(kind).next(160) for _ in range(400)])   # 8 s
    rms = np.sqrt(np.mean(pcm.reshape(-1, 160).astype(np.float64) ** 2, axis=1))
    quiet, run = 0, 0
    for level in rms:
        run = run + 1 if level < 100 else 0
        quiet = max(quiet, run)
    assert quiet * 0.02 <= longest_quiet_s
    assert 500 < rms.max() < 8000     # heard, well below full scale


def test_the_loop_repeats_the_pattern_without_a_seam():
    pattern = hold_pattern("music")
    loop = HoldLoop("music")
    n = len(pattern)
    got = np.concatenate([loop.next(333) for _ in range(2 * n // 333 + 1)])   # chunks that straddle the end
    assert len(got) >= 2 * n
    assert np.array_equal(got[:n], pattern) and np.array_equal(got[n:2 * n], pattern)


def test_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="unknown hold audio"):
        hold_pattern("jazz")  # type: ignore[arg-type]
