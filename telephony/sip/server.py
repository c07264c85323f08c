"""The SIP user agent: one UDP socket for signalling, and the calls it answers.

::

    sip = SipServer(SipConfig(port=5060, allowed_networks=("203.0.113.0/24",)),
                    agent_factory, store=http_server.store, pipeline_config=PipelineConfig())
    port = await sip.start()     # binds UDP, starts REGISTER if configured
    result = await sip.dial(DialRequest("sip:alice@198.51.100.7"))   # a call out (telephony.sip.dialer)
    sip.answering_plans = plans  # CallInfo -> AnsweringPlan | None: dialled calls screened for a machine
    sip.draining = True          # new INVITEs get 503, live calls go on
    await sip.drain(grace_s, farewell)   # SIGTERM: draining, wait, then farewell + BYE for the rest
    await sip.stop()             # hangs up what is left (BYE), unregisters, closes the socket

Requests are checked in this order: parse (a datagram that does not parse is counted; a request
among them gets a 400 when enough of it is legible to answer), source allow-list (403),
retransmission (the cached response is sent again), :func:`~telephony.sip.checks.check_request`
(505, 400, 501/405, 416, 420, 415, 406), a request merged from another path (482), then by
method. An INVITE also meets: draining and capacity (503 with Retry-After: carriers fail over on
503, not on 486), digest auth when credentials are set (401), and an SDP offer with G.711 (488).
In-dialog requests go to their :class:`SipCall`. Responses carry ``received`` (and ``rport``
when asked, RFC 3581) in the top Via.

Transactions are the small RFC 3261 subset a UA on UDP needs: final responses are cached per
(branch, Via sent-by, method) (RFC 3261 17.2.3; an ACK matches its INVITE) and replayed to
retransmissions; our own requests are retransmitted from T1 doubling to T2 until a final
response; the 2xx to an INVITE is retransmitted until its ACK.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, replace

from pipeline.builder import PipelineConfig
from pipeline.frames import TransferCallFrame
from pipeline.records import CallRecord, CallStore, MemoryCallStore
from telephony.core.supervisor import SHUTDOWN_REASON, drain_calls
from telephony.sip.call import SipCall
from telephony.sip.checks import ALLOW, check_request, warning
from telephony.sip.config import SipConfig
from telephony.sip.dialer import DialedCall, DialRequest, DialResult, resolve_destination
from telephony.sip.digest import DigestServer
from telephony.sip.errors import DialError, SdpParseError, SipConfigError, SipError, SipParseError
from telephony.sip.headers import NameAddr, Via
from telephony.sip.media import MediaStats, RtpSession, is_ip, random_tag
from telephony.sip.message import SipRequest, SipResponse, parse_message, response_to, salvage_request, \
    sdp_body, with_received
from telephony.sip.register import Registration
from telephony.sip.sdp import Connection, SessionDescription, answer_offer, pending_media
from telephony.sip.warm import WarmTransfer
from telephony.log_limit import LogLimiter
from telephony.metrics import Metrics
from telephony.calls import AgentFactory, AnsweringPlanFactory

log = logging.getLogger(__name__)

T1_S = 0.5
T2_S = 4.0
_CACHE_SIZE = 2048
_REFUSAL_REASONS = {401: "sip-unauthorized", 403: "sip-forbidden", 488: "sip-no-codec"}
RETRY_AFTER_S = 30  # what a 503 (draining, full) tells the carrier: try another server, or this one later

_NO_DIALOG = warning("no dialog of this Call-ID and tags here")
TransactionKey = tuple[str, str, str]  # (branch, Via sent-by, method)


def new_call_id() -> str:
    """A Call-ID for a call we place."""
    return f"{random_tag()}{random_tag()}@parley"


@dataclass(frozen=True)
class EndedSipCall:
    """What the server keeps of an ended call (``SipServer.recent``)."""

    call_id: str
    history: list[str]
    record: CallRecord
    routes: list[str]
    stats: MediaStats
    end_reason: str | None

    @classmethod
    def of(cls, call: SipCall) -> EndedSipCall:
        return cls(call.call_id, list(call.history), call.record, list(call.routes), call.session.stats,
                   call.end_reason)


class SipServer(asyncio.DatagramProtocol):
    """Owns the signalling socket, the transaction tables and the live calls (a :class:`~telephony.sip.endpoint.SipEndpoint`)."""

    def __init__(self, config: SipConfig, agent_factory: AgentFactory, store: CallStore | None = None,
                 pipeline_config: PipelineConfig | None = None, metrics: Metrics | None = None):
        self.config = config
        self.metrics = metrics or Metrics()
        self.agent_factory = agent_factory
        self.store = store or MemoryCallStore()
        self.pipeline_config = pipeline_config or PipelineConfig()
        # dialled calls: what to do when a machine or nobody answers (None: the agent greets at once)
        self.answering_plans: AnsweringPlanFactory | None = None
        self.draining = False
        self.live: dict[str, SipCall] = {}
        self._answering: set[str] = set()  # Call-IDs whose INVITE is being set up
        # the process's admission (the call server's, beside HTTP): "draining", "capacity" or None
        self.admit: Callable[[], str | None] | None = None
        # the last 100 ended calls, newest last: what they were (history, record, media counts),
        # not the calls themselves, whose pipelines and buffers go when they end (a soak grew
        # ~1 MB per SIP call while the whole SipCall was kept here)
        self.recent: deque[EndedSipCall] = deque(maxlen=100)
        self.port: int | None = None
        self.bad_datagrams = 0
        self.refused: dict[int, int] = {}  # status -> count of requests refused with it
        self._digest = DigestServer(config.realm, dict(config.credentials)) if config.credentials else None
        self._transport: asyncio.DatagramTransport | None = None
        self._responses: OrderedDict[TransactionKey, tuple[SipResponse, tuple]] = OrderedDict()
        # (Call-ID, From tag, CSeq) of requests outside a dialog -> the (branch, sent-by) that
        # brought it first: the same request by another path is merged (482, RFC 3261 8.2.2.2)
        self._first_path: OrderedDict[tuple[str, str, str], tuple[str, str]] = OrderedDict()
        # our client transactions, by (branch, CSeq method) (RFC 3261 17.1.3: a CANCEL shares its
        # INVITE's branch): non-INVITE ones wait for a final answer, an INVITE's hears every answer
        self._pending: dict[tuple[str, str], asyncio.Future[SipResponse]] = {}
        self._listeners: dict[tuple[str, str], Callable[[SipResponse], None]] = {}
        self._tasks: set[asyncio.Task] = set()
        self._should_log_refusal = LogLimiter()  # one warning a minute per refused source
        self.errors: list[BaseException] = []  # call failures kept for stop() when reraise_call_errors
        self.registration: Registration | None = None
        self._register_task: asyncio.Task | None = None

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> int:
        loop = asyncio.get_running_loop()
        try:
            self._transport, _ = await loop.create_datagram_endpoint(
                lambda: self, local_addr=(self.config.host, self.config.port))
        except OSError as exc:  # in use, no such address: one line, not a traceback
            raise SipConfigError(f"cannot listen for SIP on udp://{self.config.host}:{self.config.port}: "
                                 f"{exc.strerror or exc}") from exc
        self.port = self._transport.get_extra_info("sockname")[1]
        log.info("SIP listening on udp://%s:%d (RTP %d-%d)", self.config.host, self.port,
                 self.config.rtp_port_min, self.config.rtp_port_max)
        if self.config.registration is not None:
            self.registration = Registration(self, self.config.registration)
            self._register_task = self._spawn(self.registration.run(), "register")
        return self.port

    async def drain(self, grace_s: float = 30.0, farewell: str = "I'm sorry, we have to end this call now. Goodbye.",
                    end_timeout_s: float = 15.0) -> None:
        """SIGTERM: new INVITEs get 503; live calls get ``grace_s`` to finish, then hear ``farewell`` and a BYE."""
        self.draining = True
        await drain_calls(lambda: self.live.values(), grace_s=grace_s, farewell=farewell,
                          end_timeout_s=end_timeout_s, what="SIP call")

    async def stop(self, timeout_s: float = 5.0) -> None:
        """Refuse new calls, hang up the live ones (BYE, all at once: a call whose caller never
        ACKed our 200 is not waited for), unregister, close the socket."""
        self.draining = True
        calls = list(self.live.values())
        for call in calls:
            call.end_transactions()
        await asyncio.gather(*(call.hang_up(SHUTDOWN_REASON) for call in calls))
        if self._register_task is not None:
            self._register_task.cancel()
            await asyncio.gather(self._register_task, return_exceptions=True)
            self._register_task = None
        if self.registration is not None:
            await self.registration.stop()
        if self._tasks:
            done, pending = await asyncio.wait(self._tasks, timeout=timeout_s)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        if self._transport is not None:
            self._transport.close()
            self._transport = None
        if self.errors:  # reraise_call_errors (tests): a call's failure surfaces here, after the clean-up
            raise self.errors[0]

    @property
    def calls_in_progress(self) -> int:
        """Live calls and those being set up."""
        return len(self.live) + len(self._answering)

    def _spawn(self, coro, name: str) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if task.cancelled() or task.exception() is None:
            return
        if self.config.reraise_call_errors:
            self.errors.append(task.exception())  # type: ignore[arg-type]
        else:
            log.error("SIP task %s failed: %r", task.get_name(), task.exception())

    # -- sending ------------------------------------------------------------------------------

    def send(self, message: SipRequest | SipResponse, addr: tuple[str, int]) -> None:
        if self._transport is not None:
            self._transport.sendto(bytes(message), addr)

    def respond(self, request: SipRequest, addr: tuple[str, int], status: int, reason: str | None = None, *,
                to_tag: str | None = None, headers: tuple = (), body: bytes = b"", refusal: str = "") -> SipResponse:
        """Answer ``request`` (final answers are cached for retransmissions; ``refusal`` names a refused call)."""
        new_call = request.method == "INVITE" and to_tag is None  # refused before any dialog existed
        if status >= 200 and to_tag is None:
            to_tag = random_tag()
        extra = tuple(headers) + (("User-Agent", "parley"),)
        if body:
            extra += (("Content-Type", "application/sdp"),)
        resp = response_to(with_received(request, addr), status, reason, to_tag=to_tag, headers=extra, body=body)
        self.send(resp, addr)
        key = self._key(request)
        if status >= 200 and key is not None:
            self._responses[key] = (resp, addr)
            while len(self._responses) > _CACHE_SIZE:
                self._responses.popitem(last=False)
        if status >= 300:
            self.refused[status] = self.refused.get(status, 0) + 1
            if new_call and status in _REFUSAL_REASONS and not refusal:
                refusal = _REFUSAL_REASONS[status]
            if refusal:
                self.metrics.call_refused(refusal)
        return resp

    def new_request(self, method: str, uri: str, *, call_id: str, from_: str, to: str, cseq: int,
                    headers: tuple = (), body: bytes = b"") -> SipRequest:
        via = Via(self._contact_host, self.port, "UDP", (("branch", "z9hG4bK" + os.urandom(8).hex()), ("rport", None)))
        base = (("Via", str(via)), ("Max-Forwards", "70"), ("From", from_), ("To", to), ("Call-ID", call_id),
                ("CSeq", f"{cseq} {method}"), ("Contact", f"<{self.contact_uri}>"), ("User-Agent", "parley"))
        return SipRequest(method=method, uri=uri, headers=base + tuple(headers), body=body)

    @property
    def _contact_host(self) -> str:
        ip = self.config.contact_ip
        return f"[{ip}]" if ":" in ip else ip

    @property
    def contact_uri(self) -> str:
        return f"sip:parley@{self._contact_host}:{self.port}"

    async def request(self, req: SipRequest, addr: tuple[str, int], timeout_s: float | None = None) -> SipResponse:
        """Send ``req`` (retransmitting T1..T2) until a final response; TimeoutError after ``timeout_s``."""
        key = (req.top_via.branch or "", req.method)
        fut: asyncio.Future[SipResponse] = asyncio.get_running_loop().create_future()
        self._pending[key] = fut
        interval = T1_S
        try:
            async with asyncio.timeout(timeout_s or self.config.request_timeout_s):
                while True:
                    self.send(req, addr)
                    done, _ = await asyncio.wait({fut}, timeout=interval)
                    if done:
                        return fut.result()
                    interval = min(interval * 2, T2_S)
        finally:
            self._pending.pop(key, None)

    def listen(self, req: SipRequest, callback: Callable[[SipResponse], None] | None) -> None:
        """Hand every response to ``req`` (an INVITE we sent: provisional, final and the 2xx
        retransmissions) to ``callback``; None stops it. The sender retransmits by itself."""
        key = (req.top_via.branch or "", req.method)
        if callback is None:
            self._listeners.pop(key, None)
        else:
            self._listeners[key] = callback

    # -- placing calls ------------------------------------------------------------------------

    async def dial(self, request: DialRequest, call_id: str | None = None, *,
                   make_call: Callable[..., DialedCall] = DialedCall) -> DialResult:
        """Place one call (:mod:`telephony.sip.dialer`) and run it to its end; its record is kept
        as an inbound call's is, under ``call_id`` (default: a fresh Call-ID). DialError when it
        cannot be placed at all (a host that does not resolve, no RTP port, the server full or
        draining). ``make_call``: the call's class (a warm transfer's leg to the person runs no agent)."""
        if self.calls_in_progress >= self.config.max_calls:
            raise DialError(f"at capacity ({self.config.max_calls} calls)")
        dest = await resolve_destination(request)
        call_id = call_id or new_call_id()
        session = RtpSession(call_id, pending_media(self.config.codecs), allowed_sources={dest[0]},
                             jitter_depth=self.config.jitter_depth_packets)
        try:
            await session.open(self.config.host, self.config.rtp_port_min, self.config.rtp_port_max)
        except SipError as exc:
            raise DialError(str(exc)) from exc
        call = make_call(self, request, dest, session, call_id)
        self.live[call_id] = call
        try:
            await call.run()
        finally:
            self.live.pop(call_id, None)
            self.recent.append(EndedSipCall.of(call))
            session.close()
        return call.result()

    async def warm_transfer(self, call: SipCall, frame: TransferCallFrame) -> None:
        """Call the person, brief them, bridge them to ``call`` (:mod:`telephony.sip.warm`)."""
        transfer = WarmTransfer(call, frame, self.dial)
        call.warm = transfer
        await transfer.run()

    # -- receiving ----------------------------------------------------------------------------

    def datagram_received(self, data: bytes, addr) -> None:
        addr = (addr[0], addr[1])
        if not data.strip(b"\r\n"):
            return  # a CRLF keep-alive (RFC 5626)
        try:
            msg = parse_message(data)
        except SipParseError as exc:
            self.bad_datagrams += 1
            self._on_unparsable(data, addr, exc)
            return
        if isinstance(msg, SipResponse):
            self._on_response(msg)
            return
        try:
            self._on_request(msg, addr)
        except SipParseError as exc:  # a header we needed turned out malformed
            self.bad_datagrams += 1
            log.info("bad %s from %s: %s", msg.method, addr[0], exc)
            if msg.method != "ACK":
                self.respond(msg, addr, 400, "Bad Request", headers=warning(str(exc)))

    def _on_unparsable(self, data: bytes, addr: tuple[str, int], exc: SipParseError) -> None:
        """A request that does not parse gets a 400 saying why, if enough of it is legible to
        answer (Via, the dialog headers) and its source may be answered at all; else nothing."""
        request = salvage_request(data)
        if request is None or not self.config.source_allowed(addr[0]):
            log.debug("bad SIP datagram from %s dropped: %s", addr[0], exc)
            return
        if self._should_log_refusal(addr[0]):
            log.info("malformed %s from %s answered 400: %s", request.method[:20], addr[0], exc)
        self.respond(request, addr, 400, "Bad Request", headers=warning(str(exc)))

    def error_received(self, exc: Exception) -> None:
        log.debug("SIP socket error: %s", exc)

    @staticmethod
    def _key(req: SipRequest) -> TransactionKey | None:
        """RFC 3261 17.2.3: branch, sent-by and method (an ACK belongs to its INVITE); None for an
        RFC 2543 peer (no magic cookie), whose requests are not cached."""
        try:
            via = req.top_via
        except SipParseError:
            return None
        branch = via.transaction_id
        if branch is None:
            return None
        return branch, via.sent_by, "INVITE" if req.method == "ACK" else req.method

    def _merged(self, req: SipRequest) -> bool:
        """The same request (Call-ID, From tag, CSeq) arrived before along another path."""
        if req.method == "ACK" or NameAddr.parse(req.header("to") or "").tag is not None:
            return False
        via = req.top_via
        path = (via.branch or "", via.sent_by)
        key = (req.call_id, NameAddr.parse(req.header("from") or "").tag or "", req.header("cseq") or "")
        first = self._first_path.setdefault(key, path)
        while len(self._first_path) > _CACHE_SIZE:
            self._first_path.popitem(last=False)
        return first != path

    def _on_response(self, resp: SipResponse) -> None:
        try:
            key = (resp.top_via.branch or "", resp.cseq[1])
        except SipParseError:
            self.bad_datagrams += 1
            return
        listener = self._listeners.get(key)
        if listener is not None:
            listener(resp)
            return
        fut = self._pending.get(key)
        if fut is not None and not fut.done() and resp.status >= 200:
            fut.set_result(resp)
        elif resp.status >= 200 and fut is None:
            call = self.live.get(resp.header("call-id") or "")
            if call is not None:
                call.on_stray_response(resp)

    def _on_request(self, req: SipRequest, addr: tuple[str, int]) -> None:
        if not self.config.source_allowed(addr[0]):
            if self._should_log_refusal(addr[0]):
                log.warning("refused %s from %s: not in the allowed networks", req.method, addr[0])
            if req.method != "ACK":
                self.respond(req, addr, 403, "Forbidden")
            return
        key = self._key(req)
        if key is not None and key in self._responses and req.method != "ACK":
            resp, to = self._responses[key]
            self.send(resp, to)  # a retransmission: answer it the same way again
            return
        refusal = check_request(req)
        if refusal is not None:
            if self._should_log_refusal(addr[0]):
                log.info("%s from %s refused %d: %s", req.method[:20], addr[0], refusal.status, refusal.detail)
            if req.method != "ACK":
                self.respond(req, addr, refusal.status, headers=refusal.headers + warning(refusal.detail))
            return
        if self._merged(req):
            self.respond(req, addr, 482, headers=warning("this request arrived before by another path"))
            return
        call = self.live.get(req.call_id)
        method = req.method
        if call is not None and not call.matches(req):
            if method == "INVITE" and not NameAddr.parse(req.header("to") or "").tag:
                self.respond(req, addr, 482, "Loop Detected")  # same Call-ID, not our dialog
            elif method != "ACK":
                self.respond(req, addr, 481, headers=_NO_DIALOG)
            return
        if method == "INVITE":
            if call is None and req.call_id in self._answering:
                self.respond(req, addr, 100)  # a retransmission while its call is being set up
                return
            if call is not None and NameAddr.parse(req.header("to") or "").tag is None:
                call.on_invite_retransmitted(req, addr)
            elif call is not None:
                call.on_reinvite(req, addr)
            else:
                self._on_invite(req, addr)
        elif method == "OPTIONS" and (self.draining or (self.admit is not None and self.admit() == "draining")):
            # a dispatcher's keep-alive (Kamailio's ds_ping): a draining server answers 503, so the
            # dispatcher marks it inactive and sends new calls elsewhere while its live ones finish
            self.respond(req, addr, 503, headers=(("Retry-After", str(RETRY_AFTER_S)), ("Allow", ALLOW),
                                                  *warning("draining: not taking new calls")))
        elif method == "OPTIONS":
            self.respond(req, addr, 200, headers=(("Allow", ALLOW), ("Accept", "application/sdp"),
                                                  ("Accept-Encoding", "identity"), ("Accept-Language", "en")))
        elif method == "ACK":
            if call is not None:
                call.on_ack(req)
        elif call is None:
            self.respond(req, addr, 481, headers=_NO_DIALOG)
        elif method == "CANCEL":
            call.on_cancel(req, addr)
        elif method == "BYE":
            call.on_bye(req, addr)
        elif method == "NOTIFY":
            call.on_notify(req, addr)
        else:
            self.respond(req, addr, 405, headers=(("Allow", ALLOW),))


    def _on_invite(self, req: SipRequest, addr: tuple[str, int]) -> None:
        shared = self.admit() if self.admit is not None else None  # the process's, beside HTTP
        if self.draining or shared == "draining":
            self.respond(req, addr, 503, headers=(("Retry-After", str(RETRY_AFTER_S)),), refusal="draining")
            return
        if shared == "capacity" or self.calls_in_progress >= self.config.max_calls:  # set-up calls count
            if self._should_log_refusal(f"full:{addr[0]}"):
                log.warning("INVITE from %s refused 503: %d calls, the most this server takes", addr[0],
                            self.config.max_calls)
            self.respond(req, addr, 503, headers=(("Retry-After", str(RETRY_AFTER_S)),) +
                         warning(f"at capacity ({self.config.max_calls} calls)"), refusal="capacity")
            return
        if NameAddr.parse(req.header("to") or "").tag:  # in-dialog INVITE for a call we do not know
            self.respond(req, addr, 481, headers=_NO_DIALOG)
            return
        if self._digest is not None:
            credentials = req.header("authorization")
            if self._digest.verify("INVITE", credentials, req.uri) is None:
                if credentials:
                    log.warning("INVITE from %s: digest credentials refused", addr[0])
                self.respond(req, addr, 401, headers=(("WWW-Authenticate", str(self._digest.challenge())),))
                return
        offer: SessionDescription | None = None  # none: a delayed offer, ours goes in the 200
        if req.body:
            try:
                offer = SessionDescription.parse(sdp_body(req))
            except SdpParseError as exc:
                log.info("INVITE from %s without a usable SDP offer: %s", addr[0], exc)
                self.respond(req, addr, 488, headers=warning(str(exc)))
                return
            if answer_offer(offer, self.config.contact_ip, 0, codecs=self.config.codecs) is None:
                self.respond(req, addr, 488, headers=warning("no G.711 audio (PCMU/PCMA at 8 kHz) offered"))
                return
        self.respond(req, addr, 100)
        # Regression guard: an INVITE and its retransmission arriving together once started two
        # calls for one Call-ID; the Call-ID is claimed here, before anything is awaited.
        self._answering.add(req.call_id)
        self._spawn(self._answer(req, addr, offer), f"sip-call-{req.call_id}")

    async def _answer(self, req: SipRequest, addr: tuple[str, int], offer: SessionDescription | None) -> None:
        if offer is not None:
            try:
                offer = await _resolved(offer)
            except SipError as exc:
                self._answering.discard(req.call_id)
                log.info("INVITE %s refused: %s", req.call_id, exc)
                self.respond(req, addr, 488, headers=warning(str(exc)))
                return
            _, media = answer_offer(offer, self.config.contact_ip, 0, codecs=self.config.codecs)  # type: ignore[misc]
        else:
            media = pending_media(self.config.codecs)
        session = RtpSession(req.call_id, media, allowed_sources={addr[0]},
                             jitter_depth=self.config.jitter_depth_packets)
        try:
            await session.open(self.config.host, self.config.rtp_port_min, self.config.rtp_port_max)
        except SipError as exc:
            self._answering.discard(req.call_id)
            log.error("INVITE %s refused: %s", req.call_id, exc)
            self.respond(req, addr, 503, refusal="sip-no-rtp-port")
            return
        try:
            call = SipCall(self, req, addr, offer, session)
            self.live[call.call_id] = call
        finally:
            self._answering.discard(req.call_id)
        try:
            await call.run()
        finally:
            self.live.pop(call.call_id, None)
            self.recent.append(EndedSipCall.of(call))
            session.close()


async def _resolved(offer: SessionDescription, timeout_s: float = 2.0) -> SessionDescription:
    """``offer`` with a host name in its audio's c= resolved once, off the event loop (asyncio
    would otherwise resolve it, blocking, for every RTP packet sent). SipError when it does not
    resolve in ``timeout_s``."""
    m = offer.audio()
    conn = offer.connection_of(m) if m is not None else None
    if m is None or conn is None or conn.is_hold or is_ip(conn.address):
        return offer
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(timeout_s):
            infos = await loop.getaddrinfo(conn.address, m.port, type=socket.SOCK_DGRAM,
                                           family=socket.AF_INET6 if conn.addrtype == "IP6" else socket.AF_INET)
    except (OSError, TimeoutError) as exc:
        raise SipError(f"the SDP's media host {conn.address[:60]!r} does not resolve") from exc
    ip = str(infos[0][4][0])
    resolved = Connection(ip, conn.addrtype, conn.nettype)
    media = tuple(replace(x, connection=resolved) if x is m and x.connection is not None else x for x in offer.media)
    return replace(offer, media=media, connection=resolved if m.connection is None else offer.connection)

