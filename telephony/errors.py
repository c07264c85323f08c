"""Exceptions raised by the telephony package.

::

    TelephonyError                 base of everything below
     ├── ProtocolError             a malformed or unexpected Twilio Media Streams message
     │    ├── HandshakeError       a Media Stream that never sent a usable ``start``
     │    └── SignalingError       a malformed WebRTC offer / candidate patch (telephony.webrtc.errors)
     │         └── UnknownPeerError  a candidate patch for a connection we do not have
     ├── SignatureError            a missing or invalid X-Twilio-Signature
     ├── ConfigError               an invalid setting (a pacer's lead, a jitter buffer's depth)
     ├── PlacementError            a call that cannot be placed: a bad number, Twilio refusing it
     └── SipError                  everything SIP (tree in telephony.sip.errors)

Foreign exceptions (json, binascii, websockets, aiohttp) are translated once, at
the boundary, with ``raise X from exc``.
"""

from __future__ import annotations

__all__ = ["ConfigError", "HandshakeError", "PlacementError", "ProtocolError", "SignatureError", "TelephonyError"]


class TelephonyError(Exception):
    """Base class for telephony errors."""


class ProtocolError(TelephonyError):
    """A Media Streams message that is not JSON, too large, of an unknown event, or misshapen."""


class HandshakeError(ProtocolError):
    """The stream never sent a usable ``start``."""


class SignatureError(TelephonyError):
    """A request whose X-Twilio-Signature is missing or does not match."""


class ConfigError(TelephonyError, ValueError):
    """An invalid setting of a telephony part (a pacer's lead, a jitter buffer's depth)."""


class PlacementError(TelephonyError):
    """A call that cannot be placed: a bad request, or Twilio refusing or not answering the
    create-call request. ``status`` is Twilio's HTTP status (None: no answer, or never asked)."""

    def __init__(self, message: str, *, status: int | None = None):
        super().__init__(message)
        self.status = status
