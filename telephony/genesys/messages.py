"""Genesys Cloud AudioHook (protocol version "2", the Audio Connector bot variant): the wire.

Text frames are JSON messages; binary frames are raw PCMU audio (8 kHz, channels interleaved in
the order the chosen media names them). Every message carries ``version`` "2", the session ``id``
(the ``Audiohook-Session-Id`` header), its ``type``, the sender's ``seq`` (1, 2, 3, ... per side)
and ``parameters``; the client's also carry ``serverseq`` (the last server seq it has seen) and
``position`` (an ISO 8601 duration, ``PT1.5S``: how far into its audio it is); the server's carry
``clientseq`` (the last client seq it has seen).

    env = parse_client(raw)                 # -> ClientMessage, or ProtocolError saying what is wrong
    seqs.accept(env)                        # seq == last + 1, serverseq <= ours, id == the session's
    ws.send_str(seqs.message("pong", {}))   # -> the next server message, numbered

Client -> server: open, ping, close, update, paused, resumed, discarded, error, and for bots dtmf,
playback_started, playback_completed. Server -> client: opened, pong, closed, updated, pause,
resume, event (``barge_in``, ``bot_turn_response``), disconnect.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Final

from telephony.errors import ProtocolError

__all__ = ["CLIENT_TYPES", "NULL_UUID", "ClientMessage", "MediaOffer", "OpenParams", "Sequence", "duration",
           "parse_client", "parse_duration", "parse_open"]

VERSION: Final = "2"
NULL_UUID: Final = "00000000-0000-0000-0000-000000000000"
MAX_TEXT_CHARS: Final = 65535
CLIENT_TYPES: Final = frozenset({"open", "ping", "close", "update", "paused", "resumed", "discarded", "error",
                                 "dtmf", "playback_started", "playback_completed"})
_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
_DURATION = re.compile(r"^PT(\d*\.?\d+)S$")


def is_uuid(value: object) -> bool:
    return isinstance(value, str) and bool(_UUID.match(value))


def parse_duration(value: object) -> float:
    m = _DURATION.match(value) if isinstance(value, str) else None
    if m is None:
        raise ProtocolError(f"not a duration like PT1.5S: {value!r:.40}")
    return float(m[1])


def duration(seconds: float) -> str:
    text = f"{max(0.0, seconds):.3f}".rstrip("0").rstrip(".")
    return f"PT{text or '0'}S"


@dataclass(frozen=True)
class ClientMessage:
    id: str
    type: str
    seq: int
    serverseq: int
    position_s: float
    parameters: dict[str, Any]


def _int(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ProtocolError(f"{what} must be a non-negative integer, got {value!r:.40}")
    return value


def parse_client(raw: str) -> ClientMessage:
    """A client text message, or ``ProtocolError`` (the reason goes into ``disconnect``'s info)."""
    if len(raw) > MAX_TEXT_CHARS:
        raise ProtocolError(f"text message too large ({len(raw)} > {MAX_TEXT_CHARS} characters)")
    try:
        msg = json.loads(raw)
    except ValueError:
        raise ProtocolError("text message not valid JSON") from None
    if not isinstance(msg, dict):
        raise ProtocolError("message not a well-formed client message (not an object)")
    if msg.get("version") != VERSION:
        raise ProtocolError(f"unsupported protocol version {msg.get('version')!r:.20} (parley speaks \"2\")")
    if not is_uuid(msg.get("id")):
        raise ProtocolError("message not a well-formed client message ('id' is not a UUID)")
    if not isinstance(msg.get("type"), str):
        raise ProtocolError("message not a well-formed client message ('type' missing)")
    parameters = msg.get("parameters")
    if not isinstance(parameters, dict):
        raise ProtocolError("message not a well-formed client message ('parameters' is not an object)")
    return ClientMessage(id=msg["id"], type=msg["type"], seq=_int(msg.get("seq"), "seq"),
                         serverseq=_int(msg.get("serverseq"), "serverseq"),
                         position_s=parse_duration(msg.get("position")), parameters=parameters)


@dataclass(frozen=True)
class MediaOffer:
    format: str
    channels: tuple[str, ...]
    rate: int

    def to_json(self) -> dict[str, Any]:
        return {"type": "audio", "format": self.format, "channels": list(self.channels), "rate": self.rate}


@dataclass(frozen=True)
class OpenParams:
    organization_id: str
    conversation_id: str
    participant_id: str
    ani: str
    ani_name: str
    dnis: str
    media: tuple[MediaOffer, ...]
    language: str = ""
    input_variables: dict[str, str] = field(default_factory=dict)

    @property
    def probe(self) -> bool:
        """Genesys checks a connection with an ``open`` whose conversation is the null UUID."""
        return self.conversation_id == NULL_UUID

    def choose_media(self) -> MediaOffer | None:
        """PCMU at 8 kHz with the caller's channel: mono if offered, else the first that has it."""
        usable = [m for m in self.media if m.format == "PCMU" and m.rate == 8000 and "external" in m.channels]
        mono = [m for m in usable if m.channels == ("external",)]
        return (mono or usable)[0] if usable else None


def parse_open(parameters: dict[str, Any]) -> OpenParams:
    participant = parameters.get("participant")
    if not isinstance(participant, dict):
        raise ProtocolError("invalid message: 'open' without a participant")
    for key in ("organizationId", "conversationId"):
        if not is_uuid(parameters.get(key)):
            raise ProtocolError(f"invalid message: 'open' {key} is not a UUID")
    offers = parameters.get("media")
    if not isinstance(offers, list) or not offers:
        raise ProtocolError("invalid message: 'open' offers no media")
    media = []
    for offer in offers:
        if not (isinstance(offer, dict) and isinstance(offer.get("channels"), list)
                and isinstance(offer.get("rate"), int)):
            raise ProtocolError(f"invalid message: bad media offer {offer!r:.80}")
        media.append(MediaOffer(str(offer.get("format")), tuple(str(c) for c in offer["channels"]), offer["rate"]))
    variables = parameters.get("inputVariables") or {}
    if not isinstance(variables, dict):
        raise ProtocolError("invalid message: 'inputVariables' is not an object")

    def text(key: str) -> str:
        value = participant.get(key, "")
        return value[:256] if isinstance(value, str) else ""

    return OpenParams(organization_id=parameters["organizationId"], conversation_id=parameters["conversationId"],
                      participant_id=text("id"), ani=text("ani"), ani_name=text("aniName"), dnis=text("dnis"),
                      media=tuple(media), language=str(parameters.get("language") or "")[:16],
                      input_variables={str(k)[:128]: str(v)[:1024] for k, v in list(variables.items())[:64]})


class Sequence:
    """Both sides' sequence numbers for one session: checks the client's, numbers the server's."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.clientseq = 0          # the last client seq accepted
        self.seq = 0                # the last server seq sent

    def accept(self, msg: ClientMessage) -> None:
        if msg.seq != self.clientseq + 1:
            raise ProtocolError(f"invalid seq value {msg.seq} (expected {self.clientseq + 1}: not monotonically "
                                f"increasing)")
        if msg.serverseq > self.seq:
            raise ProtocolError(f"invalid serverseq value {msg.serverseq} (the last sent is {self.seq})")
        if msg.id != self.session_id:
            raise ProtocolError("session identifier mismatch")
        self.clientseq = msg.seq

    def message(self, type_: str, parameters: dict[str, Any] | None = None) -> str:
        self.seq += 1
        return json.dumps({"version": VERSION, "id": self.session_id, "type": type_, "seq": self.seq,
                           "clientseq": self.clientseq, "parameters": parameters or {}}, separators=(",", ":"))
