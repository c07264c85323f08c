"""Transactions as RFC 3261 17.2.3 matches them, merged requests (482), rport, overload (503), and
in-dialog requests that follow the route set (RFC 3261 12.2.1.1).

Raw UDP peers write their own messages, so each test controls branch, sent-by and timing.
"""

from __future__ import annotations

import asyncio

from telephony.sip.headers import Via
from telephony.sip.message import SipRequest, response_to

from .conftest import UdpPeer, branch, hang_up, in_dialog, invite, wait_for


def _options(peer: UdpPeer, call_id: str, via_branch: str, sent_by: str | None = None, rport: bool = False) -> SipRequest:
    via = f"SIP/2.0/UDP {sent_by or f'127.0.0.1:{peer.port}'};branch={via_branch}" + (";rport" if rport else "")
    return SipRequest(method="OPTIONS", uri="sip:parley@127.0.0.1", headers=(
        ("Via", via), ("Max-Forwards", "70"), ("From", "<sip:peer@127.0.0.1>;tag=a"),
        ("To", "<sip:parley@127.0.0.1>"), ("Call-ID", call_id), ("CSeq", "1 OPTIONS")))


async def test_a_branch_reused_by_another_peer_is_a_transaction_of_its_own(sip_server):
    """Regression: transactions were matched on (branch, method) alone; a second peer reusing a
    branch got nothing, and the first peer's cached answer went to the first peer again."""
    a, b = await UdpPeer.open(), await UdpPeer.open()
    try:
        a.send(_options(a, "call-a", "z9hG4bKshared"), sip_server)
        [ra] = await a.responses()
        b.send(_options(b, "call-b", "z9hG4bKshared"), sip_server)
        [rb] = await b.responses()
        assert ra.call_id == "call-a" and rb.call_id == "call-b" and rb.status == 200
        assert await a.messages(0.3) == []  # nothing more for the first peer
        a.send(_options(a, "call-a", "z9hG4bKshared"), sip_server)  # a's retransmission: its own answer again
        [again] = await a.responses()
        assert bytes(again) == bytes(ra)
    finally:
        a.close()
        b.close()


async def test_the_same_invite_by_another_path_gets_482(sip_server, seen):
    """RFC 3261 8.2.2.2: same Call-ID, From tag and CSeq, no To tag, another branch: merged."""
    peer = await UdpPeer.open()
    try:
        peer.send(invite(peer, "merged-1", via_branch="z9hG4bKfirst"), sip_server)
        first = await peer.responses()
        assert first[-1].status == 200
        peer.send(invite(peer, "merged-1", via_branch="z9hG4bKsecond"), sip_server)  # a fork's copy
        [merged] = await peer.responses()
        assert merged.status == 482 and merged.top_via.branch == "z9hG4bKsecond"
        assert seen.agents == 1 and len(sip_server.live) == 1
        await hang_up(peer, sip_server, first[-1])
    finally:
        peer.close()


async def test_rport_and_received_are_filled_in(sip_server):
    """RFC 3581: the response names the address and port the request came from."""
    peer = await UdpPeer.open()
    try:
        peer.send(_options(peer, "rport-1", branch(), sent_by="10.9.8.7:5099", rport=True), sip_server)
        [resp] = await peer.responses()
        via = resp.top_via
        assert (via.host, via.port) == ("10.9.8.7", 5099)
        assert via.param("received") == "127.0.0.1" and via.param("rport") == str(peer.port)
    finally:
        peer.close()


async def test_methods_are_case_sensitive(sip_server):
    """Regression: a lower-case method was upper-cased before it was compared."""
    peer = await UdpPeer.open()
    try:
        req = _options(peer, "case-1", branch())
        lower = SipRequest(method="options", uri=req.uri, headers=tuple(
            (n, "1 options" if n == "CSeq" else v) for n, v in req.headers))
        peer.send(lower, sip_server)
        [resp] = await peer.responses()
        assert resp.status == 501 and "OPTIONS" in (resp.header("allow") or "")
    finally:
        peer.close()


async def test_a_full_server_answers_503_with_retry_after(make_sip_server, seen):
    """Regression: the cap answered 486 Busy Here (a carrier reads "user busy" and does not fail
    over), and calls being set up were not counted, so a burst got past the cap."""
    server = await make_sip_server(max_calls=2)
    peer = await UdpPeer.open()
    try:
        for i in range(4):  # a burst: all four arrive before any call is set up
            peer.send(invite(peer, f"burst-{i}"), server)
        finals: dict[str, object] = {}
        while len(finals) < 4:
            got = await peer.messages(8.0, until=lambda m: m.status >= 200)
            assert got, f"only {len(finals)} final answers to the burst of 4"
            finals[got[-1].call_id] = got[-1]
        statuses = sorted(m.status for m in finals.values())  # type: ignore[attr-defined]
        assert statuses == [200, 200, 503, 503]
        for m in finals.values():
            if m.status == 503:  # type: ignore[attr-defined]
                assert m.header("retry-after") == "30"  # type: ignore[attr-defined]
                assert "capacity" in (m.header("warning") or "")  # type: ignore[attr-defined]
        assert seen.agents == 2 and server.metrics.refused["capacity"] == 2
        for m in finals.values():
            if m.status == 200:  # type: ignore[attr-defined]
                await hang_up(peer, server, m)
    finally:
        peer.close()


def test_transaction_ids_need_the_magic_cookie_and_more():
    assert Via.parse("SIP/2.0/UDP a;branch=z9hG4bK").transaction_id is None
    assert Via.parse("SIP/2.0/UDP a;branch=12345").transaction_id is None
    assert Via.parse("SIP/2.0/UDP a;branch=z9hG4bKx").transaction_id == "z9hG4bKx"
    assert Via.parse("SIP/2.0/UDP A.example:5060;branch=z9hG4bKx").sent_by == "a.example:5060"
    assert Via.parse("SIP/2.0/UDP a.example;branch=z9hG4bKx").sent_by == "a.example:5060"


async def _call_through_a_proxy(server, proxy: UdpPeer, ua: UdpPeer, record_route: str):
    """An INVITE that came through ``proxy`` (which Record-Routed it) from ``ua``; answered and ACKed."""
    req = invite(ua, "routed-1", extra=(("Record-Route", record_route),))
    proxy.send(req, server)
    ok = (await proxy.responses())[-1]
    assert ok.status == 200 and ok.headers_named("record-route") == [record_route]  # copied into the 2xx
    proxy.send(in_dialog("ACK", ok, 1, proxy.port), server)
    [call] = server.live.values()
    await wait_for(lambda: "acked" in call.history)
    return call


async def _bye_reaches(proxy: UdpPeer, ua: UdpPeer, server, call) -> SipRequest:
    hang_up = asyncio.create_task(call.hang_up("test hangs up"))
    [bye] = await proxy.messages(5.0, until=lambda m: isinstance(m, SipRequest))
    assert isinstance(bye, SipRequest) and bye.method == "BYE"
    proxy.send(response_to(bye, 200), server)
    await hang_up
    await wait_for(lambda: not server.live)
    assert await ua.messages(0.3) == []  # nothing went around the proxy
    return bye


async def test_our_bye_follows_a_loose_route_set_through_the_proxy(sip_server):
    """Regression: the BYE carried Route but went to the remote Contact, around the carrier's
    proxy or SBC that Record-Routed the call (RFC 3261 12.2.1.1)."""
    proxy, ua = await UdpPeer.open(), await UdpPeer.open()
    try:
        call = await _call_through_a_proxy(sip_server, proxy, ua, f"<sip:127.0.0.1:{proxy.port};lr>")
        bye = await _bye_reaches(proxy, ua, sip_server, call)
        assert bye.uri == f"sip:peer@127.0.0.1:{ua.port}"  # the remote target stays the Request-URI
        assert bye.headers_named("route") == [f"<sip:127.0.0.1:{proxy.port};lr>"]
    finally:
        proxy.close()
        ua.close()


async def test_a_strict_router_becomes_the_request_uri(sip_server):
    proxy, ua = await UdpPeer.open(), await UdpPeer.open()
    try:
        call = await _call_through_a_proxy(sip_server, proxy, ua, f"<sip:127.0.0.1:{proxy.port}>")
        bye = await _bye_reaches(proxy, ua, sip_server, call)
        assert bye.uri == f"sip:127.0.0.1:{proxy.port}"
        assert bye.headers_named("route") == [f"<sip:peer@127.0.0.1:{ua.port}>"]
    finally:
        proxy.close()
        ua.close()


async def test_the_process_wide_admission_refuses_sip_invites_too(sip_server, seen):
    """Beside HTTP, SIP asks the call server's admission (one max_calls for every transport)."""
    peer = await UdpPeer.open()
    try:
        for reason in ("capacity", "draining"):
            sip_server.admit = lambda reason=reason: reason
            peer.send(invite(peer, f"admit-{reason}"), sip_server)
            final = (await peer.responses())[-1]
            assert final.status == 503 and final.header("retry-after") == "30"
            assert sip_server.metrics.refused[reason] == 1
        assert seen.agents == 0
    finally:
        peer.close()
