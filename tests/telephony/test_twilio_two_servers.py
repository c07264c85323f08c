"""The webhook and the media stream of one Twilio call on different servers (a deployment behind a
load balancer): the server that answers the webhook vouches for the stream with a signed token in
the <Stream>'s parameters; any server of the deployment (the same auth token) takes it, once, within
the minute; a forged, stale or replayed token is refused."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest

from agent.echo import EchoAgentProcessor
from harness.callers.twilio import CallerConfig, CallerUtterance, run_call
from telephony.server import CallServer, ServerConfig
from telephony.twilio.messages import Connected, Start
from telephony.twilio.signature import ANSWER_PARAM, SIGNATURE_HEADER, answer_token, compute_signature

from .conftest import TOKEN


@pytest.fixture
async def two_servers():
    servers = [CallServer(ServerConfig(host="127.0.0.1", port=0, auth_token=TOKEN),
                          agent_factory=lambda _info: EchoAgentProcessor()) for _ in range(2)]
    for s in servers:
        await s.start()
    try:
        yield servers
    finally:
        for s in servers:
            await s.stop()


async def test_a_stream_is_taken_by_a_server_that_did_not_answer_its_webhook(two_servers):
    a, b = two_servers
    report = await run_call(CallerConfig(
        url=f"ws://127.0.0.1:{b.port}/twilio/stream", auth_token=TOKEN, timeout_s=45,
        calls_base_url=f"http://127.0.0.1:{a.port}",          # the webhook goes to A, the stream to B
        utterances=(CallerUtterance(text="hello how are you"),)))
    assert len(report.turns) == 1 and report.turns[0].agent_audio_bytes > 0
    record = b.store.get(report.call_sid)
    assert record is not None and record.ended and ANSWER_PARAM not in record.params
    assert a.store.get(report.call_sid) is None


async def _stream(server: CallServer, call_sid: str, token: str) -> int | None:
    """Open a stream with ``token``; -> the close code when refused, None when it was taken."""
    url = f"ws://127.0.0.1:{server.port}/twilio/stream"
    async with aiohttp.ClientSession() as s, s.ws_connect(
            url, headers={SIGNATURE_HEADER: compute_signature(TOKEN, url, {})}) as ws:
        await ws.send_str(Connected().to_json())
        await ws.send_str(Start(1, "MZ" + "1" * 32, "AC" + "1" * 32, call_sid, ("inbound",),
                                {ANSWER_PARAM: token}).to_json())
        msg = await ws.receive(timeout=5)
        if msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.CLOSING):
            return ws.close_code or msg.data
        await ws.close()
        return None


@pytest.mark.parametrize("how", ["forged", "stale", "another call's"])
async def test_a_stream_with_a_bad_token_is_refused(two_servers, how):
    _, b = two_servers
    sid = "CA" + "7" * 32
    token = {"forged": answer_token("not-the-auth-token", sid, time.time()),
             "stale": answer_token(TOKEN, sid, time.time() - 120),
             "another call's": answer_token(TOKEN, "CA" + "8" * 32, time.time())}[how]
    assert await _stream(b, sid, token) == 1008
    assert b.store.get(sid) is None


async def test_a_token_is_taken_once(two_servers):
    _, b = two_servers
    sid = "CA" + "9" * 32
    token = answer_token(TOKEN, sid, time.time())
    assert await _stream(b, sid, token) is None               # taken: the call starts (the greeting)
    for _ in range(50):
        if sid not in b.live:
            break
        await asyncio.sleep(0.1)
    assert await _stream(b, sid, token) == 1008               # the same token again: refused
