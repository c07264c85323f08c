"""Browser offers as a hostile or broken client sends them: abandoned before ICE, without a codec
in common, with a bad or no DTLS fingerprint. Refused in one line, and nothing left open."""

from __future__ import annotations

import asyncio
import logging
import os
import re

import aiohttp
from aiortc import RTCPeerConnection
from aiortc.mediastreams import AudioStreamTrack


def _sockets() -> int:
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
        except OSError:
            pass
    return count


async def _offer() -> tuple[RTCPeerConnection, str]:
    pc = RTCPeerConnection()
    pc.addTrack(AudioStreamTrack())
    await pc.setLocalDescription(await pc.createOffer())
    return pc, pc.localDescription.sdp


async def test_abandoned_offers_leave_no_socket_open(webrtc_server, monkeypatch):
    """Regression: offers that never finished ICE kept a UDP socket each for the life of the
    process (aiortc's close, cancelled half-way, left every later close waiting)."""
    monkeypatch.setattr("telephony.webrtc.routes.CONNECT_TIMEOUT_S", 2)
    monkeypatch.setattr("telephony.webrtc.call.DISCONNECT_TIMEOUT_S", 1.0)
    before = _sockets()
    async with aiohttp.ClientSession() as session:
        for _ in range(4):
            pc, sdp = await _offer()
            async with session.post(f"http://127.0.0.1:{webrtc_server.port}/api/offer",
                                    json={"sdp": sdp, "type": "offer"}) as resp:
                assert resp.status == 200
            await pc.close()  # the caller goes away before ICE completes
        async with asyncio.timeout(30):
            while webrtc_server.webrtc.calls:
                await asyncio.sleep(0.2)
        await asyncio.sleep(0.5)
    assert _sockets() <= before, "abandoned offers left sockets open"


async def test_offers_without_a_codec_or_a_good_fingerprint_are_400_in_one_line(webrtc_server, caplog):
    """Regression: an offer with no codec in common got 500 and a traceback; a bad DTLS
    fingerprint was accepted."""
    caplog.set_level(logging.INFO)
    pc, sdp = await _offer()
    await pc.close()
    no_codec = re.sub(r"a=rtpmap:(?!99).*\r\n", "", re.sub(r"(m=audio \d+ \S+) [0-9 ]+\r\n", r"\1 99\r\n", sdp))
    no_codec += "a=rtpmap:99 foo/8000\r\n"
    cases = {
        "no codec": (no_codec, "offer refused"),
        "bad fingerprint": (re.sub(r"a=fingerprint:sha-256 \S+", "a=fingerprint:sha-256 ZZ:ZZ", sdp),
                            "bad DTLS fingerprint"),
        "no fingerprint": (re.sub(r"a=fingerprint:.*\r\n", "", sdp), "no DTLS fingerprint"),
    }
    async with aiohttp.ClientSession() as session:
        for name, (body, reason) in cases.items():
            async with session.post(f"http://127.0.0.1:{webrtc_server.port}/api/offer",
                                    json={"sdp": body, "type": "offer"}) as resp:
                assert resp.status == 400, name
                assert reason in await resp.text(), name
    assert not webrtc_server.webrtc.calls
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
