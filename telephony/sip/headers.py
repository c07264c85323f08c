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


# a word of an unquoted display name: RFC 3261's token, and (liberal: PBXs send them) any
# non-ASCII letters; separators (, ; " < > @ : \) and controls are what RFC 4475 baddn refuses
_TOKEN_WORD = re.compile(r"(?:[A-Za-z0-9.!%*_+`'~\-]|[^\x00-\x7f])+\Z")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+\-.]*\Z")
_VIA = re.compile(r"\s*SIP\s*/\s*([0-9]+\.[0-9]+)\s*/\s*([A-Za-z0-9.!%*_+`'~\-]+)\s+(\S.*)\Z", re.S | re.I)


def _quoted_string(text: str) -> tuple[str, int]:
    """The unescaped content of the quoted string that starts ``text``, and the index after it."""
    out: list[str] = []
    i = 1
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            out.append(text[i + 1])
            i += 2
            continue
        if ch == '"':
            return "".join(out), i + 1
        out.append(ch)
        i += 1
    raise SipParseError(f"unterminated quoted string in {text[:80]!r}")


def _bracketed(rest: str, text: str) -> tuple[str, str]:
    """``<uri>tail`` -> (uri, tail); no white space is allowed inside the brackets."""
    uri, close, tail = rest[1:].partition(">")
    if not close or not uri or uri != uri.strip() or any(c in uri for c in ' \t<"'):
        raise SipParseError(f"bad <uri> in {text[:80]!r}")
    return uri, tail


def _check_scheme(uri: str, text: str) -> None:
    scheme, colon, rest = uri.partition(":")
    if not colon or not rest or not _SCHEME.match(scheme):
        raise SipParseError(f"no URI scheme in {text[:80]!r}")


def split_commas(value: str) -> list[str]:
    """Split a header value on commas outside quotes and angle brackets (Via, Contact lists).

    A backslash inside quotes escapes the next character (RFC 3261 quoted-pair)."""
    out: list[str] = []
    cur: list[str] = []
    quoted, escaped, angle = False, False, 0
    for ch in value:
        if escaped:
            escaped = False
        elif quoted and ch == "\\":
            escaped = True
        elif ch == '"':
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
        """``sip:`` / ``sips:`` only. The user part ends at the last ``@`` (a user may hold ``;``,
        ``?`` and ``/``; parameters, headers and the host never hold ``@``)."""
        text = text.strip()
        scheme, colon, rest = text.partition(":")
        if not colon or scheme.lower() not in ("sip", "sips"):
            raise SipParseError(f"not a SIP URI: {text[:80]!r}")
        if any(c.isspace() for c in rest):
            raise SipParseError(f"white space inside the URI {text[:80]!r}")
        user = None
        if "@" in rest:
            user, _, rest = rest.rpartition("@")
            if not user:
                raise SipParseError(f"empty user part in {text[:80]!r}")
        rest, _, headers = rest.partition("?")
        hostpart, semi, params = rest.partition(";")
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

    def has_param(self, name: str) -> bool:
        """Whether the parameter is there, with or without a value (``;lr``)."""
        return any(n.lower() == name.lower() for n, _ in self.params)

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
        """``"Display" <uri>;params``, ``Display Words <uri>``, or a bare ``uri;params``.

        Strict where RFC 4475 asks for a 400: an unterminated quote, a display name of non-token
        words left unquoted (``Bell, Alexander <...>``), white space inside the brackets."""
        text = text.strip()
        if text.startswith('"'):
            display, end = _quoted_string(text)
            rest = text[end:].lstrip(" \t")
            if not rest.startswith("<"):
                raise SipParseError(f"a quoted display name without <uri> in {text[:80]!r}")
            uri, tail = _bracketed(rest, text)
        elif "<" in text:
            before, _, after = text.partition("<")
            words = before.split()
            if not all(_TOKEN_WORD.match(w) for w in words):
                raise SipParseError(f"display name {before.strip()[:40]!r} must be quoted")
            display = " ".join(words)
            uri, tail = _bracketed("<" + after, text)
        else:  # addr-spec: parameters after the URI belong to the header, not the URI
            uri, _, tail = text.partition(";")
            uri, tail = uri.strip(), ";" + tail if tail else ""
            display = ""
            if any(c in uri for c in ' \t<>"'):
                raise SipParseError(f"bad URI in {text[:80]!r}")
        tail = tail.strip()
        if tail and not tail.startswith(";"):
            raise SipParseError(f"junk after the URI in {text[:80]!r}")
        _check_scheme(uri, text)
        return cls(uri=uri, display=display, params=_parse_params(tail[1:]) if tail else ())

    def __str__(self) -> str:
        escaped = self.display.replace("\\", "\\\\").replace('"', '\\"')
        display = f'"{escaped}" ' if self.display else ""
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
    version: str = "2.0"

    @classmethod
    def parse(cls, text: str) -> "Via":
        """One via-parm (split a Via header's list with :func:`split_commas` first). White space
        is legal around the ``/`` of the protocol, and around ``;`` and ``=`` (RFC 4475 wsinv)."""
        m = _VIA.match(text)
        if m is None:
            raise SipParseError(f"bad Via {text[:80]!r}")
        version, transport, rest = m.group(1), m.group(2), m.group(3).strip()
        sent_by, semi, params = rest.partition(";")
        host, port = _host_port(sent_by.strip())
        return cls(host=host, port=port, transport=transport.upper(),
                   params=_parse_params(params) if semi else (), version=version)

    def __str__(self) -> str:
        port = f":{self.port}" if self.port is not None else ""
        return f"SIP/{self.version}/{self.transport} {self.host}{port}{_format_params(self.params)}"

    def param(self, name: str) -> str | None:
        return _param(self.params, name)

    @property
    def branch(self) -> str | None:
        return _param(self.params, "branch")

    @property
    def sent_by(self) -> str:
        """``host:port`` as the sender wrote it (lower-case host, 5060 when no port was given)."""
        return f"{self.host.lower()}:{self.port or 5060}"

    @property
    def transaction_id(self) -> str | None:
        """The RFC 3261 branch (magic cookie ``z9hG4bK`` and something after it), else None:
        an RFC 2543 peer, whose requests are not matched to transactions by branch."""
        branch = self.branch
        return branch if branch and branch.startswith("z9hG4bK") and len(branch) > 7 else None
