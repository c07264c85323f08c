"""Garbage-collector pauses: the start-up heap frozen (server and engine children), pauses counted."""

from __future__ import annotations

import gc
import subprocess
import sys

import pytest

from pipeline.gc_pauses import PAUSE_BUCKETS_MS, GcPauses, freeze_startup_heap
from telephony.metrics import Metrics
from tests.metrics_text import sample


class _Cycle:
    def __init__(self) -> None:
        self.me = self


@pytest.fixture
def unfrozen():
    yield
    gc.unfreeze()


def test_freezing_skips_what_exists_and_still_collects_what_comes_later(unfrozen):
    kept = [_Cycle() for _ in range(100)]
    frozen = freeze_startup_heap()
    # (another thread may free a frozen object at once: in a full run the count was 2 short)
    assert frozen >= 100 and frozen - 100 <= gc.get_freeze_count() <= frozen
    tracked = {id(o) for o in gc.get_objects()}      # what collections walk: none of them now
    assert not any(id(c) in tracked for c in kept)
    gc.collect()
    # a collection does not thaw them: they stay out of what collections walk. (The count itself
    # may fall by a few: a frozen object whose last reference a finalizer of earlier tests' garbage
    # drops is freed by reference counting, not thawed.)
    tracked = {id(o) for o in gc.get_objects()}
    assert not any(id(c) in tracked for c in kept)
    assert frozen - 100 <= gc.get_freeze_count() <= frozen
    for _ in range(50):
        _Cycle()                                      # garbage made after start-up ...
    assert gc.collect() >= 50                         # ... is still collected


def test_every_collection_is_counted_by_generation_until_uninstalled():
    pauses = GcPauses()
    pauses.install()
    pauses.install()                                  # twice is once
    try:
        assert gc.callbacks.count(pauses._callback) == 1
        gc.collect(2)
        gc.collect(0)
    finally:
        pauses.uninstall()
    counts, total_ms, n = pauses.histogram(2)
    assert n >= 1 and sum(counts) == n and total_ms > 0.0
    assert pauses.histogram(0)[2] >= 1
    assert pauses.worst_ms >= total_ms / n
    gc.collect(2)
    assert pauses.histogram(2)[2] == n                # uninstalled: no longer counted
    assert pauses._callback not in gc.callbacks


def test_pauses_land_in_their_buckets_and_in_the_metrics_page():
    pauses = GcPauses()
    for generation, ms in ((2, 0.5), (2, 75.0), (2, 190.0), (2, 5000.0), (0, 3.0), (7, 1.0)):
        pauses.record(generation, ms)
    counts, total_ms, n = pauses.histogram(2)
    assert n == 5 and total_ms == pytest.approx(5266.5)    # generation 7 is clamped to 2
    assert counts[0] == 2                                  # <= 1 ms: 0.5 and the clamped 1.0
    assert counts[PAUSE_BUCKETS_MS.index(100)] == 1        # 75 ms
    assert counts[PAUSE_BUCKETS_MS.index(250)] == 1        # 190 ms
    assert counts[-1] == 1                                 # above every bound
    assert pauses.worst_ms == 5000.0

    metrics = Metrics()
    assert "parley_gc_pause_ms" not in metrics.render()    # nothing registered, nothing shown
    metrics.register_gc(pauses)
    text = metrics.render()
    assert "# TYPE parley_gc_pause_ms histogram" in text
    assert sample(text, 'parley_gc_pause_ms_bucket{generation="2",le="50"}') == 2     # cumulative
    assert sample(text, 'parley_gc_pause_ms_bucket{generation="2",le="250"}') == 4
    assert sample(text, 'parley_gc_pause_ms_bucket{generation="2",le="+Inf"}') == 5
    assert sample(text, 'parley_gc_pause_ms_count{generation="0"}') == 1
    assert sample(text, 'parley_gc_pause_ms_count{generation="1"}') == 0
    assert sample(text, 'parley_gc_pause_ms_sum{generation="2"}') == pytest.approx(5266.5)


def test_an_engine_child_freezes_its_heap_before_it_says_ready():
    code = ("import gc, socket\n"
            "from pipeline.engines.child import ChildEnd\n"
            "from pipeline.engines.framing import recv_frame, unpack\n"
            "a, b = socket.socketpair()\n"
            "assert gc.get_freeze_count() == 0\n"
            "ChildEnd(b.detach()).ready(0.0)\n"
            "head, _ = unpack(recv_frame(a))\n"
            "assert head == {'id': 0, 'ok': 0.0}, head\n"
            "print(gc.get_freeze_count())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) > 1000          # the modules it imported, frozen
