"""The model servers a call server may use, and which of them to try next.

    replicas = Replicas.parse("ws://10.0.1.5:8080,ws://10.0.2.7:8080")
    url = replicas.pick()                 # round robin over those not recently failed
    replicas.failed(url, "connection reset")   # skipped for COOLDOWN_S, unless all are

A replica that failed (refused, reset, timed out, or said ``goaway``) is skipped for ``COOLDOWN_S``;
when every replica is cooling down the least recently failed one is tried anyway (a call never
waits for a cool-down to end). ``pick(avoid=...)`` skips the one a stream just left.
"""

from __future__ import annotations

import itertools
import logging
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from pipeline.errors import ConfigError

__all__ = ["COOLDOWN_S", "Replicas"]

log = logging.getLogger(__name__)

COOLDOWN_S = 5.0


@dataclass
class Replicas:
    urls: tuple[str, ...]
    cooldown_s: float = COOLDOWN_S
    _failed_at: dict[str, float] = field(default_factory=dict)
    _turn: itertools.count = field(default_factory=itertools.count)

    def __post_init__(self) -> None:
        if not self.urls:
            raise ConfigError("no model server URL: give --model-url ws://HOST:PORT[,ws://HOST2:PORT]")
        for url in self.urls:
            parts = urlsplit(url)
            if parts.scheme not in ("ws", "wss") or not parts.hostname:
                raise ConfigError(f"model server URL {url!r}: expected ws://HOST:PORT or wss://HOST:PORT")

    @classmethod
    def parse(cls, text: str) -> Replicas:
        return cls(tuple(u.strip().rstrip("/") for u in text.split(",") if u.strip()))

    def pick(self, avoid: str | None = None) -> str:
        now = time.monotonic()
        n = len(self.urls)
        start = next(self._turn)
        order = [self.urls[(start + i) % n] for i in range(n)]
        fresh = [u for u in order if now - self._failed_at.get(u, -1e9) >= self.cooldown_s and u != avoid]
        if fresh:
            return fresh[0]
        others = [u for u in order if u != avoid] or order
        return min(others, key=lambda u: self._failed_at.get(u, -1e9))

    def failed(self, url: str, why: str) -> None:
        if time.monotonic() - self._failed_at.get(url, -1e9) >= self.cooldown_s:
            log.warning("model server %s: %s; trying another replica", url, why)
        self._failed_at[url] = time.monotonic()
