"""A Media Streams client that does what Twilio never would: another audio format, a second
stream for a live CallSid, an absurd chunk number, forged marks, a flood of bad messages.
The call goes on or is refused in one log line; counters and the log stay bounded."""

from __future__ import annotations

import asyncio
import base64
import json
import logging

import aiohttp

from telephony.twilio.signature import SIGNATURE_HEADER, compute_signature

from .conftest import TOKEN


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


async def _open(session: aiohttp.ClientSession, port: int) -> aiohttp.ClientWebSocketResponse:
    url = f"ws://127.0.0.1:{port}/twilio/stream"
    ws = await session.ws_connect(url, headers={SIGNATURE_HEADER: compute_signature(TOKEN, url, {})})
    await ws.send_str('{"event": "connected", "protocol": "Call", "version": "1.0.0"}')
    return ws


async def _until(predicate, timeout_s: float = 10.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not predicate():
            await asyncio.sleep(0.05)


async def test_a_stream_in_another_audio_format_is_refused_in_one_line(server, caplog):
    """Regression: ``audio/x-l16`` at 16 kHz (or two channels) was accepted and decoded as mu-law."""
    caplog.set_level(logging.INFO)
    async with aiohttp.ClientSession() as s:
        for i, (enc, rate, ch) in enumerate([("audio/x-l16", 16000, 1), ("audio/x-mulaw", 8000, 2)]):
            ws = await _open(s, server.port)
            sid = f"CA{i}" + "4" * 31
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
        first = await _open(s, server.port)
        await first.send_str(_start(sid))
        await _until(lambda: sid in server.live)
        call = server.live[sid]
        second = await _open(s, server.port)
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
        ws = await _open(s, server.port)
        await ws.send_str(_start(sid))
        await _until(lambda: sid in server.live)
        call = server.live[sid]
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
