"""HTTP digest authentication for SIP (RFC 3261 22, RFC 2617, MD5, ``qop=auth``), both sides.

Server (inbound trunks with credentials)::

    auth = DigestServer(realm="parley", credentials={"trunk": "secret"}, secret=b"...")
    challenge = auth.challenge()                        # -> WWW-Authenticate value for a 401
    user = auth.verify(method, header, request_uri)     # -> the user name, or None

Nonces are ``timestamp-random:hmac(secret, timestamp-random)``, valid for ``nonce_ttl_s``. A captured
``Authorization`` must not start calls of its own (a replay): with ``qop=auth`` each use of a
nonce must carry a higher nonce-count than the last accepted one; without ``qop`` a nonce is good
once. The digest ``uri`` must name the Request-URI's scheme, host and port (RFC 2617 3.2.2.5;
the user part is not compared: sipp, among others, leaves it out).

Client (REGISTER to a PBX)::

    header = authorization(challenge, method, uri, username, password)
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from telephony.sip.errors import DigestParseError, SipParseError
from telephony.sip.headers import SipUri

__all__ = ["DigestChallenge", "DigestCredentials", "DigestServer", "authorization"]

_PAIR = re.compile(r'\s*([A-Za-z0-9_\-]+)\s*=\s*("(?:[^"\\]|\\.)*"|[^\s,"]+)\s*(?:,|$)')


def _md5(text: str) -> str:
    return hashlib.md5(text.encode("utf-8")).hexdigest()


def _parse_pairs(value: str) -> dict[str, str]:
    scheme, _, rest = value.strip().partition(" ")
    if scheme.lower() != "digest":
        raise DigestParseError(f"not a Digest header: {value[:60]!r}")
    out: dict[str, str] = {}
    pos = 0
    rest = rest.strip()
    while pos < len(rest):
        m = _PAIR.match(rest, pos)
        if m is None or m.end() == pos:
            raise DigestParseError(f"bad digest parameters at {rest[pos:pos + 40]!r}")
        v = m.group(2)
        if v.startswith('"'):
            v = re.sub(r"\\(.)", r"\1", v[1:-1])
        out[m.group(1).lower()] = v
        pos = m.end()
    return out


def _quote(v: str) -> str:
    return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'


@dataclass(frozen=True)
class DigestChallenge:
    """A ``WWW-Authenticate`` / ``Proxy-Authenticate`` value."""

    realm: str
    nonce: str
    algorithm: str = "MD5"
    qop: str | None = "auth"
    opaque: str | None = None

    @classmethod
    def parse(cls, value: str) -> "DigestChallenge":
        p = _parse_pairs(value)
        if "realm" not in p or "nonce" not in p:
            raise DigestParseError("digest challenge without realm or nonce")
        return cls(realm=p["realm"], nonce=p["nonce"], algorithm=p.get("algorithm", "MD5"),
                   qop=p.get("qop"), opaque=p.get("opaque"))

    def __str__(self) -> str:
        parts = [f"realm={_quote(self.realm)}", f"nonce={_quote(self.nonce)}", f"algorithm={self.algorithm}"]
        if self.qop:
            parts.append(f"qop={_quote(self.qop)}")
        if self.opaque is not None:
            parts.append(f"opaque={_quote(self.opaque)}")
        return "Digest " + ", ".join(parts)


@dataclass(frozen=True)
class DigestCredentials:
    """An ``Authorization`` / ``Proxy-Authorization`` value."""

    username: str
    realm: str
    nonce: str
    uri: str
    response: str
    algorithm: str = "MD5"
    qop: str | None = None
    nc: str | None = None
    cnonce: str | None = None
    opaque: str | None = None

    @classmethod
    def parse(cls, value: str) -> "DigestCredentials":
        p = _parse_pairs(value)
        missing = [k for k in ("username", "realm", "nonce", "uri", "response") if k not in p]
        if missing:
            raise DigestParseError(f"digest credentials without {', '.join(missing)}")
        return cls(username=p["username"], realm=p["realm"], nonce=p["nonce"], uri=p["uri"],
                   response=p["response"].lower(), algorithm=p.get("algorithm", "MD5"), qop=p.get("qop"),
                   nc=p.get("nc"), cnonce=p.get("cnonce"), opaque=p.get("opaque"))

    def __str__(self) -> str:
        parts = [f"username={_quote(self.username)}", f"realm={_quote(self.realm)}",
                 f"nonce={_quote(self.nonce)}", f"uri={_quote(self.uri)}", f"response={_quote(self.response)}",
                 f"algorithm={self.algorithm}"]
        if self.qop:
            parts += [f"qop={self.qop}", f"nc={self.nc}", f"cnonce={_quote(self.cnonce or '')}"]
        if self.opaque is not None:
            parts.append(f"opaque={_quote(self.opaque)}")
        return "Digest " + ", ".join(parts)


def _same_target(digest_uri: str, request_uri: str) -> bool:
    """Both name the same scheme, host and port (the user part is not compared)."""
    if digest_uri == request_uri:
        return True
    try:
        mine, theirs = SipUri.parse(digest_uri), SipUri.parse(request_uri)
    except SipParseError:
        return False
    return (mine.scheme, mine.host.lower(), mine.port or 5060) == (theirs.scheme, theirs.host.lower(),
                                                                    theirs.port or 5060)


def digest_response(*, username: str, password: str, realm: str, method: str, uri: str, nonce: str,
                    qop: str | None = None, nc: str | None = None, cnonce: str | None = None) -> str:
    ha1 = _md5(f"{username}:{realm}:{password}")
    ha2 = _md5(f"{method}:{uri}")
    if qop:
        return _md5(f"{ha1}:{nonce}:{nc}:{cnonce}:{qop}:{ha2}")
    return _md5(f"{ha1}:{nonce}:{ha2}")


def authorization(challenge: DigestChallenge, method: str, uri: str, username: str, password: str,
                  *, nc: int = 1, cnonce: str | None = None) -> DigestCredentials:
    """Answer a challenge (the client side: REGISTER, or an INVITE to a trunk)."""
    if challenge.algorithm.upper() != "MD5":
        raise DigestParseError(f"digest algorithm {challenge.algorithm} is not supported (MD5 only)")
    qop = None
    if challenge.qop:
        if "auth" not in [q.strip() for q in challenge.qop.split(",")]:
            raise DigestParseError(f"qop {challenge.qop!r} offers no 'auth'")
        qop = "auth"
    nc_s = f"{nc:08x}" if qop else None
    cnonce = (cnonce or os.urandom(8).hex()) if qop else None
    response = digest_response(username=username, password=password, realm=challenge.realm, method=method,
                               uri=uri, nonce=challenge.nonce, qop=qop, nc=nc_s, cnonce=cnonce)
    return DigestCredentials(username=username, realm=challenge.realm, nonce=challenge.nonce, uri=uri,
                             response=response, qop=qop, nc=nc_s, cnonce=cnonce, opaque=challenge.opaque)


class DigestServer:
    """Challenges and verifies inbound requests against a table of user names and passwords."""

    def __init__(self, realm: str, credentials: dict[str, str], *, secret: bytes | None = None,
                 nonce_ttl_s: float = 300.0, clock: Callable[[], float] = time.time) -> None:
        self.realm = realm
        self._credentials = dict(credentials)
        self._secret = secret or os.urandom(32)
        self._ttl_s = nonce_ttl_s
        self._clock = clock
        self._used: OrderedDict[str, int] = OrderedDict()  # nonce -> highest nonce-count accepted
        self.replays = 0  # credentials refused because their nonce-count was used already

    def _sign(self, stamp: str) -> str:
        return hmac.new(self._secret, stamp.encode(), hashlib.sha256).hexdigest()[:32]

    def challenge(self) -> DigestChallenge:
        value = f"{self._clock():.3f}-{os.urandom(8).hex()}"  # unique: its counts are its own
        return DigestChallenge(realm=self.realm, nonce=f"{value}:{self._sign(value)}", qop="auth")

    @staticmethod
    def _stamp(nonce: str) -> float | None:
        try:
            return float(nonce.partition("-")[0])
        except ValueError:
            return None

    def _nonce_ok(self, nonce: str) -> bool:
        value, _, sig = nonce.rpartition(":")
        if not hmac.compare_digest(sig.encode(), self._sign(value).encode()):
            return False
        stamp = self._stamp(nonce)
        return stamp is not None and 0 <= self._clock() - stamp <= self._ttl_s

    def verify(self, method: str, header: str | None, request_uri: str | None = None) -> str | None:
        """The authenticated user name, or None (missing, malformed, stale, replayed or wrong
        credentials, or a digest ``uri`` that is not ``request_uri``)."""
        if not header:
            return None
        try:
            cred = DigestCredentials.parse(header)
        except DigestParseError:
            return None
        password = self._credentials.get(cred.username)
        if password is None or cred.realm != self.realm or not self._nonce_ok(cred.nonce):
            return None
        if cred.algorithm.upper() != "MD5" or (cred.qop not in (None, "auth")):
            return None
        if request_uri is not None and not _same_target(cred.uri, request_uri):
            return None
        count = self._nonce_count(cred)
        if count is None:
            return None
        expected = digest_response(username=cred.username, password=password, realm=self.realm, method=method,
                                   uri=cred.uri, nonce=cred.nonce, qop=cred.qop, nc=cred.nc, cnonce=cred.cnonce)
        if not hmac.compare_digest(expected, cred.response):
            return None
        if count <= self._used.get(cred.nonce, 0):
            self.replays += 1
            return None
        self._used[cred.nonce] = count
        self._used.move_to_end(cred.nonce)
        self._forget_stale()
        return cred.username

    @staticmethod
    def _nonce_count(cred: DigestCredentials) -> int | None:
        """The nonce-count (8 hex digits with qop; 1 without: such a nonce is good once)."""
        if cred.qop is None:
            return 1
        nc = cred.nc or ""
        if len(nc) != 8 or any(c not in "0123456789abcdefABCDEF" for c in nc) or not cred.cnonce:
            return None
        return int(nc, 16)

    def _forget_stale(self) -> None:
        """Nonces past their lifetime are refused anyway: their counts need not be kept."""
        now = self._clock()
        while self._used:
            stamp = self._stamp(next(iter(self._used)))
            fresh = stamp is not None and now - stamp <= self._ttl_s
            if fresh and len(self._used) <= 100_000:
                break
            self._used.popitem(last=False)
