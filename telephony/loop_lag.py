"""How late the event loop runs: one probe per server, in ``/metrics`` and the log.

    probe = LoopLagProbe(metrics.observe_loop_lag, live_calls=lambda: len(server.live))
    task = asyncio.get_running_loop().create_task(probe.run())   # cancel it to stop

Every call of a ``parley serve`` process shares one event loop. Anything that holds it (a
blocking call on the loop, or another thread holding Python's GIL, as building a pocketsphinx
decoder did for ~0.4 s) delays every call's audio at once, and the delay shows up nowhere else:
each call's own latencies start counting only when its frames are finally processed. The probe
sleeps ``interval_s`` and measures how much later than asked it woke up; each lateness goes to a
histogram (``parley_event_loop_lag_ms``), and one of ``warn_s`` or more is logged as a warning
(at most one line per ``quiet_s``, counting the stalls in between).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from telephony.errors import ConfigError

log = logging.getLogger(__name__)


class LoopLagProbe:
    def __init__(self, observe_ms: Callable[[float], None], *, live_calls: Callable[[], int] = lambda: 0,
                 interval_s: float = 0.05, warn_s: float = 0.25, quiet_s: float = 5.0) -> None:
        if interval_s <= 0 or warn_s <= 0:
            raise ConfigError("interval_s and warn_s must be > 0")
        self.observe_ms = observe_ms
        self.live_calls = live_calls
        self.interval_s, self.warn_s, self.quiet_s = interval_s, warn_s, quiet_s
        self.worst_s = 0.0
        """The longest lag seen so far."""
        self._last_warning = -float("inf")
        self._unreported = 0

    async def run(self) -> None:
        """Probe until cancelled."""
        while True:
            t0 = time.perf_counter()
            await asyncio.sleep(self.interval_s)
            self.record(time.perf_counter() - t0 - self.interval_s)

    def record(self, lag_s: float) -> None:
        lag_s = max(0.0, lag_s)
        self.worst_s = max(self.worst_s, lag_s)
        self.observe_ms(lag_s * 1000.0)
        if lag_s < self.warn_s:
            return
        now = time.monotonic()
        if now - self._last_warning < self.quiet_s:
            self._unreported += 1
            return
        also = f" ({self._unreported} more stall(s) since the last warning)" if self._unreported else ""
        log.warning("event loop stalled %.0f ms with %d live call(s): every call's audio waited%s; "
                    "look for blocking work on the loop or a thread holding the GIL",
                    lag_s * 1000.0, self.live_calls(), also)
        self._last_warning, self._unreported = now, 0
