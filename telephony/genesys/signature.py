"""The HTTP message signature Genesys puts on an AudioHook upgrade request (HMAC-SHA256).

Genesys signs the WebSocket upgrade GET the way draft-ietf-httpbis-message-signatures (RFC 9421's
draft 11) says, with the integration's client secret (base64; the decoded bytes are the key)::

    Signature-Input: sig1=("@request-target" "@authority" "audiohook-organization-id"
        "audiohook-session-id" "audiohook-correlation-id" "x-api-key");keyid="<api key>";
        nonce="<base64>";alg="hmac-sha256";created=<unix s>;expires=<unix s>
    Signature: sig1=:<base64 HMAC-SHA256 of the signature base>:

The signature base is one line per covered component, ``"<name>": <value>``, then
``"@signature-params": <the inner list as written>``, joined by LF. ``verify`` checks it all
(the components Genesys must cover, keyid == X-API-KEY, the algorithm, the clock: created at most
``SKEW_S`` ahead and at most ``MAX_AGE_S`` old, expires not passed; a nonce used once) and raises
``SignatureError`` saying why; ``sign`` builds the headers (the harness's Genesys client).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass

from telephony.errors import SignatureError

__all__ = ["COVERED", "NonceCache", "SignatureInput", "sign", "verify"]

COVERED = ("@request-target", "@authority", "audiohook-organization-id", "audiohook-session-id",
           "audiohook-correlation-id", "x-api-key")
SKEW_S = 3.0
MAX_AGE_S = 10.0
_PARAMS = ("keyid", "nonce", "alg", "created", "expires")
_STRING = re.compile(r'"((?:[^"\\]|\\["\\])*)"')
_INTEGER = re.compile(r"-?\d{1,15}")
_TOKEN = re.compile(r"[A-Za-z*][A-Za-z0-9_.:%*/!#$&'+^`|~-]*")


@dataclass(frozen=True)
class SignatureInput:
    label: str
    components: tuple[str, ...]
    params: dict[str, str | int]
    raw_params: str          # the member value after the label, as serialised for the base

    @classmethod
    def parse(cls, header: str) -> SignatureInput:
        m = re.match(r"\s*([a-z*][a-z0-9_.*-]*)=\(", header)
        if m is None:
            raise SignatureError("Signature-Input is not label=(...)")
        label, pos = m[1], m.end()
        components: list[str] = []
        while True:
            while pos < len(header) and header[pos] == " ":
                pos += 1
            if header.startswith(")", pos):
                pos += 1
                break
            s = _STRING.match(header, pos)
            if s is None:
                raise SignatureError("Signature-Input's covered components must be quoted strings")
            components.append(s[1].replace('\\"', '"').replace("\\\\", "\\"))
            pos = s.end()
        params: dict[str, str | int] = {}
        while header.startswith(";", pos):
            k = _TOKEN.match(header, pos + 1)
            if k is None or not header.startswith("=", k.end()):
                raise SignatureError("Signature-Input has a malformed parameter")
            pos = k.end() + 1
            if (s := _STRING.match(header, pos)) is not None:
                params[k[0]] = s[1]
            elif (i := _INTEGER.match(header, pos)) is not None:
                params[k[0]] = int(i[0])
            else:
                raise SignatureError(f"Signature-Input parameter {k[0]!r} is neither a string nor an integer")
            pos = (s or i).end()  # type: ignore[union-attr]
        if header[pos:].strip():
            raise SignatureError("Signature-Input holds more than one signature, or trailing text")
        unknown = set(params) - set(_PARAMS)
        if unknown:
            raise SignatureError(f"Signature-Input has unknown parameters {sorted(unknown)}")
        inner = "(" + " ".join(f'"{c}"' for c in components) + ")"
        raw = inner + "".join(f";{k}=\"{v}\"" if isinstance(v, str) else f";{k}={v}" for k, v in params.items())
        return cls(label, tuple(components), params, raw)


def _signature_bytes(header: str, label: str) -> bytes:
    m = re.fullmatch(rf"\s*{re.escape(label)}=:([A-Za-z0-9+/=]*):\s*", header)
    if m is None:
        raise SignatureError(f"Signature has no byte sequence for {label!r}")
    try:
        return base64.b64decode(m[1], validate=True)
    except binascii.Error:
        raise SignatureError("Signature is not base64") from None


def _component(name: str, target: str, authority: str, headers: Mapping[str, str]) -> str:
    if name == "@request-target":
        return target
    if name == "@authority":
        return authority.lower()
    if name.startswith("@"):
        raise SignatureError(f"derived component {name!r} is not supported here")
    value = headers.get(name)
    if value is None:
        raise SignatureError(f"covered header {name!r} is missing")
    return re.sub(r"[ \t]*\r\n[ \t]+", " ", value.strip())


def signature_base(si: SignatureInput, target: str, authority: str, headers: Mapping[str, str]) -> bytes:
    lines = [f'"{c}": {_component(c, target, authority, headers)}' for c in si.components]
    lines.append(f'"@signature-params": {si.raw_params}')
    return "\n".join(lines).encode()


class NonceCache:
    """Nonces seen within the signature's lifetime: a captured upgrade cannot be replayed."""

    def __init__(self, ttl_s: float = MAX_AGE_S + 2 * SKEW_S, size: int = 100_000) -> None:
        self._seen: OrderedDict[str, float] = OrderedDict()
        self._ttl_s, self._size = ttl_s, size

    def fresh(self, nonce: str, now: float) -> bool:
        while self._seen and (now - next(iter(self._seen.values())) > self._ttl_s or len(self._seen) > self._size):
            self._seen.popitem(last=False)
        if nonce in self._seen:
            return False
        self._seen[nonce] = now
        return True


def verify(headers: Mapping[str, str], *, target: str, authority: str, secret: bytes,
           now: float | None = None, nonces: NonceCache | None = None) -> None:
    """Check the signed upgrade request (``headers``: lower-case names). -> None or SignatureError."""
    si_header, sig_header = headers.get("signature-input"), headers.get("signature")
    if not si_header or not sig_header:
        raise SignatureError("the request is not signed (Signature / Signature-Input missing)")
    si = SignatureInput.parse(si_header)
    missing = [c for c in COVERED if c not in si.components]
    if missing:
        raise SignatureError(f"the signature does not cover {', '.join(missing)}")
    if si.params.get("alg", "hmac-sha256") != "hmac-sha256":
        raise SignatureError(f"unsupported signature algorithm {si.params.get('alg')!r}")
    if si.params.get("keyid") != headers.get("x-api-key"):
        raise SignatureError("keyid is not the X-API-KEY")
    nonce = si.params.get("nonce")
    if not isinstance(nonce, str) or len(nonce) < 22:
        raise SignatureError("the signature has no nonce (or one too short)")
    now = time.time() if now is None else now
    created, expires = si.params.get("created"), si.params.get("expires")
    if not isinstance(created, int):
        raise SignatureError("the signature has no 'created' time")
    if created > now + SKEW_S:
        raise SignatureError("the signature was created in the future")
    if now - created > MAX_AGE_S + SKEW_S or (isinstance(expires, int) and expires < now - SKEW_S):
        raise SignatureError("the signature has expired")
    expected = hmac.new(secret, signature_base(si, target, authority, headers), hashlib.sha256).digest()
    if not hmac.compare_digest(expected, _signature_bytes(sig_header, si.label)):
        raise SignatureError("signatures do not match")
    if nonces is not None and not nonces.fresh(nonce, now):
        raise SignatureError("this signature's nonce was used already (a replayed request)")


def sign(headers: dict[str, str], *, target: str, authority: str, api_key: str, secret: bytes,
         now: float | None = None, lifetime_s: int = 30, nonce: str | None = None) -> dict[str, str]:
    """``headers`` (the Audiohook-* ones, lower-case) plus X-API-KEY, Signature-Input, Signature."""
    created = int(time.time() if now is None else now)
    out = {**headers, "x-api-key": api_key}
    nonce = nonce or base64.b64encode(secrets.token_bytes(18)).decode()
    inner = "(" + " ".join(f'"{c}"' for c in COVERED) + ")"
    si = SignatureInput.parse(f'sig1={inner};keyid="{api_key}";nonce="{nonce}";alg="hmac-sha256";'
                              f"created={created};expires={created + lifetime_s}")
    digest = hmac.new(secret, signature_base(si, target, authority, out), hashlib.sha256).digest()
    out["signature-input"] = f"sig1={si.raw_params}"
    out["signature"] = f"sig1=:{base64.b64encode(digest).decode()}:"
    return out
