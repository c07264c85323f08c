"""Exceptions raised by the WebRTC entry point (they join ``telephony.errors``' tree).

::

    TelephonyError                    (telephony.errors)
     └── ProtocolError                (telephony.errors)
          ├── SignalingError          a malformed /api/offer body or candidate patch
          │    └── UnknownPeerError   a PATCH or renegotiation for a peer connection we do not hold
          └── PageMessageError        a data-channel message from the page that is no command

aiortc's own exceptions (a bad SDP) are translated once, in the route handler, with
``raise SignalingError(...) from exc``.
"""

from __future__ import annotations

from telephony.errors import ProtocolError

__all__ = ["PageMessageError", "SignalingError", "UnknownPeerError"]


class SignalingError(ProtocolError):
    """A signaling request that is not JSON, misses a field, or has a field of the wrong type."""


class UnknownPeerError(SignalingError):
    """The request names a ``pc_id`` this server does not hold (ended, or never existed)."""


class PageMessageError(ProtocolError):
    """A data-channel message from the page that is not a command parley knows (the call goes on)."""
