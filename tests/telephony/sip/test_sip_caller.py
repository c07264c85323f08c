"""The scripted SIP caller against a real SipServer on loopback: a turn answered, v2v measured."""

from __future__ import annotations

import asyncio
import socket

import aiohttp
import numpy as np
import pytest

from agent.echo import EchoAgentProcessor
from harness.flite import synthesize_flite
from pipeline.audio.g711 import resample
from harness.errors import CallerError
from telephony.server import CallServer, ServerConfig
from harness.callers.rtp_receiver import RtpReceiver
from harness.callers.sip import place_sip_call
from telephony.sip.message import SipRequest, SipResponse, response_to
from telephony.sip.rtp import RtpPacket

from .conftest import UdpPeer, hang_up, wait_for
from .conftest import invite as sip_invite


@pytest.fixture(scope="module")
def hello_8k() -> np.ndarray:
    pcm, rate_hz = asyncio.run(synthesize_flite("hello how are you"))
    return resample(pcm, rate_hz, 8000)


async def test_a_turn_is_answered_and_v2v_measured(sip_server, seen, hello_8k):
    report = await place_sip_call("127.0.0.1", sip_server.port, [hello_8k], greeting_wait_s=0.5,
                                  reply_timeout_s=15.0, timeout_s=40.0)
    assert report.history[:2] == ("invite", "invite-100") and "invite-200" in report.history
    assert report.history[-2:] == ("bye", "bye-200"), report.history
    assert not report.timed_out and not report.server_hung_up
    (turn,) = report.turns
    assert turn.v2v_ms is not None and 0 < turn.v2v_ms < 10_000, turn
    assert turn.reply_ms is not None and turn.reply_ms > 200  # "You said ..." lasts a while
    assert not turn.overlapped  # no greeting (ProbeAgent), so nothing played while we spoke
    assert seen.speech_starts >= 1 and seen.transcripts  # the agent heard us
    rtp = report.rtp
    assert rtp.received > 50 and rtp.lost == 0 and rtp.duplicates == 0 and rtp.foreign == 0
    assert np.abs(report.agent_audio.astype(np.int32)).max() > 3000
    assert report.packets_sent >= hello_8k.size // 160  # speech plus silence, all call long


async def test_nobody_there_raises_caller_error(hello_8k):
    """A bound socket that never answers (not a port picked and let go: another test could take it)."""
    silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    silent.bind(("127.0.0.1", 0))
    try:
        with pytest.raises(CallerError, match="no answer"):
            await place_sip_call("127.0.0.1", silent.getsockname()[1], [hello_8k], io_timeout_s=0.6)
    finally:
        silent.close()


async def test_a_refused_call_raises_caller_error(sip_server, hello_8k):
    sip_server.draining = True
    with pytest.raises(CallerError, match="INVITE refused: 503"):
        await place_sip_call("127.0.0.1", sip_server.port, [hello_8k], io_timeout_s=2.0)


def _pkt(seq: int, ts: int, marker: bool = False, loud: bool = False, ssrc: int = 1234) -> bytes:
    return bytes(RtpPacket(0, seq & 0xFFFF, ts, ssrc, (b"\x00" if loud else b"\xff") * 160, marker=marker))


def test_receiver_counts_loss_reordering_duplicates_and_lateness():
    rx = RtpReceiver(asyncio.Event(), late_after_ms=60.0)
    t = 100.0
    rx.on_packet(_pkt(65534, 0, marker=True), t)
    rx.on_packet(_pkt(65535, 160), t + 0.02)
    rx.on_packet(_pkt(1, 480), t + 0.06)        # 0 is missing (across the wrap)
    rx.on_packet(_pkt(1, 480), t + 0.06)        # a duplicate
    rx.on_packet(_pkt(2, 640, loud=True), t + 0.20)  # due at t + 0.08: 120 ms late
    rx.on_packet(b"junk", t + 0.21)
    st = rx.stats
    assert (st.received, st.lost, st.duplicates, st.late, st.foreign) == (4, 1, 1, 1, 1)
    assert 119 < st.max_late_ms < 121 and st.jitter_ms > 0
    rx.on_packet(_pkt(0, 320), t + 0.22)        # the missing one, late and out of order
    assert (st.received, st.lost, st.out_of_order) == (5, 0, 1)
    assert rx.energy_times == [t + 0.20]
    assert st.ssrcs == 1


def test_receiver_keeps_a_second_sender_apart():
    """Guards the bench's negative ``lost``: two servers' calls answering one INVITE interleave
    two sequence spaces on one port; each is counted on its own, and ``ssrcs`` shows two."""
    rx = RtpReceiver(asyncio.Event())
    for i in range(5):
        rx.on_packet(_pkt(100 + i, 160 * i, marker=i == 0), 10 + 0.02 * i)
        rx.on_packet(_pkt(40_000 + i, 160 * i, marker=i == 0, ssrc=99), 10 + 0.02 * i)
    st = rx.stats
    assert (st.received, st.lost, st.out_of_order, st.duplicates, st.ssrcs) == (10, 0, 0, 0, 2)


async def test_an_invite_and_its_retransmission_together_start_one_call(sip_server, seen):
    """Regression: two copies of one INVITE read before the first was set up made two calls."""
    peer = await UdpPeer.open()
    sdp = (f"v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n"
           f"m=audio {peer.port + 2} RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\n")
    invite = (
        f"INVITE sip:parley@127.0.0.1:{sip_server.port} SIP/2.0\r\n"
        f"Via: SIP/2.0/UDP 127.0.0.1:{peer.port};branch=z9hG4bKdup1\r\n"
        f"From: <sip:caller@127.0.0.1>;tag=abc\r\nTo: <sip:parley@127.0.0.1>\r\n"
        f"Call-ID: dup-invite-1@127.0.0.1\r\nCSeq: 1 INVITE\r\n"
        f"Contact: <sip:caller@127.0.0.1:{peer.port}>\r\nMax-Forwards: 70\r\n"
        f"Content-Type: application/sdp\r\nContent-Length: {len(sdp)}\r\n\r\n{sdp}"
    ).encode()
    try:
        peer.send(invite, sip_server)
        peer.send(invite, sip_server)
        await wait_for(lambda: seen.agents >= 1, 10)
        await asyncio.sleep(1.0)
        assert seen.agents == 1
        assert list(sip_server.live) == ["dup-invite-1@127.0.0.1"]
        ok = [m for m in await peer.messages(0.1) if isinstance(m, SipResponse) and m.status == 200][0]
        await hang_up(peer, sip_server, ok)  # (left unACKed, the server's stop waited out the ACK)
    finally:
        peer.close()


async def test_stopping_does_not_wait_out_an_ack_that_never_comes(sip_server):
    """Regression: ``stop()`` hung up a call whose caller had not ACKed our 200 by waiting up to
    32 s for the ACK before its BYE (and hung up the live calls one after another)."""
    peer = await UdpPeer.open()
    try:
        peer.send(sip_invite(peer, "no-ack-at-stop"), sip_server)
        assert (await peer.responses())[-1].status == 200
        stop = asyncio.create_task(sip_server.stop())
        got = await peer.messages(3.0, until=lambda m: isinstance(m, SipRequest) and m.method == "BYE")
        bye = got[-1] if got else None
        assert isinstance(bye, SipRequest) and bye.method == "BYE", got
        peer.send(response_to(bye, 200), sip_server)
        async with asyncio.timeout(3.0):
            await stop
        assert not sip_server.live
        [call] = sip_server.recent
        assert call.history == ["ringing", "answered", "bye-sent", "ended"]
    finally:
        peer.close()


async def test_healthz_counts_live_sip_calls(sip_server, hello_8k):
    """Regression: /healthz counted only Twilio and browser calls, so a server busy with SIP
    calls reported none live."""
    http = CallServer(ServerConfig(port=0, insecure_dev=True), agent_factory=lambda _i: EchoAgentProcessor())
    http.sip = sip_server  # as serve_forever does
    port = await http.start()
    try:
        call = asyncio.create_task(place_sip_call("127.0.0.1", sip_server.port, [hello_8k], greeting_wait_s=3.0,
                                                  reply_timeout_s=15.0, timeout_s=40.0))
        await wait_for(lambda: sip_server.live, 10.0)
        async with aiohttp.ClientSession() as s:
            async with s.get(f"http://127.0.0.1:{port}/healthz") as r:
                assert (await r.json())["live_calls"] == 1
        await call
        await wait_for(lambda: not sip_server.live, 10.0)
        async with aiohttp.ClientSession() as s:
            async with s.get(f"http://127.0.0.1:{port}/healthz") as r:
                assert (await r.json())["live_calls"] == 0
    finally:
        await http.stop()
