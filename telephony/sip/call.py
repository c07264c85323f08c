"""One SIP call, from INVITE to BYE: the dialog, and the SIP edge of the call core.

States: ``ringing`` (180 sent, CANCEL possible) -> ``answered`` (200 + SDP sent, retransmitted
until ACK, pipeline running) -> ``ended``. ``history`` keeps every step (``ringing``,
``answered``, ``acked``, ``hold``, ``resumed``, ``refer-sent``, ``transferred``, ``bye-received``,
``bye-sent``, ``cancelled``, ``ended``; a warm transfer adds ``warm-transfer``,
``transfer-answered``, ``transfer-briefing`` and ``transfer-joined`` or ``transfer-no-answer`` /
``transfer-failed``) so tests can assert the whole exchange.

The call's life (the agent, the pipeline, the one catch-all, the record) is the
:class:`~telephony.core.supervisor.CallSupervisor`'s; this edge answers (ringing, CANCEL), hangs
up (BYE when answered, 487 while ringing), transfers (REFER; a warm transfer is
:mod:`telephony.sip.warm`'s, and a joined call stays up until either leg hangs up), and closes (BYE if none went
either way, RTP closed). It talks to the user agent through :class:`~telephony.sip.endpoint.SipEndpoint`.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from dataclasses import replace
from urllib.parse import urlencode
from enum import Enum
from typing import ClassVar, Protocol

from pipeline.frames import TransferCallFrame
from telephony.core.supervisor import CallSupervisor
from telephony.handoff import handoff_of
from telephony.sip.checks import ALLOW, warning
from telephony.sip.endpoint import Address, SipEndpoint
from telephony.sip.errors import SdpParseError, SipParseError, TransferError
from telephony.sip.headers import NameAddr, SipUri, split_commas
from telephony.sip.media import RtpSession, is_ip, random_tag
from telephony.sip.message import SipRequest, SipResponse, sdp_body
from telephony.sip.sdp import SessionDescription, accept_answer, answer_offer, make_offer
from telephony.sip.transport import SipTransport

log = logging.getLogger(__name__)


CONTEXT_HEADERS = 32


def header_text(text: str, limit: int = 200) -> str:
    """``text`` as a SIP header value: one line of printable characters, at most ``limit`` long."""
    clean = "".join(c if c.isprintable() else " " for c in text).strip()
    return clean[:limit] or "-"


def context_params(invite: SipRequest) -> dict[str, str]:
    """What a contact centre sends along with the call (Amazon Connect's ``X-`` headers, such as
    the contact id and attributes, and ``User-to-User``), as the call's parameters for the agent:
    ``x_amzn_contactid``, ``uui`` (at most ``CONTEXT_HEADERS`` of them, values cut at 256)."""
    out: dict[str, str] = {}
    for name, value in invite.headers:
        key = name.lower()
        if key.startswith("x-") and len(out) < CONTEXT_HEADERS:
            out["x_" + key[2:].replace("-", "_")[:60]] = value[:256]
    uui = invite.header("User-to-User")
    if uui:
        out["uui"] = uui[:256]
    return out


class WarmTransferLeg(Protocol):
    """A warm transfer's leg to the person, as the caller's call holds it (:mod:`telephony.sip.warm`)."""

    @property
    def joined(self) -> bool: ...

    async def bridged(self, hung_up: asyncio.Event) -> str:
        """Until either side leaves the bridge (``hung_up``: the caller did); why it ended."""
        ...

    async def close(self, reason: str) -> None:
        """The caller's call is over: hang up the person's leg if it is still up."""
        ...


class CallState(Enum):
    RINGING = "ringing"
    ANSWERED = "answered"
    ENDED = "ended"


class SipCall(CallSupervisor):
    """Runs one call's pipeline over its RTP session and keeps its dialog and record."""

    transport_name = "sip"
    far_end: ClassVar[str] = "caller"  # who the other side is, in end reasons

    def __init__(self, server: SipEndpoint, invite: SipRequest, addr: Address,
                 offer: SessionDescription | None, session: RtpSession, *, params: dict[str, str] | None = None):
        self.server = server
        self.config = server.config
        self.invite = invite
        self.addr = addr
        self.session = session
        self.state = CallState.RINGING
        self.history: list[str] = []
        self.local_tag = random_tag()
        self.local_cseq = 0
        self._start_dialog(invite, addr)
        self.sdp_version = 0
        self._sdp_session_id = random.getrandbits(32)
        self._offer = offer  # None: a delayed offer (our offer goes in the 200, the answer in the ACK)
        self._awaiting_answer = False
        self._answer_body = b""
        self._acked = asyncio.Event()
        self._cancelled = asyncio.Event()
        self._notify: asyncio.Future[int] | None = None
        self._bye_started = False
        self._hung_up = asyncio.Event()
        self.warm: WarmTransferLeg | None = None   # a warm transfer in progress or joined
        self._tasks: set[asyncio.Task] = set()
        transport = SipTransport(session, on_transfer=self._on_transfer)
        super().__init__(call_id=invite.call_id, transport=transport, tracker=transport.tracker,
                         frames=session.stats.frames, stats=session.stats.as_dict,
                         agent_factory=server.agent_factory, pipeline_config=server.pipeline_config,
                         store=server.store, metrics=server.metrics,
                         params={"from": NameAddr.parse(invite.header("from") or "").uri,
                                 "to": NameAddr.parse(invite.header("to") or "").uri,
                                 **context_params(invite), **(params or {})},
                         reraise=self.config.reraise_call_errors)

    def _start_dialog(self, invite: SipRequest, addr: Address) -> None:
        """The dialog as the callee sees it (RFC 3261 12.1.1): the caller is From, we are To (our
        tag added), requests go to the caller's Contact along the INVITE's Record-Route, in order."""
        self.remote = NameAddr.parse(invite.header("from") or "")
        self.local = NameAddr.parse(invite.header("to") or "").with_tag(self.local_tag)
        contact = invite.header("contact")
        try:
            target = NameAddr.parse(contact).sip_uri if contact else None
        except SipParseError:
            target = None
        self.remote_target = str(target) if target else self.remote.uri
        self.remote_addr = target.address if target else addr
        self.routes = [r for value in invite.headers_named("record-route") for r in split_commas(value)]

    def _step(self, name: str) -> None:
        self.history.append(name)
        log.debug("[%s] %s", self.call_id, name)

    # -- the call's life (CallSupervisor's hooks) ------------------------------------------------

    async def _answer(self) -> bool:
        log.info("[%s] SIP call from %s (codec %s)", self.call_id, self.addr[0], self.session.media.codec.name)
        self.server.respond(self.invite, self.addr, 180, to_tag=self.local_tag)
        self._step("ringing")
        if self.config.ring_s > 0:
            try:
                async with asyncio.timeout(self.config.ring_s):
                    await self._cancelled.wait()
            except TimeoutError:
                pass
        if self._cancelled.is_set():
            self.end_reason = self.end_reason or "caller cancelled"
            return False
        if self._offer is None:
            self._send_offer()
        else:
            self._send_answer(self.invite, self._offer)
        self.state = CallState.ANSWERED
        self._step("answered")
        self._spawn(self._watch_rtp())
        return True

    async def _watch_rtp(self) -> None:
        """End the call when the caller has sent no RTP for ``rtp_timeout_s`` (no BYE will come
        from a peer that vanished); on hold with no media, after ``rtp_hold_timeout_s``."""
        since, was_held = time.monotonic(), False
        while self.state is CallState.ANSWERED:
            media = self.session.media
            held = media.direction == "inactive" or media.remote_address is None
            if held != was_held:          # put on hold, or taken off it: the clock starts again
                since, was_held = time.monotonic(), held
            limit = self.config.rtp_hold_timeout_s if held else self.config.rtp_timeout_s
            last = max(since, self.session.last_packet_s or since)
            if limit and time.monotonic() - last >= limit:
                reason = f"no RTP from the caller for {limit:.0f} s"
                log.info("[%s] %s: ending the call", self.call_id, reason)
                await self.hang_up(reason)
                return
            await asyncio.sleep(min(1.0, limit / 4) if limit else 1.0)

    async def _pipeline_ended(self) -> str | None:
        """Joined by a warm transfer, the agent has left but the call goes on: until either side
        hangs up."""
        if self.warm is not None and self.warm.joined:
            return await self.warm.bridged(self._hung_up)
        return None

    async def _on_hang_up(self, reason: str) -> None:
        self._hung_up.set()
        if self.state is CallState.RINGING:
            if not self._cancelled.is_set():
                self.server.respond(self.invite, self.addr, 487, to_tag=self.local_tag)
                self._cancelled.set()
        elif self.state is CallState.ANSWERED:
            await self._send_bye()  # a no-op when the caller's BYE came first

    async def _close(self) -> None:
        if self.warm is not None:
            await self.warm.close(self.end_reason or "call ended")
        if self.state is CallState.ANSWERED:  # the agent hung up, or we did: BYE, once
            await self._send_bye()  # a no-op when a BYE already went either way
        self.state = CallState.ENDED
        self._step("ended")
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.session.close()
        stats = self.session.stats
        log.info("[%s] RTP: %d packets in, %d out, %d bad", self.call_id, stats.packets_in,
                 stats.packets_out, stats.bad_packets)

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
        self._send_ok(request, self._answer_body)
        return True

    def _send_offer(self) -> None:
        """A delayed offer (an INVITE without SDP, as PBX trunks send): ours goes in the 200."""
        offer = make_offer(self.config.contact_ip, self.session.port or 0, codecs=self.config.codecs,
                           session_id=self._sdp_session_id, session_version=self.sdp_version)
        self.sdp_version += 1
        self._awaiting_answer = True
        self._send_ok(self.invite, bytes(offer))

    def _send_ok(self, request: SipRequest, body: bytes) -> None:
        resp = self.server.respond(request, self.addr, 200, to_tag=self.local_tag, body=body,
                                   headers=(("Contact", f"<{self.server.contact_uri}>"), ("Allow", ALLOW)))
        self._acked.clear()
        self._spawn(self._retransmit_until_ack(resp))

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
        await self.hang_up("no ACK")

    def end_transactions(self) -> None:
        """The server is stopping, and our 2xx's transaction ends with it: the BYE need not wait
        out the ACK (RFC 3261 15: a BYE may follow once the transaction is over)."""
        self._acked.set()

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

    def on_ack(self, req: SipRequest) -> None:
        if self._acked.is_set() or self.state is not CallState.ANSWERED:
            return
        self._acked.set()
        self._step("acked")
        if self._awaiting_answer:  # the ACK carries the answer to our offer
            self._awaiting_answer = False
            body = sdp_body(req)
            try:
                answer = SessionDescription.parse(body) if body else None
            except SdpParseError:
                answer = None
            media = accept_answer(answer, codecs=self.config.codecs) if answer is not None else None
            if media is None or (media.remote_address is not None and not is_ip(media.remote_address[0])):
                log.warning("[%s] the ACK carried no usable SDP answer to our offer: hanging up", self.call_id)
                self._spawn(self.hang_up("no usable SDP answer in the ACK"))  # RFC 3261 13.3.1.4: BYE
                return
            self._offer = answer
            self.session.update(media)
        self.session.start_sending()  # nothing went to the SDP's address before the caller confirmed

    def on_invite_retransmitted(self, req: SipRequest, addr: Address) -> None:
        """The caller did not hear our 180 yet (the final answer, once sent, is replayed from the cache)."""
        if self.state is CallState.RINGING:
            self.server.respond(req, addr, 180, to_tag=self.local_tag)

    def on_reinvite(self, req: SipRequest, addr: Address) -> None:
        if self.state is not CallState.ANSWERED:
            self.server.respond(req, addr, 491 if self.state is CallState.RINGING else 481, to_tag=self.local_tag)
            return
        try:
            offer = SessionDescription.parse(sdp_body(req)) if req.body else self._offer
        except SdpParseError:
            self.server.respond(req, addr, 488, to_tag=self.local_tag)
            return
        audio = offer.audio() if offer is not None else None
        conn = offer.connection_of(audio) if offer is not None and audio is not None else None
        if offer is None or (conn is not None and not conn.is_hold and not is_ip(conn.address)):
            self.server.respond(req, addr, 488, to_tag=self.local_tag,  # a host name would be resolved per packet
                                headers=warning("a re-INVITE's c= must be an IP address"))
            return
        self._offer = offer
        self._send_answer(req, offer)

    def on_cancel(self, req: SipRequest, addr: Address) -> None:
        self.server.respond(req, addr, 200, to_tag=self.local_tag)
        if self.state is CallState.RINGING and not self._cancelled.is_set():
            self.server.respond(self.invite, self.addr, 487, to_tag=self.local_tag)
            self._step("cancelled")
            self.end_reason = self.end_reason or "caller cancelled"
            self._cancelled.set()

    def on_bye(self, req: SipRequest, addr: Address) -> None:
        self.server.respond(req, addr, 200, to_tag=self.local_tag)
        self._step("bye-received")
        self._cancelled.set()
        self._spawn(self.hang_up(f"{self.far_end} hung up (BYE)"))

    def on_notify(self, req: SipRequest, addr: Address) -> None:
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

    def _in_dialog(self, method: str, headers: tuple = (), body: bytes = b"", *,
                   cseq: int | None = None) -> tuple[SipRequest, Address]:
        """A request within the dialog and where to send it (RFC 3261 12.2.1.1): with a route set
        it goes to the first route, not the remote target: a loose router (``;lr``) keeps the
        target as Request-URI and gets the whole set as Route; a strict one becomes the
        Request-URI itself and the target goes last in Route. ``cseq``: an ACK's, its INVITE's
        number; otherwise the next one."""
        if cseq is None:
            self.local_cseq += 1
            cseq = self.local_cseq
        uri, routes, dest = self.remote_target, list(self.routes), self.remote_addr
        if routes:
            first = SipUri.parse(NameAddr.parse(routes[0]).uri)
            dest = (first.param("maddr") or first.host.strip("[]"), first.port or 5060)
            if not first.has_param("lr"):  # a strict router (RFC 2543)
                uri = str(first)
                routes = routes[1:] + [f"<{self.remote_target}>"]
        request = self.server.new_request(method, uri, call_id=self.call_id, from_=str(self.local),
                                          to=str(self.remote), cseq=cseq,
                                          headers=tuple(("Route", r) for r in routes) + tuple(headers), body=body)
        return request, dest

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
            resp = await self.server.request(*self._in_dialog("BYE", self._outcome_headers()))
            log.info("[%s] BYE answered %d", self.call_id, resp.status)
        except TimeoutError:
            log.warning("[%s] BYE unanswered", self.call_id)

    def _outcome_headers(self, outcome: str | None = None) -> tuple[tuple[str, str], ...]:
        """What the call hands back to the far end's flow (Amazon Connect's "resume flow after
        disconnect", a PBX's script) in headers of our BYE or REFER: the outcome, why it ended,
        the slots the agent filled and a summary; the caller's User-to-User goes back as it came."""
        self.sync()
        handoff = handoff_of(self.record)
        reason = self.end_reason or self._polite_reason or "agent ended the call"
        headers = [("X-Parley-Outcome", outcome or ("transferred" if reason.startswith("transferred") else "completed")),
                   ("X-Parley-End-Reason", header_text(reason)), ("X-Parley-Turns", str(handoff.turns))]
        if handoff.slots:
            headers.append(("X-Parley-Slots", urlencode(handoff.slots)))
        if handoff.summary:
            headers.append(("X-Parley-Summary", header_text(handoff.summary, 500)))
        uui = self.invite.header("User-to-User")
        if uui:
            headers.append(("User-to-User", uui))
        return tuple(headers)

    async def _on_transfer(self, frame: TransferCallFrame) -> None:
        if frame.kind == "enqueue":
            self.record.errors.append("transfer: 'enqueue' is a Twilio Flex workflow, not a SIP target")
            log.warning("[%s] cannot enqueue over SIP; transfer ignored", self.call_id)
            return
        target = frame.target if frame.target.startswith(("sip:", "sips:", "tel:")) else \
            f"sip:{frame.target}@{self.remote_addr[0]}"
        if frame.mode == "warm":
            if self.warm is not None:
                log.warning("[%s] a warm transfer is already under way; this one ignored", self.call_id)
                return
            self._step("warm-transfer")
            self._spawn(self.server.warm_transfer(self, replace(frame, target=target)))
            return
        self._spawn(self._refer(target))

    async def _refer(self, target: str) -> None:
        self._step("refer-sent")
        self._notify = asyncio.get_running_loop().create_future()
        req, dest = self._in_dialog("REFER", (("Refer-To", f"<{target}>"), ("Referred-By", f"<{self.local.uri}>"),
                                              *self._outcome_headers("transferred")))
        try:
            resp = await self.server.request(req, dest)
            if resp.status >= 300:
                raise TransferError(f"REFER refused: {resp.status} {resp.reason}")
            async with asyncio.timeout(self.config.transfer_timeout_s):
                status = await self._notify
            if status >= 300:
                raise TransferError(f"transfer failed: {status}")
        except (TimeoutError, TransferError) as exc:
            reason = str(exc) or "transfer timed out"
            self.record.errors.append(f"transfer to {target}: {reason}")
            log.warning("[%s] transfer to %s failed (%s); the call goes on", self.call_id, target, reason)
            return
        self._step("transferred")
        await self.hang_up(f"transferred to {target}")  # BYE, then the pipeline stops
