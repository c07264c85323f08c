"""Signatures are checked on the webhook, the stream upgrade and the call records."""

from __future__ import annotations

import asyncio
import logging

import aiohttp
import pytest

from telephony.server import CallServer, ServerConfig
from telephony.errors import TelephonyError
from telephony.twilio.signature import SIGNATURE_HEADER, compute_signature

from .conftest import TOKEN

FORM = {"CallSid": "CA" + "1" * 32, "From": "+15550100", "To": "+15550199", "Direction": "inbound"}


async def test_voice_webhook_answers_twiml_with_stream_and_parameters(server):
    url = f"http://127.0.0.1:{server.port}/twilio/voice"
    async with aiohttp.ClientSession() as s:
        sig = compute_signature(TOKEN, url, FORM)
        async with s.post(url, data=FORM, headers={SIGNATURE_HEADER: sig}) as r:
            assert r.status == 200
            body = await r.text()
    assert r.content_type == "application/xml"
    assert f'<Stream url="ws://127.0.0.1:{server.port}/twilio/stream">' in body
    assert '<Parameter name="CallSid" value="CA1111' in body
    assert '<Parameter name="From" value="+15550100"/>' in body


@pytest.mark.parametrize("signature", ["", "Zm9yZ2VkLXNpZ25hdHVyZQ=="])
async def test_forged_webhook_signature_is_refused(server, signature):
    url = f"http://127.0.0.1:{server.port}/twilio/voice"
    headers = {SIGNATURE_HEADER: signature} if signature else {}
    async with aiohttp.ClientSession() as s:
        async with s.post(url, data=FORM, headers=headers) as r:
            assert r.status == 403


async def test_signature_over_other_params_is_refused(server):
    url = f"http://127.0.0.1:{server.port}/twilio/voice"
    sig = compute_signature(TOKEN, url, {**FORM, "From": "+15550666"})
    async with aiohttp.ClientSession() as s:
        async with s.post(url, data=FORM, headers={SIGNATURE_HEADER: sig}) as r:
            assert r.status == 403


@pytest.mark.parametrize("forge", ["missing", "wrong-token", "wrong-url"])
async def test_forged_stream_upgrade_is_refused(server, forge):
    url = f"ws://127.0.0.1:{server.port}/twilio/stream"
    headers = {}
    if forge == "wrong-token":
        headers[SIGNATURE_HEADER] = compute_signature("not-the-token", url, {})
    elif forge == "wrong-url":
        headers[SIGNATURE_HEADER] = compute_signature(TOKEN, url.replace("stream", "other"), {})
    async with aiohttp.ClientSession() as s:
        with pytest.raises(aiohttp.WSServerHandshakeError) as exc:
            await s.ws_connect(url, headers=headers)
    assert exc.value.status == 403


async def test_call_records_need_a_signature_and_unknown_calls_are_404(server):
    url = f"http://127.0.0.1:{server.port}/calls/CA{'0' * 32}"
    async with aiohttp.ClientSession() as s:
        async with s.get(url) as r:
            assert r.status == 403
        async with s.get(url, headers={SIGNATURE_HEADER: compute_signature(TOKEN, url, {})}) as r:
            assert r.status == 404


async def test_healthz(server):
    async with aiohttp.ClientSession() as s:
        async with s.get(f"http://127.0.0.1:{server.port}/healthz") as r:
            assert r.status == 200
            assert (await r.json())["status"] == "ok"


async def test_the_browsers_icon_request_is_no_content_not_a_404(server):
    async with aiohttp.ClientSession() as s:
        async with s.get(f"http://127.0.0.1:{server.port}/favicon.ico") as r:
            assert r.status == 204 and await r.read() == b""


def test_no_token_and_not_insecure_is_a_clear_error():
    with pytest.raises(TelephonyError, match="TWILIO_AUTH_TOKEN"):
        ServerConfig(auth_token=None)


async def test_insecure_dev_accepts_unsigned_webhook(caplog):
    srv = CallServer(ServerConfig(port=0, insecure_dev=True), agent_factory=lambda _i: None)
    port = await srv.start()
    try:
        async with aiohttp.ClientSession() as s:
            async with s.post(f"http://127.0.0.1:{port}/twilio/voice", data=FORM) as r:
                assert r.status == 200
    finally:
        await srv.stop()
    assert "INSECURE DEV MODE" in caplog.text


async def test_behind_a_proxy_the_public_url_is_what_is_signed():
    srv = CallServer(ServerConfig(port=0, auth_token=TOKEN, public_url="https://parley.example.com"),
                     agent_factory=lambda _i: None)
    port = await srv.start()
    try:
        local = f"http://127.0.0.1:{port}/twilio/voice"
        async with aiohttp.ClientSession() as s:
            public_sig = compute_signature(TOKEN, "https://parley.example.com/twilio/voice", FORM)
            async with s.post(local, data=FORM, headers={SIGNATURE_HEADER: public_sig}) as r:
                assert r.status == 200
                assert '<Stream url="wss://parley.example.com/twilio/stream">' in await r.text()
            local_sig = compute_signature(TOKEN, local, FORM)  # what a forger on the inside would sign
            async with s.post(local, data=FORM, headers={SIGNATURE_HEADER: local_sig}) as r:
                assert r.status == 403
            ws_sig = compute_signature(TOKEN, "wss://parley.example.com/twilio/stream", {})
            async with s.ws_connect(f"ws://127.0.0.1:{port}/twilio/stream",
                                    headers={SIGNATURE_HEADER: ws_sig}) as ws:
                await ws.close()  # the upgrade was accepted
    finally:
        await srv.stop()


async def test_a_server_without_twilio_needs_no_token_and_says_why_twilio_is_off():
    """A SIP-only (or browser-only) server: `parley serve --sip-port` without TWILIO_AUTH_TOKEN
    used to refuse to start."""
    with pytest.raises(TelephonyError, match="TWILIO_AUTH_TOKEN"):
        ServerConfig(port=0)
    server = CallServer(ServerConfig(port=0, twilio=False), agent_factory=lambda _i: None)
    port = await server.start()
    try:
        async with aiohttp.ClientSession() as s:
            async with s.post(f"http://127.0.0.1:{port}/twilio/voice", data=FORM) as r:
                assert r.status == 404 and "TWILIO_AUTH_TOKEN" in await r.text()
            async with s.get(f"http://127.0.0.1:{port}/calls/CA123") as r:
                assert r.status == 404
            async with s.get(f"http://127.0.0.1:{port}/healthz") as r:
                assert r.status == 200
    finally:
        await server.stop()


async def test_a_port_in_use_is_one_clear_error(server):
    other = CallServer(ServerConfig(port=server.port, insecure_dev=True), agent_factory=lambda _i: None)
    with pytest.raises(TelephonyError, match=f"cannot listen on 127.0.0.1:{server.port}"):
        await other.start()
    with pytest.raises(TelephonyError, match="outside 0..65535"):
        ServerConfig(port=70000, insecure_dev=True)


async def _raw(port: int, data: bytes, *, wait_s: float = 2.0, hang_up: bool = False) -> bytes:
    """Send ``data`` on a new connection; the answer's first bytes (or hang up at once)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()
    if hang_up:  # the client goes away mid-request
        writer.close()
        await writer.wait_closed()
        return b""
    try:
        return await asyncio.wait_for(reader.read(200), wait_s)
    finally:
        writer.close()


async def test_what_a_client_sends_wrong_is_one_line_never_a_traceback(monkeypatch, caplog):
    """Regression: a malformed multipart body got 500 and a traceback (it was parsed before the
    signature was checked); half-sent bodies and over-long lines gave tracebacks too; header and
    body dribblers were never dropped."""
    monkeypatch.setattr("telephony.server.HEADER_TIMEOUT_S", 1.0)
    monkeypatch.setattr("telephony.server.BODY_TIMEOUT_S", 1.0)
    caplog.set_level(logging.INFO)
    srv = CallServer(ServerConfig(port=0, auth_token=TOKEN), agent_factory=lambda _i: None)
    port = await srv.start()
    try:
        body = b'--xx\r\nContent-Disposition: form-data; name="a"\r\n\r\nvalue\r\n--yy--'
        head = (b"POST /twilio/voice HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=xx\r\n"
                b"Content-Length: %d\r\n" % len(body))
        assert (await _raw(port, head + b"\r\n" + body)).startswith(b"HTTP/1.1 403")  # unsigned: not parsed
        signed = head + SIGNATURE_HEADER.encode() + b": Zm9yZ2Vk\r\n"
        assert (await _raw(port, signed + b"\r\n" + body)).startswith(b"HTTP/1.1 400")  # malformed: 400
        half = (b"POST /twilio/voice HTTP/1.1\r\nHost: x\r\n" + SIGNATURE_HEADER.encode() + b": Zm9yZ2Vk\r\n"
                b"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 1000\r\n\r\nCallSid=CA1")
        for _ in range(5):  # half-sent bodies, the client gone
            await _raw(port, half, hang_up=True)
        assert (await _raw(port, half, wait_s=3)).startswith(b"HTTP/1.1 408")  # a body dribbler: dropped
        assert (await _raw(port, b"GET /" + b"a" * 10_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")).startswith(b"HTTP/1.0 400")
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # a header dribbler
        assert await asyncio.wait_for(reader.read(100), 5) == b""  # closed by the server
        assert loop.time() - t0 < 3
        writer.close()
        await asyncio.sleep(0.3)
    finally:
        await srv.stop()
    assert not [r for r in caplog.records if r.exc_info], "a traceback from client input"
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert any("malformed body" in r.getMessage() for r in caplog.records)


async def test_a_flood_of_unsigned_requests_is_one_warning_a_minute(server, caplog):
    """Regression: each refused request was a WARNING line; a scan filled the log."""
    caplog.set_level(logging.INFO)
    url = f"http://127.0.0.1:{server.port}/twilio/voice"
    async with aiohttp.ClientSession() as s:
        for _ in range(50):
            async with s.post(url, data=FORM, headers={SIGNATURE_HEADER: "Zm9yZ2Vk"}) as r:
                assert r.status == 403
    lines = [r.getMessage() for r in caplog.records if "bad or missing" in r.getMessage()]
    assert len(lines) == 1 and "once a minute" in lines[0]
