"""The post-call webhooks' signature: HMAC-SHA256 over ``timestamp + "." + body``.

    headers = signed_headers(secret, body, delivery_id, now=time.time())
    verify(secret, headers[TIMESTAMP_HEADER], headers[SIGNATURE_HEADER], body, now=time.time())

``X-Parley-Signature`` is ``v1=<hex>`` (comma-separated when several secrets sign during a
rotation; a receiver accepts any ``v1`` it can match). The timestamp is Unix seconds as sent in
``X-Parley-Timestamp``; a receiver refuses one more than ``tolerance_s`` away from its clock, so a
captured request cannot be replayed later. Each attempt is signed afresh (a retry an hour later
carries that hour's timestamp over the same body). docs/webhooks.md shows the receiver's side.
"""

from __future__ import annotations

import hashlib
import hmac

__all__ = ["DELIVERY_HEADER", "EVENT_HEADER", "SIGNATURE_HEADER", "TIMESTAMP_HEADER", "sign", "signed_headers",
           "verify"]

TIMESTAMP_HEADER = "X-Parley-Timestamp"
SIGNATURE_HEADER = "X-Parley-Signature"
DELIVERY_HEADER = "X-Parley-Delivery"
EVENT_HEADER = "X-Parley-Event"
DEFAULT_TOLERANCE_S = 300.0


def sign(secret: str, timestamp: str, body: bytes) -> str:
    """``v1=<hex>``: HMAC-SHA256 with ``secret`` over ``timestamp + "." + body``."""
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return "v1=" + mac.hexdigest()


def signed_headers(secret: str, body: bytes, delivery_id: str, *, now: float,
                   event: str = "call.ended") -> dict[str, str]:
    timestamp = str(int(now))
    return {"Content-Type": "application/json", TIMESTAMP_HEADER: timestamp,
            SIGNATURE_HEADER: sign(secret, timestamp, body), DELIVERY_HEADER: delivery_id,
            EVENT_HEADER: event, "User-Agent": "parley-webhooks/1"}


def verify(secret: str, timestamp: str, signature: str, body: bytes, *, now: float,
           tolerance_s: float = DEFAULT_TOLERANCE_S) -> bool:
    """Whether ``signature`` (the header's value) signs ``body`` at ``timestamp`` with ``secret``,
    and ``timestamp`` is within ``tolerance_s`` of ``now``."""
    try:
        if abs(now - int(timestamp)) > tolerance_s:
            return False
    except ValueError:
        return False
    expected = sign(secret, timestamp, body)
    return any(hmac.compare_digest(expected, part.strip()) for part in signature.split(","))
