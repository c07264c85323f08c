"""ICE host addresses pinned to loopback: what aiortc offers, and that the pin comes off again."""

from __future__ import annotations

import aioice.ice
import pytest
from aiortc import RTCPeerConnection

from telephony.webrtc import ice
from telephony.webrtc.errors import SignalingError


async def _offered_addresses() -> list[str]:
    pc = RTCPeerConnection()
    try:
        pc.addTransceiver("audio")
        await pc.setLocalDescription(await pc.createOffer())  # gathers before it returns
        return [ln.split()[4] for ln in pc.localDescription.sdp.splitlines() if ln.startswith("a=candidate:")]
    finally:
        await pc.close()


async def test_pinned_to_loopback_offers_only_127_0_0_1(loopback_ice):
    assert ice.pinned_host_addresses() == ice.LOOPBACK
    assert await _offered_addresses() == ["127.0.0.1"]


def test_pin_comes_off_after_the_block(loopback_ice):
    with ice.host_addresses(("10.1.2.3", "::1")):
        assert aioice.ice.get_host_addresses(use_ipv4=True, use_ipv6=False) == ["10.1.2.3"]
        assert aioice.ice.get_host_addresses(use_ipv4=True, use_ipv6=True) == ["10.1.2.3", "::1"]
    assert aioice.ice.get_host_addresses(use_ipv4=True, use_ipv6=True) == ["127.0.0.1"]
    with ice.host_addresses(None):
        assert aioice.ice.get_host_addresses is ice._original_get_host_addresses
    assert ice.pinned_host_addresses() == ice.LOOPBACK


@pytest.mark.parametrize("addresses", [("localhost",), ("127.0.0.1", "nope"), ()])
def test_pin_refuses_non_addresses(addresses, loopback_ice):
    with pytest.raises(SignalingError):
        ice.pin_host_addresses(addresses)
    assert ice.pinned_host_addresses() == ice.LOOPBACK  # unchanged


def test_mdns_candidates_are_dropped_from_an_offer():
    sdp = "\r\n".join([
        "v=0", "m=audio 9 UDP/TLS/RTP/SAVPF 111",
        "a=candidate:1 1 udp 2122260223 3f1e2d4c-aaaa-bbbb-cccc-0123456789ab.local 50000 typ host",
        "a=candidate:2 1 udp 2122260223 192.0.2.2 50001 typ host",
        "a=mid:0", "",
    ])
    kept = ice.drop_mdns_candidates(sdp)
    assert ".local" not in kept and "192.0.2.2 50001" in kept and kept.endswith("a=mid:0\r\n")
    assert ice.is_mdns_candidate("candidate:1 1 udp 1 abc.local 5 typ host")
    assert not ice.is_mdns_candidate("candidate:1 1 udp 1 127.0.0.1 5 typ host")
