"""The model server's ``/metrics``, through ``prometheus_client`` (its own registry).

    parley_model_ttfb_ms{model="tts"}               histogram, request -> first audio sent
    parley_model_final_ms{model="stt"}              histogram, "finalize" -> final transcript sent
    parley_model_stt_finals_total{early}            counter, finals sent; early="yes": begun before the
                                                    finalize (at the client's pause, or the quiet)
    parley_model_live_streams{model}                gauge, open WebSocket streams (and /invocations)
    parley_model_streams_total{model}               counter, streams opened
    parley_model_refused_total{reason}              counter, streams refused (draining, full, bad)
    parley_model_steps_total{model}                 counter, batched model steps run
    parley_model_step_seconds_total{model}          counter, seconds inside them
    parley_model_stepped_streams_total{model}       counter, streams summed over them
                                                    (mean batch size = stepped / steps)
    parley_model_queue_depth{model}                 gauge, requests waiting for the model thread
    parley_model_ready                              gauge, 1 when /ping answers 200
    parley_gpu_utilization_ratio{gpu}, parley_gpu_memory_used_bytes{gpu}
                                                    gauges, only when a GPU and NVML are present

SageMaker scrapes this into CloudWatch when the endpoint config asks for it
(``MetricsConfig.EnableDetailedObservability``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

prometheus_client.disable_created_metrics()
LATENCY_BUCKETS_MS = (2, 5, 10, 20, 30, 50, 75, 100, 150, 250, 500, 1000, 2500)


@dataclass(frozen=True)
class EngineStats:
    """Read at scrape time from one model's engine (all cumulative but ``queue_depth``)."""

    steps: int
    step_s: float
    streams_stepped: int
    queue_depth: int


class _EngineCollector(Collector):
    def __init__(self, sources: dict[str, Callable[[], EngineStats]], gpu: Callable[[], list[tuple[float, int]]]):
        self._sources = sources
        self._gpu = gpu

    def collect(self) -> Iterator[Metric]:
        steps = CounterMetricFamily("parley_model_steps", "Batched model steps run", labels=["model"])
        secs = CounterMetricFamily("parley_model_step_seconds", "Seconds inside batched model steps",
                                   labels=["model"])
        stepped = CounterMetricFamily("parley_model_stepped_streams", "Streams summed over the batched steps",
                                      labels=["model"])
        depth = GaugeMetricFamily("parley_model_queue_depth", "Requests waiting for the model thread",
                                  labels=["model"])
        for model, read in self._sources.items():
            stats = read()
            steps.add_metric([model], stats.steps)
            secs.add_metric([model], stats.step_s)
            stepped.add_metric([model], stats.streams_stepped)
            depth.add_metric([model], stats.queue_depth)
        yield from (steps, secs, stepped, depth)
        gpus = self._gpu()
        if gpus:
            util = GaugeMetricFamily("parley_gpu_utilization_ratio", "GPU busy share (NVML)", labels=["gpu"])
            mem = GaugeMetricFamily("parley_gpu_memory_used_bytes", "GPU memory in use (NVML)", labels=["gpu"])
            for i, (busy, used) in enumerate(gpus):
                util.add_metric([str(i)], busy)
                mem.add_metric([str(i)], used)
            yield util
            yield mem


def _nvml_reader() -> Callable[[], list[tuple[float, int]]]:
    """GPU utilisation and memory through NVML (``pynvml``) when both a GPU and the package are
    here; otherwise a reader that reports nothing (CPU hosts export no GPU series)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    except Exception as exc:  # noqa: BLE001 - no package, no driver, no GPU: all mean "no GPU series"
        log.debug("no GPU metrics: %s", exc)
        return list

    def read() -> list[tuple[float, int]]:
        return [(pynvml.nvmlDeviceGetUtilizationRates(h).gpu / 100.0, pynvml.nvmlDeviceGetMemoryInfo(h).used)
                for h in handles]

    log.info("GPU metrics through NVML for %d device(s)", len(handles))
    return read


class ModelServerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.ttfb_ms = Histogram("parley_model_ttfb_ms", "TTS: request to first audio sent, ms", ["model"],
                                 buckets=LATENCY_BUCKETS_MS, registry=self.registry)
        self.final_ms = Histogram("parley_model_final_ms", "STT: finalize to final transcript sent, ms",
                                  ["model"], buckets=LATENCY_BUCKETS_MS, registry=self.registry)
        self.finals = Counter("parley_model_stt_finals", "STT: finals sent, by whether begun before the finalize",
                              ["early"], registry=self.registry)
        for early in ("yes", "no"):
            self.finals.labels(early)
        self.live = Gauge("parley_model_live_streams", "Open streams", ["model"], registry=self.registry)
        self.streams = Counter("parley_model_streams", "Streams opened", ["model"], registry=self.registry)
        self.refused = Counter("parley_model_refused", "Streams refused", ["reason"], registry=self.registry)
        self.ready = Gauge("parley_model_ready", "1 when /ping answers 200", registry=self.registry)
        for model in ("tts", "stt"):
            self.live.labels(model)
            self.streams.labels(model)
        self._sources: dict[str, Callable[[], EngineStats]] = {}
        self.registry.register(_EngineCollector(self._sources, _nvml_reader()))

    def register_engine(self, model: str, read: Callable[[], EngineStats]) -> None:
        self._sources[model] = read

    def render(self) -> bytes:
        return generate_latest(self.registry)
