"""``parley serve --heap-profile N``: where the server's memory grows, asked for with a signal.

    parley serve --heap-profile 8 ...       # tracemalloc, 8 frames a trace (~2x the allocation cost)
    kill -USR1 <pid>                         # the first time: the baseline
    kill -USR1 <pid>                         # later: the 15 places grown most since, one log line each

A soak that shows RSS creeping (``benchmarks/bench_soak.py --heap-profile``) reads these lines to
tell a leak (one place growing call after call) from what warms once. Off by default: tracing
every allocation costs CPU a live server should not pay.
"""

from __future__ import annotations

import logging
import signal
import tracemalloc
from asyncio import AbstractEventLoop

log = logging.getLogger("parley.heap")

__all__ = ["HeapProfile"]

_NOISE = (tracemalloc.Filter(False, tracemalloc.__file__), tracemalloc.Filter(False, "<frozen importlib._bootstrap*>"),
          tracemalloc.Filter(False, "<unknown>"))


class HeapProfile:
    def __init__(self, frames: int, top: int = 15) -> None:
        if not 1 <= frames <= 64:
            from pipeline.errors import ConfigError

            raise ConfigError(f"--heap-profile takes 1..64 frames a trace, got {frames}")
        self.frames, self.top = frames, top
        self._base: tracemalloc.Snapshot | None = None
        tracemalloc.start(frames)

    def mark(self) -> list[str]:
        """The first call takes the baseline (-> one line saying so); each later one -> the ``top``
        places (file:line of the innermost frame that is parley's or a library's) that grew most
        since the baseline, as lines ``heap: +N KiB (+M blocks) at FILE:LINE <- ...``."""
        snap = tracemalloc.take_snapshot().filter_traces(_NOISE)
        if self._base is None:
            self._base = snap
            size, _peak = tracemalloc.get_traced_memory()
            return [f"heap: baseline taken ({size / 2**20:.1f} MiB traced)"]
        stats = snap.compare_to(self._base, "traceback")
        lines = []
        for stat in stats[: self.top]:
            where = " <- ".join(f"{f.filename.rsplit('/site-packages/', 1)[-1]}:{f.lineno}"
                                for f in list(stat.traceback)[::-1][:3])   # innermost first
            lines.append(f"heap: {stat.size_diff / 1024:+.0f} KiB ({stat.count_diff:+d} blocks) at {where}")
        total = sum(s.size_diff for s in stats)
        lines.append(f"heap: {total / 2**20:+.1f} MiB traced since the baseline")
        return lines

    def install(self, loop: AbstractEventLoop) -> None:
        """SIGUSR1 -> ``mark()``, logged at WARNING (seen at any --log-level but ERROR)."""
        def report() -> None:
            for line in self.mark():
                log.warning(line)

        loop.add_signal_handler(signal.SIGUSR1, report)
