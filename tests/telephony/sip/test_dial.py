"""parley dials out: real sipp callees on loopback (scenarios ``callee_*.xml``) answer, ring out,
refuse, challenge and play early media; sipp fails its scenario on any message it did not expect
(so the ACK / CANCEL / BYE sequence is checked on the wire), and the tests assert the outcome,
the call's history and record, and the agent's audio arriving over RTP."""

from __future__ import annotations

import asyncio
import contextlib
import socket

import pytest

from agent.echo import EchoAgentProcessor
from telephony.calls import CallInfo
from telephony.sip import DialError, DialOutcome, DialRequest, SipServer
from telephony.sip.headers import NameAddr
from telephony.sip.message import SipRequest, SipResponse, parse_message, response_to

from .conftest import OFFER, RtpSink, SippResult, UdpPeer, callee, wait_for


def _ok(result: SippResult) -> None:
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]


async def test_answered_call_runs_the_agent_and_its_audio_arrives_over_rtp(make_sip_server, tmp_path):
    server: SipServer = await make_sip_server()
    infos: list[CallInfo] = []

    def greeter(info: CallInfo):
        infos.append(info)
        return EchoAgentProcessor()  # greets at once: "Hello, this is parley..."

    server.agent_factory = greeter
    transport, sink = await asyncio.get_running_loop().create_datagram_endpoint(RtpSink, local_addr=("127.0.0.1", 0))
    try:
        async with callee("callee_answers.xml", tmp_path, rtp_port=transport.get_extra_info("sockname")[1]) as peer:
            result = await server.dial(DialRequest(peer.uri, params=(("customer", "C-42"),)))
            _ok(await peer.result())
    finally:
        transport.close()
    assert result.outcome is DialOutcome.ANSWERED and result.status == 200
    assert result.end_reason == "callee hung up (BYE)"
    assert result.history == ("inviting", "ringing", "answered", "acked", "bye-received", "ended")
    assert 2.5 < result.talk_s < 6
    # the agent ran as for an inbound call, with the call's parameters
    [info] = infos
    assert info.transport == "sip" and info.call_sid == result.call_id
    assert info.params["direction"] == "outbound" and info.params["customer"] == "C-42"
    assert info.params["to"] == peer.uri and info.params["from"].startswith("sip:parley@127.0.0.1")
    [record] = server.store.list()
    assert record.ended and record.end_reason == "callee hung up (BYE)" and record.greeting
    # its greeting reached the callee's RTP port: about a second of speech, not silence
    assert len(sink.packets) >= 40 and sink.rms() > 300
    assert result.stats["rtp_out"] == len(sink.packets)
    assert len({p.ssrc for p in sink.packets}) == 1
    assert not server.live and [c.call_id for c in server.recent] == [result.call_id]


async def test_nobody_answers_so_parley_cancels_and_acks_the_487(make_sip_server, seen, tmp_path):
    server = await make_sip_server()
    async with callee("callee_rings_out.xml", tmp_path) as peer:
        result = await server.dial(DialRequest(peer.uri, ring_timeout_s=1.0))
        _ok(await peer.result())
    assert result.outcome is DialOutcome.NO_ANSWER
    assert (result.status, result.reason) == (487, "Request Terminated")
    assert result.history == ("inviting", "ringing", "cancel-sent", "ended")
    assert seen.agents == 0  # never answered: no pipeline
    [record] = server.store.list()
    assert record.end_reason == "no-answer (487 Request Terminated)"


async def test_busy_is_acked_and_recorded(make_sip_server, seen, tmp_path):
    server = await make_sip_server()
    async with callee("callee_busy.xml", tmp_path) as peer:
        result = await server.dial(DialRequest(peer.uri))
        _ok(await peer.result())
    assert result.outcome is DialOutcome.BUSY and (result.status, result.reason) == (486, "Busy Here")
    assert result.history == ("inviting", "ended") and seen.agents == 0
    assert result.as_dict()["outcome"] == "busy"


async def test_through_a_trunk_the_request_uri_stays_the_target(make_sip_server, tmp_path):
    """The INVITE goes to the trunk's address; its Request-URI names a host that never resolves."""
    server = await make_sip_server()
    async with callee("callee_busy.xml", tmp_path) as peer:
        result = await server.dial(DialRequest("sip:+15550100@carrier.invalid", trunk=f"127.0.0.1:{peer.port}",
                                               from_uri="sip:+15550199@parley.example"))
        _ok(await peer.result())
    assert result.outcome is DialOutcome.BUSY and result.target == "sip:+15550100@carrier.invalid"
    [record] = server.store.list()
    assert record.params["from"] == "sip:+15550199@parley.example"


async def test_digest_challenge_is_answered_with_credentials_and_the_next_cseq(make_sip_server, seen, tmp_path):
    server = await make_sip_server()
    async with callee("callee_auth.xml", tmp_path) as peer:
        result = await server.dial(DialRequest(peer.uri, auth_user="parley", auth_password="trunk-pw"))
        _ok(await peer.result())
    assert result.outcome is DialOutcome.ANSWERED and result.end_reason == "callee hung up (BYE)"
    assert result.history == ("inviting", "challenged", "inviting", "ringing", "answered", "acked",
                              "bye-received", "ended")
    assert seen.agents == 1


async def test_wrong_credentials_end_in_a_failed_outcome(make_sip_server, tmp_path):
    """sipp refuses the second INVITE (403) and then waits in vain: its scenario fails, ours
    reports the refusal after ACKing it."""
    server = await make_sip_server()
    async with callee("callee_auth.xml", tmp_path) as peer:
        result = await server.dial(DialRequest(peer.uri, auth_user="parley", auth_password="wrong"))
        assert (await peer.result()).returncode != 0  # verifyauth refused the credentials
    assert result.outcome is DialOutcome.FAILED and result.status == 403
    assert result.history == ("inviting", "challenged", "inviting", "ended")


async def test_early_media_is_received_then_the_agent_hangs_up_with_bye(make_sip_server, seen, tmp_path):
    server = await make_sip_server()
    async with callee("callee_early_media.xml", tmp_path) as peer:
        result = await server.dial(DialRequest(peer.uri))
        _ok(await peer.result())
    assert result.outcome is DialOutcome.ANSWERED and result.early_media
    assert result.history == ("inviting", "ringing", "early-media", "answered", "acked", "bye-sent", "ended")
    assert result.end_reason == "agent ended the call"
    [call] = server.recent
    assert call.stats.dtmf_in == ["1", "#"]  # the early key was received, on the 183's media
    assert seen.dtmf == ["#"]  # only what came after the answer reached the agent


async def test_a_peer_that_never_answers_times_out(make_sip_server, seen):
    """Timer B: the INVITE is retransmitted (Timer A) to a socket that never answers."""
    server = await make_sip_server()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as silent:
        silent.bind(("127.0.0.1", 0))
        silent.setblocking(False)
        port = silent.getsockname()[1]
        result = await server.dial(DialRequest(f"sip:bob@127.0.0.1:{port}", invite_timeout_s=2.0))
        invites = []
        with contextlib.suppress(BlockingIOError):
            while True:
                invites.append(silent.recv(65535))
    assert result.outcome is DialOutcome.TIMEOUT and result.status is None
    assert result.reason == "no answer to the INVITE in 2 s"
    assert len(invites) == 3 and len(set(invites)) == 1  # sent at 0, 0.5 and 1.5 s: the same bytes
    assert seen.agents == 0 and not server.live


async def test_hang_up_while_ringing_cancels(make_sip_server, tmp_path):
    server = await make_sip_server()
    async with callee("callee_rings_out.xml", tmp_path) as peer:
        dial = asyncio.create_task(server.dial(DialRequest(peer.uri, ring_timeout_s=30)))
        await wait_for(lambda: any("ringing" in c.history for c in server.live.values()))
        [call] = server.live.values()
        await call.hang_up("canceled by the user")
        result = await dial
        _ok(await peer.result())
    assert result.outcome is DialOutcome.CANCELED and result.status == 487
    assert result.end_reason == "canceled by the user"


@pytest.mark.parametrize("target, message", [
    ("alice@example.com", "is not a SIP URI"),
    ("sip:alice@exa mple.com", "is not a SIP URI"),
    ("sips:alice@example.com", "only sip: URIs"),
    ("+15551234567", "is not a SIP URI"),
])
def test_malformed_targets_are_refused_in_one_line(target, message):
    with pytest.raises(DialError, match=message) as err:
        DialRequest(target)
    assert "\n" not in str(err.value)


async def test_unknown_host_is_a_dial_error_and_the_server_goes_on(make_sip_server, tmp_path):
    server = await make_sip_server()
    with pytest.raises(DialError, match="does not resolve"):
        await server.dial(DialRequest("sip:alice@no-such-host.invalid"))
    async with callee("callee_busy.xml", tmp_path) as peer:  # still dialling
        assert (await server.dial(DialRequest(peer.uri))).outcome is DialOutcome.BUSY


async def _invite_from(peer: UdpPeer) -> tuple[SipRequest, tuple[str, int]]:
    data, addr = await asyncio.wait_for(peer.queue.get(), 5)
    invite = parse_message(data)
    assert isinstance(invite, SipRequest) and invite.method == "INVITE"
    return invite, addr


@pytest.mark.parametrize("status, outcome", [
    (404, DialOutcome.FAILED), (480, DialOutcome.NO_ANSWER), (503, DialOutcome.FAILED),
    (600, DialOutcome.BUSY), (603, DialOutcome.DECLINED)])
async def test_each_final_refusal_is_acked_in_its_transaction_and_becomes_an_outcome(make_sip_server, status,
                                                                                    outcome):
    server = await make_sip_server()
    peer = await UdpPeer.open()
    try:
        dial = asyncio.create_task(server.dial(DialRequest(f"sip:carol@127.0.0.1:{peer.port}")))
        invite, addr = await _invite_from(peer)
        refusal = response_to(invite, status, to_tag="callee1")
        peer.transport.sendto(bytes(refusal), addr)  # type: ignore[union-attr]
        [ack] = await peer.messages(1.0, until=lambda m: True)
        peer.transport.sendto(bytes(refusal), addr)  # type: ignore[union-attr]  # as if our ACK was lost
        [again] = await peer.messages(1.0, until=lambda m: True)
        result = await dial
    finally:
        peer.close()
    assert isinstance(ack, SipRequest) and ack.method == "ACK" and bytes(again) == bytes(ack)
    assert ack.uri == invite.uri and ack.top_via.branch == invite.top_via.branch  # the INVITE's transaction
    assert ack.cseq == (1, "ACK") and NameAddr.parse(ack.header("to") or "").tag == "callee1"
    assert result.outcome is outcome and result.status == status and result.history == ("inviting", "ended")


async def test_a_retransmitted_200_gets_the_ack_again_and_the_bye_ends_the_call(make_sip_server, seen):
    server = await make_sip_server()
    peer = await UdpPeer.open()
    try:
        dial = asyncio.create_task(server.dial(DialRequest(f"sip:dave@127.0.0.1:{peer.port}")))
        invite, addr = await _invite_from(peer)
        ok = response_to(invite, 200, to_tag="callee2", body=OFFER,
                         headers=(("Contact", f"<sip:dave@127.0.0.1:{peer.port}>"), ("Content-Type", "application/sdp")))
        peer.transport.sendto(bytes(ok), addr)  # type: ignore[union-attr]
        [ack] = await peer.messages(1.0, until=lambda m: True)
        peer.transport.sendto(bytes(ok), addr)  # type: ignore[union-attr]
        [again] = await peer.messages(1.0, until=lambda m: True)
        await wait_for(lambda: seen.agents == 1)
        bye = SipRequest(method="BYE", uri=NameAddr.parse(invite.header("contact") or "").uri, headers=(
            ("Via", f"SIP/2.0/UDP 127.0.0.1:{peer.port};branch=z9hG4bKbye1"), ("Max-Forwards", "70"),
            ("From", ok.header("to") or ""), ("To", ok.header("from") or ""), ("Call-ID", ok.call_id),
            ("CSeq", "1 BYE")))  # the callee's side of the dialog: From and To the other way round
        peer.transport.sendto(bytes(bye), addr)  # type: ignore[union-attr]
        [bye_ok] = await peer.messages(2.0, until=lambda m: isinstance(m, SipResponse))
        result = await dial
    finally:
        peer.close()
    assert isinstance(ack, SipRequest) and ack.method == "ACK" and bytes(again) == bytes(ack)
    assert ack.uri == f"sip:dave@127.0.0.1:{peer.port}"  # the 200's Contact
    assert ack.top_via.branch != invite.top_via.branch and ack.cseq == (1, "ACK")  # a transaction of its own
    assert isinstance(bye_ok, SipResponse) and bye_ok.status == 200
    assert result.outcome is DialOutcome.ANSWERED and result.end_reason == "callee hung up (BYE)"
