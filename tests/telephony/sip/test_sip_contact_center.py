"""A contact centre's call over SIP (Amazon Connect's external voice transfer, a Chime Voice
Connector trunk): the INVITE's context headers reach the agent as the call's parameters, and the
BYE that ends it carries the outcome back for the flow that resumes after it."""

from __future__ import annotations

from urllib.parse import parse_qs

from telephony.sip.message import SipRequest, response_to
from telephony.sip.rtp import RtpPacket, TelephoneEvent

from .conftest import OFFER, UdpPeer, in_dialog, invite, wait_for

CONTEXT = (("X-Amzn-ContactId", "0f3a6a83-4d1c-4c46-9a0e-5f2f3a1d2b77"), ("X-Amzn-Attribute-Intent", "billing"),
           ("User-to-User", "04a1b2c3;encoding=hex"))


async def test_context_headers_reach_the_agent_and_the_bye_hands_the_outcome_back(sip_server, seen):
    peer, rtp = await UdpPeer.open(), await UdpPeer.open()
    try:
        offer = OFFER.replace(b"m=audio 9 ", f"m=audio {rtp.port} ".encode())
        peer.send(invite(peer, "connect-1", body=offer, extra=CONTEXT), sip_server)
        ok = (await peer.responses())[-1]
        assert ok.status == 200
        [call] = sip_server.live.values()
        peer.send(in_dialog("ACK", ok, 1, peer.port), sip_server)
        await wait_for(lambda: "acked" in call.history)
        params = call.record.params
        assert params["x_amzn_contactid"] == "0f3a6a83-4d1c-4c46-9a0e-5f2f3a1d2b77"
        assert params["x_amzn_attribute_intent"] == "billing" and params["uui"] == "04a1b2c3;encoding=hex"
        rtp.send(RtpPacket(101, 1, 8000, 77, bytes(TelephoneEvent(11, True, 10, 800))), call.session.port)  # '#'
        [bye] = await peer.messages(10.0, until=lambda m: isinstance(m, SipRequest) and m.method == "BYE")
        peer.send(response_to(bye, 200), sip_server)
        await wait_for(lambda: not sip_server.live)
    finally:
        peer.close()
        rtp.close()
    assert seen.dtmf == ["#"]
    assert bye.header("X-Parley-Outcome") == "completed"
    assert bye.header("X-Parley-End-Reason") and bye.header("X-Parley-Turns") == "0"
    assert bye.header("User-to-User") == "04a1b2c3;encoding=hex"      # handed back as it came
    assert call.record.end_reason and "agent" in call.record.end_reason


def test_slots_and_summary_travel_as_header_text():
    from pipeline.records import CallRecord, TurnRecord
    from telephony.handoff import handoff_of
    from telephony.sip.call import header_text

    record = CallRecord(call_sid="c", transport="sip", turns=[TurnRecord(
        turn=1, user_text="my account is\r\nA 42", agent_text="Thanks.",
        events=[{"kind": "slot", "data": {"name": "account", "value": "A 42&x=1"}}])])
    handoff = handoff_of(record)
    from urllib.parse import urlencode
    assert parse_qs(urlencode(handoff.slots)) == {"account": ["A 42&x=1"]}
    assert "\r" not in header_text(handoff.summary) and "\n" not in header_text(handoff.summary)
    assert header_text("x" * 900, 500) == "x" * 500 and header_text("\r\n") == "-"
