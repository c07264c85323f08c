"""SDP offers as trunks send them: delayed offer (no SDP in the INVITE), host names in c=, and
offers that must be refused (payload types above 127, a NUL in c=) or accepted (a trailing blank line)."""

from __future__ import annotations

import asyncio

from telephony.sip.message import SipRequest, response_to
from telephony.sip.rtp import RtpPacket, TelephoneEvent
from telephony.sip.sdp import SessionDescription

from .conftest import OFFER, UdpPeer, hang_up, in_dialog, invite, wait_for


def _answer(rtp_port: int, pt: str = "8") -> bytes:
    return (b"v=0\r\no=peer 2 2 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n"
            b"m=audio %d RTP/AVP %s 101\r\na=rtpmap:101 telephone-event/8000\r\n" % (rtp_port, pt.encode()))


async def test_a_delayed_offer_gets_our_offer_in_the_200_and_its_answer_in_the_ack(sip_server, seen):
    """Regression: an INVITE without SDP (PBX trunks send them) was refused with 488."""
    peer, rtp = await UdpPeer.open(), await UdpPeer.open()
    try:
        peer.send(invite(peer, "delayed-1", body=b""), sip_server)
        ok = (await peer.responses())[-1]
        assert ok.status == 200 and ok.header("content-type") == "application/sdp"
        offer = SessionDescription.parse(ok.body)
        audio = offer.audio()
        assert audio is not None and audio.formats == ("0", "8", "101")
        assert {c.name for c in audio.codecs.values()} == {"PCMU", "PCMA", "telephone-event"}
        [call] = sip_server.live.values()
        assert call.session.port == audio.port
        ack = in_dialog("ACK", ok, 1, peer.port)
        peer.send(SipRequest(method="ACK", uri=ack.uri, headers=ack.headers + (("Content-Type", "application/sdp"),),
                             body=_answer(rtp.port)), sip_server)
        await wait_for(lambda: "acked" in call.history)
        media = call.session.media
        assert (media.codec.name, media.dtmf_payload_type, media.remote_address) == \
            ("PCMA", 101, ("127.0.0.1", rtp.port))
        rtp.send(RtpPacket(101, 1, 8000, 77, bytes(TelephoneEvent(5, True, 10, 800))), call.session.port)
        await wait_for(lambda: seen.dtmf == ["5"])  # the key came through on the payload type we offered
        await hang_up(peer, sip_server, ok, ack=False)
    finally:
        peer.close()
        rtp.close()


async def test_an_ack_without_an_answer_ends_the_call_with_bye(sip_server):
    peer = await UdpPeer.open()
    try:
        peer.send(invite(peer, "delayed-2", body=b""), sip_server)
        ok = (await peer.responses())[-1]
        [call] = sip_server.live.values()
        peer.send(in_dialog("ACK", ok, 1, peer.port), sip_server)  # no SDP: the offer goes unanswered
        [bye] = await peer.messages(5.0, until=lambda m: isinstance(m, SipRequest))
        assert isinstance(bye, SipRequest) and bye.method == "BYE"
        peer.send(response_to(bye, 200), sip_server)
        await wait_for(lambda: not sip_server.live)
        assert call.record.end_reason == "no usable SDP answer in the ACK"
    finally:
        peer.close()


async def test_a_host_name_in_c_is_resolved_once_before_the_call(sip_server):
    """Regression: a host name in c= was resolved on the event loop for every RTP packet."""
    peer = await UdpPeer.open()
    try:
        peer.send(invite(peer, "named-1", body=OFFER.replace(b"c=IN IP4 127.0.0.1", b"c=IN IP4 localhost")),
                  sip_server)
        ok = (await peer.responses())[-1]
        assert ok.status == 200
        [call] = sip_server.live.values()
        assert call.session.media.remote_address == ("127.0.0.1", 9)
        await hang_up(peer, sip_server, ok)
    finally:
        peer.close()


async def test_offers_that_cannot_carry_audio_are_refused_and_a_blank_line_is_not(sip_server, seen):
    """Regression: payload types above 127 or a NUL in c= started calls with no audio and ~100
    ERROR lines each; a trailing blank line got 488."""
    peer = await UdpPeer.open()
    try:
        for i, body in enumerate([OFFER.replace(b"RTP/AVP 0 101", b"RTP/AVP 200 0"),
                                  OFFER.replace(b"c=IN IP4 127.0.0.1", b"c=IN IP4 127.0.0.1\x00evil"),
                                  OFFER.replace(b"c=IN IP4 127.0.0.1", b"c=IN IP4 no-such-host.invalid")]):
            peer.send(invite(peer, f"refused-{i}", body=body), sip_server)
            final = (await peer.responses())[-1]
            assert final.status == 488, (i, final.status, final.header("warning"))
            assert (final.header("warning") or "").startswith("399 parley ")
        await asyncio.sleep(0.2)
        assert seen.agents == 0 and not sip_server.live

        peer.send(invite(peer, "blank-line", body=OFFER + b"\r\n"), sip_server)
        ok = (await peer.responses())[-1]
        assert ok.status == 200
        await hang_up(peer, sip_server, ok)
    finally:
        peer.close()


async def test_a_sip_i_offer_with_isup_beside_the_sdp_is_answered(sip_server):
    """SIP-I/SIP-T trunks send multipart/mixed: the SDP and an ISUP part. The SDP part is read;
    the ISUP is ignored. (Before, the whole body was parsed as SDP: 488, and the trunk's call lost.)"""
    peer = await UdpPeer.open()
    try:
        body = (b"--unique-boundary-1\r\nContent-Type: application/sdp\r\n\r\n" + OFFER +
                b"\r\n--unique-boundary-1\r\nContent-Type: application/isup;version=itu-t92+\r\n"
                b"Content-Disposition: signal;handling=optional\r\n\r\n\x01\x00\x49\x00\x00\x03\x02\x00\x07"
                b"\r\n--unique-boundary-1--\r\n")
        req = invite(peer, "sip-i-1", body=body)
        req = SipRequest(method="INVITE", uri=req.uri, body=body, headers=tuple(
            (n, 'multipart/mixed;boundary="unique-boundary-1"' if n == "Content-Type" else v)
            for n, v in req.headers))
        peer.send(req, sip_server)
        ok = (await peer.responses())[-1]
        assert ok.status == 200
        [call] = sip_server.live.values()
        assert call.session.media.remote_address == ("127.0.0.1", 9) and call.session.media.codec.name == "PCMU"
        await hang_up(peer, sip_server, ok)
        peer.send(invite(peer, "sip-i-2", body=body, extra=()), sip_server)  # typed application/sdp: not SDP
        assert (await peer.responses())[-1].status == 488
    finally:
        peer.close()
