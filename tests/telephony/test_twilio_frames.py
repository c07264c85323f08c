"""Dropped audio frames on Twilio calls, counted by the server over a real loopback stream."""

from __future__ import annotations

import asyncio
import base64
import json

import aiohttp

from harness.callers.twilio import CallerConfig, CallerUtterance, run_call
from telephony.twilio.signature import SIGNATURE_HEADER, compute_signature
from tests.metrics_text import sample

from .conftest import TOKEN, answer

SILENCE_20MS = base64.b64encode(b"\xff" * 160).decode()


def _media(stream_sid: str, seq: int, chunk: int, timestamp_ms: int) -> str:
    return json.dumps({"event": "media", "sequenceNumber": str(seq), "streamSid": stream_sid,
                       "media": {"track": "inbound", "chunk": str(chunk), "timestamp": str(timestamp_ms),
                                 "payload": SILENCE_20MS}})


async def _ended(server, sid: str):
    for _ in range(100):
        record = server.store.get(sid)
        if record is not None and record.ended:
            return record
        await asyncio.sleep(0.05)
    raise AssertionError(f"call {sid} did not end")


async def test_skipped_chunks_repeats_and_late_media_are_counted(server):
    url = f"ws://127.0.0.1:{server.port}/twilio/stream"
    sid, stream = "CA" + "7" * 32, "MZ" + "7" * 32
    seq = iter(range(1, 10_000))
    await answer(server.port, sid)
    async with aiohttp.ClientSession() as s:
        async with s.ws_connect(url, headers={SIGNATURE_HEADER: compute_signature(TOKEN, url, {})}) as ws:
            await ws.send_str('{"event": "connected", "protocol": "Call", "version": "1.0.0"}')
            await ws.send_str(json.dumps({
                "event": "start", "sequenceNumber": str(next(seq)), "streamSid": stream,
                "start": {"streamSid": stream, "accountSid": "AC" + "7" * 32, "callSid": sid,
                          "tracks": ["inbound"], "customParameters": {},
                          "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}},
            }))
            for _ in range(200):  # until the pipeline runs (and reads the socket): the greeting plays
                live = server.live.get(sid)
                if live is not None and live.transport.link.stats.media_out_bytes > 0:
                    break
                await asyncio.sleep(0.05)
            # chunks 1-10, then 14-20 (11, 12 and 13 never sent), all at once: early, never late
            for chunk in [*range(1, 11), *range(14, 21)]:
                await ws.send_str(_media(stream, next(seq), chunk, (chunk - 1) * 20))
            await asyncio.sleep(0.5)  # chunk 21 is due 20 ms after chunk 20, and comes ~0.5 s later
            await ws.send_str(_media(stream, next(seq), 21, 400))
            await ws.send_str(_media(stream, next(seq), 21, 400))  # a repeat: its place has passed
            await ws.send_str(json.dumps({"event": "stop", "sequenceNumber": str(next(seq)), "streamSid": stream,
                                          "stop": {"accountSid": "AC" + "7" * 32, "callSid": sid}}))
            await asyncio.sleep(0.1)
    record = await _ended(server, sid)
    stats = record.stats
    assert (stats["frames_in"], stats["frames_in_lost"], stats["frames_in_late"]) == (19, 3, 2), stats
    async with aiohttp.ClientSession() as s:
        async with s.get(f"http://127.0.0.1:{server.port}/metrics") as r:
            text = await r.text()
    assert sample(text, 'parley_audio_frames_missed_total{transport="twilio",direction="in",reason="lost"}') == 3
    assert sample(text, 'parley_audio_frames_total{transport="twilio",direction="in"}') == 19


async def test_a_clean_call_loses_no_frames(server):
    url = f"ws://127.0.0.1:{server.port}/twilio/stream"
    report = await run_call(CallerConfig(url=url, auth_token=TOKEN, utterances=(CallerUtterance(text="hello how are you"),),
                                         timeout_s=30))
    assert len(report.turns) == 1 and report.turns[0].agent_audio_bytes > 0
    record = await _ended(server, report.call_sid)
    stats = record.stats
    # every chunk the caller sent arrived, none missing; the greeting and reply went out
    assert stats["frames_in"] == report.media_frames_sent and stats["frames_in_lost"] == 0, stats
    assert stats["frames_out"] * 160 >= report.media_bytes_received > 0, stats
    # the counters are in the record the server serves (late/underrun depend on this machine's load:
    # the benchmark measures them)
    call_url = f"http://127.0.0.1:{server.port}/calls/{report.call_sid}"
    async with aiohttp.ClientSession() as s:
        async with s.get(call_url, headers={SIGNATURE_HEADER: compute_signature(TOKEN, call_url, {})}) as r:
            served = await r.json()
    assert {k: served["stats"][k] for k in stats if k.startswith("frames_")} == \
        {k: v for k, v in stats.items() if k.startswith("frames_")}
    assert served["greeting_heard"] == served["greeting"] and served["greeting"].startswith("Hello")
