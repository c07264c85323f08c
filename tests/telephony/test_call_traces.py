"""Each call a trace: real Twilio calls over loopback, their spans posted (OTLP/HTTP, protobuf)
to a stand-in collector on 127.0.0.1:0, which answers, refuses (500) or never answers."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import logging
from collections.abc import AsyncIterator
from typing import Literal

import pytest
from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from agent.echo import EchoAgentProcessor
from harness.callers.twilio import CallerConfig, CallerUtterance, run_call
from pipeline.tracing import CallTracing
from telephony.server import CallServer, ServerConfig

from .conftest import TOKEN

Mode = Literal["answer", "refuse", "hang"]
SAID = ("hello how are you", "i would like to check my account")


class Collector:
    """An OTLP/HTTP traces endpoint: ``POST /v1/traces`` with an ``ExportTraceServiceRequest``."""

    def __init__(self, mode: Mode):
        self.mode = mode
        self.requests: list[ExportTraceServiceRequest] = []
        self.posts = 0
        self._never = asyncio.Event()

    async def traces(self, request: web.Request) -> web.Response:
        self.posts += 1
        assert request.content_type == "application/x-protobuf"
        body = await request.read()
        if request.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        if self.mode == "hang":
            await self._never.wait()
        if self.mode == "refuse":
            return web.Response(status=500, text="collector down")
        self.requests.append(ExportTraceServiceRequest.FromString(body))
        return web.Response(body=ExportTraceServiceResponse().SerializeToString(),
                            content_type="application/x-protobuf")

    def spans(self) -> list[tuple[dict, Span]]:
        """Every span received, with its resource's attributes."""
        out = []
        for req in self.requests:
            for rs in req.resource_spans:
                resource = _attrs(rs.resource.attributes)
                out.extend((resource, span) for ss in rs.scope_spans for span in ss.spans)
        return out


def _value(v: AnyValue) -> object:
    return getattr(v, v.WhichOneof("value"))


def _attrs(kvs) -> dict:
    return {kv.key: _value(kv.value) for kv in kvs}


@contextlib.asynccontextmanager
async def traced_server(mode: Mode, *, timeout_s: float = 2.0) -> AsyncIterator[tuple[CallServer, Collector]]:
    collector = Collector(mode)
    app = web.Application()
    app.router.add_post("/v1/traces", collector.traces)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    tracing = CallTracing.otlp(f"http://127.0.0.1:{port}/v1/traces", agent_name="echo", timeout_s=timeout_s,
                               schedule_delay_ms=50)
    server = CallServer(ServerConfig(host="127.0.0.1", port=0, auth_token=TOKEN),
                        agent_factory=lambda _info: EchoAgentProcessor(), tracing=tracing)
    await server.start()
    try:
        yield server, collector
    finally:
        await server.stop()
        await asyncio.to_thread(tracing.shutdown)
        await runner.cleanup()


async def _call(server: CallServer, said: tuple[str, ...] = SAID):
    report = await run_call(CallerConfig(
        url=f"ws://127.0.0.1:{server.port}/twilio/stream", auth_token=TOKEN,
        utterances=tuple(CallerUtterance(text=t) for t in said), params={"customer": "test"}, timeout_s=60))
    record = server.store.get(report.call_sid)
    assert record is not None and record.ended and record.end_reason == "caller hung up (stop)"
    assert len(record.turns) == len(said) and all(t.agent_text_heard for t in record.turns)
    return report, record


async def test_a_call_is_one_trace_with_a_span_per_turn():
    async with traced_server("answer") as (server, collector):
        report, record = await _call(server)
        assert await asyncio.to_thread(server.metrics.tracing.force_flush, 5.0)
        spans = collector.spans()
    roots = [(res, s) for res, s in spans if s.name == "call"]
    assert len(roots) == 1, [s.name for _, s in spans]
    resource, root = roots[0]
    assert resource["service.name"] == "parley" and resource["service.version"]
    assert not root.parent_span_id
    call = _attrs(root.attributes)
    assert call["parley.call.id"] == report.call_sid
    assert call["parley.transport"] == "twilio"
    assert call["parley.call.direction"] == "inbound"
    assert call["parley.agent.name"] == "echo"
    assert call["parley.call.end_reason"] == "caller hung up (stop)"
    assert call["parley.call.turns"] == len(SAID)

    turns = sorted((s for _, s in spans if s.name == "turn"), key=lambda s: s.start_time_unix_nano)
    assert len(turns) == len(SAID) == len(spans) - 1
    for number, (span, rec) in enumerate(zip(turns, record.turns), start=1):
        a = _attrs(span.attributes)
        assert span.trace_id == root.trace_id and span.parent_span_id == root.span_id
        assert a["parley.turn.number"] == number and a["parley.turn.answered"] is True
        # end of speech -> first audio out: the record's voice-to-voice, inside the call
        v2v_ms = (span.end_time_unix_nano - span.start_time_unix_nano) / 1e6
        assert 0 < v2v_ms < 5000
        assert v2v_ms == pytest.approx(rec.latency_ms["transport_first_byte"], abs=0.01)
        assert a["parley.turn.transport_first_byte_ms"] == rec.latency_ms["transport_first_byte"]
        assert root.start_time_unix_nano <= span.start_time_unix_nano <= span.end_time_unix_nano \
            <= root.end_time_unix_nano
        events = [e.name for e in span.events]
        assert events[0] == "vad.stop" and events[-1] == "audio.first_out"
        assert {"stt.final", "llm.first_token", "tts.first_audio"} <= set(events)
        times = [e.time_unix_nano for e in span.events]
        assert times == sorted(times)
    assert turns[0].end_time_unix_nano <= turns[1].start_time_unix_nano

    # nothing the caller said, nor their number, in any attribute of any span or event
    values = [str(v) for _, s in spans for v in _attrs(s.attributes).values()]
    values += [str(v) for _, s in spans for e in s.events for v in _attrs(e.attributes).values()]
    resource_text = " ".join(str(v) for res, _ in spans for v in res.values())
    text = " ".join(values).lower()
    assert "15550100" not in text + resource_text and "15550199" not in text + resource_text
    said_and_answered = SAID + tuple(t.user_text for t in record.turns) + tuple(t.agent_text for t in record.turns)
    assert all(said_and_answered)
    for said in said_and_answered:
        for word in said.lower().split():
            if len(word) > 3:
                assert word not in text, (word, values)


@pytest.mark.parametrize("mode", ["refuse", "hang"])
async def test_a_collector_that_refuses_or_hangs_costs_the_call_nothing(mode: Mode, caplog):
    caplog.set_level(logging.WARNING, logger="pipeline.tracing")
    async with traced_server(mode, timeout_s=0.5) as (server, collector):
        await _call(server, SAID[:1])  # answered and heard as if no collector were there
        await asyncio.to_thread(server.metrics.tracing.force_flush, 5.0)
        assert collector.posts >= 1 and not collector.requests
        assert server.metrics.tracing.dropped == 2  # the turn and the call
        drops = [r for r in caplog.records if r.name == "pipeline.tracing"]
        assert len(drops) == 1, [r.getMessage() for r in drops]
        assert "dropped" in drops[0].getMessage()
