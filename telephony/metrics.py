"""Server metrics in Prometheus' text format (``GET /metrics``), through ``prometheus_client``.

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
    parley_engine_request_ms{engine,op}                 histogram, measured in the engine workers:
                                                        a request's arrival to its reply (merged
                                                        from their files: read_worker_metrics)

Engine workers are whatever ``register_engine`` was given (``parley serve`` registers its
pocketsphinx workers, SSM recognizer and SSM voice processes); each is asked at every scrape.

``mark`` is one of the latency observer's marks (vad_stop, stt_final, first_text,
tts_first_audio, transport_first_byte); transport_first_byte is the server's voice-to-voice.
Frame counters (:mod:`telephony.audio_meter`) include live calls: a call's ``FrameCounts`` is
read at every scrape while it runs and folded into the totals when it ends.

Each :class:`Metrics` owns a ``prometheus_client`` registry (``Metrics.registry``): the two
histograms observed as calls go are the library's ``Histogram``; what is read at scrape time
(calls, frames, engine workers, GC pauses) comes from one collector. ``render()`` is the
library's exposition (``generate_latest``). ``_created`` series are off: the scrape is about
the server's life, which ``process_start_time_seconds`` already dates.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from pathlib import Path
from collections.abc import Callable, Iterator
from itertools import accumulate

import prometheus_client
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from pipeline.gc_pauses import GcPauses
from pipeline.latency import MARKS
from pipeline.tracing import CallTracing
from telephony.audio_meter import FrameCounts

BUCKETS_MS = (50, 100, 150, 200, 250, 300, 400, 500, 750, 1000, 1500, 2000, 3000, 5000)
LAG_BUCKETS_MS = (1, 5, 10, 20, 50, 100, 250, 500, 1000, 2500)
# (direction, reason or None for all frames) -> the FrameCounts field
FRAME_SERIES = {("in", None): "in_frames", ("in", "lost"): "in_lost", ("in", "late"): "in_late",
                ("out", None): "out_frames", ("out", "underrun"): "out_underrun", ("out", "late"): "out_late"}

prometheus_client.disable_created_metrics()


class _ScrapeCollector(Collector):
    """What is read at scrape time: calls, frames, engine workers, GC pauses."""

    def __init__(self, metrics: "Metrics") -> None:
        self._m = metrics

    def collect(self) -> Iterator[Metric]:
        yield from self._m._collect()


class Metrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        # each call's trace is made here too (pipeline.tracing): this object already reaches
        # every transport's calls; off unless the server was given a collector
        self.tracing = CallTracing.off()
        self.live: dict[str, int] = defaultdict(int)
        self.calls: dict[str, int] = defaultdict(int)
        self.refused: dict[str, int] = defaultdict(int)
        self._frames_done: dict[str, FrameCounts] = defaultdict(FrameCounts)  # by transport
        self._frames_live: dict[int, tuple[str, FrameCounts]] = {}
        self._engines: dict[str, tuple[Callable[[], int], Callable[[], int]]] = {}
        self._gc: GcPauses | None = None
        self._turn_listeners: list[Callable[[str, dict[str, float | None]], None]] = []
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(_ScrapeCollector(self))
        self._latency = Histogram("parley_turn_latency_ms",
                                  "Per-turn latency after the end of the caller's speech.",
                                  ["transport", "mark"], buckets=BUCKETS_MS, registry=self.registry)
        self._loop_lag = Histogram("parley_event_loop_lag_ms", "How late the event loop ran (all calls share it).",
                                   buckets=LAG_BUCKETS_MS, registry=self.registry)

    def register_gc(self, pauses: GcPauses) -> None:
        """Report this process's garbage-collector pauses (``pipeline.gc_pauses``)."""
        with self._lock:
            self._gc = pauses

    def read_worker_metrics(self, folder: str | Path) -> None:
        """Merge what engine worker processes write into ``folder`` into every scrape
        (``pipeline.engines.worker_metrics``: ``parley_engine_request_ms``)."""
        MultiProcessCollector(self.registry, path=str(folder))

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

    def live_calls(self) -> int:
        """Calls in progress, every transport together."""
        with self._lock:
            return sum(self.live.values())

    def missed_frames(self) -> int:
        """Frames not delivered on time so far (lost, late, underrun), every transport and call."""
        missed = [name for (_, reason), name in FRAME_SERIES.items() if reason is not None]
        with self._lock:
            transports = {t for t, _ in self._frames_live.values()} | set(self._frames_done)
            return sum(getattr(self._frames(t), name) for t in transports for name in missed)

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

    def add_turn_listener(self, listener: Callable[[str, dict[str, float | None]], None]) -> None:
        """Also hand each turn's latencies to ``listener`` (telephony.emf's CloudWatch lines)."""
        self._turn_listeners.append(listener)

    def observe_turn(self, transport: str, latency_ms: dict[str, float | None]) -> None:
        for listener in self._turn_listeners:
            listener(transport, latency_ms)
        for mark in MARKS:
            value = latency_ms.get(mark)
            if value is not None:
                self._latency.labels(transport=transport, mark=mark).observe(value)

    def observe_loop_lag(self, lag_ms: float) -> None:
        self._loop_lag.observe(lag_ms)

    def render(self) -> str:
        """The Prometheus text exposition of everything above."""
        return generate_latest(self.registry).decode()

    def _collect(self) -> Iterator[Metric]:
        live = GaugeMetricFamily("parley_live_calls", "Calls in progress.", labels=["transport"])
        calls = CounterMetricFamily("parley_calls", "Calls taken.", labels=["transport"])
        refused = CounterMetricFamily("parley_calls_refused", "Calls refused.", labels=["reason"])
        frames = CounterMetricFamily("parley_audio_frames", "Audio frames (20 ms) by transport and direction.",
                                     labels=["transport", "direction"])
        missed = CounterMetricFamily("parley_audio_frames_missed", "Audio frames not delivered on time.",
                                     labels=["transport", "direction", "reason"])
        with self._lock:
            for t, n in sorted(self.live.items()):
                live.add_metric([t], n)
            for t, n in sorted(self.calls.items()):
                calls.add_metric([t], n)
            for r, n in sorted(self.refused.items()):
                refused.add_metric([r], n)
            transports = sorted({t for t, _ in self._frames_live.values()} | set(self._frames_done))
            for t in transports:
                total = self._frames(t)
                for (direction, reason), name in FRAME_SERIES.items():
                    if reason is None:
                        frames.add_metric([t, direction], getattr(total, name))
                    else:
                        missed.add_metric([t, direction, reason], getattr(total, name))
            engines = dict(self._engines)
            pauses = self._gc
        yield from (live, calls, refused, frames, missed)
        if pauses is not None:
            gc = HistogramMetricFamily("parley_gc_pause_ms",
                                       "How long each garbage collection stopped the server process.",
                                       labels=["generation"])
            for generation in range(3):
                counts, total_ms, n = pauses.histogram(generation)
                bounds = [str(b) for b in pauses.buckets_ms] + ["+Inf"]
                gc.add_metric([str(generation)], list(zip(bounds, accumulate(counts))), total_ms)
            yield gc
        if engines:  # asked outside the lock: the callbacks take their own locks
            up = GaugeMetricFamily("parley_engine_workers", "Speech-engine worker processes running.",
                                   labels=["engine"])
            again = CounterMetricFamily("parley_engine_restarts", "Engine workers replaced after they died.",
                                        labels=["engine"])
            for name, (workers, restarts) in sorted(engines.items()):
                up.add_metric([name], workers())
                again.add_metric([name], restarts())
            yield from (up, again)
