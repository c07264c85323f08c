"""Which addresses aiortc offers as ICE host candidates.

aiortc gathers its candidates through aioice, which lists every interface's address (and skips
127.0.0.1). aioice has no option for choosing them, so :func:`pin_host_addresses` replaces its
address lookup, process-wide: with ``("127.0.0.1",)`` every candidate this process offers, as
answerer or as a test's client, is on loopback and no media or STUN check leaves the machine.
A server behind NAT can pin its public-facing address the same way. No STUN or TURN server is
configured unless the operator names one.

A browser that hides its addresses sends mDNS candidates (``<uuid>.local``); resolving them would
send multicast queries on the network, so while addresses are pinned they are dropped
(:func:`drop_mdns_candidates`) and the browser is reached through its peer-reflexive address.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
from collections.abc import Iterator, Sequence

import aioice.ice

from telephony.webrtc.errors import SignalingError

log = logging.getLogger(__name__)

LOOPBACK: tuple[str, ...] = ("127.0.0.1",)

_original_get_host_addresses = aioice.ice.get_host_addresses
_pinned: tuple[str, ...] | None = None


def _pinned_host_addresses(use_ipv4: bool, use_ipv6: bool) -> list[str]:
    assert _pinned is not None
    return [a for a in _pinned if (use_ipv4 if ipaddress.ip_address(a).version == 4 else use_ipv6)]


def pin_host_addresses(addresses: Sequence[str] | None) -> None:
    """Offer only ``addresses`` as host candidates from now on; ``None`` restores aioice's lookup."""
    global _pinned
    if addresses is None:
        _pinned = None
        aioice.ice.get_host_addresses = _original_get_host_addresses
        return
    try:
        checked = tuple(str(ipaddress.ip_address(a)) for a in addresses)
    except ValueError as exc:
        raise SignalingError(f"ICE host addresses must be IP literals: {exc}") from exc
    if not checked:
        raise SignalingError("pin at least one ICE host address (or None for all interfaces)")
    _pinned = checked
    aioice.ice.get_host_addresses = _pinned_host_addresses
    log.info("ICE host candidates pinned to %s", ", ".join(checked))


def pinned_host_addresses() -> tuple[str, ...] | None:
    return _pinned


@contextlib.contextmanager
def host_addresses(addresses: Sequence[str] | None) -> Iterator[None]:
    """``pin_host_addresses`` for the length of a ``with`` block, then the previous setting."""
    previous = _pinned
    pin_host_addresses(addresses)
    try:
        yield
    finally:
        pin_host_addresses(previous)


def is_mdns_candidate(candidate: str) -> bool:
    fields = candidate.removeprefix("a=").split()
    return len(fields) > 4 and fields[4].lower().endswith(".local")


def drop_mdns_candidates(sdp: str) -> str:
    """The SDP without ``a=candidate`` lines whose address is an mDNS name."""
    lines = sdp.split("\r\n")
    kept = [ln for ln in lines if not (ln.startswith("a=candidate:") and is_mdns_candidate(ln))]
    if len(kept) != len(lines):
        log.debug("dropped %d mDNS candidates from an offer", len(lines) - len(kept))
    return "\r\n".join(kept)


def close_sockets(pc) -> int:
    """Close the UDP sockets of ``pc``'s ICE connections that are still open; how many.

    aiortc's ``RTCPeerConnection.close()`` marks itself closed first; when the task running it is
    cancelled half-way (pipecat's connect-timeout monitor cancels its own task while closing an
    offer whose ICE never completed), every later ``close()`` waits forever and the sockets stay
    open: one per abandoned offer, for the life of the process. This closes them directly (the
    aioice ``Connection``'s datagram protocols; attribute names as in aiortc 1.x / aioice 0.10)."""
    if pc is None:
        return 0
    transports = set()
    for transceiver in pc.getTransceivers():
        dtls = transceiver.receiver.transport
        if dtls is not None:
            transports.add(dtls.transport)
    sctp = pc.sctp
    if sctp is not None:
        transports.add(sctp.transport.transport)
    closed = 0
    for ice_transport in transports:
        connection = getattr(ice_transport, "_connection", None)
        for protocol in list(getattr(connection, "_protocols", ())):
            transport = getattr(protocol, "transport", None)
            if transport is not None and not transport.is_closing():
                transport.close()
                closed += 1
    return closed
