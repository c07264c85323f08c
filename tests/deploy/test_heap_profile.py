"""``parley serve --heap-profile``: a baseline, then the places grown most since (leak hunts)."""

from __future__ import annotations

import tracemalloc

import pytest

from deploy.heap import HeapProfile
from pipeline.errors import ConfigError

KEPT: list[bytes] = []


def _leak() -> None:
    KEPT.extend(bytes(2048) + bytes([i % 256]) for i in range(600))     # ~1.2 MB held here


def test_the_second_mark_names_the_line_that_kept_memory_since_the_first():
    profile = HeapProfile(4, top=5)
    try:
        (first,) = profile.mark()
        assert first.startswith("heap: baseline taken (")
        _leak()
        lines = profile.mark()
        assert 2 <= len(lines) <= 6 and lines[-1].endswith("MiB traced since the baseline")
        assert f"at {__file__}:" in lines[0] and "+600 blocks" in lines[0]     # the line that kept it
        assert float(lines[0].split("heap: ", 1)[1].split(" KiB")[0]) > 1000
    finally:
        tracemalloc.stop()
        KEPT.clear()


@pytest.mark.parametrize("frames", [0, 65])
def test_frames_out_of_range_are_refused(frames):
    with pytest.raises(ConfigError, match="--heap-profile takes 1..64 frames"):
        HeapProfile(frames)
    assert not tracemalloc.is_tracing()
