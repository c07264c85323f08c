"""The server that takes calls: HTTP webhooks and the Twilio Media Streams WebSocket (aiohttp).

Routes:
    POST /twilio/voice      Twilio's voice webhook; answers TwiML <Connect><Stream> (signed)
    GET  /twilio/stream     the Media Streams WebSocket (upgrade signed like Twilio signs it)
    GET  /calls/{sid}       a call's record as JSON (signed, same token)
    GET  /ui/calls[/{sid}]  the call pages: the list, one call's timeline (telephony.timeline:
                            behind ``api_token``; without one, open on a loopback address only)
    POST /calls             place a call, Twilio or SIP (bearer token: ``api_token``; telephony.calls_api)
    POST /campaigns         run an outbound campaign here; GET, stop, resume, results (same token;
                            telephony.campaign.api)
    POST /twilio/dial-status  Twilio's status and answering-machine callbacks on calls we placed (signed)
    GET  /healthz           200 while taking calls, 503 once draining
    GET  /metrics           Prometheus text format: live calls, per-turn latencies and audio
                            frames lost, late or underrun, by transport; event-loop lag

On SIGTERM (``drain``) the server stops taking calls (the webhook answers ``<Reject>``, new
streams and /healthz get 503), lets live calls finish for ``drain_grace_s``, then ends the rest
politely: a short farewell is spoken and the stream closed after it played.

Admission (``admission()``): one yes/no for every transport of the process. While draining, or
with ``max_calls`` calls in progress (live, being set up, or answered on the webhook and not yet
streaming; SIP's included), a new call is refused: the webhook answers ``<Reject reason="busy">``,
a browser offer 503, a SIP INVITE 503 with Retry-After; ``/metrics`` counts each by reason.

A Media Streams socket is taken only for a CallSid this server answered on ``/twilio/voice`` in
the last ``ANSWERED_TTL_S`` seconds, once (Twilio's upgrade signature covers only the URL: one
captured header would otherwise open any number of streams), and never for a CallSid that is live;
or, for a warm transfer's call to the person, once, with the secret its TwiML carried
(:mod:`telephony.twilio.warm`).

Signatures: Twilio signs the URL it requested with the account's auth token. Behind a proxy or a
tunnel that URL is the public one, so ``public_url`` (e.g. ``https://parley.example.com``) is
what we check against; without it, the URL this server saw. ``insecure_dev`` turns checking off
for local work, and says so loudly at start and on every call.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from urllib.parse import urlsplit, urlunsplit

from aiohttp import WSCloseCode, web
from aiohttp.http_exceptions import HttpProcessingError

from pipeline.builder import PipelineConfig
from pipeline.capacity import recorded_capacity
from pipeline.gc_pauses import GcPauses, freeze_startup_heap
from telephony.errors import ProtocolError, TelephonyError
from telephony.log_limit import LogLimiter
from telephony.loop_lag import LoopLagProbe
from telephony.metrics import Metrics
from telephony.emf import EmfPublisher
from telephony.webhooks import WebhookSender
from telephony.sip import SipServer
from pipeline.records import CallStore, MemoryCallStore
from telephony.calls import AgentFactory, AnsweringPlanFactory
from telephony.core.supervisor import CallSupervisor, drain_calls
from telephony.genesys.routes import GenesysConfig, register_genesys_routes
from telephony.twilio.call import TwilioCall, read_start
from telephony.twilio.rest import TwilioCallControl, handoff_twiml
from telephony.twilio.twiml import params_from_query, stream_twiml
from telephony.twilio.outbound import OutboundCalls, TwilioDialer
from telephony.twilio.warm import WarmTransfers
from telephony.calls_api import AgentLoader, CallsApi
from telephony.campaign.api import CampaignsApi
from telephony.campaign.placer import ServerPlacer
from telephony.handoff import handoff_of
from telephony.timeline import CallPages, page_access
from pipeline.frames import TransferCallFrame
from pipeline.tracing import CallTracing
from telephony.webrtc import WebRTCConfig, register_webrtc_routes
from telephony.twilio.signature import (ANSWER_PARAM, SIGNATURE_HEADER, answer_token, check_answer_token,
                                        verify_signature)

log = logging.getLogger(__name__)

WS_MAX_MESSAGE_BYTES = 1 << 20  # larger messages close the socket; the parser's own limit is lower
ANSWERED_TTL_S = 60.0  # a stream must follow its webhook within this long
HEADER_TIMEOUT_S = 10.0  # a connection's request head (and an idle keep-alive) must come within this
BODY_TIMEOUT_S = 10.0  # and a webhook's body
# what a client can cause: aiohttp would log each with a traceback ("Error handling request")
CLIENT_FAULTS = (ConnectionResetError, BrokenPipeError, asyncio.IncompleteReadError, HttpProcessingError)


class _ClientFaultFilter(logging.Filter):
    """One INFO line, not a traceback, for what a client did wrong (a half-sent body, a request
    line too long, a reset); tracebacks stay for everything else, our own bugs."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, CLIENT_FAULTS):
            record.msg = f"{record.getMessage()}: {type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
            record.args = None
            record.exc_info = record.exc_text = None
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


def _quiet_client_faults() -> None:
    server_log = logging.getLogger("aiohttp.server")
    if not any(isinstance(f, _ClientFaultFilter) for f in server_log.filters):
        server_log.addFilter(_ClientFaultFilter())
MAX_ANSWERED = 10_000


async def _no_icon(_request: web.Request) -> web.Response:
    """``/favicon.ico``: no content (204), so a browser's automatic request is not a 404 in the log."""
    return web.Response(status=204)


def default_max_calls() -> int:
    """Calls this machine answers in time by the shipped engines' recorded costs and its cores
    (``pipeline.capacity``); ``parley serve`` times the engines on the machine instead."""
    return recorded_capacity().max_calls


@dataclass(frozen=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8765
    auth_token: str | None = None
    insecure_dev: bool = False
    public_url: str | None = None
    pipeline: PipelineConfig = field(default_factory=PipelineConfig)
    webrtc: WebRTCConfig = field(default_factory=WebRTCConfig)
    reraise_call_errors: bool = False  # tests: a call's failure propagates after clean-up
    twilio_account_sid: str | None = None  # enables transfers (Twilio's REST API)
    twilio_api_base: str = "https://api.twilio.com"
    drain_grace_s: float = 30.0  # on SIGTERM: how long live calls may go on before being ended
    shutdown_farewell: str = "I'm sorry, we have to end this call now. Goodbye."
    # False: no Twilio account (a SIP-only or browser-only server): the Twilio routes and the
    # signed call records answer 404 and say why, and no auth token is needed
    twilio: bool = True
    max_calls: int = field(default_factory=default_max_calls)  # every transport together
    # Genesys Cloud's Audio Connector at /genesys/audiohook (None: the route is not served)
    genesys: GenesysConfig | None = None
    # the bearer token POST /calls asks for (None: the route answers 404, saying how to turn it on)
    api_token: str | None = None

    def __post_init__(self):
        if self.twilio and not self.insecure_dev and not self.auth_token:
            raise TelephonyError(
                "no Twilio auth token: set TWILIO_AUTH_TOKEN (or pass --insecure-dev for local work)"
            )
        if not 0 <= self.port <= 65535:
            raise TelephonyError(f"port {self.port} is outside 0..65535")
        if self.max_calls < 1:
            raise TelephonyError(f"max_calls must be at least 1, not {self.max_calls}")
        if self.public_url is not None and urlsplit(self.public_url).scheme not in ("http", "https"):
            raise TelephonyError(f"public_url must start with http:// or https://, not {self.public_url!r}")


class CallServer:
    """Owns the aiohttp application and the live calls."""

    def __init__(self, config: ServerConfig, agent_factory: AgentFactory, store: CallStore | None = None,
                 agents: AgentLoader | None = None, tracing: CallTracing | None = None):
        self.config = config
        self.agent_factory = agent_factory
        self.store = store or MemoryCallStore()
        self.live: dict[str, CallSupervisor] = {}  # Twilio and browser calls
        self._answered: OrderedDict[str, float] = OrderedDict()  # CallSid -> when the webhook answered it
        self._tokens_seen: OrderedDict[str, float] = OrderedDict()  # answer tokens taken (once each)
        # CallSid -> the hand-off its agent asked for, answered on Twilio's <Connect action> callback
        self._handoffs: OrderedDict[str, TransferCallFrame] = OrderedDict()
        self._streams_starting = 0  # sockets upgraded, their 'start' not read yet
        self._log_once_a_minute = LogLimiter()
        self.sip: SipServer | None = None  # serve_forever's SIP server, counted in /healthz
        # calls placed through Twilio: who answered, before the agent speaks (TwilioCall); None: not screened
        self.answering_plans: AnsweringPlanFactory | None = None
        self.metrics = Metrics()
        if tracing is not None:  # each call a trace (pipeline.tracing); SIP shares these metrics
            self.metrics.tracing = tracing
        self.draining = False
        self.call_control = None
        if config.twilio_account_sid and config.auth_token:
            self.call_control = TwilioCallControl(config.twilio_account_sid, config.auth_token,
                                                  api_base=config.twilio_api_base)
        dialer = None
        if config.twilio_account_sid and config.auth_token and config.public_url:
            dialer = TwilioDialer(config.twilio_account_sid, config.auth_token, config.public_url,
                                  api_base=config.twilio_api_base)
        # calls placed through Twilio, their statuses written on their records as they come
        self.outbound = OutboundCalls(self.store, self.live, dialer)
        # warm transfers: the person called through the same client, joined by call control
        self.warm_transfers = WarmTransfers(self.outbound, lambda: self.call_control)
        self.calls_api = CallsApi(token=config.api_token, outbound=self.outbound, sip=lambda: self.sip,
                                  admit=self.admission, agents=agents)
        self._runner: web.AppRunner | None = None
        self.loop_lag = LoopLagProbe(self.metrics.observe_loop_lag, live_calls=self.live_calls)
        self._lag_task: asyncio.Task | None = None
        self.port: int | None = None
        self.app = web.Application(client_max_size=64 * 1024)
        self.app.add_routes([
            web.post("/twilio/voice", self.twilio_voice),
            web.post("/twilio/connect-done", self.twilio_connect_done),
            web.post("/twilio/dial-status", self.twilio_dial_status),
            web.get("/twilio/stream", self.twilio_stream),
            web.get("/calls/{sid}", self.call_record),
            web.get("/healthz", self.healthz),
            web.get("/metrics", self.metrics_text),
            web.get("/favicon.ico", _no_icon),
        ])
        self.calls_api.register(self.app)
        # outbound campaigns (POST /campaigns, same token), run here under this server's admission
        self.campaigns_api = CampaignsApi(
            store=self.store, authorize=self.calls_api.authorize, agents=agents,
            placer=lambda key: ServerPlacer(self.outbound, lambda: self.sip, self.store, self.admission, agent_key=key))
        self.campaigns_api.register(self.app)
        # the call pages (/ui/calls): the API token, else this machine only, else off
        self.call_pages = CallPages(self.store, page_access(config.api_token, config.host),
                                    recordings_dir=config.pipeline.recordings_dir,
                                    recordings_s3=config.pipeline.recordings_s3,
                                    secure_cookie=(config.public_url or "").startswith("https://"))
        self.call_pages.register(self.app)
        # browser calls: the page at /, POST/PATCH /api/offer (same pipeline, store and live calls)
        self.webrtc = register_webrtc_routes(
            self.app, agent_factory=self.agent_factory, pipeline_config=config.pipeline, store=self.store,
            live=self.live, config=replace(config.webrtc, reraise_call_errors=config.reraise_call_errors),
            metrics=self.metrics, admit=self.admission,
        )
        if config.genesys is not None:  # contact centres: the same pipeline, store, live calls and cap
            register_genesys_routes(self.app, config.genesys, agent_factory=self.agent_factory,
                                    pipeline_config=config.pipeline, store=self.store, live=self.live,
                                    metrics=self.metrics, admit=self.admission,
                                    reraise=config.reraise_call_errors)

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> int:
        if self.config.insecure_dev:
            log.warning("INSECURE DEV MODE: Twilio signatures are NOT checked. Never expose this server.")
        if not self.config.twilio:
            log.warning("Twilio calls are off (no TWILIO_AUTH_TOKEN): /twilio/* and /calls/* answer 404")
        _quiet_client_faults()
        # keepalive_timeout also bounds a new connection's wait for its first request head:
        # a client dribbling its headers (or holding an idle socket) is closed after it
        self._runner = web.AppRunner(self.app, access_log=None, keepalive_timeout=HEADER_TIMEOUT_S)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.config.host, self.config.port)
        try:
            await site.start()
        except OSError as exc:  # in use, no such address, not allowed: one line, not a traceback
            await self._runner.cleanup()
            self._runner = None
            raise TelephonyError(f"cannot listen on {self.config.host}:{self.config.port}: "
                                 f"{exc.strerror or exc}") from exc
        addresses = self._runner.addresses  # read the bound port back (port 0)
        self.port = int(addresses[0][1]) if addresses else self.config.port
        log.info("parley listening on http://%s:%d", self.config.host, self.port)
        self.call_pages.log_mode(self.config.host)
        self._lag_task = asyncio.get_running_loop().create_task(self.loop_lag.run(), name="loop-lag")
        return self.port

    async def drain(self) -> None:
        """Stop taking calls, let live ones finish for ``drain_grace_s``, end the rest politely."""
        self.draining = True
        await drain_calls(lambda: self.live.values(), grace_s=self.config.drain_grace_s,
                          farewell=self.config.shutdown_farewell)

    async def stop(self) -> None:
        await self.campaigns_api.stop()
        await self.calls_api.stop()
        if self._lag_task is not None:
            self._lag_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._lag_task
            self._lag_task = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # -- signatures --------------------------------------------------------------------------

    def _public(self, request: web.Request, *, websocket: bool) -> str:
        """The URL Twilio requested, as it signed it."""
        if self.config.public_url:
            base = urlsplit(self.config.public_url)
            scheme = base.scheme
            netloc = base.netloc
        else:
            scheme = "https" if request.secure else "http"
            netloc = request.host
        if websocket:
            scheme = "wss" if scheme == "https" else "ws"
        return urlunsplit((scheme, netloc, request.path, request.query_string, ""))

    def _check(self, request: web.Request, url: str, params: dict[str, str]) -> None:
        if not self.config.twilio:
            raise web.HTTPNotFound(text="Twilio is not configured on this server (TWILIO_AUTH_TOKEN)\n")
        if self.config.insecure_dev:
            return
        signature = request.headers.get(SIGNATURE_HEADER, "")
        if not signature or not verify_signature(self.config.auth_token or "", url, params, signature):
            if self._log_once_a_minute(f"signature:{request.remote}"):  # a flood is one line a minute
                log.warning("refused %s %s from %s: bad or missing %s (further refusals from it are "
                            "logged once a minute)", request.method, request.path, request.remote,
                            SIGNATURE_HEADER)
            raise web.HTTPForbidden(text="invalid Twilio signature\n")

    # -- handlers ----------------------------------------------------------------------------

    def live_calls(self) -> int:
        """Calls live on this server, every transport (SIP's too when it runs beside HTTP)."""
        return len(self.live) + (len(self.sip.live) if self.sip is not None else 0)

    def calls_in_progress(self) -> int:
        """Live calls, and those on their way in (what ``max_calls`` bounds)."""
        self._forget_answered()
        sip = self.sip.calls_in_progress if self.sip is not None else 0
        return len(self.live) + len(self._answered) + self._streams_starting + sip

    def admission(self) -> str | None:
        """Why a new call must be refused now ("draining", "capacity"), or None to take it.
        The caller of this counts the refusal; one log line a minute per reason says why."""
        in_progress = self.calls_in_progress()
        reason = "draining" if self.draining else "capacity" if in_progress >= self.config.max_calls else None
        if reason is not None and self._log_once_a_minute(reason):
            log.warning("refusing new calls: %s (%d in progress, at most %d)", reason, in_progress,
                        self.config.max_calls)
        return reason

    def _forget_answered(self) -> None:
        now = time.monotonic()
        while self._answered and (now - next(iter(self._answered.values())) > ANSWERED_TTL_S
                                  or len(self._answered) > MAX_ANSWERED):
            self._answered.popitem(last=False)

    async def healthz(self, request: web.Request) -> web.Response:
        if self.draining:
            return web.json_response({"status": "draining", "live_calls": self.live_calls()}, status=503)
        return web.json_response({"status": "ok", "live_calls": self.live_calls()})

    async def metrics_text(self, request: web.Request) -> web.Response:
        return web.Response(text=self.metrics.render(), content_type="text/plain", charset="utf-8",
                            headers={"X-Content-Type-Options": "nosniff"})

    async def _signed_form(self, request: web.Request) -> dict[str, str]:
        """A Twilio webhook's form, its signature checked (unsigned: refused before the body)."""
        if self.config.twilio and not self.config.insecure_dev and not request.headers.get(SIGNATURE_HEADER):
            self._check(request, "", {})  # unsigned: refused before a byte of the body is parsed
        try:
            async with asyncio.timeout(BODY_TIMEOUT_S):
                form = await request.post()
        except TimeoutError:
            log.info("POST %s from %s: the body did not come within %.0f s", request.path, request.remote,
                     BODY_TIMEOUT_S)
            raise web.HTTPRequestTimeout(text="the request body did not arrive in time\n") from None
        except ValueError as exc:  # what aiohttp's form and multipart parsers raise on a bad body
            log.info("POST %s from %s: malformed body: %.200s", request.path, request.remote, exc)
            raise web.HTTPBadRequest(text="malformed form body\n") from None
        params = {k: str(v) for k, v in form.items()}
        self._check(request, self._public(request, websocket=False), params)
        return params

    async def twilio_connect_done(self, request: web.Request) -> web.Response:
        """Twilio's ``<Connect action>`` callback, once a call's stream has ended: the hand-off its
        agent asked for (``<Enqueue>`` into a Flex workflow with the call's facts as the task's
        attributes, or ``<Dial>``), else ``<Hangup/>``."""
        params = await self._signed_form(request)
        call_sid = params.get("CallSid", "")
        transfer = self._handoffs.pop(call_sid, None)
        if transfer is None:
            return web.Response(text='<?xml version="1.0" encoding="UTF-8"?><Response><Hangup/></Response>',
                                content_type="application/xml")
        record = self.store.get(call_sid)
        handoff = handoff_of(record) if record is not None else None
        base = self._public(request, websocket=False).split("?")[0].removesuffix("/twilio/connect-done")
        attributes = {"parley_call_sid": call_sid, "reason": transfer.reason,
                      "summary": handoff.summary if handoff else "", "slots": handoff.slots if handoff else {},
                      "turns": handoff.turns if handoff else 0, "transcript_url": f"{base}/calls/{call_sid}"}
        try:
            twiml = handoff_twiml(transfer.kind, transfer.target, attributes)
        except TelephonyError as exc:
            log.error("[%s] hand-off to %s:%s impossible: %s; hanging up", call_sid, transfer.kind, transfer.target, exc)
            twiml = "<Response><Hangup/></Response>"
        log.info("[%s] handed to %s:%s on the stream's action callback", call_sid, transfer.kind, transfer.target)
        return web.Response(text='<?xml version="1.0" encoding="UTF-8"?>' + twiml, content_type="application/xml")

    def _answered_elsewhere(self, start) -> bool:
        """The stream carries a valid answer token: a server of this deployment (another one,
        behind the same proxy) answered its webhook within ``ANSWERED_TTL_S``; each token once here."""
        token = start.custom_parameters.get(ANSWER_PARAM, "")
        if not self.config.auth_token or not check_answer_token(self.config.auth_token, start.call_sid, token,
                                                                time.time(), ANSWERED_TTL_S):
            return False
        if token in self._tokens_seen:
            return False
        self._tokens_seen[token] = time.monotonic()
        while self._tokens_seen and time.monotonic() - next(iter(self._tokens_seen.values())) > ANSWERED_TTL_S:
            self._tokens_seen.popitem(last=False)
        return True

    async def twilio_dial_status(self, request: web.Request) -> web.Response:
        """Twilio's status callback (and its answering-machine one) on a call this server placed."""
        params = await self._signed_form(request)
        self.outbound.on_status(request.query.get("dial", ""), params)
        return web.Response(status=204)

    def handoff(self, call_sid: str, transfer: TransferCallFrame) -> None:
        """Keep ``transfer`` for the call's ``<Connect action>`` callback (a few minutes at most)."""
        self._handoffs[call_sid] = transfer
        while len(self._handoffs) > 10_000:
            self._handoffs.popitem(last=False)

    async def twilio_voice(self, request: web.Request) -> web.Response:
        params = await self._signed_form(request)
        refusal = self.admission()
        if refusal is not None:
            self.metrics.call_refused(refusal)
            return web.Response(text='<?xml version="1.0" encoding="UTF-8"?><Response><Reject reason="busy"/></Response>',
                                content_type="application/xml")
        call_sid = params.get("CallSid", "")
        if call_sid and call_sid not in self.live:  # its stream is due within ANSWERED_TTL_S; it holds a place
            self._answered[call_sid] = time.monotonic()
            self._answered.move_to_end(call_sid)
        stream_url = self._public(request, websocket=True).split("?")[0].removesuffix("/twilio/voice")
        stream_url += "/twilio/stream"
        # a call parley placed carries its parameters in the (signed) webhook URL: param.NAME=VALUE
        forward = params_from_query(request.query.items())
        forward |= {k: params[k] for k in ("CallSid", "From", "To", "Direction") if k in params}
        forward.pop(ANSWER_PARAM, None)
        if call_sid and self.config.auth_token:  # the stream may reach another server: it checks this
            forward[ANSWER_PARAM] = answer_token(self.config.auth_token, call_sid, time.time())
        # when the stream ends Twilio asks the action URL what next: a hand-off, or hang up
        action = self._public(request, websocket=False).split("?")[0].removesuffix("/twilio/voice")
        action += "/twilio/connect-done"
        twiml = stream_twiml(stream_url, action, forward)
        return web.Response(text=twiml, content_type="application/xml")

    async def call_record(self, request: web.Request) -> web.Response:
        self._check(request, self._public(request, websocket=False), {})
        sid = request.match_info["sid"]
        live = self.live.get(sid)
        if live is not None:
            live.sync()
        record = self.store.get(sid)
        if record is None:
            raise web.HTTPNotFound(text=f"no call {sid}\n")
        return web.json_response(record.to_dict())

    async def twilio_stream(self, request: web.Request) -> web.StreamResponse:
        self._check(request, self._public(request, websocket=True), {})
        if self.draining:
            self.metrics.call_refused("draining")
            raise web.HTTPServiceUnavailable(text="draining: not taking new calls\n")
        ws = web.WebSocketResponse(max_msg_size=WS_MAX_MESSAGE_BYTES, heartbeat=30.0)
        await ws.prepare(request)
        peer = str(request.remote)
        self._streams_starting += 1
        try:
            start = await read_start(ws, peer)
        except (ProtocolError, TimeoutError) as exc:
            log.warning("[%s] stream refused: %s", peer, exc or "no 'start' in time")
            await ws.close(code=WSCloseCode.UNSUPPORTED_DATA, message=b"refused: see the server log")
            return ws
        finally:
            self._streams_starting -= 1
        if self.warm_transfers.is_briefing(start):   # a warm transfer's call to the person
            await self.warm_transfers.take_briefing(ws, start, peer)
            return ws
        if start.call_sid in self.live:  # one record and one drain entry per call: no second stream
            log.warning("[%s] second stream for a live CallSid from %s refused", start.call_sid[:64], peer)
            self.metrics.call_refused("duplicate")
            await ws.close(code=WSCloseCode.POLICY_VIOLATION, message=b"this CallSid has a live stream")
            return ws
        self._forget_answered()
        answered_here = self._answered.pop(start.call_sid, None) is not None
        if not answered_here and not self._answered_elsewhere(start):
            if self._log_once_a_minute(f"unanswered:{peer}"):  # a replayed upgrade header, maybe: bounded
                log.warning("[%s] stream from %s refused: /twilio/voice did not answer this CallSid in the "
                            "last %.0f s (or its stream came already)", start.call_sid[:64], peer, ANSWERED_TTL_S)
            self.metrics.call_refused("unanswered")
            await ws.close(code=WSCloseCode.POLICY_VIOLATION, message=b"no call answered for this CallSid")
            return ws
        if self.config.insecure_dev:
            log.warning("[%s] call accepted WITHOUT signature check (insecure dev mode)", start.call_sid)
        placed = self.store.get(start.call_sid)  # a call we placed: its record holds how it was dialled
        ours = placed is not None and bool(placed.dial)
        call = TwilioCall(ws, start, agent_factory=self.agent_factory, pipeline_config=self.config.pipeline,
                          store=self.store, reraise=self.config.reraise_call_errors, metrics=self.metrics,
                          call_control=self.call_control, handoff=self.handoff,
                          answering_plans=self.answering_plans if ours else None,
                          warm_transfers=self.warm_transfers)
        if placed is not None and ours:
            call.record.dial = placed.dial
        self.live[call.call_sid] = call
        try:
            await call.run()
        finally:
            self.live.pop(call.call_sid, None)
        return ws


async def serve_forever(server: CallServer, sip: SipServer | None = None,
                        emf: EmfPublisher | None = None, webhooks: WebhookSender | None = None,
                        listening: Callable[[dict[str, int | None]], None] | None = None) -> None:
    """Serve until SIGTERM (drain, then stop) or SIGINT (stop); SIP beside HTTP when given; the
    call tier's CloudWatch metrics as EMF lines when ``emf`` is given; post-call webhooks sent from
    their outbox when ``webhooks`` is given (stopped after the calls). ``listening`` is told the
    bound ports (``{"http_port": p, "sip_port": q or None}``) once every socket listens and
    SIGTERM drains."""
    await server.start()
    emf_task = asyncio.create_task(emf.run(), name="emf") if emf is not None else None
    if webhooks is not None:
        await webhooks.start()
    if sip is not None:
        server.sip = sip
        sip.admit = server.admission  # one max_calls for every transport
        await sip.start()
    pauses = GcPauses()
    pauses.install()
    server.metrics.register_gc(pauses)
    # what start-up made lives as long as the process: out of the collector's way (gc_pauses)
    log.info("froze %d start-up objects out of garbage collection", freeze_startup_heap())
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()

    async def on_sigterm() -> None:
        drains = [server.drain()]
        if sip is not None:
            drains.append(sip.drain(server.config.drain_grace_s, server.config.shutdown_farewell))
        await asyncio.gather(*drains)
        stopping.set()

    drain_tasks: set[asyncio.Task] = set()

    def sigterm() -> None:
        if not server.draining:
            task = loop.create_task(on_sigterm())
            drain_tasks.add(task)
            task.add_done_callback(drain_tasks.discard)

    loop.add_signal_handler(signal.SIGTERM, sigterm)
    loop.add_signal_handler(signal.SIGINT, stopping.set)
    try:
        if listening is not None:  # only now: a SIGTERM the moment the ports are known drains
            listening({"http_port": server.port, "sip_port": sip.port if sip is not None else None})
        await stopping.wait()
    finally:
        pauses.uninstall()
        loop.remove_signal_handler(signal.SIGTERM)
        loop.remove_signal_handler(signal.SIGINT)
        if sip is not None:
            await sip.stop()
        await server.stop()
        if webhooks is not None:        # after the calls ended: their events are in the outbox
            await webhooks.stop()
        if emf_task is not None:        # after the calls ended: their last turns are in the flush
            emf_task.cancel()
            await asyncio.gather(emf_task, return_exceptions=True)
