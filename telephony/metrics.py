"""Server metrics in Prometheus' text format (``GET /metrics``), with no client library.

    parley_live_calls{transport}                        gauge
    parley_calls_total{transport}                       counter
    parley_calls_refused_total{reason}                  counter
    parley_turn_latency_ms{transport,mark}              histogram, per turn, ms after end of speech

``mark`` is one of the latency observer's marks (vad_stop, stt_final, first_text,
tts_first_audio, transport_first_byte); transport_first_byte is the server's voice-to-voice.
"""

from __future__ import annotations

import bisect
import threading
from collections import defaultdict

from pipeline.latency import MARKS

BUCKETS_MS = (50, 100, 150, 200, 250, 300, 400, 500, 750, 1000, 1500, 2000, 3000, 5000)


class _Histogram:
    def __init__(self) -> None:
        self.counts = [0] * (len(BUCKETS_MS) + 1)
        self.total = 0.0
        self.n = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(BUCKETS_MS, value)] += 1
        self.total += value
        self.n += 1


class Metrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.live: dict[str, int] = defaultdict(int)
        self.calls: dict[str, int] = defaultdict(int)
        self.refused: dict[str, int] = defaultdict(int)
        self._latency: dict[tuple[str, str], _Histogram] = defaultdict(_Histogram)

    def call_started(self, transport: str) -> None:
        with self._lock:
            self.live[transport] += 1
            self.calls[transport] += 1

    def call_ended(self, transport: str) -> None:
        with self._lock:
            self.live[transport] -= 1

    def call_refused(self, reason: str) -> None:
        with self._lock:
            self.refused[reason] += 1

    def observe_turn(self, transport: str, latency_ms: dict[str, float | None]) -> None:
        with self._lock:
            for mark in MARKS:
                value = latency_ms.get(mark)
                if value is not None:
                    self._latency[(transport, mark)].observe(value)

    def render(self) -> str:
        lines = [
            "# HELP parley_live_calls Calls in progress.",
            "# TYPE parley_live_calls gauge",
        ]
        with self._lock:
            for t, n in sorted(self.live.items()):
                lines.append(f'parley_live_calls{{transport="{t}"}} {n}')
            lines += ["# HELP parley_calls_total Calls taken.", "# TYPE parley_calls_total counter"]
            for t, n in sorted(self.calls.items()):
                lines.append(f'parley_calls_total{{transport="{t}"}} {n}')
            lines += ["# HELP parley_calls_refused_total Calls refused.", "# TYPE parley_calls_refused_total counter"]
            for r, n in sorted(self.refused.items()):
                lines.append(f'parley_calls_refused_total{{reason="{r}"}} {n}')
            lines += [
                "# HELP parley_turn_latency_ms Per-turn latency after the end of the caller's speech.",
                "# TYPE parley_turn_latency_ms histogram",
            ]
            for (t, mark), h in sorted(self._latency.items()):
                labels = f'transport="{t}",mark="{mark}"'
                cumulative = 0
                for bound, count in zip(BUCKETS_MS, h.counts):
                    cumulative += count
                    lines.append(f'parley_turn_latency_ms_bucket{{{labels},le="{bound}"}} {cumulative}')
                lines.append(f'parley_turn_latency_ms_bucket{{{labels},le="+Inf"}} {h.n}')
                lines.append(f"parley_turn_latency_ms_sum{{{labels}}} {h.total:.3f}")
                lines.append(f"parley_turn_latency_ms_count{{{labels}}} {h.n}")
        return "\n".join(lines) + "\n"
