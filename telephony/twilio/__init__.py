"""Twilio Media Streams: typed wire messages and request signatures."""

from telephony.twilio.messages import (
    MAX_MESSAGE_BYTES,
    Clear,
    Connected,
    Dtmf,
    Mark,
    Media,
    MediaFormat,
    OutMark,
    OutMedia,
    ServerMessage,
    Start,
    Stop,
    TwilioMessage,
    parse_to_twilio,
    parse_twilio,
)
from telephony.twilio.signature import SIGNATURE_HEADER, compute_signature, verify_signature

__all__ = [
    "MAX_MESSAGE_BYTES",
    "SIGNATURE_HEADER",
    "Clear",
    "Connected",
    "Dtmf",
    "Mark",
    "Media",
    "MediaFormat",
    "OutMark",
    "OutMedia",
    "ServerMessage",
    "Start",
    "Stop",
    "TwilioMessage",
    "compute_signature",
    "parse_to_twilio",
    "parse_twilio",
    "verify_signature",
]
