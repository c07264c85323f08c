"""SDP (RFC 4566) for one audio stream: typed parse / bytes, and the offer/answer parley makes.

::

    offer = SessionDescription.parse(invite.body)        # or raises SdpParseError
    answer, media = answer_offer(offer, local_ip, rtp_port, codecs=("PCMU", "PCMA"))
    invite_response_body = bytes(answer)

    # delayed offer (an INVITE without SDP): our offer in the 200, the caller's answer in the ACK
    offer = make_offer(local_ip, rtp_port, codecs=("PCMU", "PCMA"))
    media = accept_answer(SessionDescription.parse(ack.body), codecs=("PCMU", "PCMA"))  # or None

Session-level lines other than ``v o s c t a m`` are kept in order in ``other`` and written after
``s=``; media-level ones likewise. Payload types 0 (PCMU) and 8 (PCMA) are known without an
``rtpmap``. Hold (RFC 3264 8.4) is an offer with ``a=sendonly`` / ``a=inactive`` or a zero address.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final, Literal

from telephony.sip.errors import SdpParseError

__all__ = [
    "Codec",
    "Connection",
    "MediaDescription",
    "NegotiatedMedia",
    "Origin",
    "SessionDescription",
    "accept_answer",
    "answer_offer",
    "make_offer",
    "pending_media",
]

Direction = Literal["sendrecv", "sendonly", "recvonly", "inactive"]
_DIRECTIONS: Final = ("sendrecv", "sendonly", "recvonly", "inactive")
_ANSWER_DIRECTION: Final = {"sendrecv": "sendrecv", "sendonly": "recvonly", "recvonly": "sendonly",
                            "inactive": "inactive"}
_STATIC: Final = {0: ("PCMU", 8000), 8: ("PCMA", 8000)}
_FIELD = re.compile(r"[^\s]+\Z")  # one space-free field
_ATTR_NAME = re.compile(r"[A-Za-z0-9_\-.]+\Z")
_ADDRESS = re.compile(r"[A-Za-z0-9.:\-]{1,253}(/[0-9]{1,3}){0,2}\Z")  # multicast may add /ttl/count
MAX_SDP_BYTES: Final = 16_384

Attributes = tuple[tuple[str, str | None], ...]
Lines = tuple[tuple[str, str], ...]


def _check_field(name: str, value: str) -> None:
    if not isinstance(value, str) or not _FIELD.match(value):
        raise SdpParseError(f"bad {name} {value!r}")


def _check_text(name: str, value: str) -> None:
    if not isinstance(value, str) or any(c in value for c in "\r\n\x00"):
        raise SdpParseError(f"bad {name} {value!r}")


def _check_lines(lines: Lines, reserved: str) -> None:
    for kind, value in lines:
        if not isinstance(kind, str) or len(kind) != 1 or not "a" <= kind <= "z" or kind in reserved:
            raise SdpParseError(f"line type {kind!r} not allowed here")
        _check_text(f"{kind}= line", value)


def _check_attrs(attrs: Attributes) -> None:
    for name, value in attrs:
        if not isinstance(name, str) or not _ATTR_NAME.match(name):
            raise SdpParseError(f"bad attribute name {name!r}")
        if value is not None:
            _check_text(f"a={name} value", value)


@dataclass(frozen=True)
class Connection:
    """``c=IN IP4 203.0.113.5``"""

    address: str
    addrtype: str = "IP4"
    nettype: str = "IN"

    def __post_init__(self) -> None:
        for name in ("address", "addrtype", "nettype"):
            _check_field(f"c= {name}", getattr(self, name))
        if not _ADDRESS.match(self.address):  # an IP literal or a host name, nothing else (no NUL)
            raise SdpParseError(f"bad c= address {self.address[:60]!r}")

    @classmethod
    def parse(cls, value: str) -> "Connection":
        parts = value.split(" ")
        if len(parts) != 3:
            raise SdpParseError(f"bad c= line {value[:80]!r}")
        return cls(nettype=parts[0], addrtype=parts[1], address=parts[2])

    def __str__(self) -> str:
        return f"{self.nettype} {self.addrtype} {self.address}"

    @property
    def is_hold(self) -> bool:
        return self.address in ("0.0.0.0", "::")


@dataclass(frozen=True)
class Origin:
    """``o=- 1234 1 IN IP4 203.0.113.5``"""

    username: str = "-"
    session_id: int = 0
    session_version: int = 0
    nettype: str = "IN"
    addrtype: str = "IP4"
    address: str = "0.0.0.0"

    def __post_init__(self) -> None:
        for name in ("username", "nettype", "addrtype", "address"):
            _check_field(f"o= {name}", getattr(self, name))
        for name in ("session_id", "session_version"):
            v = getattr(self, name)
            if not isinstance(v, int) or not 0 <= v < 10**20:
                raise SdpParseError(f"bad o= {name} {v!r}")

    @classmethod
    def parse(cls, value: str) -> "Origin":
        parts = value.split(" ")
        if len(parts) != 6 or not all(p.isascii() and p.isdigit() for p in parts[1:3]) or \
                any(len(p) > 20 for p in parts[1:3]):
            raise SdpParseError(f"bad o= line {value[:80]!r}")
        return cls(parts[0], int(parts[1]), int(parts[2]), parts[3], parts[4], parts[5])

    def __str__(self) -> str:
        return (f"{self.username} {self.session_id} {self.session_version} "
                f"{self.nettype} {self.addrtype} {self.address}")


@dataclass(frozen=True)
class Codec:
    payload_type: int
    name: str
    clock_rate_hz: int
    fmtp: str | None = None


@dataclass(frozen=True)
class MediaDescription:
    """``m=audio 49170 RTP/AVP 0 8 101`` and the lines under it."""

    media: str = "audio"
    port: int = 0
    proto: str = "RTP/AVP"
    formats: tuple[str, ...] = ()
    num_ports: int | None = None
    connection: Connection | None = None
    attributes: Attributes = ()
    other: Lines = ()  # i= b= k= lines, in order

    def __post_init__(self) -> None:
        _check_field("m= media", self.media)
        _check_field("m= proto", self.proto)
        if not isinstance(self.port, int) or not 0 <= self.port <= 65535:
            raise SdpParseError(f"bad m= port {self.port!r}")
        if self.num_ports is not None and (not isinstance(self.num_ports, int) or not 1 <= self.num_ports <= 65535):
            raise SdpParseError(f"bad m= port count {self.num_ports!r}")
        if not self.formats:
            raise SdpParseError("m= line without formats")
        for f in self.formats:
            _check_field("m= format", f)
            if self.proto.upper().startswith("RTP/") and not (f.isascii() and f.isdigit() and int(f) <= 127):
                raise SdpParseError(f"RTP payload type {f[:10]!r} is not 0..127")  # RFC 3551: 7 bits
        _check_attrs(self.attributes)
        _check_lines(self.other, "vcam")

    def attribute(self, name: str) -> list[str | None]:
        return [v for n, v in self.attributes if n == name]

    @property
    def codecs(self) -> dict[int, Codec]:
        """Payload type -> codec, from ``a=rtpmap`` / ``a=fmtp`` (plus the static 0 and 8)."""
        out: dict[int, Codec] = {}
        fmtp: dict[int, str] = {}
        for v in self.attribute("fmtp"):
            pt, _, params = (v or "").partition(" ")
            if pt.isascii() and pt.isdigit():
                fmtp[int(pt)] = params.strip()
        for f in self.formats:
            if f.isascii() and f.isdigit() and int(f) in _STATIC:
                name, rate = _STATIC[int(f)]
                out[int(f)] = Codec(int(f), name, rate, fmtp.get(int(f)))
        for v in self.attribute("rtpmap"):
            pt, _, spec = (v or "").partition(" ")
            enc = spec.strip().split("/")
            if pt.isascii() and pt.isdigit() and len(enc) >= 2 and enc[1].isascii() and enc[1].isdigit():
                out[int(pt)] = Codec(int(pt), enc[0], int(enc[1]), fmtp.get(int(pt)))
        return out

    @property
    def direction(self) -> Direction | None:
        found = [n for n, _ in self.attributes if n in _DIRECTIONS]
        return found[-1] if found else None  # type: ignore[return-value]


@dataclass(frozen=True)
class SessionDescription:
    origin: Origin = Origin()
    session_name: str = "-"
    connection: Connection | None = None
    timing: str = "0 0"
    attributes: Attributes = ()
    media: tuple[MediaDescription, ...] = ()
    other: Lines = ()  # i= u= e= p= b= z= k= r= lines, in order

    def __post_init__(self) -> None:
        _check_text("s=", self.session_name)
        if not self.session_name:
            raise SdpParseError("empty s= line")
        _check_text("t=", self.timing)
        _check_attrs(self.attributes)
        _check_lines(self.other, "vostcam")

    # -- wire ---------------------------------------------------------------------------------

    @classmethod
    def parse(cls, data: bytes) -> "SessionDescription":
        """Parse an SDP body. Raises :class:`SdpParseError` and nothing else."""
        if not isinstance(data, (bytes, bytearray)):
            raise SdpParseError(f"expected bytes, got {type(data).__name__}")
        if len(data) > MAX_SDP_BYTES:
            raise SdpParseError(f"SDP of {len(data)} bytes is too large")
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SdpParseError("SDP is not UTF-8") from exc
        lines = text.split("\n")
        while lines and lines[-1].strip("\r") == "":  # trailing blank lines are harmless
            lines.pop()
        parsed: list[tuple[str, str]] = []
        for line in lines:
            line = line[:-1] if line.endswith("\r") else line
            if len(line) < 2 or line[1] != "=" or not ("a" <= line[0] <= "z"):
                raise SdpParseError(f"bad SDP line {line[:80]!r}")
            parsed.append((line[0], line[2:]))
        if not parsed or parsed[0] != ("v", "0"):
            raise SdpParseError("SDP does not start with v=0")
        session: dict[str, Any] = {"other": [], "attributes": []}   # fields as they come
        media: list[dict[str, Any]] = []
        for kind, value in parsed[1:]:
            target = media[-1] if media else session
            if kind == "m":
                media.append(_parse_m(value))
            elif kind == "a":
                name, colon, val = value.partition(":")
                target["attributes"].append((name, val if colon else None))
            elif kind == "c":
                if "connection" in target:
                    raise SdpParseError("two c= lines")
                target["connection"] = Connection.parse(value)
            elif not media and kind in ("o", "s", "t"):
                if kind in session:
                    raise SdpParseError(f"two {kind}= lines")
                session[kind] = value
            elif kind == "v":
                raise SdpParseError("a second v= line")
            else:
                target["other"].append((kind, value))
        for need in ("o", "s", "t"):
            if need not in session:
                raise SdpParseError(f"no {need}= line")
        return cls(
            origin=Origin.parse(str(session["o"])),
            session_name=str(session["s"]),
            connection=session.get("connection"),
            timing=str(session["t"]),
            attributes=tuple(session["attributes"]),
            media=tuple(MediaDescription(**{**m, "attributes": tuple(m["attributes"]),
                                            "other": tuple(m["other"])}) for m in media),
            other=tuple(session["other"]),
        )

    def __bytes__(self) -> bytes:
        out = ["v=0", f"o={self.origin}", f"s={self.session_name}"]
        out += [f"{k}={v}" for k, v in self.other]
        if self.connection is not None:
            out.append(f"c={self.connection}")
        out.append(f"t={self.timing}")
        out += [_attr(n, v) for n, v in self.attributes]
        for m in self.media:
            ports = f"{m.port}/{m.num_ports}" if m.num_ports is not None else str(m.port)
            out.append(f"m={m.media} {ports} {m.proto} {' '.join(m.formats)}")
            out += [f"{k}={v}" for k, v in m.other]
            if m.connection is not None:
                out.append(f"c={m.connection}")
            out += [_attr(n, v) for n, v in m.attributes]
        return ("\r\n".join(out) + "\r\n").encode("utf-8")

    # -- reading --------------------------------------------------------------------------------

    def audio(self) -> MediaDescription | None:
        return next((m for m in self.media if m.media == "audio" and m.port != 0), None)

    def direction_of(self, m: MediaDescription) -> Direction:
        if m.direction is not None:
            return m.direction
        found = [n for n, _ in self.attributes if n in _DIRECTIONS]
        return found[-1] if found else "sendrecv"  # type: ignore[return-value]

    def connection_of(self, m: MediaDescription) -> Connection | None:
        return m.connection or self.connection


def _attr(name: str, value: str | None) -> str:
    return f"a={name}" if value is None else f"a={name}:{value}"


def _parse_m(value: str) -> dict[str, object]:
    parts = value.split(" ")
    if len(parts) < 4:
        raise SdpParseError(f"bad m= line {value[:80]!r}")
    port_s, _, count_s = parts[1].partition("/")
    if not port_s.isascii() or not port_s.isdigit() or len(port_s) > 5 or \
            (count_s and (not count_s.isascii() or not count_s.isdigit() or len(count_s) > 5)):
        raise SdpParseError(f"bad m= port {parts[1][:20]!r}")
    return {"media": parts[0], "port": int(port_s), "proto": parts[2], "formats": tuple(parts[3:]),
            "num_ports": int(count_s) if count_s else None, "attributes": [], "other": []}


@dataclass(frozen=True)
class NegotiatedMedia:
    """What an offer/answer settled for the call's audio."""

    codec: Codec  # PCMU or PCMA at 8 kHz
    dtmf_payload_type: int | None
    remote_address: tuple[str, int] | None  # None while the caller holds with a zero address
    direction: Direction  # the direction *we* answered (``recvonly`` = we must not send: on hold)
    ptime_ms: int = 20

    @property
    def on_hold(self) -> bool:
        return self.direction in ("recvonly", "inactive") or self.remote_address is None


OFFER_DTMF_PT: Final = 101
_PT: Final = {"PCMU": 0, "PCMA": 8}


def _settle(sdp: SessionDescription, codecs: tuple[str, ...]) -> NegotiatedMedia | None:
    """The media an offer or answer settles on (codec in its order of preference among ours,
    telephone-event, remote address, our direction), or None with no audio in common."""
    m = sdp.audio()
    if m is None:
        return None
    offered = m.codecs
    chosen: Codec | None = None
    for pt_s in m.formats:  # the sender's order of preference, among those we speak
        c = offered.get(int(pt_s)) if pt_s.isascii() and pt_s.isdigit() else None
        if c is not None and c.name.upper() in codecs and c.clock_rate_hz == 8000:
            chosen = c
            break
    if chosen is None:
        return None
    dtmf = next((c for c in offered.values() if c.name.lower() == "telephone-event" and c.clock_rate_hz == 8000), None)
    conn = sdp.connection_of(m)
    remote = None if conn is None or conn.is_hold else (conn.address, m.port)
    direction: Direction = _ANSWER_DIRECTION[sdp.direction_of(m)]  # type: ignore[assignment]
    return NegotiatedMedia(chosen, dtmf.payload_type if dtmf else None, remote, direction)


def _description(local_ip: str, rtp_port: int, codecs: list[Codec], dtmf_pt: int | None, direction: str,
                 session_id: int, session_version: int) -> SessionDescription:
    formats = [str(c.payload_type) for c in codecs]
    attrs: list[tuple[str, str | None]] = [("rtpmap", f"{c.payload_type} {c.name}/8000") for c in codecs]
    if dtmf_pt is not None:
        formats.append(str(dtmf_pt))
        attrs += [("rtpmap", f"{dtmf_pt} telephone-event/8000"), ("fmtp", f"{dtmf_pt} 0-15")]
    attrs += [("ptime", "20"), (direction, None)]
    addrtype = "IP6" if ":" in local_ip else "IP4"
    return SessionDescription(
        origin=Origin("parley", session_id, session_version, "IN", addrtype, local_ip),
        session_name="parley",
        connection=Connection(local_ip, addrtype),
        media=(MediaDescription("audio", rtp_port, "RTP/AVP", tuple(formats), attributes=tuple(attrs)),),
    )


def pending_media(codecs: tuple[str, ...] = ("PCMU", "PCMA")) -> NegotiatedMedia:
    """A session's media between our offer and the caller's answer: nowhere to send yet."""
    first = codecs[0].upper()
    return NegotiatedMedia(Codec(_PT[first], first, 8000), OFFER_DTMF_PT, None, "sendrecv")


def make_offer(local_ip: str, rtp_port: int, *, codecs: tuple[str, ...] = ("PCMU", "PCMA"), session_id: int = 0,
               session_version: int = 0) -> SessionDescription:
    """Our offer (a delayed-offer INVITE's 200): ``codecs`` in order, and telephone-event."""
    ours = [Codec(_PT[name.upper()], name.upper(), 8000) for name in codecs]
    return _description(local_ip, rtp_port, ours, OFFER_DTMF_PT, "sendrecv", session_id, session_version)


def accept_answer(answer: SessionDescription, *, codecs: tuple[str, ...] = ("PCMU", "PCMA")) -> NegotiatedMedia | None:
    """What the caller's answer (in the ACK) to :func:`make_offer` settles, or None when it
    chose nothing we offered. Payload types are ours, as offered (RFC 3264 6.1)."""
    media = _settle(answer, codecs)
    if media is None or media.codec.payload_type != _PT.get(media.codec.name.upper()):
        return None
    dtmf = OFFER_DTMF_PT if media.dtmf_payload_type == OFFER_DTMF_PT else None
    return NegotiatedMedia(media.codec, dtmf, media.remote_address, media.direction)


def answer_offer(offer: SessionDescription, local_ip: str, rtp_port: int, *,
                 codecs: tuple[str, ...] = ("PCMU", "PCMA"), session_id: int = 0,
                 session_version: int = 0) -> tuple[SessionDescription, NegotiatedMedia] | None:
    """The answer to ``offer`` (RFC 3264), or None when no audio stream shares a G.711 codec."""
    media = _settle(offer, codecs)
    if media is None:
        return None
    answer = _description(local_ip, rtp_port, [media.codec], media.dtmf_payload_type, media.direction,
                          session_id, session_version)
    return answer, media
