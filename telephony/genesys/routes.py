"""``GET /genesys/audiohook``: Genesys Cloud's Audio Connector calls parley's bot here.

The upgrade request is checked before it is accepted: the ``Audiohook-*`` headers (UUIDs), the
``X-API-KEY`` (one parley knows, else 401), and, when the key has a client secret, the HTTP
message signature over them (``signature.py``; missing, wrong, stale or replayed: 401). Then the
session: ``open`` (5 s at most; its organisation must be the header's), the media chosen (PCMU,
8 kHz, the caller's channel), ``opened``; a connection probe (the null conversation id) is
answered and closed without a call; anything else is a call (``call.py``).

Configured from the environment by the command line: ``PARLEY_GENESYS_API_KEY`` and
``PARLEY_GENESYS_CLIENT_SECRET`` (base64, as Genesys shows it; empty: unsigned requests with the
key are taken, and the log says so).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import WSMsgType, web

from pipeline.builder import PipelineConfig
from pipeline.records import CallStore
from telephony.calls import AgentFactory
from telephony.errors import ConfigError, ProtocolError, SignatureError
from telephony.genesys.call import GenesysCall
from telephony.genesys.messages import Sequence, is_uuid, parse_client, parse_open
from telephony.genesys.signature import NonceCache, verify
from telephony.genesys.transport import GenesysSession
from telephony.log_limit import LogLimiter
from telephony.metrics import Metrics

log = logging.getLogger(__name__)

PATH = "/genesys/audiohook"
OPEN_TIMEOUT_S = 5.0
MAX_MESSAGE_BYTES = 64 * 1024 + 1024
SESSION_HEADERS = ("audiohook-organization-id", "audiohook-session-id", "audiohook-correlation-id")


@dataclass(frozen=True)
class GenesysConfig:
    api_key: str
    client_secret: bytes | None = None       # decoded; None: unsigned requests are taken

    @classmethod
    def from_env(cls, api_key: str | None, client_secret_b64: str | None) -> GenesysConfig | None:
        if not api_key:
            if client_secret_b64:
                raise ConfigError("PARLEY_GENESYS_CLIENT_SECRET is set but PARLEY_GENESYS_API_KEY is not")
            return None
        secret = None
        if client_secret_b64:
            try:
                secret = base64.b64decode(client_secret_b64, validate=True)
            except binascii.Error:
                raise ConfigError("PARLEY_GENESYS_CLIENT_SECRET is not base64 (paste it as Genesys shows it)") from None
        return cls(api_key, secret)


class GenesysGateway:
    def __init__(self, config: GenesysConfig, *, agent_factory: AgentFactory, pipeline_config: PipelineConfig,
                 store: CallStore, live: dict, metrics: Metrics, admit: Callable[[], str | None],
                 reraise: bool = False) -> None:
        self.config = config
        self._agent_factory = agent_factory
        self._pipeline_config = pipeline_config
        self._store = store
        self._live = live
        self._metrics = metrics
        self._admit = admit
        self._reraise = reraise
        self._nonces = NonceCache()
        self._once_a_minute = LogLimiter()
        if config.client_secret is None:
            log.warning("Genesys: no client secret, so AudioHook requests are not signature-checked "
                        "(set PARLEY_GENESYS_CLIENT_SECRET)")

    def _refuse(self, request: web.Request, status: type[web.HTTPException], why: str, reason: str):
        self._metrics.call_refused(reason)
        if self._once_a_minute(f"genesys:{reason}:{request.remote}"):
            log.warning("refused an AudioHook session from %s: %s (logged once a minute per source)",
                        request.remote, why)
        return status(text=why + "\n")

    def _authenticate(self, request: web.Request) -> None:
        headers = {k.lower(): v for k, v in request.headers.items()}
        missing = [h for h in SESSION_HEADERS if not is_uuid(headers.get(h))]
        if missing:
            raise self._refuse(request, web.HTTPBadRequest, f"missing or malformed {', '.join(missing)}", "bad_request")
        if headers.get("x-api-key") != self.config.api_key:
            raise self._refuse(request, web.HTTPUnauthorized, "unknown or missing X-API-KEY", "unauthorized")
        if self.config.client_secret is None:
            return
        try:
            verify(headers, target=request.path_qs, authority=request.host, secret=self.config.client_secret,
                   nonces=self._nonces)
        except SignatureError as exc:
            raise self._refuse(request, web.HTTPUnauthorized, f"signature verification failed: {exc}",
                               "unauthorized") from None

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self._authenticate(request)
        refusal = self._admit()
        if refusal is not None:
            self._metrics.call_refused(refusal)
            raise web.HTTPServiceUnavailable(text=f"{refusal}: not taking new calls\n", headers={"Retry-After": "5"})
        session_id = request.headers["Audiohook-Session-Id"]
        ws = web.WebSocketResponse(max_msg_size=MAX_MESSAGE_BYTES, heartbeat=None)
        await ws.prepare(request)
        seqs = Sequence(session_id)
        call_id = f"genesys-{session_id}"
        try:
            opened = await self._open(ws, seqs, request.headers["Audiohook-Organization-Id"], call_id)
        except (ProtocolError, TimeoutError) as exc:
            log.warning("[%s] AudioHook session refused: %s", call_id, exc or "no 'open' in time")
            if not ws.closed:
                await ws.send_str(seqs.message("disconnect", {"reason": "error", "info": f"Client Error: {exc}"}))
                await _wait_close(ws, seqs)
            return ws
        if opened is None:                            # a connection probe: answered and closed
            return ws
        session, media = opened
        connector = request.match_info.get("connector_id", "")[:128]
        call = GenesysCall(GenesysSession(ws, seqs, session, media, call_id, _no_op), connector_id=connector,
                           agent_factory=self._agent_factory, pipeline_config=self._pipeline_config,
                           store=self._store, reraise=self._reraise, metrics=self._metrics)
        self._live[call.call_sid] = call
        try:
            await call.run()
        finally:
            self._live.pop(call.call_sid, None)
        return ws

    async def _open(self, ws: web.WebSocketResponse, seqs: Sequence, organization_id: str, call_id: str):
        """``open`` -> ``opened``. -> (OpenParams, the media chosen), or None for a probe."""
        async with asyncio.timeout(OPEN_TIMEOUT_S):
            msg = await ws.receive()
        if msg.type != WSMsgType.TEXT:
            raise ProtocolError("the session's first message was not 'open'")
        env = parse_client(msg.data)
        seqs.accept(env)
        if env.type != "open":
            raise ProtocolError(f"expected 'open', got {env.type[:40]!r}")
        params = parse_open(env.parameters)
        if params.organization_id.lower() != organization_id.lower():
            await ws.send_str(seqs.message("disconnect", {
                "reason": "unauthorized",
                "info": 'Mismatch between "organizationId" open parameter and "audiohook-organization-id" header'}))
            await _wait_close(ws, seqs)
            return None
        media = params.choose_media()
        if media is None:
            raise ProtocolError("no supported media offered (parley takes PCMU at 8000 Hz with the external channel)")
        await ws.send_str(seqs.message("opened", {"startPaused": False, "media": [media.to_json()]}))
        if params.probe:
            log.info("[%s] Genesys connection probe answered", call_id)
            await _wait_close(ws, seqs)
            return None
        log.info("[%s] AudioHook session opened: conversation %s, from %s to %s, %d input variable(s)", call_id,
                 params.conversation_id, params.ani or "?", params.dnis or "?", len(params.input_variables))
        return params, media


async def _wait_close(ws: web.WebSocketResponse, seqs: Sequence, timeout_s: float = OPEN_TIMEOUT_S) -> None:
    """Answer pings until Genesys's ``close`` (answered ``closed``), then close the socket."""
    try:
        async with asyncio.timeout(timeout_s):
            async for msg in ws:
                if msg.type != WSMsgType.TEXT:
                    continue
                try:
                    env = parse_client(msg.data)
                except ProtocolError:
                    continue
                seqs.clientseq = max(seqs.clientseq, env.seq)
                if env.type == "ping":
                    await ws.send_str(seqs.message("pong"))
                elif env.type == "close":
                    await ws.send_str(seqs.message("closed"))
                    break
    except TimeoutError:
        pass
    await ws.close()


async def _no_op(_reason: str) -> None:
    """A session's close handler until its call takes it over."""


def register_genesys_routes(app: web.Application, config: GenesysConfig, **kwargs) -> GenesysGateway:
    gateway = GenesysGateway(config, **kwargs)
    # Genesys appends the Architect action's connector id to the integration's base URI
    app.add_routes([web.get(PATH, gateway.handle), web.get(PATH + "/{connector_id}", gateway.handle)])
    return gateway


def new_session_headers(organization_id: str | None = None) -> dict[str, str]:
    """Fresh ``Audiohook-*`` headers (a client's, lower-case)."""
    return {"audiohook-organization-id": organization_id or str(uuid.uuid4()),
            "audiohook-session-id": str(uuid.uuid4()), "audiohook-correlation-id": str(uuid.uuid4())}
