"""The call tier's metrics for CloudWatch, as Embedded Metric Format (EMF) log lines.

CloudWatch turns each JSON line below into metrics when the log reaches CloudWatch Logs (the
CloudWatch agent, the ECS awslogs driver, or Lambda): no API call from the server, no credentials.

    {"_aws": {"Timestamp": 1764676800000, "CloudWatchMetrics": [{"Namespace": "Parley",
       "Dimensions": [["Deployment"]], "Metrics": [{"Name": "FirstByteMs", "Unit": "Milliseconds"}, ...]}]},
     "Deployment": "parley-voice", "FirstByteMs": [312.0, 287.5], "LiveCalls": 4, "DroppedFrames": 0}

``FirstByteMs`` is each turn's end of caller speech -> first agent audio byte on the wire (the
latency observer's ``transport_first_byte``), every value of the interval (EMF takes up to 100 a
line, so CloudWatch computes true percentiles); ``LiveCalls`` the calls in progress at the flush;
``DroppedFrames`` the 20 ms frames lost, late or underrun since the last flush. The names and the
``Deployment`` dimension are what ``parley deploy``'s alarms and dashboard read.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable

from .metrics import Metrics

NAMESPACE = "Parley"
DIMENSION = "Deployment"
FIRST_BYTE = "FirstByteMs"
LIVE_CALLS = "LiveCalls"
DROPPED_FRAMES = "DroppedFrames"
MAX_VALUES = 100                      # EMF's limit of values per metric per line


class EmfPublisher:
    """Writes one EMF line per interval (more when a busy interval has over 100 turns)."""

    def __init__(self, metrics: Metrics, deployment: str, write: Callable[[str], None], interval_s: float = 60.0,
                 clock: Callable[[], float] = time.time) -> None:
        self.metrics = metrics
        self.deployment = deployment
        self.write = write
        self.interval_s = interval_s
        self.clock = clock
        self._lock = threading.Lock()
        self._first_byte_ms: list[float] = []
        self._dropped_before = metrics.missed_frames()
        metrics.add_turn_listener(self._on_turn)

    def _on_turn(self, _transport: str, latency_ms: dict[str, float | None]) -> None:
        value = latency_ms.get("transport_first_byte")
        if value is not None:
            with self._lock:
                self._first_byte_ms.append(round(float(value), 1))

    def flush(self) -> list[str]:
        """The lines of the interval just ended, written and returned."""
        with self._lock:
            values, self._first_byte_ms = self._first_byte_ms, []
        dropped_now = self.metrics.missed_frames()
        dropped, self._dropped_before = dropped_now - self._dropped_before, dropped_now
        live = self.metrics.live_calls()
        stamp = int(self.clock() * 1000)
        batches = [values[i:i + MAX_VALUES] for i in range(0, len(values), MAX_VALUES)] or [[]]
        lines = []
        for i, batch in enumerate(batches):
            metrics = ([{"Name": FIRST_BYTE, "Unit": "Milliseconds"}] if batch else [])
            doc: dict[str, object] = {DIMENSION: self.deployment}
            if batch:
                doc[FIRST_BYTE] = batch
            if i == 0:                  # the gauges once per interval
                metrics += [{"Name": LIVE_CALLS, "Unit": "Count"}, {"Name": DROPPED_FRAMES, "Unit": "Count"}]
                doc[LIVE_CALLS] = live
                doc[DROPPED_FRAMES] = dropped
            doc["_aws"] = {"Timestamp": stamp, "CloudWatchMetrics": [
                {"Namespace": NAMESPACE, "Dimensions": [[DIMENSION]], "Metrics": metrics}]}
            lines.append(json.dumps(doc, separators=(",", ":")))
        for line in lines:
            self.write(line)
        return lines

    async def run(self) -> None:
        """Flush every interval until cancelled; the last interval is flushed on the way out."""
        try:
            while True:
                await asyncio.sleep(self.interval_s)
                self.flush()
        finally:
            self.flush()
