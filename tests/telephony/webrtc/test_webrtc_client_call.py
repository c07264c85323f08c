"""A browser-less WebRTC call (aiortc) through /api/offer, against the real server and pipeline."""

from __future__ import annotations

import asyncio
import re

import aiohttp
import jiwer
import numpy as np

from pipecat.frames.frames import (
    EndWorkerFrame,
    LLMContextFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
)
from pipecat.processors.frame_processor import FrameDirection

from agent.echo import EchoAgentProcessor
from telephony.server import CallServer, ServerConfig
from telephony.twilio.signature import SIGNATURE_HEADER, compute_signature
from harness.callers.webrtc import place_call

from .conftest import SAID, TOKEN


def _replied(messages: list[dict]) -> bool:
    return any(m.get("type") == "latency" and m.get("turn") == 1 for m in messages) and any(
        m.get("type") == "transcript" and m.get("role") == "agent" and m.get("turn") == 1 and m.get("final")
        for m in messages)


async def test_call_is_heard_and_answered(webrtc_server, speech):
    pcm, rate_hz = speech
    base = f"http://127.0.0.1:{webrtc_server.port}"
    # lead_s: speak after the greeting. (At lead_s=4.0 pocketsphinx hears "oh yeah lair you" every
    # time: the VAD fires ~0.6 s into the speech and the 0.5 s pre-roll misses "hel-".)
    result = await place_call(base, pcm, rate_hz, until=_replied, timeout_s=25.0, lead_s=3.5)
    assert result.call_id and result.call_id.startswith("WR")
    candidates = [ln.split()[4] for ln in result.answer_sdp.splitlines() if ln.startswith("a=candidate:")]
    assert candidates and set(candidates) == {"127.0.0.1"}, candidates  # ICE stayed on loopback
    kinds = [m.get("type") for m in result.messages]
    assert kinds[0] == "call" and result.messages[0]["state"] == "started", kinds

    # the agent heard the caller (pocketsphinx: allow recognizer errors)
    heard = " ".join(result.transcripts("user")).lower()
    assert heard and jiwer.wer(SAID, heard) <= 0.5, heard
    assert result.transcripts("user", final=False), "no partial transcripts reached the client"

    # the agent's greeting and reply arrived as audio (Opus at 48 kHz) and as text
    audio = result.agent_audio
    assert result.audio_sample_rate_hz == 48000
    assert np.abs(audio.astype(np.int32)).max() > 3000
    agent = result.transcripts("agent")
    # word timestamps drop punctuation; under load the greeting's first phrase can play out before
    # the next is made, and the page then gets it as a final of its own first ("Hello this", seen
    # once in a full `make test`): the whole greeting still follows
    assert any(t.startswith("Hello this is parley") for t in agent[:2]), agent
    assert any(t.startswith("You said") for t in agent), agent

    # per-turn latency came with the turn
    latency = next(m for m in result.messages if m.get("type") == "latency")
    assert latency["turn"] == 1 and latency["latency_ms"]["transport_first_byte"] > 0

    # the record is kept like a Twilio call's, and the server serves it
    record = webrtc_server.store.get(result.call_id)
    assert record is not None and record.transport == "webrtc"
    assert record.greeting.startswith("Hello") and record.turns[0].agent_text.startswith("You said")
    assert record.turns[0].user_text == heard_first(result)
    url = f"{base}/calls/{result.call_id}"
    async with aiohttp.ClientSession() as http:
        async with http.get(url, headers={SIGNATURE_HEADER: compute_signature(TOKEN, url, {})}) as resp:
            assert resp.status == 200
            served = await resp.json()
    assert served["transport"] == "webrtc" and served["turns"][0]["latency_ms"]["transport_first_byte"] > 0


def heard_first(result) -> str:
    return next(m["text"] for m in result.messages
                if m.get("type") == "transcript" and m.get("role") == "user" and m.get("final"))


class FarewellAgent(EchoAgentProcessor):
    """Answers any first turn with a farewell and ends the call (no reliance on the recognizer)."""

    async def process_frame(self, frame, direction):
        if not isinstance(frame, LLMContextFrame):
            return await super().process_frame(frame, direction)
        await self.push_frame(LLMFullResponseStartFrame())
        await self.push_frame(LLMTextFrame("Thank you for calling. Goodbye!"))
        await self.push_frame(LLMFullResponseEndFrame())
        await self.push_frame(EndWorkerFrame(), FrameDirection.UPSTREAM)


async def test_agent_ends_the_call_after_its_farewell(webrtc_server, speech):
    webrtc_server.webrtc.agent_factory = lambda _info: FarewellAgent()
    pcm, rate_hz = speech

    def ended(messages: list[dict]) -> bool:
        return any(m.get("type") == "signalling" and m.get("message", {}).get("type") == "peerLeft"
                   for m in messages)

    base = f"http://127.0.0.1:{webrtc_server.port}"
    # lead_s=1.0 cuts into the greeting: the farewell is the only reply
    result = await place_call(base, pcm, rate_hz, until=ended, timeout_s=25.0, lead_s=1.0)
    assert ended(result.messages), [m.get("type") for m in result.messages]
    agent = result.transcripts("agent")
    assert any(line.startswith("Thank you for") for line in agent), agent
    record = webrtc_server.store.get(result.call_id)
    for _ in range(50):
        if record.ended:
            break
        await asyncio.sleep(0.1)
    assert record.ended and record.end_reason == "agent ended the call", record.end_reason
    # the farewell played to its end before the call closed (the server's account: the page's last
    # transcript line may stop at a pause in playback when the machine is busy)
    assert record.turns[-1].agent_text_heard == "Thank you for calling Goodbye", record.turns
    assert not webrtc_server.live


async def test_server_shutdown_ends_live_calls(webrtc_server, speech):
    pcm, rate_hz = speech
    base = f"http://127.0.0.1:{webrtc_server.port}"

    def ended(messages: list[dict]) -> bool:
        return any(m.get("type") == "call" and m.get("state") == "ended" for m in messages)

    call = asyncio.create_task(place_call(base, pcm, rate_hz, until=ended, timeout_s=20.0, lead_s=5.0))
    for _ in range(100):  # until the greeting is playing
        if webrtc_server.live and any(c.events.lines for c in webrtc_server.live.values()):
            break
        await asyncio.sleep(0.05)
    (live,) = webrtc_server.live.values()
    await webrtc_server.stop()
    result = await call
    (end,) = [m for m in result.messages if m.get("type") == "call" and m.get("state") == "ended"]
    assert end["reason"] == "server shutting down" and end["call_id"] == live.call_sid, end
    record = webrtc_server.store.get(live.call_sid)
    assert record.ended and record.end_reason == "server shutting down"
    assert not webrtc_server.live and not webrtc_server.webrtc.calls


async def test_a_caller_whose_pings_stop_is_hung_up(webrtc_server, speech, monkeypatch):
    """A browser tab that vanishes sends no close: the keep-alive watchdog ends its call."""
    monkeypatch.setattr("telephony.webrtc.call.KEEPALIVE_LOST_S", 0.5)
    pcm, rate_hz = speech
    base = f"http://127.0.0.1:{webrtc_server.port}"
    result = await place_call(base, pcm, rate_hz, until=lambda _m: False, timeout_s=15.0, lead_s=30.0,
                              keepalive_for_s=1.0)
    (end,) = [m for m in result.messages if m.get("type") == "call" and m.get("state") == "ended"]
    assert end["reason"] == "caller gone (keep-alive lost)", end
    record = webrtc_server.store.get(result.call_id)
    for _ in range(50):
        if record.ended:
            break
        await asyncio.sleep(0.1)
    assert record.end_reason == "caller gone (keep-alive lost)"


async def test_drain_ends_a_live_browser_call_with_the_farewell(speech):
    """Regression: the drain called ``end_politely`` on every live call, and browser calls had
    none (AttributeError stopped the drain). Now the call core ends every transport's calls."""
    server = CallServer(ServerConfig(host="127.0.0.1", port=0, auth_token=TOKEN, drain_grace_s=0.3,
                                     shutdown_farewell="We are closing now. Goodbye."),
                        agent_factory=lambda _info: EchoAgentProcessor())
    await server.start()
    pcm, rate_hz = speech
    try:
        call = asyncio.create_task(place_call(f"http://127.0.0.1:{server.port}", pcm, rate_hz,
                                              until=lambda _m: False, timeout_s=30.0, lead_s=20.0))
        for _ in range(200):  # until the greeting has played
            live = list(server.live.values())
            if live and live[0].record.greeting:
                break
            await asyncio.sleep(0.05)
        (live,) = server.live.values()
        await asyncio.wait_for(server.drain(), 25)
        result = await asyncio.wait_for(call, 30)
    finally:
        await server.stop()
    assert not server.live
    agent = result.transcripts("agent")
    # the farewell reached the page (its last words' transcripts may lose the race with the hang-up
    # when the machine is loaded: the audio played, the page's text ends a word or two early; seen
    # in full `make test` runs beside a training job, "... We are closing", never alone)
    assert agent and re.search(r"We are closing( now( Goodbye)?)?$", agent[-1]), agent
    # the server ended it after the farewell, as when the agent says goodbye (pipecat's peerLeft)
    assert any(m.get("type") == "signalling" and m.get("message", {}).get("type") == "peerLeft"
               for m in result.messages), [m.get("type") for m in result.messages]
    record = server.store.get(live.call_id)
    assert record.ended and record.end_reason == "server shutting down"
    said = " ".join([record.greeting] + [t.agent_text for t in record.turns])
    assert "we are closing now" in said.lower(), said  # and the record kept it
