"""One SIP call, from INVITE to BYE: the dialog and the per-call supervisor.

States: ``ringing`` (180 sent, CANCEL possible) -> ``answered`` (200 + SDP sent, retransmitted
until ACK, pipeline running) -> ``ended``. ``history`` keeps every step (``ringing``,
``answered``, ``acked``, ``hold``, ``resumed``, ``refer-sent``, ``transferred``, ``bye-received``,
``bye-sent``, ``cancelled``, ``ended``) so tests can assert the whole exchange.

The supervisor is the only catch-all in the call path: whatever breaks inside a call is logged
with its call id and traceback, the call ends cleanly (BYE sent, RTP closed, record kept), and
the server goes on. With ``reraise_call_errors`` (tests) the error propagates after the clean-up.
"""

from __future__ import annotations

import asyncio
import logging
import random
from enum import Enum
from typing import TYPE_CHECKING

from pipecat.frames.frames import EndFrame, TTSSpeakFrame
from pipecat.workers.runner import WorkerRunner

from pipeline.builder import build_pipeline
from pipeline.frames import TransferCallFrame
from pipeline.records import CallRecord
from telephony.callbook import CallBook
from telephony.sip.errors import SdpParseError, SipParseError
from telephony.sip.headers import NameAddr
from telephony.sip.media import RtpSession, random_tag
from telephony.sip.message import SipRequest, SipResponse
from telephony.sip.sdp import SessionDescription, answer_offer
from telephony.sip.transport import SipTransport
from telephony.calls import CallInfo

if TYPE_CHECKING:
    from telephony.sip.server import SipServer

log = logging.getLogger(__name__)


class CallState(Enum):
    RINGING = "ringing"
    ANSWERED = "answered"
    ENDED = "ended"


class SipCall:
    """Runs one call's pipeline over its RTP session and keeps its dialog and record."""

    def __init__(self, server: "SipServer", invite: SipRequest, addr: tuple[str, int],
                 offer: SessionDescription, session: RtpSession):
        self.server = server
        self.config = server.config
        self.invite = invite
        self.addr = addr
        self.call_id = invite.call_id
        self.session = session
        self.state = CallState.RINGING
        self.history: list[str] = []
        self.local_tag = random_tag()
        self.remote = NameAddr.parse(invite.header("from") or "")
        self.local = NameAddr.parse(invite.header("to") or "").with_tag(self.local_tag)
        contact = invite.header("contact")
        try:
            target = NameAddr.parse(contact).sip_uri if contact else None
        except SipParseError:
            target = None
        self.remote_target = str(target) if target else self.remote.uri
        self.remote_addr = target.address if target else addr
        self.routes = invite.headers_named("record-route")
        self.local_cseq = 0
        self.sdp_version = 0
        self._sdp_session_id = random.getrandbits(32)
        self.end_reason: str | None = None
        self._offer = offer
        self._answer_body = b""
        self._acked = asyncio.Event()
        self._cancelled = asyncio.Event()
        self._notify: asyncio.Future[int] | None = None
        self._worker = None
        self._reason_when_done: str | None = None
        self._bye_started = False
        self._tasks: set[asyncio.Task] = set()
        self.record = CallRecord(call_sid=self.call_id, transport="sip",
                                 params={"from": self.remote.uri, "to": self.local.uri})
        self.transport = SipTransport(session, on_transfer=self._on_transfer)
        self.book = CallBook(self.record, server.store, server.metrics, tracker=self.transport.tracker,
                             frames=session.stats.frames, stats=session.stats.as_dict)
        self.latency = self.book.observe(self.transport.output())

    def _step(self, name: str) -> None:
        self.history.append(name)
        log.debug("[%s] %s", self.call_id, name)

    # -- the call -----------------------------------------------------------------------------

    async def run(self) -> None:
        log.info("[%s] SIP call from %s (codec %s)", self.call_id, self.addr[0], self.session.media.codec.name)
        self.server.respond(self.invite, self.addr, 180, to_tag=self.local_tag)
        self._step("ringing")
        try:
            if self.config.ring_s > 0:
                try:
                    async with asyncio.timeout(self.config.ring_s):
                        await self._cancelled.wait()
                except TimeoutError:
                    pass
            if self._cancelled.is_set():
                self.end_reason = "caller cancelled"
                return
            self._send_answer(self.invite, self._offer)
            self.state = CallState.ANSWERED
            self._step("answered")
            self.book.started()
            await self._run_pipeline()
        except asyncio.CancelledError:
            self.end_reason = self.end_reason or "server shutting down"
            raise
        except Exception as exc:  # the per-call supervisor: log, end cleanly, keep the record
            self.end_reason = f"error: {type(exc).__name__}: {exc}"
            self.record.errors.append(self.end_reason)
            log.exception("[%s] call failed; ending it cleanly", self.call_id)
            if self.config.reraise_call_errors:
                raise
        finally:
            await self._finish()

    async def _run_pipeline(self) -> None:
        agent = self.server.agent_factory(CallInfo(self.call_id, "sip", dict(self.record.params)))
        built = build_pipeline(self.transport, agent, self.server.pipeline_config, observers=[self.latency])
        self._worker = built.worker
        if self.end_reason is not None:  # hung up while the pipeline was being built
            return
        runner = WorkerRunner(handle_sigint=False)
        await runner.add_workers(built.worker)
        await runner.run()
        if self.end_reason is None:  # the pipeline ended by itself: the agent (or end_politely) hung up
            self.end_reason = self._reason_when_done or "agent ended the call"
            await self._send_bye()

    async def _finish(self) -> None:
        if self.state is CallState.ANSWERED:
            await asyncio.shield(self._send_bye())  # a no-op when a BYE already went either way
        self.state = CallState.ENDED
        self._step("ended")
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.session.close()
        self.book.ended(self.end_reason or "ended")
        log.info("[%s] SIP call ended: %s (%d turns, %d RTP in, %d out, %d bad)", self.call_id,
                 self.record.end_reason, len(self.record.turns), self.session.stats.packets_in,
                 self.session.stats.packets_out, self.session.stats.bad_packets)

    async def hangup(self, reason: str) -> None:
        """End the call from our side (BYE when answered, 487 when still ringing)."""
        if self.state is CallState.ENDED or self.end_reason is not None:
            return
        self.end_reason = reason
        if self.state is CallState.RINGING:
            self.server.respond(self.invite, self.addr, 487, to_tag=self.local_tag)
            self._cancelled.set()
            return
        await self._send_bye()
        await self._stop_worker(reason)

    async def end_politely(self, farewell: str, reason: str = "server shutting down") -> None:
        """Say ``farewell`` after what is playing, then BYE (SIGTERM's drain). Still ringing: 487."""
        if self.state is CallState.RINGING or self._worker is None:
            await self.hangup(reason)
            return
        if self.end_reason is None:
            log.info("[%s] ending the call: %s", self.call_id, reason)
            self._reason_when_done = reason
            await self._worker.queue_frames([TTSSpeakFrame(farewell), EndFrame()])

    async def _stop_worker(self, reason: str) -> None:
        if self._worker is not None:
            await self._worker.cancel(reason=reason)

    # -- signalling from the caller -----------------------------------------------------------

    def _send_answer(self, request: SipRequest, offer: SessionDescription) -> bool:
        settled = answer_offer(offer, self.config.contact_ip, self.session.port or 0, codecs=self.config.codecs,
                               session_id=self._sdp_session_id, session_version=self.sdp_version)
        if settled is None:
            self.server.respond(request, self.addr, 488, to_tag=self.local_tag)
            return False
        answer, media = settled
        self.sdp_version += 1
        was_on_hold = self.session.media.on_hold
        self.session.update(media)
        if self.state is CallState.ANSWERED and media.on_hold != was_on_hold:
            self._step("hold" if media.on_hold else "resumed")
        self._answer_body = bytes(answer)
        resp = self.server.respond(request, self.addr, 200, to_tag=self.local_tag, body=self._answer_body,
                                   headers=(("Contact", f"<{self.server.contact_uri}>"),
                                            ("Allow", "INVITE, ACK, BYE, CANCEL, OPTIONS, REFER, NOTIFY")))
        self._acked.clear()
        self._spawn(self._retransmit_until_ack(resp))
        return True

    def _spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _retransmit_until_ack(self, resp: SipResponse) -> None:
        interval, waited = 0.5, 0.0
        while waited < self.config.no_ack_timeout_s:
            try:
                async with asyncio.timeout(interval):
                    await self._acked.wait()
                return
            except TimeoutError:
                waited += interval
                self.server.send(resp, self.addr)
                interval = min(interval * 2, 4.0)
        log.warning("[%s] no ACK for our 200 OK in %.0f s: hanging up", self.call_id, waited)
        self._acked.set()  # the transaction gave up: the BYE need not wait for it any more
        await self.hangup("no ACK")

    def matches(self, req: SipRequest) -> bool:
        """Whether ``req`` belongs to this dialog: the caller's From tag, and our To tag once answered.

        A retransmitted INVITE and the CANCEL carry no To tag; an ACK for a 487 carries ours.
        """
        from_tag = NameAddr.parse(req.header("from") or "").tag
        to_tag = NameAddr.parse(req.header("to") or "").tag
        if from_tag != self.remote.tag:
            return False
        if req.method in ("CANCEL", "INVITE", "ACK") and to_tag is None:
            return True
        return to_tag == self.local_tag

    def on_ack(self, _req: SipRequest) -> None:
        if not self._acked.is_set() and self.state is CallState.ANSWERED:
            self._acked.set()
            self._step("acked")

    def on_invite_retransmitted(self, req: SipRequest, addr: tuple[str, int]) -> None:
        """The caller did not hear our 180 yet (the final answer, once sent, is replayed from the cache)."""
        if self.state is CallState.RINGING:
            self.server.respond(req, addr, 180, to_tag=self.local_tag)

    def on_reinvite(self, req: SipRequest, addr: tuple[str, int]) -> None:
        if self.state is not CallState.ANSWERED:
            self.server.respond(req, addr, 491 if self.state is CallState.RINGING else 481, to_tag=self.local_tag)
            return
        try:
            offer = SessionDescription.parse(req.body) if req.body else self._offer
        except SdpParseError:
            self.server.respond(req, addr, 488, to_tag=self.local_tag)
            return
        self._offer = offer
        self._send_answer(req, offer)

    def on_cancel(self, req: SipRequest, addr: tuple[str, int]) -> None:
        self.server.respond(req, addr, 200, to_tag=self.local_tag)
        if self.state is CallState.RINGING and not self._cancelled.is_set():
            self.server.respond(self.invite, self.addr, 487, to_tag=self.local_tag)
            self._step("cancelled")
            self.end_reason = "caller cancelled"
            self._cancelled.set()

    def on_bye(self, req: SipRequest, addr: tuple[str, int]) -> None:
        self.server.respond(req, addr, 200, to_tag=self.local_tag)
        self._step("bye-received")
        if self.end_reason is None:
            self.end_reason = "caller hung up (BYE)"
        self._cancelled.set()
        if self._worker is not None:
            self._spawn(self._stop_worker(self.end_reason))

    def on_notify(self, req: SipRequest, addr: tuple[str, int]) -> None:
        """Progress of a transfer we asked for (REFER): the body is a sipfrag status line."""
        self.server.respond(req, addr, 200, to_tag=self.local_tag)
        line = req.body.split(b"\r\n", 1)[0].decode("utf-8", "replace").split(" ")
        code = line[1] if len(line) >= 2 else ""
        if len(code) == 3 and code.isascii() and code.isdigit() and self._notify is not None \
                and not self._notify.done():
            status = int(code)
            if status >= 200:
                self._notify.set_result(status)

    def on_stray_response(self, resp: SipResponse) -> None:
        log.debug("[%s] stray %d response ignored", self.call_id, resp.status)

    # -- requests we send ---------------------------------------------------------------------

    def _in_dialog(self, method: str, headers: tuple = (), body: bytes = b"") -> SipRequest:
        self.local_cseq += 1
        routes = tuple(("Route", r) for r in self.routes)
        return self.server.new_request(method, self.remote_target, call_id=self.call_id, from_=str(self.local),
                                       to=str(self.remote), cseq=self.local_cseq, headers=routes + tuple(headers),
                                       body=body)

    async def _send_bye(self) -> None:
        if self._bye_started or "bye-received" in self.history:
            return
        self._bye_started = True
        try:  # RFC 3261 15: not before the ACK of our 2xx (or the retransmissions gave up)
            async with asyncio.timeout(self.config.no_ack_timeout_s):
                await self._acked.wait()
        except TimeoutError:
            pass
        self._step("bye-sent")
        try:
            resp = await self.server.request(self._in_dialog("BYE"), self.remote_addr)
            log.info("[%s] BYE answered %d", self.call_id, resp.status)
        except TimeoutError:
            log.warning("[%s] BYE unanswered", self.call_id)

    async def _on_transfer(self, frame: TransferCallFrame) -> None:
        if frame.kind == "enqueue":
            self.record.errors.append("transfer: 'enqueue' is a Twilio Flex workflow, not a SIP target")
            log.warning("[%s] cannot enqueue over SIP; transfer ignored", self.call_id)
            return
        target = frame.target if frame.target.startswith(("sip:", "sips:", "tel:")) else \
            f"sip:{frame.target}@{self.remote_addr[0]}"
        self._spawn(self._refer(target))

    async def _refer(self, target: str) -> None:
        self._step("refer-sent")
        self._notify = asyncio.get_running_loop().create_future()
        req = self._in_dialog("REFER", (("Refer-To", f"<{target}>"), ("Referred-By", f"<{self.local.uri}>")))
        try:
            resp = await self.server.request(req, self.remote_addr)
            if resp.status >= 300:
                raise RuntimeError(f"REFER refused: {resp.status} {resp.reason}")
            async with asyncio.timeout(self.config.transfer_timeout_s):
                status = await self._notify
            if status >= 300:
                raise RuntimeError(f"transfer failed: {status}")
        except (TimeoutError, RuntimeError) as exc:
            reason = str(exc) or "transfer timed out"
            self.record.errors.append(f"transfer to {target}: {reason}")
            log.warning("[%s] transfer to %s failed (%s); the call goes on", self.call_id, target, reason)
            return
        self._step("transferred")
        self.end_reason = f"transferred to {target}"
        await self._send_bye()
        await self._stop_worker(self.end_reason)

    # -- the record ---------------------------------------------------------------------------

    def sync(self) -> None:
        """Bring the record up to date (turns, words said and heard, RTP and frame counters)."""
        self.book.sync()
