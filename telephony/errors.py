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
     ├── RecordingUploadError      a recording not stored in S3 (refused, unreachable, not verified)
     ├── CampaignError             an outbound campaign that cannot run (telephony.campaign)
     │    └── ContactsError        a contacts file refused: every problem, one line each
     └── SipError                  everything SIP (tree in telephony.sip.errors)

Foreign exceptions (json, binascii, websockets, aiohttp) are translated once, at
the boundary, with ``raise X from exc``.
"""

from __future__ import annotations

__all__ = ["CampaignError", "ConfigError", "ContactsError", "HandshakeError", "PlacementError", "ProtocolError",
           "RecordingUploadError", "SignatureError", "TelephonyError"]


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
    create-call request. ``status`` is Twilio's HTTP status (None: no answer, or never asked);
    ``maybe_placed``: the request may have reached Twilio (it timed out), so the call may exist."""

    def __init__(self, message: str, *, status: int | None = None, maybe_placed: bool = False):
        super().__init__(message)
        self.status = status
        self.maybe_placed = maybe_placed


class RecordingUploadError(TelephonyError):
    """A call recording that could not be stored in S3: the bucket refused it or could not be
    reached (after botocore's retries), or the stored object is not the file (size, ETag or
    encryption differ). The file stays on disk."""


class CampaignError(TelephonyError):
    """An outbound campaign that cannot run: a bad setting, a name taken by other contacts."""


class ContactsError(CampaignError):
    """A contacts (or do-not-call) file refused before any call: ``problems`` holds one line
    each, ``FILE:LINE: what is wrong``, every problem found, not only the first."""

    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems
