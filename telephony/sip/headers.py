"""The structured SIP header values the user agent reads: URIs, name-addrs (From/To/Contact), Via.

Each is a frozen dataclass with ``parse(text)`` and ``__str__``; bad text raises
:class:`SipParseError`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from telephony.sip.errors import SipParseError

__all__ = ["NameAddr", "SipUri", "Via", "split_commas"]

Params = tuple[tuple[str, str | None], ...]

_PARAM_NAME = re.compile(r"[A-Za-z0-9.!%*_+`'~\-]+\Z")


def _parse_params(text: str) -> Params:
    """``;a=1;b`` -> (("a", "1"), ("b", None)). ``text`` starts after the first ``;``."""
    out: list[tuple[str, str | None]] = []
    for part in text.split(";"):
        part = part.strip()
        if not part:
            raise SipParseError(f"empty parameter in {text[:80]!r}")
        name, eq, value = part.partition("=")
        name = name.strip()
        if not _PARAM_NAME.match(name):
            raise SipParseError(f"bad parameter name {name[:40]!r}")
        out.append((name, value.strip() if eq else None))
    return tuple(out)


def _format_params(params: Params) -> str:
    return "".join(f";{n}" if v is None else f";{n}={v}" for n, v in params)


def _param(params: Params, name: str) -> str | None:
    low = name.lower()
    for n, v in params:
        if n.lower() == low:
            return v
    return None


def split_commas(value: str) -> list[str]:
    """Split a header value on commas outside quotes and angle brackets (Via, Contact lists)."""
    out: list[str] = []
    cur: list[str] = []
    quoted, angle = False, 0
    for ch in value:
        if ch == '"':
            quoted = not quoted
        elif not quoted and ch == "<":
            angle += 1
        elif not quoted and ch == ">":
            angle = max(0, angle - 1)
        if ch == "," and not quoted and angle == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur).strip())
    return [p for p in out if p]


def _host_port(text: str) -> tuple[str, int | None]:
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise SipParseError(f"unclosed IPv6 reference in {text[:80]!r}")
        host, rest = text[: end + 1], text[end + 1:]
        if rest and not rest.startswith(":"):
            raise SipParseError(f"bad host:port {text[:80]!r}")
        port_s = rest[1:] if rest else ""
    else:
        host, _, port_s = text.partition(":")
    if not host or any(c in host for c in " \t;,<>\"@"):
        raise SipParseError(f"bad host {host[:80]!r}")
    if port_s:
        if not port_s.isascii() or not port_s.isdigit() or not 0 < int(port_s) < 65536:
            raise SipParseError(f"bad port {port_s[:20]!r}")
        return host, int(port_s)
    return host, None


@dataclass(frozen=True)
class SipUri:
    """``sip:user@host:port;params`` (``?headers`` are kept verbatim in ``headers``)."""

    host: str
    user: str | None = None
    port: int | None = None
    params: Params = ()
    scheme: str = "sip"
    headers: str = ""

    @classmethod
    def parse(cls, text: str) -> "SipUri":
        text = text.strip()
        scheme, colon, rest = text.partition(":")
        if not colon or scheme.lower() not in ("sip", "sips"):
            raise SipParseError(f"not a SIP URI: {text[:80]!r}")
        rest, _, headers = rest.partition("?")
        hostpart, semi, params = rest.partition(";")
        user = None
        if "@" in hostpart:
            user, _, hostpart = hostpart.rpartition("@")
        host, port = _host_port(hostpart)
        return cls(host=host, user=user, port=port, params=_parse_params(params) if semi else (),
                   scheme=scheme.lower(), headers=headers)

    def __str__(self) -> str:
        user = f"{self.user}@" if self.user is not None else ""
        port = f":{self.port}" if self.port is not None else ""
        headers = f"?{self.headers}" if self.headers else ""
        return f"{self.scheme}:{user}{self.host}{port}{_format_params(self.params)}{headers}"

    def param(self, name: str) -> str | None:
        return _param(self.params, name)

    @property
    def address(self) -> tuple[str, int]:
        """Where to send requests for this URI (no DNS: the host is used as given)."""
        return self.host.strip("[]"), self.port or 5060


@dataclass(frozen=True)
class NameAddr:
    """From / To / Contact / Refer-To: ``"Display" <uri>;tag=...``."""

    uri: str
    display: str = ""
    params: Params = ()

    @classmethod
    def parse(cls, text: str) -> "NameAddr":
        text = text.strip()
        if "<" in text:
            before, _, after = text.partition("<")
            uri, close, tail = after.partition(">")
            if not close or not uri.strip():
                raise SipParseError(f"bad name-addr {text[:80]!r}")
            display = before.strip()
            if display.startswith('"') and display.endswith('"') and len(display) >= 2:
                display = display[1:-1]
            tail = tail.strip()
        else:  # addr-spec: parameters after the URI belong to the header, not the URI
            uri, _, tail = text.partition(";")
            tail = ";" + tail if tail else ""
            display = ""
        if tail and not tail.startswith(";"):
            raise SipParseError(f"junk after the URI in {text[:80]!r}")
        uri = uri.strip()
        if not uri or any(c in uri for c in ' \t<>"'):
            raise SipParseError(f"bad URI in {text[:80]!r}")
        return cls(uri=uri, display=display, params=_parse_params(tail[1:]) if tail else ())

    def __str__(self) -> str:
        display = f'"{self.display}" ' if self.display else ""
        return f"{display}<{self.uri}>{_format_params(self.params)}"

    @property
    def tag(self) -> str | None:
        return _param(self.params, "tag")

    def with_tag(self, tag: str) -> "NameAddr":
        return replace(self, params=tuple(p for p in self.params if p[0].lower() != "tag") + (("tag", tag),))

    @property
    def sip_uri(self) -> SipUri:
        return SipUri.parse(self.uri)


@dataclass(frozen=True)
class Via:
    """``SIP/2.0/UDP host:port;branch=z9hG4bK...;rport``."""

    host: str
    port: int | None = None
    transport: str = "UDP"
    params: Params = ()

    @classmethod
    def parse(cls, text: str) -> "Via":
        text = text.strip()
        proto, _, rest = text.partition(" ")
        bits = proto.split("/")
        if len(bits) != 3 or bits[0].strip().upper() != "SIP" or not bits[2].strip():
            raise SipParseError(f"bad Via {text[:80]!r}")
        sent_by, semi, params = rest.strip().partition(";")
        host, port = _host_port(sent_by.strip())
        return cls(host=host, port=port, transport=bits[2].strip().upper(),
                   params=_parse_params(params) if semi else ())

    def __str__(self) -> str:
        port = f":{self.port}" if self.port is not None else ""
        return f"SIP/2.0/{self.transport} {self.host}{port}{_format_params(self.params)}"

    @property
    def branch(self) -> str | None:
        return _param(self.params, "branch")
