"""The browser's way in: ``POST /api/offer``, ``PATCH /api/offer`` and the call page at ``/``.

Register on the call server's aiohttp application, next to the Twilio routes::

    gateway = register_webrtc_routes(app, agent_factory=..., pipeline_config=..., store=..., live=live)

Routes:
    GET   /                 the call page (telephony/static/index.html)
    GET   /static/{file}    its script and style sheet (no build step)
    POST  /api/offer        SmallWebRTC offer -> answer; starts the call's pipeline
    PATCH /api/offer        trickled ICE candidates for a peer connection we hold

The offer is answered once aiortc has gathered its own candidates (they are in the answer's
SDP; aiortc does not trickle). Each accepted offer becomes a :class:`WebRTCCall` run in a task
this gateway owns; ``close()`` (run on the application's shutdown) ends them all.

``/api/offer`` takes no credential: anyone who reaches the server can start a call. Bound the cost
with ``max_live_calls`` and put the page behind your own login before exposing it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web
from aiortc.exceptions import InternalError, InvalidAccessError, InvalidStateError, OperationError
from aiortc.sdp import candidate_from_sdp
from pipecat.transports.smallwebrtc.connection import SmallWebRTCConnection

from pipeline.builder import PipelineConfig
from pipeline.records import CallStore
from telephony.calls import AgentFactory
from telephony.core.supervisor import SHUTDOWN_REASON
from telephony.metrics import Metrics
from telephony.webrtc import ice
from telephony.webrtc.call import WebRTCCall
from telephony.webrtc.errors import SignalingError, UnknownPeerError
from telephony.webrtc.signaling import Answer, CandidatePatch, Offer, check_fingerprints

log = logging.getLogger(__name__)

STATIC_DIR = Path(__file__).resolve().parent.parent / "static"
STATIC_FILES = {"app.js": "text/javascript", "app.css": "text/css"}
OFFER_TIMEOUT_S = 10.0
# what aiortc's SDP parsing raises on a well-formed body with a broken SDP
SDP_ERRORS = (ValueError, AssertionError, IndexError, KeyError, TypeError, InternalError, InvalidAccessError,
              InvalidStateError, OperationError)  # e.g. no codec in common: OperationError
CONNECT_TIMEOUT_S = 20


@dataclass(frozen=True)
class WebRTCConfig:
    """How browser calls are taken.

    ice_host_addresses: the only addresses offered as ICE host candidates, process-wide
        (``ice.LOOPBACK`` in tests; a public address behind NAT); ``None`` offers every interface.
    ice_servers: STUN/TURN URLs handed to aiortc; none by default, so nothing is asked of the network.
    max_live_calls: offers beyond this many live calls are answered 503.
    """

    ice_host_addresses: tuple[str, ...] | None = None
    ice_servers: tuple[str, ...] = ()
    max_live_calls: int = 50
    serve_page: bool = True
    reraise_call_errors: bool = False  # tests: a call's failure propagates after clean-up

    def __post_init__(self):
        if self.max_live_calls < 1:
            raise SignalingError(f"max_live_calls must be at least 1, not {self.max_live_calls}")
        for url in self.ice_servers:
            if not url.startswith(("stun:", "turn:", "turns:")):
                raise SignalingError(f"ICE server URL must start with stun:, turn: or turns:, not {url!r}")


class WebRTCGateway:
    """Answers offers, holds the peer connections and runs their calls."""

    def __init__(self, *, agent_factory: AgentFactory, pipeline_config: PipelineConfig, store: CallStore,
                 config: WebRTCConfig | None = None, live: dict | None = None, metrics: Metrics | None = None,
                 admit: Callable[[], str | None] | None = None):
        self.config = config or WebRTCConfig()
        self.admit = admit  # the server's admission ("draining", "capacity" or None to take the call)
        self.metrics = metrics or Metrics()
        self.agent_factory = agent_factory
        self.pipeline_config = pipeline_config
        self.store = store
        self.live: dict = live if live is not None else {}  # shared with the server's /calls/{sid}
        self.calls: dict[str, WebRTCCall] = {}  # by pc_id, the name signaling uses
        self._tasks: set[asyncio.Task] = set()
        if self.config.ice_host_addresses is not None:
            ice.pin_host_addresses(self.config.ice_host_addresses)

    def routes(self) -> list[web.AbstractRouteDef]:
        table: list[web.AbstractRouteDef] = [web.post("/api/offer", self.offer), web.patch("/api/offer", self.patch)]
        if self.config.serve_page:
            table += [web.get("/", self.index), web.get("/static/{name}", self.static)]
        return table

    # -- the page ------------------------------------------------------------------------------

    async def index(self, request: web.Request) -> web.StreamResponse:
        return web.FileResponse(STATIC_DIR / "index.html", headers={"Cache-Control": "no-cache"})

    async def static(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        if name not in STATIC_FILES:  # a fixed list: no path ever reaches the file system
            raise web.HTTPNotFound(text="no such file\n")
        return web.FileResponse(STATIC_DIR / name, headers={"Cache-Control": "no-cache",
                                                            "Content-Type": STATIC_FILES[name]})

    # -- signaling -----------------------------------------------------------------------------

    async def _body(self, request: web.Request, parse):
        try:
            return parse(await request.read())
        except SignalingError as exc:
            log.warning("refused %s %s from %s: %s", request.method, request.path, request.remote, exc)
            raise web.HTTPBadRequest(text=f"{exc}\n") from exc

    async def offer(self, request: web.Request) -> web.Response:
        offer: Offer = await self._body(request, Offer.parse)
        if offer.pc_id is not None:
            # renegotiation of a call we hold (pipecat's clients do this on a track change)
            call = self.calls.get(offer.pc_id)
            if call is None:
                raise web.HTTPNotFound(text=f"{UnknownPeerError(offer.pc_id)}\n")
            if offer.restart_pc:
                raise web.HTTPBadRequest(text="restart_pc is not supported: place a new call\n")
            try:
                async with asyncio.timeout(OFFER_TIMEOUT_S):
                    await call.connection.renegotiate(sdp=self._remote_sdp(offer.sdp), type=offer.type)
            except (*SDP_ERRORS, TimeoutError) as exc:
                raise web.HTTPBadRequest(text=f"renegotiation refused: {exc or 'timed out'}\n") from exc
            return web.json_response(Answer(**self._answer(call.connection)).to_dict())
        refusal = self.admit() if self.admit is not None else None
        if refusal is None and len(self.calls) >= self.config.max_live_calls:
            refusal = "capacity"
        if refusal is not None:
            self.metrics.call_refused(refusal)
            raise web.HTTPServiceUnavailable(text=f"not taking calls now ({refusal})\n",
                                             headers={"Retry-After": "30"})
        try:
            check_fingerprints(offer.sdp)
        except SignalingError as exc:
            log.warning("refused an offer from %s: %s", request.remote, exc)
            raise web.HTTPBadRequest(text=f"{exc}\n") from exc
        connection = SmallWebRTCConnection(ice_servers=list(self.config.ice_servers) or None,
                                           connection_timeout_secs=CONNECT_TIMEOUT_S)
        try:
            async with asyncio.timeout(OFFER_TIMEOUT_S):
                await connection.initialize(sdp=self._remote_sdp(offer.sdp), type=offer.type)
        except (*SDP_ERRORS, TimeoutError) as exc:
            await connection.disconnect()
            log.warning("refused an offer from %s: %s", request.remote, exc)
            raise web.HTTPBadRequest(text=f"offer refused: {exc or 'timed out'}\n") from exc
        call = WebRTCCall(connection, agent_factory=self.agent_factory, pipeline_config=self.pipeline_config,
                          store=self.store, params={"remote": str(request.remote)},
                          reraise=self.config.reraise_call_errors, metrics=self.metrics)
        self._start(call)
        return web.json_response(Answer(**self._answer(connection)).to_dict())

    async def patch(self, request: web.Request) -> web.Response:
        patch: CandidatePatch = await self._body(request, CandidatePatch.parse)
        call = self.calls.get(patch.pc_id)
        if call is None:
            raise web.HTTPNotFound(text=f"{UnknownPeerError(patch.pc_id)}\n")
        for c in patch.candidates:
            if c.end_of_candidates:
                await call.connection.add_ice_candidate(None)
                continue
            if self._pinned() and ice.is_mdns_candidate(c.candidate):
                continue  # resolving it would multicast on the network (see ice.py)
            try:
                candidate = candidate_from_sdp(c.candidate)
            except (ValueError, IndexError) as exc:
                raise web.HTTPBadRequest(text=f"bad candidate: {exc}\n") from exc
            candidate.sdpMid = c.sdp_mid
            candidate.sdpMLineIndex = c.sdp_mline_index
            await call.connection.add_ice_candidate(candidate)
        return web.json_response({"status": "success"})

    def _pinned(self) -> bool:
        return ice.pinned_host_addresses() is not None

    def _remote_sdp(self, sdp: str) -> str:
        return ice.drop_mdns_candidates(sdp) if self._pinned() else sdp

    @staticmethod
    def _answer(connection: SmallWebRTCConnection) -> dict:
        answer = connection.get_answer()
        if answer is None:
            raise web.HTTPInternalServerError(text="no SDP answer\n")
        return answer

    # -- calls ---------------------------------------------------------------------------------

    def _start(self, call: WebRTCCall) -> None:
        self.calls[call.pc_id] = call
        self.live[call.call_sid] = call
        task = asyncio.create_task(self._run(call), name=f"webrtc-call-{call.call_sid}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, call: WebRTCCall) -> None:
        try:
            await call.run()
        finally:
            self.calls.pop(call.pc_id, None)
            self.live.pop(call.call_sid, None)

    async def close(self, _app: web.Application | None = None) -> None:
        """End every live call (the application's ``on_shutdown`` hook)."""
        for call in list(self.calls.values()):
            await call.hang_up(SHUTDOWN_REASON)
        if self._tasks:
            done, pending = await asyncio.wait(set(self._tasks), timeout=5.0)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            for task in done:
                error = None if task.cancelled() else task.exception()
                if error is not None and self.config.reraise_call_errors:
                    raise error


def register_webrtc_routes(app: web.Application, *, agent_factory: AgentFactory,
                           pipeline_config: PipelineConfig, store: CallStore,
                           config: WebRTCConfig | None = None, live: dict | None = None,
                           metrics: Metrics | None = None,
                           admit: Callable[[], str | None] | None = None) -> WebRTCGateway:
    """Add the browser routes to ``app`` and end their calls on its shutdown."""
    gateway = WebRTCGateway(agent_factory=agent_factory, pipeline_config=pipeline_config, store=store,
                            config=config, live=live, metrics=metrics, admit=admit)
    app.add_routes(gateway.routes())
    app.on_shutdown.append(gateway.close)
    return gateway
