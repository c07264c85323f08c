"""``POST /calls``: place a call from outside (a CRM, a campaign runner), the agent on it.

::

    POST /calls
    Authorization: Bearer $PARLEY_API_TOKEN
    {"to": "+15551234567", "from": "+15550100", "agent": "receptionist", "params": {"customer": "C-42"}}

    202 {"call_id": "CA...", "via": "twilio", "status": "queued"}     # GET /calls/{call_id} follows it

A phone number (E.164) is dialled through Twilio (:mod:`telephony.twilio.outbound`: ``from`` is a
number of the account); a ``sip:`` URI by the SIP user agent beside the server
(:meth:`~telephony.sip.server.SipServer.dial`, ``from`` optional). ``agent`` names the agent (a
name or a spec's path, as the server's loader takes it; default: the server's); ``params`` reach
the agent with the call. 202 means placed: Twilio took the request (the call id is its CallSid),
or the SIP call is dialling (the call id is its Call-ID); how it goes is on the call's record.

Answers: 401 without the bearer token, 404 when the server has none configured (the route is
off), 400 for a body that is not what is above (one line says what), 501 when the server cannot
dial that kind of target, 503 while draining or full, 502 when Twilio refused the request or
never answered (its reason in ``error``). Errors are JSON: ``{"error": "..."}``.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

from telephony.errors import PlacementError
from telephony.log_limit import LogLimiter
from telephony.sip import DialError, DialRequest, SipServer
from telephony.sip.dialer import resolve_destination
from telephony.sip.server import new_call_id
from telephony.twilio.outbound import OutboundCalls, TwilioDialRequest, is_phone_number, masked

__all__ = ["AGENT_PARAM", "AgentLoader", "CallsApi", "MAX_BODY_BYTES", "read_json_object"]

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 16 * 1024
BODY_TIMEOUT_S = 10.0
AGENT_PARAM = "parley_agent"
FIELDS = ("to", "from", "agent", "params")

AgentLoader = Callable[[str], Awaitable[str]]
"""Loads the agent a request names (once) and returns the key calls carry in ``AGENT_PARAM``,
by which the server's agent factory picks it; ValueError (its message said to the client) when
there is no such agent."""


async def read_json_object(request: web.Request, max_bytes: int, timeout_s: float, shape: str) -> dict:
    """A request's body, a JSON object of at most ``max_bytes`` come within ``timeout_s``; else
    ValueError, one line for the client (``shape``: what the object should look like)."""
    if (request.content_length or 0) > max_bytes:
        raise ValueError(f"the body is over {max_bytes} bytes")
    try:
        async with asyncio.timeout(timeout_s):
            raw = await request.content.read(max_bytes + 1)
    except TimeoutError:
        raise ValueError(f"the body did not come within {timeout_s:.0f} s") from None
    if len(raw) > max_bytes:
        raise ValueError(f"the body is over {max_bytes} bytes")
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"the body is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise ValueError(f"the body is not a JSON object: {shape}")
    return body


def _json_error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


class CallsApi:
    """The ``POST /calls`` route and the SIP calls it started (stopped with the server)."""

    def __init__(self, *, token: str | None, outbound: OutboundCalls, sip: Callable[[], SipServer | None],
                 admit: Callable[[], str | None], agents: AgentLoader | None = None):
        self.token = token
        self.outbound = outbound
        self._sip = sip
        self._admit = admit
        self._agents = agents
        self._dialling: set[asyncio.Task] = set()
        self._log_limit = LogLimiter()

    def register(self, app: web.Application) -> None:
        app.router.add_post("/calls", self.post)

    async def stop(self) -> None:
        """Hang up the SIP calls this route placed that are still going (their tasks end)."""
        for task in list(self._dialling):
            task.cancel()
        await asyncio.gather(*self._dialling, return_exceptions=True)

    def authorize(self, request: web.Request) -> web.Response | None:
        """The refusal of a request without the API's bearer token (None: it has it). The
        campaigns' routes ask this too: one token for every route that places calls."""
        route = f"{request.method} {request.path}"
        if not self.token:
            return _json_error(404, f"{route} is off: start parley serve with --api-token (or PARLEY_API_TOKEN)")
        given = request.headers.get("Authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {self.token}".encode()):
            if self._log_limit(f"token:{request.remote}"):
                log.warning("refused %s from %s: %s bearer token (further refusals from it are logged "
                            "once a minute)", route, request.remote, "wrong" if given else "no")
            return web.json_response({"error": "a bearer token is needed: Authorization: Bearer TOKEN"}, status=401,
                                     headers={"WWW-Authenticate": "Bearer"})
        return None

    async def post(self, request: web.Request) -> web.Response:
        unauthorized = self.authorize(request)
        if unauthorized is not None:
            return unauthorized
        try:
            body = await self._body(request)
            to, from_, params = self._fields(body)
        except ValueError as exc:
            log.info("POST /calls from %s refused: %s", request.remote, exc)
            return _json_error(400, str(exc))
        refusal = self._admit()
        if refusal is not None:
            return _json_error(503, f"not placing calls now: {refusal}")
        if isinstance(body.get("agent"), str):
            if self._agents is None:
                return _json_error(501, "this server runs one agent: leave out 'agent'")
            try:
                params[AGENT_PARAM] = await self._agents(body["agent"])
            except ValueError as exc:
                return _json_error(400, f"agent {body['agent'][:100]!r}: {exc}")
        if to.startswith("sip:"):
            return await self._dial_sip(to, from_, params)
        return await self._dial_twilio(to, from_, params)

    async def _body(self, request: web.Request) -> dict:
        return await read_json_object(request, MAX_BODY_BYTES, BODY_TIMEOUT_S,
                                      '{"to": ..., "from": ..., "agent": ..., "params": {...}}')

    @staticmethod
    def _fields(body: dict) -> tuple[str, str | None, dict[str, str]]:
        unknown = sorted(set(body) - set(FIELDS))
        if unknown:
            raise ValueError(f"unknown field {unknown[0][:40]!r} (fields: {', '.join(FIELDS)})")
        to, from_, agent, params = (body.get(k) for k in FIELDS)
        if not isinstance(to, str) or not to:
            raise ValueError("'to' is missing: a phone number in E.164 form (+15551234567) or a sip: URI")
        if not (to.startswith("sip:") or is_phone_number(to)):
            raise ValueError(f"'to' {to[:40]!r} is neither a phone number in E.164 form (+15551234567) nor a sip: URI")
        if from_ is not None and not isinstance(from_, str):
            raise ValueError("'from' is not a string")
        if agent is not None and (not isinstance(agent, str) or not agent):
            raise ValueError("'agent' is not a name or a path")
        if params is None:
            params = {}
        if not isinstance(params, dict) or not all(isinstance(v, str) for v in params.values()):
            raise ValueError("'params' is not an object of strings")
        return to, from_, dict(params)

    async def _dial_twilio(self, to: str, from_: str | None, params: dict[str, str]) -> web.Response:
        if from_ is None:
            return _json_error(400, "'from' is missing: calling a phone number needs a number of the Twilio account")
        try:
            request = TwilioDialRequest(to, from_, params=tuple(params.items()))
        except PlacementError as exc:
            return _json_error(400, str(exc))
        if self.outbound.dialer is None:
            return _json_error(501, "this server cannot dial phone numbers: it needs TWILIO_ACCOUNT_SID, "
                               "TWILIO_AUTH_TOKEN and --public-url")
        try:
            placed = await self.outbound.place(request)
        except PlacementError as exc:
            return _json_error(502, str(exc))
        return web.json_response({"call_id": placed.call_sid, "via": "twilio", "status": "queued"}, status=202,
                                 headers={"Location": f"/calls/{placed.call_sid}"})

    async def _dial_sip(self, to: str, from_: str | None, params: dict[str, str]) -> web.Response:
        sip = self._sip()
        if sip is None:
            return _json_error(501, "this server cannot dial sip: URIs: start it with --sip-port")
        try:
            request = DialRequest(to, from_uri=from_, params=tuple(params.items()))
            await resolve_destination(request)  # a host that does not resolve is this request's fault
        except DialError as exc:
            return _json_error(400, str(exc))
        call_id = new_call_id()
        task = asyncio.get_running_loop().create_task(self._run_sip(sip, request, call_id), name=f"dial-{call_id}")
        self._dialling.add(task)
        task.add_done_callback(self._dialling.discard)
        return web.json_response({"call_id": call_id, "via": "sip", "status": "dialling"}, status=202,
                                 headers={"Location": f"/calls/{call_id}"})

    @staticmethod
    async def _run_sip(sip: SipServer, request: DialRequest, call_id: str) -> None:
        try:
            result = await sip.dial(request, call_id=call_id)
        except DialError as exc:
            log.warning("[%s] SIP call to %s not placed: %s", call_id, masked(request.target), exc)
            return
        log.info("[%s] SIP call over: %s", call_id, result.outcome.value)
