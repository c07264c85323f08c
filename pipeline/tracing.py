"""Each call as an OpenTelemetry trace, sent to a collector over OTLP/HTTP (off unless asked for).

    tracing = CallTracing.otlp("http://collector:4318/v1/traces", agent_name="receptionist")
    trace = tracing.call(call_id, "twilio")     # the root span "call" opens
    trace.turn(turn_latency, record)            # hook: a turn got its first agent audio
    trace.end(record)                           # the last turns and the root span close
    tracing.shutdown(timeout_s=5)               # at exit, off the event loop

The trace of one call::

    call            call id, transport, direction, agent, end reason, turns
    ├── turn 1      end of the caller's speech -> first agent audio written to the transport
    │     events: vad.stop, stt.final, llm.first_token, tts.first_audio, audio.first_out,
    │             interruption, tool_call (name, duration, error), transfer (kind), slot (name)
    ├── turn 2 ...

Spans are built from :class:`~pipeline.latency.TurnLatency`'s marks with their own timestamps, so
the hook costs one span's construction and nothing waits on the clock. A turn's span is written
when the next turn gets its first audio (or the call ends): by then a barge-in into its reply is
known. Nothing the caller or the agent said goes into a span (no transcript, no slot value, no
tool argument, no transfer target, no caller number); the end reason is masked
(:func:`~pipeline.redaction.mask_numbers`) as the records are.

Export is OpenTelemetry's ``BatchSpanProcessor``: spans queue in memory and a worker thread posts
them, so a collector that is down or slow never reaches the call. The queue is bounded
(``max_queue``): past it spans are dropped, and every drop (a full queue, a refused or timed-out
post) is counted (``dropped``) and said in one WARNING line, then at most once a minute.

Why not pipecat's own tracing (``pipecat.utils.tracing``): it puts transcripts, prompts and the
text spoken into span attributes (parley must never), it sets the process-wide tracer provider,
and its turns come from pipecat's ``TurnTrackingObserver``, not parley's latency marks (end of
speech to the first byte written), so the trace and ``/metrics`` would disagree on what a turn is.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import metadata

from opentelemetry import trace as otel_trace
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import Span, Tracer

from pipeline.latency import TurnLatency
from pipeline.records import CallRecord
from pipeline.redaction import mask_numbers

__all__ = ["CallTrace", "CallTracing", "trace_exporter_url"]

log = logging.getLogger(__name__)

SERVICE_NAME = "parley"
DROP_LOG_EVERY_S = 60.0
END_REASON_MAX_CHARS = 200
# mark -> the event's name in the turn span
MARK_EVENTS = {"vad_stop": "vad.stop", "stt_final": "stt.final", "first_text": "llm.first_token",
               "tts_first_audio": "tts.first_audio", "transport_first_byte": "audio.first_out"}
# what an agent event may carry into a span: only these keys of its data, never values said
EVENT_KEYS = {"tool_call": ("name", "duration_ms"), "transfer": ("kind",), "slot": ("name",),
              "hangup": (), "llm_error": ()}


def trace_exporter_url(endpoint: str) -> str:
    """OTLP/HTTP's traces URL for a collector's base endpoint (``http://host:4318``)."""
    base = endpoint.rstrip("/")
    return base if base.endswith("/v1/traces") else base + "/v1/traces"


def _version() -> str:
    try:
        return metadata.version("parley-voice")
    except metadata.PackageNotFoundError:
        return "unknown"


class _DropCounter:
    """Counts spans lost on the way out and says so in one line (then at most once a minute)."""

    def __init__(self, where: str):
        self.where = where
        self.dropped = 0
        self._lock = threading.Lock()
        self._logged_at: float | None = None

    def add(self, n: int, why: str) -> None:
        with self._lock:
            self.dropped += n
            now = time.monotonic()
            if self._logged_at is not None and now - self._logged_at < DROP_LOG_EVERY_S:
                return
            self._logged_at = now
            total = self.dropped
        log.warning("traces: %d span(s) dropped so far (%s; collector %s); calls go on", total, why, self.where)


class _CountingExporter(SpanExporter):
    """The OTLP exporter, its failures counted as drops; runs on the batch worker thread."""

    def __init__(self, inner: SpanExporter, drops: _DropCounter, settled: _Settled):
        self._inner = inner
        self._drops = drops
        self._settled = settled

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        ok = False
        try:  # an error raised goes on to the batch processor, which logs it; the spans are lost
            result = self._inner.export(spans)
            ok = result is SpanExportResult.SUCCESS
            return result
        finally:
            if not ok:
                self._drops.add(len(spans), "the collector refused or did not answer")
            self._settled.add(len(spans))

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)


@dataclass
class _Settled:
    """Spans that left the queue (exported or lost), against those that entered it."""

    n: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, n: int) -> None:
        with self._lock:
            self.n += n


class _BoundedProcessor(SpanProcessor):
    """``BatchSpanProcessor`` behind a bound of spans waiting: past ``max_queue`` a span is
    dropped here and counted (the batch processor's own queue would drop silently, in one log
    line per process)."""

    def __init__(self, inner: BatchSpanProcessor, drops: _DropCounter, settled: _Settled, max_queue: int):
        self._inner = inner
        self._drops = drops
        self._settled = settled
        self._max_queue = max_queue
        self._entered = 0

    def on_start(self, span, parent_context: Context | None = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        if self._entered - self._settled.n >= self._max_queue:
            self._drops.add(1, f"over {self._max_queue} spans waiting")
            return
        self._entered += 1
        self._inner.on_end(span)

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)


class CallTracing:
    """The server's tracer: one per process, shared by every transport's calls.

    ``CallTracing.off()`` (the default) makes no spans at all; ``CallTracing.otlp(url)`` exports.
    ``exporter``: any span exporter instead of OTLP (tests, benchmarks)."""

    def __init__(self, provider: TracerProvider | None, *, agent_name: str = "",
                 drops: _DropCounter | None = None):
        self._provider = provider
        self._tracer: Tracer | None = provider.get_tracer("parley") if provider is not None else None
        self.agent_name = agent_name
        self._drops = drops

    @classmethod
    def off(cls) -> CallTracing:
        return cls(None)

    @classmethod
    def otlp(cls, url: str, *, agent_name: str = "", timeout_s: float = 10.0, max_queue: int = 2048,
             schedule_delay_ms: int = 2000, exporter: SpanExporter | None = None) -> CallTracing:
        """Export to the collector at ``url`` (the full ``/v1/traces`` URL, see
        :func:`trace_exporter_url`); each post gives up after ``timeout_s``, retries included."""
        drops = _DropCounter(url)
        settled = _Settled()
        if exporter is None:
            exporter = OTLPSpanExporter(endpoint=url, timeout=timeout_s)
            # its retries log a line each; the drop counter says it once instead
            logging.getLogger("opentelemetry.exporter.otlp.proto.http.trace_exporter").setLevel(logging.CRITICAL)
        batch = BatchSpanProcessor(_CountingExporter(exporter, drops, settled), max_queue_size=max_queue,
                                   schedule_delay_millis=schedule_delay_ms,
                                   max_export_batch_size=min(512, max_queue))
        resource = Resource.create({"service.name": SERVICE_NAME, "service.version": _version()})
        provider = TracerProvider(resource=resource)
        provider.add_span_processor(_BoundedProcessor(batch, drops, settled, max_queue))
        return cls(provider, agent_name=agent_name, drops=drops)

    @property
    def enabled(self) -> bool:
        return self._tracer is not None

    @property
    def dropped(self) -> int:
        """Spans lost on the way to the collector since start."""
        return self._drops.dropped if self._drops is not None else 0

    def call(self, call_id: str, transport: str) -> CallTrace:
        """The root span of a call, open from now."""
        return CallTrace(self._tracer, call_id, transport, self.agent_name)

    def force_flush(self, timeout_s: float = 10.0) -> bool:
        """Blocks: run it off the event loop."""
        return self._provider.force_flush(int(timeout_s * 1000)) if self._provider is not None else True

    def shutdown(self) -> None:
        """Blocks until the queue is posted (each post bounded by ``timeout_s``): at exit."""
        if self._provider is not None:
            self._provider.shutdown()


class CallTrace:
    """One call's spans. With tracing off every method returns at once."""

    def __init__(self, tracer: Tracer | None, call_id: str, transport: str, agent_name: str):
        self._tracer = tracer
        self._root: Span | None = None
        self._pending: TurnLatency | None = None  # written when the next turn is, or at the end
        self._written: set[int] = set()
        # monotonic seconds (the latency marks) -> epoch nanoseconds (OpenTelemetry's time)
        self._epoch_offset_ns = time.time_ns() - time.monotonic_ns()
        self._agent_name = agent_name
        if tracer is not None:
            self._root = tracer.start_span("call", attributes={
                "parley.call.id": call_id, "parley.transport": transport})
            self._context = otel_trace.set_span_in_context(self._root)

    def _ns(self, monotonic_s: float) -> int:
        return int(monotonic_s * 1e9) + self._epoch_offset_ns

    def turn(self, turn: TurnLatency, record: CallRecord) -> None:
        """The hook where a turn got its first audio (``record`` brought up to date): the turn
        before it is written now."""
        if self._root is None:
            return
        if self._pending is not None and self._pending.turn != turn.turn:
            self._write(self._pending, record)
        self._pending = turn

    def end(self, record: CallRecord, turns: Sequence[TurnLatency] = (),
            events_before_first_turn: Sequence[dict] = ()) -> None:
        """The call is over: its unwritten turns (answered or not) and the root span end."""
        root = self._root
        if root is None:
            return
        self._root = None
        for t in turns:
            if t.turn not in self._written:
                self._write(t, record)
        for e in events_before_first_turn:
            root.add_event(e.get("kind", "event"), _event_attributes(e))
        params = record.params
        direction = (params.get("direction") or params.get("Direction")
                     or ("outbound" if record.dial or record.answered_by is not None else "inbound"))
        root.set_attributes({
            "parley.call.direction": "outbound" if direction.startswith("outbound") else "inbound",
            "parley.agent.name": self._agent_name,
            "parley.call.end_reason": mask_numbers(record.end_reason or "")[:END_REASON_MAX_CHARS],
            "parley.call.turns": len(turns),
            "parley.call.interrupted_turns": sum(1 for t in record.turns if t.interrupted),
        })
        if record.answered_by is not None:
            root.set_attribute("parley.call.answered_by", record.answered_by)
        if record.errors:
            root.set_status(otel_trace.Status(otel_trace.StatusCode.ERROR))
        root.end()

    def _write(self, t: TurnLatency, record: CallRecord) -> None:
        assert self._tracer is not None
        self._written.add(t.turn)
        marks = t.latency_ms()
        # cut in on before its first audio (the observer), or during its reply (the playout)
        interrupted = t.interrupted or (t.turn <= len(record.turns) and record.turns[t.turn - 1].interrupted)
        attributes: dict[str, bool | int | float] = {
            "parley.turn.number": t.turn,
            "parley.turn.answered": t.complete,
            "parley.turn.interrupted": interrupted,
        }
        for name, ms in marks.items():
            if ms is not None:
                attributes[f"parley.turn.{name}_ms"] = ms
        end_s = t.at.get("transport_first_byte", max(t.at.values(), default=t.end_of_speech_s))
        span = self._tracer.start_span("turn", context=self._context, attributes=attributes,
                                       start_time=self._ns(t.end_of_speech_s))
        for name, at_s in sorted(t.at.items(), key=lambda kv: kv[1]):
            if name in MARK_EVENTS:
                span.add_event(MARK_EVENTS[name], timestamp=self._ns(at_s))
        if interrupted and t.interruption_s is not None:
            span.add_event("interruption", timestamp=self._ns(t.interruption_s))
        for e, at_s in zip(t.events, t.event_at_s):
            span.add_event(e.get("kind", "event"), _event_attributes(e), timestamp=self._ns(at_s))
        span.end(end_time=self._ns(max(end_s, t.end_of_speech_s)))


def _event_attributes(event: dict) -> dict[str, str | float | bool]:
    """An agent event's safe part: the keys :data:`EVENT_KEYS` allows (names, durations), and
    whether a tool call failed; never a value, argument or target."""
    data = event.get("data") or {}
    out: dict[str, str | float | bool] = {}
    for key in EVENT_KEYS.get(event.get("kind", ""), ()):
        value = data.get(key)
        if isinstance(value, str):
            out[key] = value[:80]
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[key] = float(value)
    if event.get("kind") == "tool_call":
        out["error"] = "error" in data
    return out
