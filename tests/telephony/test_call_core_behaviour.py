"""The call core's behaviour, the same scenarios over every transport: Twilio Media Streams, SIP
(with RTP) and WebRTC, each driven by its scripted caller against one server that answers all
three with the receptionist example (pocketsphinx hears, espeak speaks).

Scenarios: the greeting and a turn (the caller asks, the agent answers, the caller hangs up), a
key pressed (DTMF, RFC 4733, the page's keypad) answered from the agent's menu, the agent hanging
up after a goodbye, and the drain (SIGTERM) ending a live call with its farewell. Each checks the
call record the core writes, so the three edges must agree on it. Barge-in and transfer have
their own tests per transport (the SIP caller does not talk over the agent or take a REFER, and a
browser call has nowhere to be transferred to).
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from agent.embedded import EmbeddedAgentProcessor
from agent.spec import load_spec
from agent.tools import ToolBox
from harness.callers.sip import place_sip_call
from harness.callers.twilio import CallerConfig, CallerUtterance, run_call
from harness.callers.webrtc import place_call
from harness.flite import synthesize_flite
from pipeline.audio.g711 import resample
from pipeline.audio.wav import trim_silence
from pipeline.records import CallRecord
from telephony.server import CallServer, ServerConfig
from telephony.sip.config import SipConfig
from telephony.sip.server import SipServer
from telephony.webrtc.routes import WebRTCConfig, register_webrtc_routes

from .conftest import TOKEN

SPEC = Path(__file__).resolve().parents[2] / "agent" / "examples" / "receptionist.yaml"
HOURS = "monday to friday"              # the receptionist's hours, by voice and by key 1
FAREWELL = "we have to end this call now"
TRANSPORTS = ("twilio", "sip", "webrtc")

pytestmark = pytest.mark.skipif(shutil.which("flite") is None,
                                reason="flite is not installed (scripts/install-system-deps)")


@dataclass
class Servers:
    http: CallServer          # Twilio and WebRTC
    sip: SipServer

    def record(self, call_id: str) -> CallRecord:
        record = self.http.store.get(call_id)
        assert record is not None, f"no record of {call_id}"
        return record

    def live(self) -> int:
        return len(self.http.live) + len(self.sip.live)


@pytest.fixture
async def servers():
    spec = load_spec(SPEC)

    def receptionist(info):
        return EmbeddedAgentProcessor(spec, ToolBox(spec), call_sid=info.call_sid)

    http = CallServer(ServerConfig(host="127.0.0.1", port=0, auth_token=TOKEN, drain_grace_s=0.5),
                      agent_factory=receptionist)
    if not any(getattr(r.resource, "canonical", None) == "/api/offer" for r in http.app.router.routes()):
        http.webrtc = register_webrtc_routes(
            http.app, agent_factory=receptionist, pipeline_config=http.config.pipeline,
            store=http.store, live=http.live, config=WebRTCConfig(reraise_call_errors=True))
    sip = SipServer(SipConfig(host="127.0.0.1", port=0, rtp_port_min=40000, rtp_port_max=44999,
                              reraise_call_errors=True),
                    receptionist, store=http.store, pipeline_config=http.config.pipeline)
    await http.start()
    await sip.start()
    try:
        yield Servers(http, sip)
    finally:
        await sip.stop()
        await http.stop()


_speech_cache: dict[str, tuple[np.ndarray, int]] = {}


async def _speech(text: str) -> tuple[np.ndarray, int]:
    if text not in _speech_cache:
        _speech_cache[text] = await synthesize_flite(text)
    return _speech_cache[text]


@dataclass
class Placed:
    call_id: str
    server_hung_up: bool


async def place(transport: str, servers: Servers, *, say: str | None = None, keys: str = "",
                timeout_s: float = 40.0, linger: bool = False) -> Placed:
    """One call over ``transport``: wait out the greeting, press ``keys``, say ``say``, wait for
    the answer, hang up (unless the server did first; ``linger``: wait for the server to)."""
    if transport == "twilio":
        steps = [CallerUtterance(dtmf=k) for k in keys] + ([CallerUtterance(text=say)] if say else [])
        report = await run_call(CallerConfig(url=f"ws://127.0.0.1:{servers.http.port}/twilio/stream",
                                             auth_token=TOKEN, utterances=tuple(steps), timeout_s=timeout_s,
                                             linger_s=5.0 if linger else 0.0))
        return Placed(report.call_sid, report.server_hung_up)
    if transport == "sip":
        pcm, rate_hz = await _speech(say) if say else (np.zeros(0, np.int16), 8000)
        utterances = [resample(trim_silence(pcm, rate_hz), rate_hz, 8000)] if say else []
        report = await place_sip_call("127.0.0.1", servers.sip.port, utterances, keys=keys,
                                      greeting_wait_s=3.0, reply_timeout_s=15.0, timeout_s=timeout_s,
                                      reply_quiet_ms=3000 if linger else 600)
        return Placed(report.call_id, report.server_hung_up)  # the record's id is the Call-ID
    assert transport == "webrtc"
    pcm, rate_hz = await _speech(say) if say else (np.zeros(1600, np.int16), 16000)
    # speak after the greeting: the clip plays 6 s after the call starts (the greeting is ~5 s)
    pcm = np.concatenate([np.zeros(int(6.0 * rate_hz), np.int16), pcm])

    def done(messages: list[dict]) -> bool:
        """The answer has played: an agent line of turn 1 (said) or after the greeting (keys)
        is final (``final`` marks where playback stops)."""
        finals = [m for m in messages if m.get("type") == "transcript"
                  and m.get("role") == "agent" and m.get("final")]
        if say:
            return any(m.get("turn", 0) >= 1 for m in finals)
        return len(finals) >= 2   # the greeting, then the answer to the keys

    result = await place_call(f"http://127.0.0.1:{servers.http.port}", pcm, rate_hz,
                              until=(lambda _m: False) if linger else done,
                              keys=keys, keys_when=_greeted, timeout_s=timeout_s)
    assert result.call_id is not None, result.messages
    return Placed(result.call_id, result.server_hung_up)


def _greeted(messages: list[dict]) -> bool:
    return any(m.get("type") == "transcript" and m.get("role") == "agent" and m.get("final")
               for m in messages)


async def _ended(servers: Servers, call_id: str) -> CallRecord:
    for _ in range(100):
        record = servers.record(call_id)
        if record.ended:
            return record
        await asyncio.sleep(0.1)
    raise AssertionError(f"call {call_id} never ended: {servers.record(call_id)}")


def _agent_words(record: CallRecord) -> str:
    return " ".join([record.greeting] + [t.agent_text for t in record.turns]).lower()


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_the_greeting_and_a_turn_then_the_caller_hangs_up(servers, transport):
    placed = await place(transport, servers, say="what are your opening hours")
    record = await _ended(servers, placed.call_id)
    assert record.transport == transport
    assert record.greeting.lower().startswith("thank you for calling riverside dental"), record.greeting
    assert record.turns and record.turns[0].user_text, record.turns
    assert HOURS in _agent_words(record), _agent_words(record)
    assert not placed.server_hung_up
    assert "caller" in (record.end_reason or "") or "peer connection" in (record.end_reason or ""), \
        record.end_reason


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_key_is_answered_from_the_menu(servers, transport):
    placed = await place(transport, servers, keys="1")
    record = await _ended(servers, placed.call_id)
    assert HOURS in _agent_words(record), _agent_words(record)
    assert not record.turns or not any(t.user_text for t in record.turns)  # nothing was said


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_the_agent_hangs_up_after_a_goodbye(servers, transport):
    # a phrase pocketsphinx (the tests' recogniser) hears right at 8 and 16 kHz: it hears "thank
    # you goodbye" as "and you can buy" at 8 kHz and "goodbye" as "good night" at 16 kHz
    placed = await place(transport, servers, say="goodbye for now", linger=True)
    record = await _ended(servers, placed.call_id)
    assert placed.server_hung_up, ("the caller hung up, not the agent", record.end_reason,
                                   [t.user_text for t in record.turns])
    assert record.end_reason == "agent ended the call", record.end_reason
    assert "goodbye" in _agent_words(record) or "bye" in _agent_words(record), _agent_words(record)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_the_drain_ends_a_live_call_with_the_farewell(servers, transport):
    call = asyncio.create_task(place(transport, servers, say="i would like to leave a message",
                                     timeout_s=30, linger=True))
    for _ in range(200):
        if servers.live():
            break
        await asyncio.sleep(0.05)
    assert servers.live(), "the call never went live"
    await asyncio.sleep(1.0)  # in the middle of the greeting
    drain: Callable[[], Awaitable[None]] = (
        (lambda: servers.sip.drain(grace_s=0.5, farewell="I'm sorry, we have to end this call now. Goodbye."))
        if transport == "sip" else servers.http.drain)
    await asyncio.wait_for(drain(), 30)
    placed = await asyncio.wait_for(call, 40)
    record = await _ended(servers, placed.call_id)
    assert record.end_reason == "server shutting down", record.end_reason
    assert FAREWELL in _agent_words(record), _agent_words(record)
    assert placed.server_hung_up
    assert servers.live() == 0
