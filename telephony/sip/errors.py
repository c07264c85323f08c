"""Exceptions raised by the SIP user agent.

::

    TelephonyError                    (telephony.errors)
     └── SipError                     base of everything SIP
          ├── SipParseError           bytes that are not a valid SIP message
          │    ├── SdpParseError      a body that is not valid SDP
          │    ├── RtpParseError      a datagram that is not a valid RTP packet / RFC 4733 event
          │    └── DigestParseError   a malformed WWW-Authenticate / Authorization header
          ├── SipConfigError          a SipConfig that does not validate
          ├── TransferError           a REFER the far end refused, or a transfer that failed
          ├── DialError               a call we cannot place: a bad target, a host that does not resolve
          └── RegistrationError       REGISTER to a PBX failed (rejected, bad credentials, no answer)

Parsers raise only their own ``SipParseError`` subclass on bad input, whatever the bytes; foreign
exceptions (``UnicodeDecodeError``, ``ValueError``, ``struct.error``) are translated at the
boundary with ``raise X from exc``.
"""

from __future__ import annotations

from telephony.errors import TelephonyError

__all__ = [
    "DialError",
    "DigestParseError",
    "RegistrationError",
    "RtpParseError",
    "SdpParseError",
    "SipConfigError",
    "SipError",
    "SipParseError",
    "TransferError",
]


class SipError(TelephonyError):
    """Base class for SIP errors."""


class SipParseError(SipError):
    """A SIP message that cannot be parsed (start line, headers, Content-Length, encoding, size)."""


class SdpParseError(SipParseError):
    """An SDP body that cannot be parsed."""


class RtpParseError(SipParseError):
    """An RTP packet or RFC 4733 telephone-event payload that cannot be parsed."""


class DigestParseError(SipParseError):
    """A digest challenge or credentials header that cannot be parsed."""


class SipConfigError(SipError):
    """A SIP configuration value out of range or inconsistent."""


class TransferError(SipError):
    """A transfer (REFER) the far end refused, or that failed after it was accepted."""


class RegistrationError(SipError):
    """A REGISTER was refused or never answered."""


class DialError(SipError):
    """A call that cannot be placed at all: a malformed target, a host that does not resolve, no
    RTP port, a full server. (A call placed and not answered is a ``DialOutcome``, not an error.)"""
