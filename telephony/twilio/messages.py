"""Twilio Media Streams WebSocket messages, typed at the edge.

Both directions of a bidirectional stream (``<Connect><Stream>``) are frozen dataclasses:

- from Twilio, parsed by ``parse_twilio``: ``Connected``, ``Start``, ``Media``, ``Dtmf``,
  ``Mark`` (a mark we sent, echoed back once the audio before it has played), ``Stop``;
- to Twilio, parsed by ``parse_to_twilio`` (the scripted caller reads these): ``OutMedia``,
  ``OutMark``, ``Clear``.

Every message has ``to_json()``, which writes exactly the shape Twilio uses on the wire: compact
JSON, keys in the order of Twilio's examples, ``sequenceNumber``/``chunk``/``timestamp`` as decimal
strings, payloads as base64 mu-law with no header. ``parse(m.to_json()) == m`` for every message.

Parsers accept unknown extra keys (Twilio adds fields over time) but nothing malformed: input that
is not UTF-8 JSON, larger than ``MAX_MESSAGE_BYTES``, of an unknown event, missing a field, of a
wrong type, or with bad base64 raises ``ProtocolError`` and nothing else.

    msg = parse_twilio(raw)  # -> Connected | Start | Media | Dtmf | Mark | Stop
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, Literal, TypeAlias

from telephony.errors import ProtocolError

__all__ = [
    "MAX_MESSAGE_BYTES",
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
    "parse_to_twilio",
    "parse_twilio",
]

MAX_MESSAGE_BYTES: Final = 64 * 1024
"""Largest message either parser accepts; a 20 ms media frame is about 300 bytes."""

_DIGITS = re.compile(r"[0-9]{1,15}")
_DTMF_DIGITS: Final = frozenset("0123456789*#ABCD")
MediaTrack: TypeAlias = Literal["inbound", "outbound"]


def _dumps(obj: dict[str, Any]) -> str:
    return json.dumps(obj, separators=(",", ":"))


def _b64(payload: bytes) -> str:
    return base64.b64encode(payload).decode("ascii")


@dataclass(frozen=True, slots=True)
class MediaFormat:
    """``start.mediaFormat``; Twilio always sends 8 kHz mono mu-law."""

    encoding: str = "audio/x-mulaw"
    sample_rate_hz: int = 8000
    channels: int = 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "encoding": self.encoding,
            "sampleRate": self.sample_rate_hz,
            "channels": self.channels,
        }


# --- From Twilio -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Connected:
    """First message on the socket; names the protocol."""

    event: ClassVar[str] = "connected"
    protocol: str = "Call"
    version: str = "1.0.0"

    def to_json(self) -> str:
        return _dumps({"event": self.event, "protocol": self.protocol, "version": self.version})


@dataclass(frozen=True, slots=True)
class Start:
    """Stream metadata, sent once after ``connected``; ``<Parameter>``s arrive here."""

    event: ClassVar[str] = "start"
    sequence_number: int
    stream_sid: str
    account_sid: str
    call_sid: str
    tracks: tuple[str, ...] = ("inbound",)
    custom_parameters: dict[str, str] = field(default_factory=dict, hash=False)
    media_format: MediaFormat = MediaFormat()

    def to_json(self) -> str:
        return _dumps(
            {
                "event": self.event,
                "sequenceNumber": str(self.sequence_number),
                "start": {
                    "accountSid": self.account_sid,
                    "streamSid": self.stream_sid,
                    "callSid": self.call_sid,
                    "tracks": list(self.tracks),
                    "mediaFormat": self.media_format.to_dict(),
                    "customParameters": dict(self.custom_parameters),
                },
                "streamSid": self.stream_sid,
            }
        )


@dataclass(frozen=True, slots=True)
class Media:
    """One chunk of caller audio (20 ms = 160 bytes of mu-law); ``payload`` is decoded."""

    event: ClassVar[str] = "media"
    sequence_number: int
    stream_sid: str
    chunk: int
    timestamp_ms: int
    payload: bytes
    track: MediaTrack = "inbound"

    def to_json(self) -> str:
        return _dumps(
            {
                "event": self.event,
                "sequenceNumber": str(self.sequence_number),
                "media": {
                    "track": self.track,
                    "chunk": str(self.chunk),
                    "timestamp": str(self.timestamp_ms),
                    "payload": _b64(self.payload),
                },
                "streamSid": self.stream_sid,
            }
        )


@dataclass(frozen=True, slots=True)
class Dtmf:
    """A key the caller pressed."""

    event: ClassVar[str] = "dtmf"
    sequence_number: int
    stream_sid: str
    digit: str
    track: str = "inbound_track"

    def to_json(self) -> str:
        return _dumps(
            {
                "event": self.event,
                "streamSid": self.stream_sid,
                "sequenceNumber": str(self.sequence_number),
                "dtmf": {"track": self.track, "digit": self.digit},
            }
        )


@dataclass(frozen=True, slots=True)
class Mark:
    """Echo of an ``OutMark``: the audio sent before it has played, or was cleared."""

    event: ClassVar[str] = "mark"
    sequence_number: int
    stream_sid: str
    name: str

    def to_json(self) -> str:
        return _dumps(
            {
                "event": self.event,
                "sequenceNumber": str(self.sequence_number),
                "streamSid": self.stream_sid,
                "mark": {"name": self.name},
            }
        )


@dataclass(frozen=True, slots=True)
class Stop:
    """The stream ended (the call hung up or the stream was stopped)."""

    event: ClassVar[str] = "stop"
    sequence_number: int
    stream_sid: str
    account_sid: str
    call_sid: str

    def to_json(self) -> str:
        return _dumps(
            {
                "event": self.event,
                "sequenceNumber": str(self.sequence_number),
                "stop": {"accountSid": self.account_sid, "callSid": self.call_sid},
                "streamSid": self.stream_sid,
            }
        )


# --- To Twilio ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OutMedia:
    """Agent audio for the caller: raw 8 kHz mu-law, any length, played in order."""

    event: ClassVar[str] = "media"
    stream_sid: str
    payload: bytes

    def to_json(self) -> str:
        media = {"payload": _b64(self.payload)}
        return _dumps({"event": self.event, "streamSid": self.stream_sid, "media": media})


@dataclass(frozen=True, slots=True)
class OutMark:
    """Ask Twilio to echo ``name`` when the audio sent before it has played."""

    event: ClassVar[str] = "mark"
    stream_sid: str
    name: str

    def to_json(self) -> str:
        mark = {"name": self.name}
        return _dumps({"event": self.event, "streamSid": self.stream_sid, "mark": mark})


@dataclass(frozen=True, slots=True)
class Clear:
    """Drop all audio not yet played (barge-in); pending marks are echoed at once."""

    event: ClassVar[str] = "clear"
    stream_sid: str

    def to_json(self) -> str:
        return _dumps({"event": self.event, "streamSid": self.stream_sid})


TwilioMessage: TypeAlias = Connected | Start | Media | Dtmf | Mark | Stop
ServerMessage: TypeAlias = OutMedia | OutMark | Clear


# --- Parsing -----------------------------------------------------------------------------------


def _load(raw: str | bytes, max_bytes: int) -> tuple[str, dict[str, Any]]:
    """Decode, size-check and JSON-parse one frame; return ``(event, object)``."""
    if isinstance(raw, (bytes, bytearray, memoryview)):
        data = bytes(raw)
        if len(data) > max_bytes:
            raise ProtocolError(f"message of {len(data)} bytes exceeds {max_bytes}")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ProtocolError("message is not UTF-8") from exc
    elif isinstance(raw, str):
        if len(raw) > max_bytes:
            raise ProtocolError(f"message of {len(raw)}+ bytes exceeds {max_bytes}")
        text = raw
        try:
            size = len(raw.encode("utf-8"))
        except UnicodeEncodeError as exc:
            raise ProtocolError("message is not encodable as UTF-8") from exc
        if size > max_bytes:
            raise ProtocolError(f"message of {size} bytes exceeds {max_bytes}")
    else:
        raise ProtocolError(f"message must be str or bytes, not {type(raw).__name__}")
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError
        raise ProtocolError("message is not valid JSON") from exc
    if not isinstance(obj, dict):
        raise ProtocolError("message is not a JSON object")
    event = obj.get("event")
    if not isinstance(event, str):
        raise ProtocolError("message has no string 'event'")
    return event, obj


def _obj(parent: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    value = parent.get(key)
    if not isinstance(value, dict):
        raise ProtocolError(f"{where}{key}: expected an object")
    return value


def _str(parent: dict[str, Any], key: str, where: str = "") -> str:
    value = parent.get(key)
    if not isinstance(value, str) or not value:
        raise ProtocolError(f"{where}{key}: expected a non-empty string")
    return value


def _decimal(parent: dict[str, Any], key: str, where: str = "") -> int:
    """A non-negative integer sent as a decimal string, as Twilio sends counters."""
    value = parent.get(key)
    if not isinstance(value, str) or not _DIGITS.fullmatch(value):
        raise ProtocolError(f"{where}{key}: expected a decimal string")
    return int(value)


def _int(parent: dict[str, Any], key: str, where: str) -> int:
    value = parent.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ProtocolError(f"{where}{key}: expected a positive integer")
    return value


def _payload(parent: dict[str, Any], where: str) -> bytes:
    value = parent.get("payload")
    if not isinstance(value, str):
        raise ProtocolError(f"{where}payload: expected a base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ProtocolError(f"{where}payload: invalid base64") from exc


def _parse_start(obj: dict[str, Any]) -> Start:
    body = _obj(obj, "start", "")
    tracks = body.get("tracks", ["inbound"])
    if not isinstance(tracks, list) or not all(isinstance(t, str) and t for t in tracks):
        raise ProtocolError("start.tracks: expected a list of strings")
    params = body.get("customParameters", {})
    if not isinstance(params, dict) or not all(isinstance(v, str) for v in params.values()):
        raise ProtocolError("start.customParameters: expected an object of strings")
    fmt = _obj(body, "mediaFormat", "start.")
    return Start(
        sequence_number=_decimal(obj, "sequenceNumber"),
        stream_sid=_str(obj, "streamSid"),
        account_sid=_str(body, "accountSid", "start."),
        call_sid=_str(body, "callSid", "start."),
        tracks=tuple(tracks),
        custom_parameters=dict(params),
        media_format=MediaFormat(
            encoding=_str(fmt, "encoding", "start.mediaFormat."),
            sample_rate_hz=_int(fmt, "sampleRate", "start.mediaFormat."),
            channels=_int(fmt, "channels", "start.mediaFormat."),
        ),
    )


def _parse_media(obj: dict[str, Any]) -> Media:
    body = _obj(obj, "media", "")
    track = body.get("track", "inbound")
    if track not in ("inbound", "outbound"):
        raise ProtocolError("media.track: expected 'inbound' or 'outbound'")
    return Media(
        sequence_number=_decimal(obj, "sequenceNumber"),
        stream_sid=_str(obj, "streamSid"),
        chunk=_decimal(body, "chunk", "media."),
        timestamp_ms=_decimal(body, "timestamp", "media."),
        payload=_payload(body, "media."),
        track=track,
    )


def _parse_dtmf(obj: dict[str, Any]) -> Dtmf:
    body = _obj(obj, "dtmf", "")
    digit = _str(body, "digit", "dtmf.")
    if digit not in _DTMF_DIGITS:
        raise ProtocolError("dtmf.digit: expected one of 0-9 * # A-D")
    return Dtmf(
        sequence_number=_decimal(obj, "sequenceNumber"),
        stream_sid=_str(obj, "streamSid"),
        digit=digit,
        track=_str(body, "track", "dtmf.") if "track" in body else "inbound_track",
    )


def _parse_mark(obj: dict[str, Any]) -> Mark:
    return Mark(
        sequence_number=_decimal(obj, "sequenceNumber"),
        stream_sid=_str(obj, "streamSid"),
        name=_str(_obj(obj, "mark", ""), "name", "mark."),
    )


def _parse_stop(obj: dict[str, Any]) -> Stop:
    body = _obj(obj, "stop", "")
    return Stop(
        sequence_number=_decimal(obj, "sequenceNumber"),
        stream_sid=_str(obj, "streamSid"),
        account_sid=_str(body, "accountSid", "stop."),
        call_sid=_str(body, "callSid", "stop."),
    )


def parse_twilio(raw: str | bytes, max_bytes: int = MAX_MESSAGE_BYTES) -> TwilioMessage:
    """Parse one message Twilio sent to our server; raise ``ProtocolError`` if malformed."""
    event, obj = _load(raw, max_bytes)
    if event == "connected":
        return Connected(protocol=_str(obj, "protocol"), version=_str(obj, "version"))
    if event == "start":
        return _parse_start(obj)
    if event == "media":
        return _parse_media(obj)
    if event == "dtmf":
        return _parse_dtmf(obj)
    if event == "mark":
        return _parse_mark(obj)
    if event == "stop":
        return _parse_stop(obj)
    raise ProtocolError(f"unknown event from Twilio: {event[:32]!r}")


def parse_to_twilio(raw: str | bytes, max_bytes: int = MAX_MESSAGE_BYTES) -> ServerMessage:
    """Parse one message a server sends to Twilio; raise ``ProtocolError`` if malformed."""
    event, obj = _load(raw, max_bytes)
    if event == "media":
        payload = _payload(_obj(obj, "media", ""), "media.")
        return OutMedia(stream_sid=_str(obj, "streamSid"), payload=payload)
    if event == "mark":
        name = _str(_obj(obj, "mark", ""), "name", "mark.")
        return OutMark(stream_sid=_str(obj, "streamSid"), name=name)
    if event == "clear":
        return Clear(stream_sid=_str(obj, "streamSid"))
    raise ProtocolError(f"unknown event to Twilio: {event[:32]!r}")
