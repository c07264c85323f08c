"""What the user agent checks of a request before it acts on it (RFC 3261 8.2), in the RFC's order.

::

    refusal = check_request(request)      # None: go on; else answer refusal.status
    if refusal is not None:
        server.respond(request, addr, refusal.status, headers=refusal.headers + warning(refusal.detail))

1. the version (505 for anything but SIP/2.0);
2. the message's own shape (400): the mandatory headers, once each where only one is allowed,
   a Via, From, To and Record-Route (SIP URIs) that parse (an unterminated quote, an unquoted display name with commas,
   white space inside ``<...>``), a CSeq below 2**31, a Request-URI with a scheme and, for SIP
   URIs, no escaped headers;
3. the method (RFC 3261 8.2.1): unknown -> 501, known but not ours (REGISTER, SUBSCRIBE,
   MESSAGE, ...) -> 405, both with ``Allow``; then the CSeq method must be the request's (400);
4. the Request-URI scheme (416 for anything but sip, sips and tel);
5. ``Require`` (420 with ``Unsupported``: parley supports no option tags), except on ACK and CANCEL;
6. for an INVITE's body: ``Content-Type`` application/sdp (or multipart with an SDP part, as
   SIP-I trunks send) and no ``Content-Encoding`` (415 with
   ``Accept`` / ``Accept-Encoding``), and an ``Accept`` that lets the answer be SDP (406).

An ACK is checked for its shape only and never answered: the caller drops the refused one.
These are the RFC 4475 torture tests' expectations (``tests/telephony/sip/test_rfc4475.py``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from telephony.sip.errors import SipParseError
from telephony.sip.headers import NameAddr, SipUri, split_commas
from telephony.sip.message import SIP_VERSION, SipRequest, sdp_body

__all__ = ["ALLOW", "KNOWN_METHODS", "SUPPORTED_METHODS", "Refusal", "check_request", "warning"]

SUPPORTED_METHODS: Final = ("INVITE", "ACK", "BYE", "CANCEL", "OPTIONS", "NOTIFY")
ALLOW: Final = ", ".join(SUPPORTED_METHODS)
KNOWN_METHODS: Final = SUPPORTED_METHODS + ("REGISTER", "SUBSCRIBE", "MESSAGE", "PUBLISH", "INFO", "UPDATE",
                                            "PRACK", "REFER")
URI_SCHEMES: Final = ("sip", "sips", "tel")
_MANDATORY: Final = ("via", "from", "to", "call-id", "cseq")
_SINGLE: Final = ("from", "to", "call-id", "cseq", "max-forwards", "content-type")
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+\-.]*):\S")
_SDP_TYPES: Final = ("application/sdp", "application/*", "*/*")


@dataclass(frozen=True)
class Refusal:
    status: int
    detail: str  # one line, for the log and the response's Warning header
    headers: tuple[tuple[str, str], ...] = ()


def warning(detail: str) -> tuple[tuple[str, str], ...]:
    """A ``Warning: 399 parley "..."`` header saying why (RFC 3261 20.43), safe to send."""
    text = "".join(c if " " <= c < "\x7f" and c not in '"\\' else "?" for c in detail)[:120]
    return (("Warning", f'399 parley "{text}"'),)


def _media_types(value: str) -> list[str]:
    return [part.split(";", 1)[0].strip().lower() for part in value.split(",") if part.strip()]


def _shape(req: SipRequest) -> str | None:
    """Why the request is malformed (a 400), or None."""
    for name in _MANDATORY:
        if req.header(name) is None:
            return f"no {name.title()} header"
    for name in _SINGLE:
        if len(req.headers_named(name)) > 1:
            return f"more than one {name.title()} header"
    try:
        req.top_via  # noqa: B018
        NameAddr.parse(req.header("from") or "")
        NameAddr.parse(req.header("to") or "")
        req.cseq  # noqa: B018
        for value in req.headers_named("record-route"):  # the route set our BYE will follow
            for route in split_commas(value):
                NameAddr.parse(route).sip_uri  # noqa: B018
    except SipParseError as exc:
        return str(exc)
    scheme = _SCHEME.match(req.uri)
    if scheme is None:
        return f"Request-URI {req.uri[:60]!r} has no scheme"
    if scheme.group(1).lower() in ("sip", "sips"):
        try:
            uri = SipUri.parse(req.uri)
        except SipParseError as exc:
            return str(exc)
        if uri.headers:
            return "headers are not allowed in a Request-URI"
    return None


def check_request(req: SipRequest) -> Refusal | None:
    """The refusal this request gets before any dialog or call sees it, or None."""
    allow = (("Allow", ALLOW),)
    if req.version != SIP_VERSION:
        return Refusal(505, f"{req.version} is not supported")
    bad = _shape(req)
    if bad is not None:
        return Refusal(400, bad)
    if req.method not in KNOWN_METHODS:
        return Refusal(501, f"method {req.method[:40]} is not implemented", allow)
    if req.method not in SUPPORTED_METHODS:
        return Refusal(405, f"parley does not take {req.method}", allow)
    if req.cseq[1] != req.method:
        return Refusal(400, "CSeq method differs from the request method")
    scheme = req.uri.partition(":")[0].lower()
    if scheme not in URI_SCHEMES:
        return Refusal(416, f"URI scheme {scheme[:30]} is not supported")
    if req.method in ("ACK", "CANCEL"):
        return None
    required = [opt.strip() for value in req.headers_named("require") for opt in value.split(",") if opt.strip()]
    if required:
        return Refusal(420, "parley supports no SIP extensions", (("Unsupported", ", ".join(required)),))
    if req.method == "INVITE":
        if req.body:
            if not sdp_body(req):  # application/sdp, or a multipart body with an SDP part
                return Refusal(415, f"body of type {(req.header('content-type') or '')[:40]}; parley reads "
                                    "application/sdp", (("Accept", "application/sdp"),))
            encoding = (req.header("content-encoding") or "identity").strip().lower()
            if encoding != "identity":
                return Refusal(415, f"content encoding {encoding[:30]}", (("Accept-Encoding", "identity"),))
        accept = req.header("accept")
        if accept is not None and accept.strip() and not set(_media_types(accept)) & set(_SDP_TYPES):
            return Refusal(406, "the answer can only be application/sdp", (("Accept", "application/sdp"),))
    return None
