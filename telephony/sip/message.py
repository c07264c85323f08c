"""SIP messages (RFC 3261): typed requests and responses, ``parse()`` and ``bytes()``.

::

    msg = parse_message(datagram)   # -> SipRequest | SipResponse, or raises SipParseError
    datagram = bytes(msg)           # Content-Length is always written, computed from the body

Headers keep their order and spelling; lookups are case-insensitive and understand the compact
forms (``v`` = Via, ``i`` = Call-ID, ...). ``Content-Length`` is not a header of the dataclass: it
is derived from ``body`` when serialising and used (then dropped) when parsing. Folded header
lines are unfolded. A datagram over ``MAX_MESSAGE_BYTES``, not UTF-8 in its head, with a bad start
line, a bad header line, or a Content-Length beyond the datagram raises :class:`SipParseError`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Final, Self

from telephony.sip.errors import SipParseError
from telephony.sip.headers import Via, split_commas

__all__ = [
    "MAX_MESSAGE_BYTES",
    "SipMessage",
    "SipRequest",
    "SipResponse",
    "canonical_name",
    "parse_message",
    "response_to",
    "salvage_request",
]

MAX_MESSAGE_BYTES: Final = 65_535
SIP_VERSION: Final = "SIP/2.0"

_TOKEN = re.compile(r"[A-Za-z0-9.!%*_+`'~\-]+\Z")
_BAD_VALUE = re.compile(r"[\r\n]")  # NUL is legal in a quoted-pair (RFC 4475 intmeth)
_VERSION = re.compile(r"SIP/[0-9]{1,3}\.[0-9]{1,3}\Z")
_BAD_URI = re.compile(r"[\x00-\x20\x7f]")

_COMPACT: Final = {
    "v": "via", "f": "from", "t": "to", "i": "call-id", "m": "contact", "l": "content-length",
    "c": "content-type", "k": "supported", "s": "subject", "e": "content-encoding", "o": "event",
    "r": "refer-to", "b": "referred-by", "u": "allow-events", "x": "session-expires",
}

Headers = tuple[tuple[str, str], ...]


def canonical_name(name: str) -> str:
    """The lower-case long form of a header name (``I`` -> ``call-id``)."""
    low = name.lower()
    return _COMPACT.get(low, low)


def _check_headers(headers: Headers) -> None:
    if not isinstance(headers, tuple):
        raise SipParseError("headers must be a tuple of (name, value) pairs")
    for pair in headers:
        if not (isinstance(pair, tuple) and len(pair) == 2):
            raise SipParseError(f"header {pair!r} is not a (name, value) pair")
        name, value = pair
        if not isinstance(name, str) or not _TOKEN.match(name):
            raise SipParseError(f"bad header name {name!r}")
        if canonical_name(name) == "content-length":
            raise SipParseError("Content-Length is derived from the body, not set as a header")
        if not isinstance(value, str) or _BAD_VALUE.search(value) or value != value.strip(" \t"):
            raise SipParseError(f"bad value for header {name}: {value!r}")


@dataclass(frozen=True)
class _Base:
    headers: Headers = ()
    body: bytes = b""

    def header(self, name: str) -> str | None:
        """The first value of a header (any spelling, compact forms included), or None."""
        want = canonical_name(name)
        for n, v in self.headers:
            if canonical_name(n) == want:
                return v
        return None

    def headers_named(self, name: str) -> list[str]:
        want = canonical_name(name)
        return [v for n, v in self.headers if canonical_name(n) == want]

    def with_header(self, name: str, value: str) -> Self:
        """A copy with every ``name`` header replaced by one ``name: value`` (added at the end if absent)."""
        want = canonical_name(name)
        out: list[tuple[str, str]] = []
        done = False
        for n, v in self.headers:
            if canonical_name(n) == want:
                if not done:
                    out.append((name, value))
                    done = True
            else:
                out.append((n, v))
        if not done:
            out.append((name, value))
        return replace(self, headers=tuple(out))

    def without_header(self, name: str) -> Self:
        want = canonical_name(name)
        return replace(self, headers=tuple((n, v) for n, v in self.headers if canonical_name(n) != want))

    @property
    def call_id(self) -> str:
        value = self.header("call-id")
        if not value:
            raise SipParseError("no Call-ID")
        return value

    @property
    def cseq(self) -> tuple[int, str]:
        """(sequence number, method) of the CSeq header."""
        value = self.header("cseq") or ""
        parts = value.split()
        if len(parts) != 2 or not (parts[0].isascii() and parts[0].isdigit()) or len(parts[0]) > 10 \
                or int(parts[0]) >= 2**31 or not _TOKEN.match(parts[1]):
            raise SipParseError(f"bad CSeq {value[:40]!r}")
        return int(parts[0]), parts[1]  # methods are case-sensitive (RFC 3261 7.1)

    @property
    def top_via(self) -> Via:
        """The first via-parm of the first Via header (a Via header may hold a comma list)."""
        values = split_commas(self.header("via") or "")
        if not values:
            raise SipParseError("no Via")
        return Via.parse(values[0])

    def _head_and_body(self, start_line: str) -> bytes:
        lines = [start_line]
        lines += [f"{n}: {v}" for n, v in self.headers]
        lines.append(f"Content-Length: {len(self.body)}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8") + self.body


@dataclass(frozen=True)
class SipRequest(_Base):
    method: str = "OPTIONS"
    uri: str = "sip:invalid"
    version: str = SIP_VERSION  # another version is parsed, to be answered 505

    def __post_init__(self) -> None:
        if not isinstance(self.method, str) or not _TOKEN.match(self.method):
            raise SipParseError(f"bad method {self.method!r}")
        if not isinstance(self.version, str) or not _VERSION.match(self.version):
            raise SipParseError(f"bad SIP version {self.version!r}")
        if not isinstance(self.uri, str) or not self.uri or _BAD_URI.search(self.uri):
            raise SipParseError(f"bad request URI {self.uri!r}")
        _check_headers(self.headers)
        if not isinstance(self.body, bytes):
            raise SipParseError("body must be bytes")

    def __bytes__(self) -> bytes:
        return self._head_and_body(f"{self.method} {self.uri} {self.version}")


@dataclass(frozen=True)
class SipResponse(_Base):
    status: int = 200
    reason: str = "OK"

    def __post_init__(self) -> None:
        if not isinstance(self.status, int) or not 100 <= self.status <= 699:
            raise SipParseError(f"bad status code {self.status!r}")
        if not isinstance(self.reason, str) or _BAD_VALUE.search(self.reason) or self.reason != self.reason.rstrip(" \t"):
            raise SipParseError(f"bad reason phrase {self.reason!r}")
        _check_headers(self.headers)
        if not isinstance(self.body, bytes):
            raise SipParseError("body must be bytes")

    def __bytes__(self) -> bytes:
        return self._head_and_body(f"{SIP_VERSION} {self.status} {self.reason}".rstrip(" "))


SipMessage = SipRequest | SipResponse


def _split_head(data: bytes) -> tuple[bytes, bytes, bytes]:
    """(head, body, line separator)."""
    crlf = data.find(b"\r\n\r\n")
    lf = data.find(b"\n\n")
    if crlf >= 0 and (lf < 0 or crlf <= lf):
        return data[:crlf], data[crlf + 4:], b"\r\n"
    if lf >= 0:
        return data[:lf], data[lf + 2:], b"\n"
    raise SipParseError("no blank line after the headers")


def parse_message(data: bytes) -> SipMessage:
    """Parse one SIP message from a datagram. Raises :class:`SipParseError` and nothing else."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise SipParseError(f"expected bytes, got {type(data).__name__}")
    data = bytes(data)
    if len(data) > MAX_MESSAGE_BYTES:
        raise SipParseError(f"message of {len(data)} bytes is over {MAX_MESSAGE_BYTES}")
    head_b, rest, sep = _split_head(data)
    try:
        head = head_b.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SipParseError("message head is not UTF-8") from exc
    raw_lines = head.split(sep.decode())
    if any("\r" in line or "\n" in line for line in raw_lines):
        raise SipParseError("stray CR or LF in the message head")
    lines: list[str] = []
    for line in raw_lines:
        if line[:1] in (" ", "\t") and len(lines) > 1:  # folded continuation of a header line
            lines[-1] = lines[-1].rstrip(" \t") + " " + line.strip(" \t")
        else:
            lines.append(line)
    start, header_lines = lines[0], lines[1:]
    headers: list[tuple[str, str]] = []
    content_length: int | None = None
    for line in header_lines:
        name, colon, value = line.partition(":")
        name = name.rstrip(" \t")
        if not colon or not _TOKEN.match(name):
            raise SipParseError(f"bad header line {line[:80]!r}")
        value = value.strip(" \t")
        if canonical_name(name) == "content-length":
            if not value.isdigit() or len(value) > 6 or not value.isascii():
                raise SipParseError(f"bad Content-Length {value[:20]!r}")
            if content_length is not None and int(value) != content_length:
                raise SipParseError("conflicting Content-Length headers")
            content_length = int(value)
            continue
        headers.append((name, value))
    if content_length is not None:
        if content_length > len(rest):
            raise SipParseError(f"Content-Length {content_length} is beyond the {len(rest)} bytes received")
        body = rest[:content_length]
    else:
        body = rest
    if start.startswith(SIP_VERSION + " "):
        parts = start.split(" ", 2)
        code = parts[1]
        if len(code) != 3 or not code.isdigit() or not code.isascii():
            raise SipParseError(f"bad status line {start[:80]!r}")
        return SipResponse(status=int(code), reason=parts[2] if len(parts) > 2 else "",
                           headers=tuple(headers), body=body)
    parts = start.split(" ")  # exactly one SP between the three parts (RFC 4475 lwsstart, trws)
    if len(parts) != 3 or not _VERSION.match(parts[2]):
        raise SipParseError(f"bad request line {start[:80]!r}")
    return SipRequest(method=parts[0], uri=parts[1], version=parts[2], headers=tuple(headers), body=body)


_SALVAGED: Final = ("via", "from", "to", "call-id", "cseq")


def salvage_request(data: bytes) -> SipRequest | None:
    """What a 400 to a request that :func:`parse_message` refused needs: its method and the
    Via, From, To, Call-ID and CSeq lines that are themselves well-formed.

    None when the datagram is not a request's (a response, noise), has no usable Via to answer
    along, or is an ACK (never answered)."""
    data = bytes(data[:MAX_MESSAGE_BYTES])
    crlf, lf = data.find(b"\r\n\r\n"), data.find(b"\n\n")
    ends = [i for i in (crlf, lf) if i >= 0]
    head = data[:min(ends)] if ends else data
    text = head.decode("utf-8", "replace").replace("\r\n", "\n")
    lines: list[str] = []
    for line in text.split("\n"):
        if line[:1] in (" ", "\t") and len(lines) > 1:
            lines[-1] = lines[-1].rstrip(" \t") + " " + line.strip(" \t")
        else:
            lines.append(line)
    start = lines[0].split()
    if len(start) < 2 or not _TOKEN.match(start[0]) or start[0] == "ACK" or start[0].startswith("SIP/"):
        return None
    uri = start[1] if len(start) == 3 and not _BAD_URI.search(start[1]) else "sip:invalid"
    headers: list[tuple[str, str]] = []
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        name, value = name.rstrip(" \t"), value.strip(" \t")
        if colon and _TOKEN.match(name) and canonical_name(name) in _SALVAGED and value:
            headers.append((name, value))
    try:
        request = SipRequest(method=start[0], uri=uri, headers=tuple(headers))
        request.top_via  # noqa: B018 (a response needs a Via to follow)
    except SipParseError:
        return None
    return request


_REASONS: Final = {
    100: "Trying", 180: "Ringing", 200: "OK", 202: "Accepted", 400: "Bad Request", 401: "Unauthorized",
    403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed", 406: "Not Acceptable",
    407: "Proxy Authentication Required", 415: "Unsupported Media Type", 416: "Unsupported URI Scheme",
    420: "Bad Extension", 481: "Call/Transaction Does Not Exist", 482: "Loop Detected", 486: "Busy Here",
    487: "Request Terminated", 488: "Not Acceptable Here", 491: "Request Pending", 500: "Server Internal Error",
    501: "Not Implemented", 503: "Service Unavailable", 505: "Version Not Supported",
}


def response_to(request: SipRequest, status: int, reason: str | None = None, *, to_tag: str | None = None,
                headers: Headers = (), body: bytes = b"") -> SipResponse:
    """A response to ``request`` (RFC 3261 8.2.6): Via, From, To (+ tag), Call-ID and CSeq copied;
    an INVITE's 1xx/2xx (they make a dialog) copies its Record-Route in order too (12.1.1)."""
    copied: list[tuple[str, str]] = []
    dialog = request.method == "INVITE" and 100 < status < 300
    for name, value in request.headers:
        canon = canonical_name(name)
        if canon == "to" and to_tag and ";tag=" not in value.replace(" ", "").lower():
            value = f"{value};tag={to_tag}"
        if canon in ("via", "from", "to", "call-id", "cseq") or (dialog and canon == "record-route"):
            copied.append((name, value))
    return SipResponse(status=status, reason=reason if reason is not None else _REASONS.get(status, ""),
                       headers=tuple(copied) + tuple(headers), body=body)



def with_received(request: SipRequest, addr: tuple[str, int]) -> SipRequest:
    """``request`` with its top Via stamped for the response: ``received`` when the source
    address differs from the sent-by host or ``rport`` was asked for, and ``rport`` filled in
    with the source port (RFC 3261 18.2.1, RFC 3581). Unchanged when nothing applies."""
    for i, (name, value) in enumerate(request.headers):
        if canonical_name(name) != "via":
            continue
        parms = split_commas(value)
        try:
            via = Via.parse(parms[0])
        except (SipParseError, IndexError):
            return request
        asked = any(n.lower() == "rport" for n, _ in via.params)
        if not asked and via.host.strip("[]") == addr[0]:
            return request
        kept = tuple((n, v) for n, v in via.params if n.lower() not in ("rport", "received"))
        stamped = kept + (("received", addr[0]),) + ((("rport", str(addr[1])),) if asked else ())
        parms[0] = str(replace(via, params=stamped))
        headers = list(request.headers)
        headers[i] = (name, ", ".join(parms))
        return replace(request, headers=tuple(headers))
    return request


def sdp_body(message: SipRequest | SipResponse) -> bytes:
    """The message's SDP: its body when that is ``application/sdp`` (or untyped), or the
    ``application/sdp`` part of a ``multipart/mixed`` body (SIP-I/SIP-T trunks send SDP beside
    ISUP). ``b""`` when there is none."""
    kind, _, params = (message.header("content-type") or "application/sdp").partition(";")
    kind = kind.strip().lower()
    if kind == "application/sdp":
        return message.body
    if not kind.startswith("multipart/"):
        return b""
    boundary = ""
    for param in params.split(";"):
        name, _, value = param.partition("=")
        if name.strip().lower() == "boundary":
            boundary = value.strip().strip('"')
    if not boundary or len(boundary) > 70:
        return b""
    delimiter = b"--" + boundary.encode("utf-8", "replace")
    for part in message.body.split(delimiter)[1:]:
        if part.startswith(b"--"):  # the closing delimiter
            break
        head, sep, body = part.lstrip(b"\r\n").partition(b"\r\n\r\n")
        if not sep:
            continue
        for line in head.split(b"\r\n"):
            field, _, field_value = line.partition(b":")
            if field.strip().lower() in (b"content-type", b"c") and \
                    field_value.split(b";", 1)[0].strip().lower() == b"application/sdp":
                return body.removesuffix(b"\r\n")
    return b""
