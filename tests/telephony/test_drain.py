"""SIGTERM's drain: no new calls, live calls finish or are ended politely, records kept."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from agent.echo import EchoAgentProcessor
from harness.callers.twilio import CallerConfig, CallerUtterance, run_call
from telephony.server import CallServer, ServerConfig
from telephony.twilio.signature import SIGNATURE_HEADER, compute_signature

from .conftest import TOKEN


async def test_drain_refuses_new_calls_and_ends_live_ones_politely():
    server = CallServer(ServerConfig(port=0, auth_token=TOKEN, drain_grace_s=1.0),
                        agent_factory=lambda _i: EchoAgentProcessor())
    port = await server.start()
    url = f"ws://127.0.0.1:{port}/twilio/stream"
    try:
        call = asyncio.create_task(run_call(CallerConfig(
            url=url, auth_token=TOKEN, timeout_s=40,
            utterances=(CallerUtterance(text="hello how are you"), CallerUtterance(text="i would like to check my account"),
                        CallerUtterance(text="can you help me please")),
        )))
        for _ in range(100):  # wait until the call is live
            if server.live:
                break
            await asyncio.sleep(0.05)
        assert server.live
        drain = asyncio.create_task(server.drain())
        await asyncio.sleep(0.2)
        async with aiohttp.ClientSession() as s:
            async with s.get(f"http://127.0.0.1:{port}/healthz") as r:
                assert r.status == 503
            headers = {SIGNATURE_HEADER: compute_signature(TOKEN, url, {})}
            with pytest.raises(aiohttp.WSServerHandshakeError) as exc:
                await s.ws_connect(url, headers=headers)
            assert exc.value.status == 503
            voice = f"http://127.0.0.1:{port}/twilio/voice"
            form = {"CallSid": "CA" + "3" * 32}
            async with s.post(voice, data=form, headers={SIGNATURE_HEADER: compute_signature(TOKEN, voice, form)}) as r:
                assert "<Reject" in await r.text()
        report = await asyncio.wait_for(call, 40)
        await asyncio.wait_for(drain, 20)
    finally:
        await server.stop()
    assert report.server_hung_up  # ended by the server, not by the caller
    record = server.store.get(report.call_sid)
    assert record.ended and record.end_reason == "server shutting down"
    spoken = " ".join([record.greeting] + [t.agent_text for t in record.turns])
    assert "we have to end this call now" in spoken.lower()  # the farewell was said
    assert not server.live
