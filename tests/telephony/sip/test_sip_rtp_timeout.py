"""A caller that vanishes (a crashed PBX, a lost network) sends no BYE: the call must not live on.
No RTP for ``rtp_timeout_s`` ends it with a BYE and a record that says why; RTP keeps it alive; a
call on hold with no media waits ``rtp_hold_timeout_s`` instead."""

from __future__ import annotations

import asyncio
import time

import pytest

from telephony.sip.config import SipConfig
from telephony.sip.errors import SipConfigError
from telephony.sip.message import SipRequest, response_to
from telephony.sip.rtp import RtpPacket

from .conftest import OFFER, UdpPeer, in_dialog, invite, wait_for


async def _answered(server, peer: UdpPeer, call_id: str, body: bytes = OFFER):
    peer.send(invite(peer, call_id, body=body), server)
    ok = (await peer.responses())[-1]
    assert ok.status == 200
    peer.send(in_dialog("ACK", ok, 1, peer.port), server)
    [call] = server.live.values()
    return call


async def test_a_caller_that_sends_no_rtp_is_hung_up_on_and_the_record_says_why(make_sip_server):
    server = await make_sip_server(rtp_timeout_s=2.0)
    peer = await UdpPeer.open()
    try:
        t0 = time.monotonic()
        call = await _answered(server, peer, "vanished-1")
        [bye] = await peer.messages(10.0, until=lambda m: isinstance(m, SipRequest) and m.method == "BYE")
        waited = time.monotonic() - t0
        assert isinstance(bye, SipRequest) and bye.method == "BYE"
        assert 2.0 <= waited < 6.0, waited
        peer.send(response_to(bye, 200), server)
        await wait_for(lambda: not server.live)
        assert call.record.end_reason == "no RTP from the caller for 2 s"
        assert call.record.ended
    finally:
        peer.close()


async def test_rtp_keeps_the_call_alive_and_its_end_starts_the_clock(make_sip_server):
    server = await make_sip_server(rtp_timeout_s=2.0)
    peer = await UdpPeer.open()
    try:
        call = await _answered(server, peer, "talking-1")
        port = call.session.port
        for n in range(200):                       # 4 s of packets, every 20 ms: past the timeout
            peer.send(RtpPacket(0, n, n * 160, 42, b"\xff" * 160), port)
            await asyncio.sleep(0.02)
        assert server.live and call.end_reason is None
        stopped = time.monotonic()
        [bye] = await peer.messages(10.0, until=lambda m: isinstance(m, SipRequest) and m.method == "BYE")
        assert bye.method == "BYE" and time.monotonic() - stopped >= 1.5
        peer.send(response_to(bye, 200), server)
        await wait_for(lambda: not server.live)
    finally:
        peer.close()


async def test_a_call_on_hold_without_media_waits_the_hold_timeout(make_sip_server):
    server = await make_sip_server(rtp_timeout_s=2.0, rtp_hold_timeout_s=30.0)
    peer = await UdpPeer.open()
    try:
        call = await _answered(server, peer, "held-1", body=OFFER + b"a=inactive\r\n")
        await wait_for(lambda: call.session.media.direction == "inactive")
        assert await peer.messages(4.0, until=lambda m: isinstance(m, SipRequest)) == []   # no BYE at 2 s
        assert server.live
    finally:
        peer.close()


def test_the_timeouts_are_checked():
    assert SipConfig(rtp_timeout_s=0).rtp_timeout_s == 0
    for bad in (1.0, -1.0, 7200.0):
        with pytest.raises(SipConfigError, match="rtp_timeout_s"):
            SipConfig(rtp_timeout_s=bad)
