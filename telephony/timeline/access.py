"""Who may read the call pages (``/ui/...``): the server's API token, or nobody but this machine.

Three modes, fixed when the server starts (:func:`page_access`):

- ``token``: an API token is configured (``--api-token`` / ``PARLEY_API_TOKEN``). A request
  carries it as ``Authorization: Bearer TOKEN``, or the page's cookie, which the login form
  (``POST /ui/login``) or a first load with ``?token=TOKEN`` sets (HttpOnly, SameSite=Strict; the
  address is then reloaded without the token). Anything else: 401.
- ``loopback``: no token, and the server listens on a loopback address only: the pages are open
  to this machine. The ``Host`` header must name a loopback host too (a web page elsewhere
  cannot reach them by pointing its own name at 127.0.0.1).
- ``off``: no token and a non-loopback address: every ``/ui`` route answers 404 and the server
  logs once at start how to turn them on. The pages are never open by default beyond this machine.

The cookie holds an HMAC of the token, not the token: it opens the pages and nothing else.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
from dataclasses import dataclass
from typing import Literal

from aiohttp import web

__all__ = ["COOKIE", "PageAccess", "is_loopback", "page_access"]

COOKIE = "parley_calls"
Mode = Literal["token", "loopback", "off"]
LOOPBACK_NAMES = ("localhost",)


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or a name, brackets and port allowed) is this machine only."""
    name = host.strip()
    if name.startswith("["):                       # [::1] or [::1]:8765
        name = name[1:].partition("]")[0]
    elif name.count(":") == 1:                     # 127.0.0.1:8765, localhost:8765
        name = name.partition(":")[0]
    if name.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class PageAccess:
    mode: Mode
    token: str | None = None

    @property
    def cookie_value(self) -> str:
        return hmac.new((self.token or "").encode(), b"parley call pages", hashlib.sha256).hexdigest()

    def token_ok(self, given: str) -> bool:
        return self.token is not None and hmac.compare_digest(given.encode(), self.token.encode())

    def allowed(self, request: web.Request) -> bool:
        """Whether ``request`` may read the pages (the caller answers 401 otherwise; off: 404)."""
        if self.mode == "off":
            return False
        if self.mode == "loopback":
            return is_loopback(request.host)
        bearer = request.headers.get("Authorization", "")
        if bearer.startswith("Bearer ") and self.token_ok(bearer[len("Bearer "):]):
            return True
        cookie = request.cookies.get(COOKIE, "")
        return bool(cookie) and hmac.compare_digest(cookie.encode(), self.cookie_value.encode())

    def set_cookie(self, response: web.StreamResponse, *, secure: bool) -> None:
        response.set_cookie(COOKIE, self.cookie_value, path="/ui", httponly=True, samesite="Strict",
                            secure=secure)


def page_access(token: str | None, host: str) -> PageAccess:
    """The mode for a server with ``token`` (or none) listening on ``host``."""
    if token:
        return PageAccess("token", token)
    return PageAccess("loopback" if is_loopback(host) else "off")
