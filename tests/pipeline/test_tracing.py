"""The call tracer without a call: turns from scripted latency marks, a stalled exporter."""

from __future__ import annotations

import threading
import time

import pytest

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from pipeline.latency import TurnLatency
from pipeline.records import CallRecord
from pipeline.tracing import CallTracing, trace_exporter_url


class Kept(SpanExporter):
    """Keeps what it is given; ``gate`` (when set) holds every export until it opens."""

    def __init__(self, gate: threading.Event | None = None):
        self.spans: list[ReadableSpan] = []
        self.gate = gate

    def export(self, spans):
        if self.gate is not None:
            self.gate.wait(10)
        self.spans.extend(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self):
        pass


def _turn(number: int, t0: float, *, tool: bool = False) -> TurnLatency:
    t = TurnLatency(turn=number, end_of_speech_s=t0)
    t.at.update(vad_stop=t0 + 0.2, stt_final=t0 + 0.25, first_text=t0 + 0.3, tts_first_audio=t0 + 0.32,
                transport_first_byte=t0 + 0.35)
    if tool:
        t.events.append({"kind": "tool_call", "data": {"name": "lookup", "arguments": {"card": "4111111111111111"},
                                                       "duration_ms": 12.0, "result": {"ok": True}}})
        t.event_at_s.append(t0 + 0.28)
        t.events.append({"kind": "transfer", "data": {"kind": "phone", "target": "+15550123"}})
        t.event_at_s.append(t0 + 0.4)
    return t


def test_off_makes_no_spans():
    tracing = CallTracing.off()
    trace = tracing.call("CA1", "twilio")
    trace.turn(_turn(1, time.monotonic()), CallRecord("CA1", "twilio"))
    trace.end(CallRecord("CA1", "twilio"))
    assert not tracing.enabled and tracing.dropped == 0


def test_turn_spans_carry_marks_and_safe_events_only():
    kept = Kept()
    tracing = CallTracing.otlp("http://unused/v1/traces", exporter=kept, agent_name="bank")
    record = CallRecord("CA1", "sip", params={"direction": "outbound", "From": "+15550100"})
    trace = tracing.call("CA1", "sip")
    t0 = time.monotonic()
    turns = [_turn(1, t0, tool=True), _turn(2, t0 + 2)]
    for t in turns:
        record.turn(t.turn)
        trace.turn(t, record)
    record.end_reason = "error: card 4111111111111111 refused"
    trace.end(record, turns)
    tracing.force_flush()
    by_name = {s.name: s for s in kept.spans if s.name == "call"}
    call = by_name["call"]
    assert call.attributes["parley.call.direction"] == "outbound"
    assert call.attributes["parley.call.end_reason"] == "error: card ************1111 refused"
    first = next(s for s in kept.spans if s.name == "turn" and s.attributes["parley.turn.number"] == 1)
    assert first.parent.span_id == call.context.span_id
    assert (first.end_time - first.start_time) / 1e6 == pytest.approx(first.attributes["parley.turn.transport_first_byte_ms"], abs=0.01)
    events = {e.name: dict(e.attributes) for e in first.events}
    assert events["tool_call"] == {"name": "lookup", "duration_ms": 12.0, "error": False}
    assert events["transfer"] == {"kind": "phone"}  # never the target
    assert "+15550100" not in str([dict(s.attributes) for s in kept.spans])
    tracing.shutdown()


def test_a_stalled_exporter_bounds_the_queue_and_counts_drops(caplog):
    gate = threading.Event()
    tracing = CallTracing.otlp("http://stalled/v1/traces", exporter=Kept(gate), max_queue=4, schedule_delay_ms=10)
    record = CallRecord("CA1", "twilio")
    started = time.perf_counter()
    for n in range(20):
        trace = tracing.call(f"CA{n}", "twilio")
        trace.end(record)
    assert time.perf_counter() - started < 0.5  # nothing waited on the exporter
    assert 20 - 4 - 1 <= tracing.dropped <= 20 - 4  # at most one batch in flight, four queued
    assert len([r for r in caplog.records if "dropped" in r.getMessage()]) == 1
    gate.set()
    tracing.shutdown()


def test_the_traces_url_of_a_base_endpoint():
    assert trace_exporter_url("http://collector:4318") == "http://collector:4318/v1/traces"
    assert trace_exporter_url("http://collector:4318/") == "http://collector:4318/v1/traces"
    assert trace_exporter_url("https://api.honeycomb.io/v1/traces") == "https://api.honeycomb.io/v1/traces"
