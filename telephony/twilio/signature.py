"""X-Twilio-Signature: compute and verify Twilio's request signature.

Twilio signs each request with HMAC-SHA1 over the full URL it requested followed by the sorted
POST parameters (name + value), keyed by the account's auth token, base64-encoded. The voice
webhook POST signs its form parameters; the Media Streams WebSocket upgrade signs the public
``wss://`` URL configured in ``<Stream url=...>`` with empty parameters.

``verify_signature`` uses ``twilio.request_validator.RequestValidator``, which compares in
constant time and also accepts the URL with or without its default port, as Twilio does.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping

from twilio.request_validator import RequestValidator

__all__ = ["SIGNATURE_HEADER", "compute_signature", "verify_signature"]

SIGNATURE_HEADER = "X-Twilio-Signature"


def compute_signature(auth_token: str, url: str, params: Mapping[str, str] | None = None) -> str:
    """The signature Twilio would send for a request to ``url`` with form ``params``."""
    return RequestValidator(auth_token).compute_signature(url, dict(params or {}))


def verify_signature(
    auth_token: str, url: str, params: Mapping[str, str] | None, signature: str | None
) -> bool:
    """True when ``signature`` is Twilio's signature of ``url`` and ``params`` (constant time)."""
    if not auth_token or not signature:
        return False
    return bool(RequestValidator(auth_token).validate(url, dict(params or {}), signature))


ANSWER_PARAM = "parley_answered"
"""The ``<Stream>`` parameter by which a server that answered a call's webhook vouches for its
stream, wherever it lands: ``<unix seconds>.<HMAC-SHA256(auth token, CallSid|seconds)>``."""


def answer_token(auth_token: str, call_sid: str, now_s: float) -> str:
    ts = str(int(now_s))
    mac = hmac.new(auth_token.encode(), f"{call_sid}|{ts}".encode(), hashlib.sha256).hexdigest()
    return f"{ts}.{mac}"


def check_answer_token(auth_token: str, call_sid: str, token: str, now_s: float, ttl_s: float) -> bool:
    """Whether ``token`` vouches for ``call_sid`` and is at most ``ttl_s`` old."""
    ts, _, mac = token.partition(".")
    if not ts.isdigit() or not 0 <= now_s - int(ts) <= ttl_s:
        return False
    return hmac.compare_digest(answer_token(auth_token, call_sid, int(ts)), token)
