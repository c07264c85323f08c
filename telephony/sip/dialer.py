"""Outbound calls: parley's user agent dials a SIP URI (the UAC side of RFC 3261) and, once
answered, runs the agent over the same RTP transport and pipeline as an inbound call.

::

    request = DialRequest("sip:alice@198.51.100.7:5060", trunk="sip.example.net",
                          auth_user="parley", auth_password="...", ring_timeout_s=30)
    result = await sip_server.dial(request)    # -> DialResult when the call is over
    result.outcome                             # DialOutcome.ANSWERED, BUSY, NO_ANSWER, ...

The INVITE carries our SDP offer (the inbound side's codecs, and telephone-event). It goes to
the target's host, or to the ``trunk`` (an outbound proxy: the Request-URI stays the target, and
in-dialog requests go through the trunk too unless the answer set a Record-Route path).

The INVITE client transaction over UDP (RFC 3261 17.1.1): retransmitted from T1 doubling (Timer
A) until a provisional answer; no answer at all in ``invite_timeout_s`` (Timer B, 64*T1) is
``timeout``. 180/183 are ``ringing``; a 183 with SDP is early media: its answer is taken and RTP
received (counted, not handed to the agent, which starts at the answer). A 401/407 is ACKed and
the INVITE sent once more with digest credentials (Authorization, or Proxy-Authorization for a
407) and CSeq+1; a second challenge is ``failed``, its end reason saying whose credentials were
refused (or that none were configured). Nobody answering in
``ring_timeout_s`` gets a CANCEL (sent only once something provisional came, RFC 3261 9.1) and
the 487 is ACKed: ``no-answer``. Other finals are ACKed and become outcomes: 486/600 ``busy``,
480/408 ``no-answer``, 603 ``declined``, the rest ``failed`` with their code. A 200 is ACKed (to
its Contact, along its Record-Route reversed: the dialog's route set), the ACK resent for each
retransmitted 200, and the call runs as an inbound one does (:class:`~telephony.sip.call.SipCall`:
BYE either way, re-INVITEs, REFER, the RTP watchdog). ``history`` records the steps
(``inviting``, ``challenged``, ``ringing``, ``early-media``, ``cancel-sent``, ``answered``,
``acked``, then the call's own).

Who answered (``SipEndpoint.answering_plans``: a plan for the call, or None): the callee's audio
from the answer goes to the answering detector (:func:`telephony.core.screening.screen`) before
the agent starts, so the agent's greeting waits for the first decision. A person: the agent runs
(it greets at once). A machine: after the detector's final decision (the beep's end, the
greeting's end, or its maximum wait) the plan's message is spoken in the agent's place
(:class:`~pipeline.voicemail.VoicemailMessageProcessor`, no barge-in) and the call hung up once it
has played, or (``on_machine: hang_up``) the call is hung up at the first decision. Nobody speaking: the agent
greets or the call is hung up (``on_unknown``). ``history`` adds ``screening`` and
``answered-by-human`` / ``-machine`` / ``-unknown`` (then ``greeting-over`` for a machine); the
record and the result keep ``answered_by`` and ``voicemail_left``. The call's recogniser (when it
is parley's) hears the answer too, and the detector reads its words ("leave a message" is a
machine): ``pipeline.answering_words``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import socket
import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Final

from pipecat.processors.frame_processor import FrameProcessor

from pipeline.answering import Decision
from pipeline.builder import PipelineConfig
from telephony.core.screening import ScreenedCall, screen
from telephony.sip.call import CallState, SipCall
from telephony.sip.checks import ALLOW
from telephony.sip.digest import DigestChallenge, authorization
from telephony.sip.endpoint import Address, SipEndpoint
from telephony.sip.errors import DialError, SdpParseError, SipParseError
from telephony.sip.headers import NameAddr, SipUri, split_commas
from telephony.sip.media import SAMPLE_RATE_HZ, AudioIn, RtpSession, is_ip, random_tag
from telephony.sip.message import SipRequest, SipResponse, sdp_body
from telephony.sip.sdp import NegotiatedMedia, SessionDescription, accept_answer, make_offer

__all__ = ["DialOutcome", "DialRequest", "DialResult", "DialedCall", "resolve_destination"]

log = logging.getLogger(__name__)

T1_S: Final = 0.5
TIMER_D_S: Final = 32.0  # how long answers to a finished INVITE are still ACKed (RFC 3261 17.1.1.2, UDP)
RESOLVE_TIMEOUT_S: Final = 3.0


class DialOutcome(Enum):
    ANSWERED = "answered"
    BUSY = "busy"
    NO_ANSWER = "no-answer"
    DECLINED = "declined"
    FAILED = "failed"      # a final answer that is none of the above: its status says which
    TIMEOUT = "timeout"    # nothing answered the INVITE at all
    CANCELED = "canceled"  # we gave up before an answer (hang_up: a shutdown, Ctrl-C)


_OUTCOMES: Final = {486: DialOutcome.BUSY, 600: DialOutcome.BUSY, 480: DialOutcome.NO_ANSWER,
                    408: DialOutcome.NO_ANSWER, 603: DialOutcome.DECLINED}


def _host_port(text: str, what: str) -> tuple[str, int]:
    """``host[:port]`` or a SIP URI's host and port (5060 when none)."""
    try:
        uri = SipUri.parse(text if text.startswith(("sip:", "sips:")) else f"sip:{text}")
    except SipParseError as exc:
        raise DialError(f"{what} {text[:80]!r} is not host[:port] or a SIP URI: {exc}") from exc
    return uri.host.strip("[]"), uri.port or 5060


@dataclass(frozen=True)
class DialRequest:
    """One call to place. ``params`` reach the agent with the call, as an inbound call's SIP
    headers and Twilio's custom parameters do (beside ``from``, ``to`` and ``direction``)."""

    target: str                       # sip:user@host[:port]
    trunk: str | None = None          # host[:port] of an outbound proxy / SIP trunk
    from_uri: str | None = None       # default sip:{auth_user or parley}@{trunk host or our address}
    auth_user: str | None = None
    auth_password: str | None = None
    ring_timeout_s: float = 30.0
    invite_timeout_s: float = 64 * T1_S  # Timer B
    params: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        uri = self.target_uri  # raises DialError on a malformed target
        if uri.scheme != "sip":
            raise DialError(f"target {self.target[:80]!r}: only sip: URIs are dialled (sips needs TLS)")
        if self.trunk is not None:
            _host_port(self.trunk, "trunk")
        if self.from_uri is not None:
            try:
                SipUri.parse(self.from_uri)
            except SipParseError as exc:
                raise DialError(f"from {self.from_uri[:80]!r} is not a SIP URI: {exc}") from exc
        if (self.auth_user is None) != (self.auth_password is None):
            raise DialError("digest auth needs both a user and a password")
        if not 1 <= self.ring_timeout_s <= 600 or not 1 <= self.invite_timeout_s <= 120:
            raise DialError("ring_timeout_s is 1..600 s and invite_timeout_s 1..120 s")

    @property
    def target_uri(self) -> SipUri:
        try:
            uri = SipUri.parse(self.target)
        except SipParseError as exc:
            raise DialError(f"target {self.target[:80]!r} is not a SIP URI: {exc}") from exc
        if uri.headers:
            raise DialError(f"target {self.target[:80]!r}: URI headers (?...) are not dialled")
        return uri

    @property
    def next_hop(self) -> tuple[str, int]:
        """Where the INVITE goes: the trunk, else the target's host (no DNS SRV/NAPTR)."""
        return _host_port(self.trunk, "trunk") if self.trunk else self.target_uri.address


async def resolve_destination(request: DialRequest) -> Address:
    """The next hop's IP address and port; DialError when the host does not resolve in time."""
    host, port = request.next_hop
    if is_ip(host):
        return host, port
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(RESOLVE_TIMEOUT_S):
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_DGRAM)
    except (OSError, TimeoutError) as exc:
        raise DialError(f"host {host[:80]!r} does not resolve") from exc
    return str(infos[0][4][0]), port


@dataclass(frozen=True)
class DialResult:
    """How a placed call went: one JSON line (``to_json``)."""

    outcome: DialOutcome
    call_id: str
    target: str
    status: int | None           # the INVITE's final status (None: no final answer came)
    reason: str                  # the final answer's reason phrase, or why there was none
    end_reason: str | None       # how the call ended (the call record's end reason)
    history: tuple[str, ...] = ()
    talk_s: float = 0.0          # answered to hung up
    early_media: bool = False
    stats: dict[str, int] = field(default_factory=dict)
    answered_by: str | None = None     # screened: human, machine or unknown; or Twilio's AnsweredBy
    voicemail_left: bool | None = None  # a machine answered: whether the whole message was spoken

    def as_dict(self) -> dict[str, Any]:
        return {"outcome": self.outcome.value, "call_id": self.call_id, "target": self.target,
                "status": self.status, "reason": self.reason, "end_reason": self.end_reason,
                "talk_s": round(self.talk_s, 2), "early_media": self.early_media,
                "history": list(self.history), "rtp_in": self.stats.get("rtp_in", 0),
                "rtp_out": self.stats.get("rtp_out", 0), "answered_by": self.answered_by,
                "voicemail_left": self.voicemail_left}

    def to_json(self) -> str:
        return json.dumps(self.as_dict())


class DialedCall(ScreenedCall, SipCall):
    """A call parley placed: the INVITE client transaction in ``_answer``, then a SIP call."""

    far_end = "callee"

    def __init__(self, server: SipEndpoint, request: DialRequest, dest: Address, session: RtpSession,
                 call_id: str):
        self.request = request
        target = request.target_uri
        trunk_host = _host_port(request.trunk, "trunk")[0] if request.trunk else None
        from_uri = request.from_uri or f"sip:{request.auth_user or 'parley'}@{trunk_host or server.config.contact_ip}"
        self._sdp_offer = bytes(make_offer(server.config.contact_ip, session.port or 0, codecs=server.config.codecs,
                                           session_id=random.getrandbits(32)))
        invite = server.new_request("INVITE", str(target), call_id=call_id, from_=f"<{from_uri}>;tag={random_tag()}",
                                    to=f"<{target}>", cseq=1, body=self._sdp_offer,
                                    headers=(("Allow", ALLOW), ("Content-Type", "application/sdp")))
        self.outcome: DialOutcome | None = None
        self.final: SipResponse | None = None
        self.no_final_reason = ""
        self.early_media = False
        self.answered_at: float | None = None
        self.ended_at: float | None = None
        self._provisional = False
        self._cancel: DialOutcome | None = None    # why we cancel: NO_ANSWER (ring timeout) or CANCELED
        self._cancel_sent = False
        self._wake: asyncio.Queue[SipResponse | None] = asyncio.Queue()
        self._invites: list[SipRequest] = []        # every INVITE sent (their answers are heard until the end)
        self._ack: tuple[SipRequest, Address] | None = None
        self._early: NegotiatedMedia | None = None
        super().__init__(server, invite, dest, None, session,
                         params={"direction": "outbound", **dict(request.params)})

    def _start_dialog(self, invite: SipRequest, addr: Address) -> None:
        """Before the answer: we are From (our tag), the callee To; requests go to the next hop.
        The 200 completes it (:meth:`_confirm_dialog`)."""
        self.local = NameAddr.parse(invite.header("from") or "")
        self.local_tag = self.local.tag or ""
        self.remote = NameAddr.parse(invite.header("to") or "")
        self.remote_target, self.remote_addr, self.routes = invite.uri, addr, []
        self.local_cseq = invite.cseq[0]

    def _confirm_dialog(self, ok: SipResponse) -> None:
        """The dialog a 2xx made (RFC 3261 12.1.2): the callee's tag, its Contact as the remote
        target, the Record-Route in reverse as the route set. With no route set, requests go to
        the Contact, or through the trunk when one is configured."""
        self.remote = NameAddr.parse(ok.header("to") or "")
        try:
            contact = NameAddr.parse(ok.header("contact") or "").sip_uri
        except SipParseError:
            contact = None
        if contact is not None:
            self.remote_target = str(contact)
            if self.request.trunk is None and is_ip(contact.host):
                self.remote_addr = contact.address
        self.routes = [r for value in ok.headers_named("record-route") for r in split_commas(value)][::-1]

    # -- the INVITE client transaction --------------------------------------------------------

    async def _answer(self) -> bool:
        self._ring_deadline = asyncio.get_running_loop().time() + self.request.ring_timeout_s
        final = await self._invite_until_final()
        self.final = final
        if final is None:
            gave_up = self._cancel is DialOutcome.CANCELED or self._cancel_sent
            self.outcome = self._cancel if gave_up and self._cancel is not None else DialOutcome.TIMEOUT
            if self.outcome is DialOutcome.TIMEOUT:
                self.no_final_reason = f"no answer to the INVITE in {self.request.invite_timeout_s:.0f} s"
            self.end_reason = self.end_reason or self.no_final_reason or "canceled before any answer"
            return False
        if final.status >= 300:
            self._ack_failure(final)
            self.outcome = self._failure_outcome(final.status)
            self.end_reason = self.end_reason or self._refusal(final)
            return False
        return self._accept(final)

    def _refusal(self, final: SipResponse) -> str:
        """Why a final refusal ended the call; a digest challenge says whose credentials failed."""
        where = "the trunk" if self.request.trunk else "the far end"
        if final.status in (401, 407) and self.request.auth_user is None:
            return f"{where} asks for digest credentials"
        if final.status in (401, 407) and "challenged" in self.history:
            return f"{where} refused the credentials of user {self.request.auth_user!r}"
        return f"{self.outcome.value if self.outcome else 'failed'} ({final.status} {final.reason})".rstrip()

    def _failure_outcome(self, status: int) -> DialOutcome:
        if status == 487 and self._cancel is not None:
            return self._cancel
        return _OUTCOMES.get(status, DialOutcome.FAILED)

    async def _invite_until_final(self) -> SipResponse | None:
        """The INVITE (and once more with credentials when challenged) until a final answer;
        None when nothing final came (Timer B, or canceled before anything provisional)."""
        challenged = False
        while True:
            final = await self._one_invite()
            if final is None or final.status not in (401, 407) or challenged or self._cancel is not None \
                    or self.request.auth_user is None:
                return final
            challenged = True
            self._ack_failure(final)
            self._step("challenged")
            try:
                self.invite = self._with_credentials(final)
            except SipParseError as exc:
                log.warning("[%s] unusable digest challenge: %s", self.call_id, exc)
                return final
            self.local_cseq = self.invite.cseq[0]

    def _with_credentials(self, challenge: SipResponse) -> SipRequest:
        """The INVITE again, answering ``challenge``: a new branch, CSeq+1 (RFC 3261 22.2)."""
        proxy = challenge.status == 407
        value = challenge.header("proxy-authenticate" if proxy else "www-authenticate") or ""
        credentials = authorization(DigestChallenge.parse(value), "INVITE", self.invite.uri,
                                    self.request.auth_user or "", self.request.auth_password or "")
        old = self.invite
        fresh = self.server.new_request("INVITE", old.uri, call_id=self.call_id, from_=old.header("from") or "",
                                        to=old.header("to") or "", cseq=old.cseq[0] + 1, body=old.body,
                                        headers=(("Allow", ALLOW), ("Content-Type", "application/sdp"),
                                                 ("Proxy-Authorization" if proxy else "Authorization",
                                                  str(credentials))))
        return fresh

    async def _one_invite(self) -> SipResponse | None:
        loop = asyncio.get_running_loop()
        invite = self.invite
        wake: asyncio.Queue[SipResponse | None] = asyncio.Queue()
        self._wake = wake
        self._invites.append(invite)
        self._provisional = False
        self.server.listen(invite, self._on_answer)
        self._step("inviting")
        interval = T1_S
        now = loop.time()
        retransmit_at, give_up_at = now + interval, now + self.request.invite_timeout_s
        cancel_deadline: float | None = None
        self.server.send(invite, self.addr)
        while True:
            if self._cancel is not None and not self._cancel_sent:
                if self._provisional:
                    self._send_cancel(invite)
                    cancel_deadline = loop.time() + self.request.invite_timeout_s
                elif self._cancel is DialOutcome.CANCELED:
                    return None  # hung up before the far end said anything: abandon the transaction
            deadlines = [cancel_deadline] if cancel_deadline is not None else []
            if not self._provisional:
                deadlines += [retransmit_at, give_up_at]
            if self._cancel is None:
                deadlines.append(self._ring_deadline)
            try:
                async with asyncio.timeout(max(0.0, min(deadlines) - loop.time()) if deadlines else None):
                    resp = await wake.get()
            except TimeoutError:
                now = loop.time()
                if cancel_deadline is not None and now >= cancel_deadline:
                    self.no_final_reason = "no final answer after our CANCEL"
                    return None
                if not self._provisional and now >= give_up_at:
                    return None
                if self._cancel is None and now >= self._ring_deadline:
                    self._cancel = DialOutcome.NO_ANSWER
                    log.info("[%s] no answer in %.0f s: canceling", self.call_id, self.request.ring_timeout_s)
                if not self._provisional and now >= retransmit_at:
                    self.server.send(invite, self.addr)
                    interval *= 2  # Timer A doubles with no cap (RFC 3261 17.1.1.2)
                    retransmit_at = now + interval
                continue
            if resp is None:  # hang_up while ringing: the loop sends the CANCEL
                continue
            if resp.status >= 200:
                return resp
            self._on_provisional(resp)

    def _on_answer(self, resp: SipResponse) -> None:
        """Every response to one of our INVITEs, retransmissions included."""
        if resp.status >= 200 and self.final is not None and resp.cseq[0] == self.final.cseq[0]:
            if resp.status < 300 and self._ack is not None:  # a retransmitted 200: our ACK was lost
                self.server.send(*self._ack)
            elif resp.status >= 300:
                self._ack_failure(resp)
            return
        if resp.cseq[0] == self.invite.cseq[0]:
            self._wake.put_nowait(resp)
        elif resp.status >= 300:  # a retransmitted challenge to the INVITE before
            self._ack_failure(resp)

    def _on_provisional(self, resp: SipResponse) -> None:
        if resp.status == 100:
            self._provisional = True
            return
        first = not self._provisional or "ringing" not in self.history
        self._provisional = True
        if first:
            self._step("ringing")
        media = self._answer_media(resp) if resp.status == 183 and resp.body else None
        if media is not None and not self.early_media:
            self.early_media = True
            self._early = media
            self.session.update(media)  # its source may send now: early media is received
            self._step("early-media")

    def _answer_media(self, resp: SipResponse) -> NegotiatedMedia | None:
        """What the SDP answer in ``resp`` settles (an IP address in c=), or None."""
        body = sdp_body(resp)
        try:
            answer = SessionDescription.parse(body) if body else None
        except SdpParseError:
            return None
        media = accept_answer(answer, codecs=self.config.codecs) if answer is not None else None
        if media is None or (media.remote_address is not None and not is_ip(media.remote_address[0])):
            return None
        return media

    def _send_cancel(self, invite: SipRequest) -> None:
        """CANCEL (RFC 3261 9.1): the INVITE's Request-URI, top Via (its branch), Call-ID, From,
        To and CSeq number, sent where the INVITE went; its 200 is its own transaction."""
        self._cancel_sent = True
        self._step("cancel-sent")
        keep = ("via", "from", "to", "call-id", "route", "max-forwards")
        headers = tuple((n, v) for n, v in invite.headers if n.lower() in keep)
        cancel = SipRequest(method="CANCEL", uri=invite.uri, headers=headers + (
            ("CSeq", f"{invite.cseq[0]} CANCEL"), ("User-Agent", "parley")))
        self._spawn(self._cancel_transaction(cancel))

    async def _cancel_transaction(self, cancel: SipRequest) -> None:
        try:
            resp = await self.server.request(cancel, self.addr)
            log.info("[%s] CANCEL answered %d", self.call_id, resp.status)
        except TimeoutError:
            log.warning("[%s] CANCEL unanswered", self.call_id)

    def _ack_failure(self, final: SipResponse) -> None:
        """The ACK of a non-2xx final answer: part of the INVITE's transaction (its branch, its
        CSeq number), To as the answer has it (RFC 3261 17.1.1.3)."""
        invite = next((i for i in self._invites if i.cseq[0] == final.cseq[0]), self.invite)
        keep = ("via", "from", "call-id", "route", "max-forwards")
        headers = tuple((n, v) for n, v in invite.headers if n.lower() in keep)
        ack = SipRequest(method="ACK", uri=invite.uri, headers=headers + (
            ("To", final.header("to") or ""), ("CSeq", f"{final.cseq[0]} ACK"), ("User-Agent", "parley")))
        self.server.send(ack, self.addr)

    def _accept(self, ok: SipResponse) -> bool:
        """A 2xx: the dialog, its ACK (a transaction of its own), the media; False when we had
        canceled meanwhile or the answer is unusable (then the BYE follows at once)."""
        self._confirm_dialog(ok)
        self._ack = self._in_dialog("ACK", cseq=ok.cseq[0])
        self.server.send(*self._ack)
        self.state = CallState.ANSWERED
        self.answered_at = time.monotonic()
        self._step("answered")
        self._acked.set()  # ours went: a BYE may follow
        self._step("acked")
        media = self._answer_media(ok) if sdp_body(ok) else self._early
        if self._cancel is not None:  # answered as we gave up: ACK, then BYE (RFC 3261 15)
            self.outcome = self._cancel
            self.end_reason = self.end_reason or "answered after we canceled"
            return False
        self.outcome = DialOutcome.ANSWERED
        if media is None:
            log.warning("[%s] the answer carried no usable SDP: hanging up", self.call_id)
            self.outcome = DialOutcome.FAILED
            self.end_reason = "no usable SDP answer in the 200"
            return False
        self.session.update(media)
        while not self.session.queue.empty():  # early media was for the ringing, not for the agent
            self.session.queue.get_nowait()
        self.session.start_sending()
        self._spawn(self._watch_rtp())
        log.info("[%s] answered (codec %s)", self.call_id, media.codec.name)
        return True

    # -- who answered: a person, a machine, nobody ---------------------------------------------

    async def _run_pipeline(self, agent: FrameProcessor | None = None, config: PipelineConfig | None = None) -> None:
        """With an answering plan, screen the answer first (module docstring), then run the agent,
        leave the message, or hang up."""
        factory = self.server.answering_plans
        plan = factory(self.info) if factory is not None and agent is None else None
        if plan is None:
            await super()._run_pipeline(agent, config)
            return
        self._step("screening")
        decision = await screen(self._read_audio, plan.detector, ended=lambda: self.end_reason is not None,
                                on_decision=self._on_decision, first_only=plan.on_machine == "hang_up",
                                words=await self._screening_words())
        if decision is None:  # the callee hung up (or we did) before anything was decided
            return
        await self._act_on(decision.kind, plan)

    def _on_decision(self, decision: Decision) -> None:
        if self.record.answered_by is None:
            self.record.answered_by = decision.kind
            self._step(f"answered-by-{decision.kind}")
        elif decision.final:
            self._step("greeting-over")
        log.info("[%s] answered by %s at %.2f s: %s", self.call_id, decision.kind, decision.at_s, decision.reason)

    async def _read_audio(self, timeout_s: float) -> bytes | None:
        """The callee's next 20 ms (into the recording too), or None when none came in time; a
        key pressed while screening reaches nobody (the agent has not started) and the recording
        is silenced around it."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            try:
                async with asyncio.timeout_at(deadline):
                    item = await self.session.queue.get()
            except TimeoutError:
                return None
            if isinstance(item, AudioIn):
                if self.recorder is not None:
                    self.recorder.caller(item.pcm, SAMPLE_RATE_HZ)
                return item.pcm
            if self.recorder is not None:   # a key (RFC 4733): its tone is kept out of the recording
                self.recorder.key_pressed()

    async def _pipeline_ended(self) -> str | None:
        if self._message is not None:  # it ends the pipeline once the message's last packet went out
            self.record.voicemail_left = self._message.spoken
            return "voicemail message left" if self._message.spoken else "the voicemail message did not play"
        return await super()._pipeline_ended()

    # -- the call's life (SipCall's hooks, the caller's side) ---------------------------------

    async def _on_hang_up(self, reason: str) -> None:
        self._hung_up.set()   # a warm transfer's bridge ends with it
        if self.state is CallState.RINGING:
            if self._cancel is None:
                self._cancel = DialOutcome.CANCELED
            self._wake.put_nowait(None)
        elif self.state is CallState.ANSWERED:
            await self._send_bye()

    async def _close(self) -> None:
        if self.answered_at is not None:
            self.ended_at = time.monotonic()
        await super()._close()
        # the transactions stay a while (Timer D): a final answer sent again, its ACK lost, is ACKed again
        loop = asyncio.get_running_loop()
        for invite in self._invites:
            loop.call_later(TIMER_D_S, self.server.listen, invite, None)

    def result(self) -> DialResult:
        final = self.final
        return DialResult(
            outcome=self.outcome or DialOutcome.CANCELED, call_id=self.call_id, target=self.request.target,
            status=final.status if final is not None else None,
            reason=final.reason if final is not None else (self.no_final_reason or self.end_reason or ""),
            end_reason=self.end_reason, history=tuple(self.history),
            talk_s=(self.ended_at or time.monotonic()) - self.answered_at if self.answered_at is not None else 0.0,
            early_media=self.early_media, stats=self.session.stats.as_dict(),
            answered_by=self.record.answered_by, voicemail_left=self.record.voicemail_left)
