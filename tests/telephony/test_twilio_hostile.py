"""A Media Streams client that does what Twilio never would: another audio format, a second
stream for a live CallSid, an absurd chunk number, forged marks, a flood of bad messages.
The call goes on or is refused in one log line; counters and the log stay bounded."""

from __future__ import annotations

import asyncio
import base64
import json
import logging

import aiohttp

from agent.echo import EchoAgentProcessor
from telephony.server import CallServer, ServerConfig
from telephony.twilio.signature import SIGNATURE_HEADER, compute_signature

from .conftest import TOKEN, answer


def _start(sid: str, encoding: str = "audio/x-mulaw", rate: int = 8000, channels: int = 1) -> str:
    stream = "MZ" + sid[2:]
    return json.dumps({
        "event": "start", "sequenceNumber": "1", "streamSid": stream,
        "start": {"streamSid": stream, "accountSid": "AC" + "3" * 32, "callSid": sid, "tracks": ["inbound"],
                  "customParameters": {},
                  "mediaFormat": {"encoding": encoding, "sampleRate": rate, "channels": channels}},
    })


def _media(sid: str, seq: int, chunk: int) -> str:
    return json.dumps({"event": "media", "sequenceNumber": str(seq), "streamSid": "MZ" + sid[2:],
                       "media": {"track": "inbound", "chunk": str(chunk), "timestamp": str(20 * seq),
                                 "payload": base64.b64encode(b"\xff" * 160).decode()}})


async def _open(session: aiohttp.ClientSession, port: int, sid: str | None = None) -> aiohttp.ClientWebSocketResponse:
    """A signed stream, after the voice webhook answered ``sid`` (as Twilio does) when given."""
    if sid is not None:
        await answer(port, sid)
    url = f"ws://127.0.0.1:{port}/twilio/stream"
    ws = await session.ws_connect(url, headers={SIGNATURE_HEADER: compute_signature(TOKEN, url, {})})
    await ws.send_str('{"event": "connected", "protocol": "Call", "version": "1.0.0"}')
    return ws


async def _live_call(session: aiohttp.ClientSession, server, sid: str):
    """A stream for ``sid`` the webhook answered, started and live: (socket, the server's call)."""
    ws = await _open(session, server.port, sid)
    await ws.send_str(_start(sid))
    await _until(lambda: sid in server.live)
    return ws, server.live[sid]


async def _until(predicate, timeout_s: float = 10.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not predicate():
            await asyncio.sleep(0.05)


async def test_a_stream_in_another_audio_format_is_refused_in_one_line(server, caplog):
    """Regression: ``audio/x-l16`` at 16 kHz (or two channels) was accepted and decoded as mu-law."""
    caplog.set_level(logging.INFO)
    async with aiohttp.ClientSession() as s:
        for i, (enc, rate, ch) in enumerate([("audio/x-l16", 16000, 1), ("audio/x-mulaw", 8000, 2)]):
            sid = f"CA{i}" + "4" * 31
            ws = await _open(s, server.port, sid)
            await ws.send_str(_start(sid, enc, rate, ch))
            closed = await ws.receive(timeout=5)
            assert closed.type is aiohttp.WSMsgType.CLOSE and closed.data == aiohttp.WSCloseCode.UNSUPPORTED_DATA
            assert server.store.get(sid) is None and not server.live
    refusals = [r.getMessage() for r in caplog.records if "stream refused" in r.getMessage()]
    assert len(refusals) == 2 and "audio/x-l16 at 16000 Hz" in refusals[0] and "2 channel(s)" in refusals[1]
    assert not any(r.exc_info for r in caplog.records)


async def test_a_second_stream_for_a_live_call_sid_is_refused(server):
    """Regression: it dropped the first out of /healthz and the drain, and both wrote one record."""
    sid = "CA" + "5" * 32
    async with aiohttp.ClientSession() as s:
        first, call = await _live_call(s, server, sid)
        second = await _open(s, server.port, sid)
        await second.send_str(_start(sid))
        closed = await second.receive(timeout=5)
        assert closed.type is aiohttp.WSMsgType.CLOSE and closed.data == aiohttp.WSCloseCode.POLICY_VIOLATION
        assert server.live.get(sid) is call and server.metrics.refused["duplicate"] == 1
        async with s.get(f"http://127.0.0.1:{server.port}/healthz") as r:
            assert (await r.json())["live_calls"] == 1
        await first.close()
        await _until(lambda: sid not in server.live)


async def test_absurd_chunks_forged_marks_and_a_flood_stay_bounded(server, caplog):
    """Regression: chunk 999999999999999 added 1e15 lost frames; a never-sent ``u0:end`` marked
    the greeting heard; 3,000 bad messages gave 3,000 WARNING lines."""
    caplog.set_level(logging.INFO)
    sid = "CA" + "6" * 32
    async with aiohttp.ClientSession() as s:
        ws, call = await _live_call(s, server, sid)
        await _until(lambda: call.transport.link.stats.media_out_bytes > 0)  # the greeting is playing
        await ws.send_str(_media(sid, 2, 1))
        await ws.send_str(_media(sid, 3, 999_999_999_999_998))
        await ws.send_str(_media(sid, 4, 1_000_000_000_000_000 - 1))  # the next one: no gap
        for name in ("u0:end", "u1:end", "x" * 10_000):
            await ws.send_str(json.dumps({"event": "mark", "sequenceNumber": "5", "streamSid": "MZ" + sid[2:],
                                          "mark": {"name": name}}))
        for _ in range(3000):
            await ws.send_str("not json")
        await _until(lambda: call.transport.link.stats.bad_messages >= 3000, 30)
        tracker = call.transport.link.tracker
        assert tracker.utterances
        assert all(u.state.name != "HEARD" for u in tracker.utterances)  # no forged mark counted
        await ws.close()
        await _until(lambda: sid not in server.live)
    stats = server.store.get(sid).stats
    assert stats["bad_messages"] == 3000 and stats["frames_in"] == 3 and stats["frames_in_lost"] == 0
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING and "bad Media Streams" in r.getMessage()]
    assert 5 <= len(warnings) <= 8  # the first five, then one per thousand
    assert max(len(r.getMessage()) for r in caplog.records) < 1000


async def test_a_stream_needs_a_call_the_webhook_answered_and_only_once(server):
    """Regression: the upgrade's signature covers only the URL, so one captured header opened any
    number of streams; now a stream needs its CallSid answered on /twilio/voice, once."""
    sid = "CA" + "7" * 32
    async with aiohttp.ClientSession() as s:
        ws = await _open(s, server.port)  # no webhook answered this CallSid
        await ws.send_str(_start(sid))
        closed = await ws.receive(timeout=5)
        assert closed.type is aiohttp.WSMsgType.CLOSE and closed.data == aiohttp.WSCloseCode.POLICY_VIOLATION
        assert server.metrics.refused["unanswered"] == 1 and server.store.get(sid) is None

        ws, _ = await _live_call(s, server, sid)  # answered: taken
        await ws.close()
        await _until(lambda: sid not in server.live)
        again = await _open(s, server.port)  # the same stream replayed after the call: refused
        await again.send_str(_start(sid))
        closed = await again.receive(timeout=5)
        assert closed.type is aiohttp.WSMsgType.CLOSE and server.metrics.refused["unanswered"] == 2


async def test_max_calls_bounds_every_transport_together(caplog):
    """Regression: 200 signed streams were all accepted on a machine sized for 16; nothing refused
    the excess, on any transport."""
    caplog.set_level(logging.INFO)
    server = CallServer(ServerConfig(host="127.0.0.1", port=0, auth_token=TOKEN, max_calls=2),
                        agent_factory=lambda _info: EchoAgentProcessor())
    await server.start()
    try:
        async with aiohttp.ClientSession() as s:
            live = await _open(s, server.port, "CA" + "8" * 32)
            await live.send_str(_start("CA" + "8" * 32))
            await answer(server.port, "CA" + "9" * 32)  # answered, its stream not yet come: a place held
            url = f"http://127.0.0.1:{server.port}/twilio/voice"
            form = {"CallSid": "CA" + "a" * 32}
            async with s.post(url, data=form, headers={SIGNATURE_HEADER: compute_signature(TOKEN, url, form)}) as r:
                assert r.status == 200 and '<Reject reason="busy"/>' in await r.text()
            offer = {"type": "offer", "sdp": "v=0\r\nm=audio 9 UDP/TLS/RTP/SAVPF 111\r\n"}
            async with s.post(f"http://127.0.0.1:{server.port}/api/offer", json=offer) as r:
                assert r.status == 503 and r.headers["Retry-After"] == "30"
            assert server.metrics.refused["capacity"] == 2
            await live.close()
            await _until(lambda: not server.live)
    finally:
        await server.stop()
    lines = [r.getMessage() for r in caplog.records if "refusing new calls" in r.getMessage()]
    assert lines == ["refusing new calls: capacity (2 in progress, at most 2)"]  # once, not per refusal
