"""SIP: parley answers calls from SIP trunks and PBXs on the same pipeline as Twilio.

Public API::

    from telephony.sip import SipServer, SipConfig, RegistrationConfig

    sip = SipServer(SipConfig(port=5060), agent_factory, store=store, pipeline_config=config)
    await sip.start(); ...; sip.draining = True; ...; await sip.stop()
    result = await sip.dial(DialRequest("sip:alice@198.51.100.7"))   # an outbound call, to its end

Wire formats (each ``parse()`` / ``bytes()``, bad input raises a ``SipParseError``):
:func:`parse_message` (SIP), :class:`SessionDescription` (SDP), :class:`RtpPacket`,
:class:`TelephoneEvent` (RFC 4733).
"""

from telephony.sip.call import CallState, SipCall
from telephony.sip.config import RegistrationConfig, SipConfig
from telephony.sip.dialer import DialOutcome, DialRequest, DialResult
from telephony.sip.errors import (
    DialError,
    DigestParseError,
    RegistrationError,
    RtpParseError,
    SdpParseError,
    SipConfigError,
    SipError,
    SipParseError,
)
from telephony.sip.message import SipRequest, SipResponse, parse_message
from telephony.sip.rtp import JitterBuffer, RtpPacket, TelephoneEvent
from telephony.sip.sdp import SessionDescription
from telephony.sip.server import SipServer

__all__ = [
    "CallState",
    "DialError",
    "DialOutcome",
    "DialRequest",
    "DialResult",
    "DigestParseError",
    "JitterBuffer",
    "RegistrationConfig",
    "RegistrationError",
    "RtpPacket",
    "RtpParseError",
    "SdpParseError",
    "SessionDescription",
    "SipCall",
    "SipConfig",
    "SipConfigError",
    "SipError",
    "SipParseError",
    "SipRequest",
    "SipResponse",
    "SipServer",
    "TelephoneEvent",
    "parse_message",
]
