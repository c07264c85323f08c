"""The 49 RFC 4475 torture messages, byte for byte over UDP, against a live SipServer.

Each gets the answer RFC 4475 intends for a user agent server, or a reasoned exception written
beside it. ``call``: a well-formed INVITE that starts a call (100, 180, 200; the test then ACKs
and hangs up with BYE). ``drop``: a response of no transaction of ours, dropped without a word.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from telephony.sip.errors import SipParseError
from telephony.sip.message import SipResponse, parse_message

from .conftest import UdpPeer, hang_up

TORTURE = Path(__file__).parent / "rfc4475"

# name -> (expected answer, the RFC's section and what it asks of a UAS)
EXPECTED: dict[str, tuple[int | str, str]] = {
    # 3.1.1 valid messages: parsed and processed
    "wsinv": (481, "3.1.1.1 well-formed; its To carries a tag of a dialog we do not have (RFC 3261 12.2.2)"),
    "intmeth": (501, "3.1.1.2 well-formed, an unknown method: an endpoint answers 501"),
    "esc01": ("call", "3.1.1.3 well-formed % escaping: a call"),
    "escnull": (405, "3.1.1.4 well-formed REGISTER; parley is no registrar (405 with Allow, RFC 3261 8.2.1)"),
    "esc02": (501, "3.1.1.5 RE%47IST%45R is an unknown method, not REGISTER: 501"),
    "lwsdisp": (200, "3.1.1.6 no LWS between display name and <: accepted (an OPTIONS: 200)"),
    "longreq": ("call", "3.1.1.7 long values everywhere: a call"),
    "dblreq": (405, "3.1.1.8 the REGISTER is handled (405: no registrar); the trailing INVITE octets ignored"),
    "semiuri": (200, "3.1.1.9 ; in the Request-URI's user part: accepted"),
    "transports": (200, "3.1.1.10 unknown transports in lower Vias: accepted"),
    "mpart01": (405, "3.1.1.11 well-formed multipart MESSAGE; parley takes no MESSAGE (405 with Allow)"),
    "unreason": ("drop", "3.1.1.12 a well-formed response with an unusual reason: parsed, no transaction"),
    "noreason": ("drop", "3.1.1.13 a well-formed response with no reason phrase: parsed, no transaction"),
    # 3.1.2 invalid messages
    "badinv01": (400, "3.1.2.1 extra ; and , in Via and Contact: 400"),
    "clerr": (400, "3.1.2.2 Content-Length beyond the datagram, over UDP: 400"),
    "ncl": (400, "3.1.2.3 negative Content-Length: an error (400)"),
    "scalar02": (400, "3.1.2.4 CSeq above 2**32-1: 400 (RFC 3261 8.1.1.5)"),
    "scalarlg": ("drop", "3.1.2.5 a response with overlarge scalars: discarded"),
    "quotbal": (400, "3.1.2.6 unterminated quote in To's display name: 400"),
    "ltgtruri": (400, "3.1.2.7 Request-URI inside <>: 400"),
    "lwsruri": (400, "3.1.2.8 LWS inside the Request-URI: 400"),
    "lwsstart": (400, "3.1.2.9 several SP between start-line elements: rejected (400)"),
    "trws": (400, "3.1.2.10 SP after the SIP version: rejected (400)"),
    "escruri": (400, "3.1.2.11 escaped headers in the Request-URI: 400"),
    "baddate": ("call", "3.1.2.12 a non-GMT Date: parley reads no Date, so it is liberal here, as the RFC allows"),
    "regbadct": (405, "3.1.2.13 malformed Contact in a REGISTER: 400 for a registrar; parley is none and "
                      "inspects the method first (RFC 3261 8.2.1 before 8.2.2): 405"),
    "badaspec": (400, "3.1.2.14 spaces inside the <addr-spec>: 400"),
    "baddn": (400, "3.1.2.15 unquoted display names with commas: 400"),
    "badvers": (505, "3.1.2.16 SIP/7.0: 505"),
    "mismatch01": (400, "3.1.2.17 CSeq method differs from the request's: 400"),
    "mismatch02": (501, "3.1.2.18 unknown method, CSeq mismatch: 501 (preferred to 400)"),
    "bigcode": ("drop", "3.1.2.19 a response code above 699: dropped"),
    # 3.2 transaction layer
    "badbranch": (200, "3.2.1 a branch of only the magic cookie: well-formed, RFC 2543 matching (200)"),
    # 3.3 application layer
    "insuf": (400, "3.3.1 no Call-ID, From or To: 400, answered with what there is"),
    "unkscm": (416, "3.3.2 unknown Request-URI scheme: 416"),
    "novelsc": (416, "3.3.3 a known but atypical scheme (soap.beep): 416"),
    "unksm2": (405, "3.3.4 unknown scheme in To of a REGISTER: parley is no registrar (405, method first)"),
    "bext01": (420, "3.3.5 Require of unknown options: 420 with Unsupported"),
    "invut": (415, "3.3.6 a body of an unknown type: 415 with Accept"),
    "regaut01": (405, "3.3.7 an unknown Authorization scheme on REGISTER: a registrar's 401; parley is none (405)"),
    "multi01": (400, "3.3.8 several To, From, Call-ID and CSeq: 400"),
    "mcl01": (400, "3.3.9 two Content-Length values: 400"),
    "bcast": ("drop", "3.3.10 a 200 with a broadcast Via: no transaction of ours, dropped"),
    "zeromf": (200, "3.3.11 Max-Forwards 0 at an endpoint: processed as usual (200)"),
    "cparam01": (405, "3.3.12 REGISTER with Contact parameters: parley is no registrar (405)"),
    "cparam02": (405, "3.3.13 REGISTER with a URI parameter in Contact: parley is no registrar (405)"),
    "regescrt": (405, "3.3.14 REGISTER with an escaped header in Contact: parley is no registrar (405)"),
    "sdp01": (406, "3.3.15 Accept without application/sdp on an INVITE: 406"),
    # 3.4 backward compatibility
    "inv2543": ("call", "3.4.1 an RFC 2543 INVITE (no branch, no From tag): a call"),
}


def test_every_torture_message_has_an_expectation():
    files = sorted(p.stem for p in TORTURE.glob("*.dat"))
    assert len(files) == 49 and sorted(EXPECTED) == files


@pytest.mark.parametrize("name", sorted(EXPECTED))
async def test_torture_message_is_answered_as_rfc_4475_intends(name, sip_server, seen):
    expected, why = EXPECTED[name]
    data = (TORTURE / f"{name}.dat").read_bytes()
    peer = await UdpPeer.open()
    try:
        bad_before = sip_server.bad_datagrams
        peer.send(data, sip_server)
        if expected == "drop":
            assert await peer.messages(0.5) == [], why
            try:
                parse_message(data)
            except SipParseError:
                assert sip_server.bad_datagrams == bad_before + 1, why  # counted, not answered
            return
        responses = await peer.responses(10.0)
        assert responses, f"{name}: no answer ({why})"
        final = responses[-1]
        if expected != "call":
            assert final.status == expected, f"{name}: {final.status} {final.reason} ({why}); " \
                                             f"{final.header('warning')}"
            assert all(r.status < 200 for r in responses[:-1])
            if final.status in (405, 501):
                assert "INVITE" in (final.header("allow") or "")
            if final.status == 420:
                assert final.header("unsupported") == "nothingSupportsThis, nothingSupportsThisEither"
            if final.status in (415, 406):
                assert final.header("accept") == "application/sdp"
            if final.status >= 400:
                assert (final.header("warning") or "").startswith("399 parley ")
            await asyncio.sleep(0.2)
            assert seen.agents == 0 and not sip_server.live, f"{name} must not start a call"
            return
        assert [r.status for r in responses] == [100, 180, 200], why
        assert final.body.startswith(b"v=0")
        [call] = sip_server.live.values()
        assert call.call_id == final.call_id
        await hang_up(peer, sip_server, final)
        assert "acked" in call.history and not sip_server.live
        assert call.record.end_reason == "caller hung up (BYE)"
    finally:
        peer.close()


async def test_a_request_that_does_not_parse_is_answered_400_saying_why(sip_server):
    """Regression: malformed requests were dropped in silence; the caller retried for 32 s."""
    peer = await UdpPeer.open()
    try:
        peer.send((TORTURE / "mcl01.dat").read_bytes(), sip_server)
        [resp] = await peer.responses(2.0)
    finally:
        peer.close()
    assert isinstance(resp, SipResponse) and resp.status == 400
    assert resp.call_id == "mcl01.fhn2323orihawfdoa3o4r52o3irsdf" and resp.cseq == (15932, "OPTIONS")
    assert resp.header("warning") == '399 parley "conflicting Content-Length headers"'
    assert "received=127.0.0.1" in (resp.header("via") or "")
