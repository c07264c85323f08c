"""REGISTER parley at a PBX (client side of digest auth), and keep the binding fresh.

``Registration.run()`` registers, answers one 401/407 challenge per attempt with the configured
credentials, re-registers at 80 % of the granted expiry, and retries every ``retry_s`` after a
failure; ``stop()`` unregisters (``Expires: 0``).
"""

from __future__ import annotations

import asyncio
import logging

from telephony.sip.config import RegistrationConfig
from telephony.sip.digest import DigestChallenge, authorization
from telephony.sip.endpoint import SipEndpoint
from telephony.sip.errors import RegistrationError, SipParseError
from telephony.sip.media import random_tag
from telephony.sip.message import SipResponse

log = logging.getLogger(__name__)


class Registration:
    def __init__(self, server: SipEndpoint, config: RegistrationConfig):
        self.server = server
        self.config = config
        self.call_id = f"{random_tag()}@parley"
        self.tag = random_tag()
        self.cseq = 0
        self.registered = False
        self.expires_s: int | None = None
        self.last_error: str | None = None
        self._stopping = False

    @property
    def _addr(self) -> tuple[str, int]:
        return self.config.registrar_host, self.config.registrar_port

    async def _send(self, expires_s: int, credentials: str | None = None, header: str = "Authorization") -> SipResponse:
        self.cseq += 1
        uri = f"sip:{self.config.domain or self.config.registrar_host}"
        extra: tuple = (("Expires", str(expires_s)),)
        if credentials:
            extra += ((header, credentials),)
        req = self.server.new_request("REGISTER", uri, call_id=self.call_id,
                                      from_=f"<{self.config.aor}>;tag={self.tag}", to=f"<{self.config.aor}>",
                                      cseq=self.cseq, headers=extra)
        return await self.server.request(req, self._addr, self.config.timeout_s)

    async def register(self, expires_s: int | None = None) -> int:
        """One REGISTER (with a digest answer if challenged). Returns the expiry granted, in seconds."""
        expires = self.config.expires_s if expires_s is None else expires_s
        uri = f"sip:{self.config.domain or self.config.registrar_host}"
        try:
            resp = await self._send(expires)
            if resp.status in (401, 407):
                name = "WWW-Authenticate" if resp.status == 401 else "Proxy-Authenticate"
                challenge = DigestChallenge.parse(resp.header(name) or "")
                cred = authorization(challenge, "REGISTER", uri, self.config.username, self.config.password)
                resp = await self._send(expires, str(cred), "Authorization" if resp.status == 401 else "Proxy-Authorization")
        except TimeoutError as exc:
            raise RegistrationError(f"registrar {self._addr[0]}:{self._addr[1]} did not answer") from exc
        except SipParseError as exc:
            raise RegistrationError(f"bad challenge from the registrar: {exc}") from exc
        if not 200 <= resp.status < 300:
            raise RegistrationError(f"REGISTER refused: {resp.status} {resp.reason}")
        granted = resp.header("expires")
        if granted and granted.isascii() and granted.isdigit() and len(granted) <= 10:
            return int(granted)
        return expires

    async def run(self) -> None:
        while not self._stopping:
            try:
                self.expires_s = await self.register()
                self.registered, self.last_error = True, None
                log.info("registered as %s at %s:%d for %d s", self.config.aor, *self._addr, self.expires_s)
                await asyncio.sleep(max(10.0, self.expires_s * 0.8))
            except RegistrationError as exc:
                self.registered, self.last_error = False, str(exc)
                log.warning("registration failed: %s; retrying in %.0f s", exc, self.config.retry_s)
                await asyncio.sleep(self.config.retry_s)

    async def stop(self) -> None:
        self._stopping = True
        if self.registered:
            try:
                await self.register(expires_s=0)
            except RegistrationError as exc:
                log.info("unregister failed: %s", exc)
            self.registered = False
