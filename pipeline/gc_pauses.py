"""Python's garbage collector in a real-time process: freeze the start-up heap, count the pauses.

A full (generation 2) collection walks every object the process tracks, and while it runs the
process does nothing else: in ``parley serve`` every call's event loop waits, in a voice worker
every call's voice. Once loaded, the server holds ~290,000 such objects (pipecat, aiortc, the
VAD), the voice worker ~170,000 and the recogniser worker ~410,000 (torch and its compiled step);
one full collection took 130-200 ms in each (``gc.callbacks`` timings during bench_transports'
16-call load, 2 cores), longer than the 120 ms lead a paced transport keeps at the far end.
Nearly all of those objects live as long as the process, so ``freeze_startup_heap()`` moves them
into the permanent generation that collections skip: after it the server made at most one
full collection per 16-call mixed run, of 24-31 ms (docs/history.md, bench_transports, "No dropped
frames"). Call it once, after loading and warming up, never per call (what a call leaves behind
must stay collectable).

    freeze_startup_heap()                      # -> how many objects were frozen
    pauses = GcPauses()
    pauses.install()                           # every collection's pause, by generation
    pauses.histogram(2)                        # -> (bucket counts, sum ms, count)
    pauses.uninstall()

``GcPauses`` runs inside the collector's callback, so it takes no lock and logs nothing (either
could wait on a thread that is itself waiting for the collection); a scrape reads its counters.
"""

from __future__ import annotations

import bisect
import gc
import time

__all__ = ["freeze_startup_heap", "GcPauses", "PAUSE_BUCKETS_MS"]

PAUSE_BUCKETS_MS = (1, 5, 10, 20, 50, 100, 250, 500, 1000)


def freeze_startup_heap() -> int:
    """Collect what start-up left as garbage, then freeze every object still alive so later
    collections skip it. Returns how many objects were frozen in all."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


class GcPauses:
    """Each collection's pause, per generation (0, 1, 2), as histogram counters in ms."""

    def __init__(self, buckets_ms: tuple[float, ...] = PAUSE_BUCKETS_MS,
                 clock=time.perf_counter) -> None:
        self.buckets_ms = tuple(buckets_ms)
        self._clock = clock
        self._counts = [[0] * (len(self.buckets_ms) + 1) for _ in range(3)]
        self._sum_ms = [0.0, 0.0, 0.0]
        self._n = [0, 0, 0]
        self.worst_ms = 0.0
        """The longest pause seen so far."""
        self._started: float | None = None

    def install(self) -> None:
        if self._callback not in gc.callbacks:
            gc.callbacks.append(self._callback)

    def uninstall(self) -> None:
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)

    def _callback(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._started = self._clock()
            return
        if self._started is None:
            return
        self.record(int(info.get("generation", 2)), (self._clock() - self._started) * 1000.0)
        self._started = None

    def record(self, generation: int, pause_ms: float) -> None:
        g = min(max(generation, 0), 2)
        self._counts[g][bisect.bisect_left(self.buckets_ms, pause_ms)] += 1
        self._sum_ms[g] += pause_ms
        self._n[g] += 1
        self.worst_ms = max(self.worst_ms, pause_ms)

    def histogram(self, generation: int) -> tuple[list[int], float, int]:
        """(per-bucket counts, not cumulative; the last is above every bound), sum ms, count."""
        return list(self._counts[generation]), self._sum_ms[generation], self._n[generation]
