"""Server metrics in Prometheus' text format (``GET /metrics``), with no client library.

    parley_live_calls{transport}                        gauge
    parley_calls_total{transport}                       counter
    parley_calls_refused_total{reason}                  counter
    parley_turn_latency_ms{transport,mark}              histogram, per turn, ms after end of speech
    parley_audio_frames_total{transport,direction}      counter, 20 ms frames (in: caller's, out: agent's)
    parley_event_loop_lag_ms                            histogram, how late the event loop woke
                                                        (telephony.loop_lag; one loop, all calls)
    parley_audio_frames_missed_total{transport,direction,reason}
                                                        counter, frames not delivered on time:
                                                        in: lost | late, out: underrun | late
    parley_engine_workers{engine}                       gauge, speech-engine worker processes up
    parley_engine_restarts_total{engine}                counter, workers replaced after dying
    parley_gc_pause_ms{generation}                      histogram, garbage-collector pauses of the
                                                        server process (pipeline.gc_pauses)

Engine workers are whatever ``register_engine`` was given (``parley serve`` registers its
pocketsphinx workers, SSM recognizer and SSM voice processes); each is asked at every scrape.

``mark`` is one of the latency observer's marks (vad_stop, stt_final, first_text,
tts_first_audio, transport_first_byte); transport_first_byte is the server's voice-to-voice.
Frame counters (:mod:`telephony.audio_meter`) include live calls: a call's ``FrameCounts`` is
read at every scrape while it runs and folded into the totals when it ends.
"""

from __future__ import annotations

import bisect
import threading
from collections import defaultdict
from collections.abc import Callable

from pipeline.gc_pauses import GcPauses
from pipeline.latency import MARKS
from telephony.audio_meter import FrameCounts

BUCKETS_MS = (50, 100, 150, 200, 250, 300, 400, 500, 750, 1000, 1500, 2000, 3000, 5000)
LAG_BUCKETS_MS = (1, 5, 10, 20, 50, 100, 250, 500, 1000, 2500)
# (direction, reason or None for all frames) -> the FrameCounts field
FRAME_SERIES = {("in", None): "in_frames", ("in", "lost"): "in_lost", ("in", "late"): "in_late",
                ("out", None): "out_frames", ("out", "underrun"): "out_underrun", ("out", "late"): "out_late"}


class _Histogram:
    def __init__(self, buckets: tuple[float, ...] = BUCKETS_MS) -> None:
        self.buckets = buckets
        self.counts = [0] * (len(buckets) + 1)
        self.total = 0.0
        self.n = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.total += value
        self.n += 1

    def lines(self, name: str, labels: str) -> list[str]:
        """Prometheus ``_bucket`` (cumulative), ``_sum`` and ``_count`` lines."""
        sep = "," if labels else ""
        out, cumulative = [], 0
        for bound, count in zip(self.buckets, self.counts):
            cumulative += count
            out.append(f'{name}_bucket{{{labels}{sep}le="{bound}"}} {cumulative}')
        out.append(f'{name}_bucket{{{labels}{sep}le="+Inf"}} {self.n}')
        out.append(f"{name}_sum{{{labels}}} {self.total:.3f}" if labels else f"{name}_sum {self.total:.3f}")
        out.append(f"{name}_count{{{labels}}} {self.n}" if labels else f"{name}_count {self.n}")
        return out


class Metrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.live: dict[str, int] = defaultdict(int)
        self.calls: dict[str, int] = defaultdict(int)
        self.refused: dict[str, int] = defaultdict(int)
        self._latency: dict[tuple[str, str], _Histogram] = defaultdict(_Histogram)
        self._frames_done: dict[str, FrameCounts] = defaultdict(FrameCounts)  # by transport
        self._frames_live: dict[int, tuple[str, FrameCounts]] = {}
        self._loop_lag = _Histogram(LAG_BUCKETS_MS)
        self._engines: dict[str, tuple[Callable[[], int], Callable[[], int]]] = {}
        self._gc: GcPauses | None = None

    def register_gc(self, pauses: GcPauses) -> None:
        """Report this process's garbage-collector pauses (``pipeline.gc_pauses``)."""
        with self._lock:
            self._gc = pauses

    def register_engine(self, name: str, workers: Callable[[], int], restarts: Callable[[], int]) -> None:
        """Report an engine's worker processes: how many are up, how many were replaced so far."""
        with self._lock:
            self._engines[name] = (workers, restarts)

    def call_started(self, transport: str, frames: FrameCounts | None = None) -> None:
        with self._lock:
            self.live[transport] += 1
            self.calls[transport] += 1
            if frames is not None:
                self._frames_live[id(frames)] = (transport, frames)

    def call_ended(self, transport: str, frames: FrameCounts | None = None) -> None:
        with self._lock:
            self.live[transport] -= 1
            if frames is not None and self._frames_live.pop(id(frames), None) is not None:
                done = self._frames_done[transport]
                for name in FRAME_SERIES.values():
                    setattr(done, name, getattr(done, name) + getattr(frames, name))

    def frames(self, transport: str) -> FrameCounts:
        """Frame counters of ``transport``'s calls so far, live ones included."""
        with self._lock:
            return self._frames(transport)

    def _frames(self, transport: str) -> FrameCounts:
        total = FrameCounts(**vars(self._frames_done.get(transport, FrameCounts())))
        for t, live in self._frames_live.values():
            if t == transport:
                for name in FRAME_SERIES.values():
                    setattr(total, name, getattr(total, name) + getattr(live, name))
        return total

    def call_refused(self, reason: str) -> None:
        with self._lock:
            self.refused[reason] += 1

    def observe_turn(self, transport: str, latency_ms: dict[str, float | None]) -> None:
        with self._lock:
            for mark in MARKS:
                value = latency_ms.get(mark)
                if value is not None:
                    self._latency[(transport, mark)].observe(value)

    def observe_loop_lag(self, lag_ms: float) -> None:
        with self._lock:
            self._loop_lag.observe(lag_ms)

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
                lines += h.lines("parley_turn_latency_ms", f'transport="{t}",mark="{mark}"')
            lines += ["# HELP parley_event_loop_lag_ms How late the event loop ran (all calls share it).",
                      "# TYPE parley_event_loop_lag_ms histogram"]
            lines += self._loop_lag.lines("parley_event_loop_lag_ms", "")
            transports = sorted({t for t, _ in self._frames_live.values()} | set(self._frames_done))
            totals = {t: self._frames(t) for t in transports}
            lines += ["# HELP parley_audio_frames_total Audio frames (20 ms) by transport and direction.",
                      "# TYPE parley_audio_frames_total counter"]
            for t in transports:
                for (direction, reason), name in FRAME_SERIES.items():
                    if reason is None:
                        lines.append(f'parley_audio_frames_total{{transport="{t}",direction="{direction}"}} '
                                     f"{getattr(totals[t], name)}")
            lines += ["# HELP parley_audio_frames_missed_total Audio frames not delivered on time.",
                      "# TYPE parley_audio_frames_missed_total counter"]
            for t in transports:
                for (direction, reason), name in FRAME_SERIES.items():
                    if reason is not None:
                        lines.append(f'parley_audio_frames_missed_total{{transport="{t}",direction="{direction}",'
                                     f'reason="{reason}"}} {getattr(totals[t], name)}')
            engines = dict(self._engines)
            pauses = self._gc
        if pauses is not None:
            lines += ["# HELP parley_gc_pause_ms How long each garbage collection stopped the server process.",
                      "# TYPE parley_gc_pause_ms histogram"]
            for generation in range(3):
                h = _Histogram(pauses.buckets_ms)
                h.counts, h.total, h.n = pauses.histogram(generation)
                lines += h.lines("parley_gc_pause_ms", f'generation="{generation}"')
        if engines:  # asked outside the lock: the callbacks take their own locks
            up = [f'parley_engine_workers{{engine="{n}"}} {workers()}'
                  for n, (workers, _) in sorted(engines.items())]
            again = [f'parley_engine_restarts_total{{engine="{n}"}} {restarts()}'
                     for n, (_, restarts) in sorted(engines.items())]
            lines += ["# HELP parley_engine_workers Speech-engine worker processes running.",
                      "# TYPE parley_engine_workers gauge", *up,
                      "# HELP parley_engine_restarts_total Engine workers replaced after they died.",
                      "# TYPE parley_engine_restarts_total counter", *again]
        return "\n".join(lines) + "\n"
