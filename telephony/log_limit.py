"""One log line a minute per key, so a flood (a scan, a replayed header) cannot flood the log.

::

    once = LogLimiter()                       # every 60 s, the newest 1,024 keys remembered
    if once(f"signature:{request.remote}"):
        log.warning("refused ... (further refusals from it are logged once a minute)")
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

__all__ = ["LogLimiter"]


class LogLimiter:
    """``limiter(key)`` is True at most once every ``every_s`` per key; the oldest keys are
    forgotten beyond ``max_keys`` (a scan from many sources costs bounded memory)."""

    def __init__(self, every_s: float = 60.0, max_keys: int = 1024,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.every_s = every_s
        self.max_keys = max_keys
        self._clock = clock
        self._last: OrderedDict[str, float] = OrderedDict()

    def __call__(self, key: str) -> bool:
        now = self._clock()
        if now - self._last.get(key, -self.every_s) < self.every_s:
            return False
        self._last[key] = now
        self._last.move_to_end(key)
        while len(self._last) > self.max_keys:
            self._last.popitem(last=False)
        return True
