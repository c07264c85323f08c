"""A warm transfer over Twilio: parley calls the person, briefs them on a stream of their own, then
joins the two in a Twilio conference and leaves.

::

    caller ──stream── parley ──Calls API──> Twilio ──stream── person      (briefing)
    caller ──────────── Twilio conference "warm-CA..." ──────────── person  (joined)

1. ``hold``: the caller's audio reaches nobody (``StreamLink.held``), and hold audio
   (:class:`~pipeline.audio.hold.HoldLoop`) goes out on the caller's stream in every 20 ms slot in
   which the agent is not speaking to them, from the moment the transfer starts: the agent's own
   words ("please hold ...") go first, the hold audio fills the rest. Twilio plays what it is sent
   in order, so hold audio sent while the agent's last words are still queued plays after them.
2. ``dialling``: the person's call is placed through the Calls API (:class:`OutboundCalls`, the
   account's number as caller id: the number the caller dialled, or the one parley called from)
   with TwiML of its own: ``<Connect><Stream>`` back to parley's stream path, whose parameters name
   the caller's call (``parley_briefing``) and carry this transfer's secret
   (``parley_briefing_token``, random, used once; the socket's upgrade is signed as any stream's).
   Twilio's ``Timeout`` is the spec's ``timeout_s`` (at least Twilio's 5 s); parley's own deadline
   is ``timeout_s`` too when that is shorter, else a few seconds after Twilio's. Busy, no-answer,
   failed or canceled (Twilio's status callback), or the deadline (the ringing call is then hung
   up over REST): the caller is given back (hold stops, the agent hears the caller again and is
   told with ``TransferOutcomeFrame``, and offers a message). The caller's stream never left
   parley, so nothing else changes.
3. ``briefing``: the person's stream starts (:meth:`WarmTransfers.take_briefing`). Once the
   agent's words to the caller have gone out, its voice is routed to the person's stream
   (``TwilioOutputTransport.route``) and the summary (built by the agent, it comes in the
   transfer's frame) is spoken by the same TTS; its marks come back on the person's stream, so
   parley knows the person heard all of it. The person hanging up meanwhile gives the caller back.
4. ``joined``: both calls' TwiML is replaced through the REST API (``POST .../Calls/{CallSid}.json``
   with ``<Dial><Conference endConferenceOnExit="true">warm-CALLSID-xxxx</Conference></Dial>``),
   the person's first. Twilio then closes each call's stream (``stop``): on the caller's stream
   that is the agent leaving (``StreamLink.leaving``), not the caller hanging up. The agent is
   told and its pipeline ends; the conference ends when either side hangs up. A refused update
   (an HTTP error, a timeout) is one log line, and the caller gets the agent back; the person, if
   their update went through and the caller's did not, is hung up over REST.

The caller's record keeps ``transfer``, as SIP's does: ``mode``, ``target``, ``outcome``
(``joined``, ``no-answer``, ``failed``), ``detail``, ``held_s``, ``leg`` (the person's CallSid),
``summary`` (what the person heard: set aside from what the caller heard) and, once joined,
``room``. The person's call has a record of its own (``params.transfer_of`` names the caller's
call), written by Twilio's status callbacks.

Without a Twilio account or a public URL for parley (``unavailable`` says which), a warm hand-off
goes blind, as before (:meth:`TwilioCall._transfer`).
"""

from __future__ import annotations

import asyncio
import logging
import math
import secrets
import time
from collections.abc import Callable
from typing import Final, Protocol

from aiohttp import WSMsgType, WSCloseCode, web
from pipecat.frames.frames import EndFrame, Frame, TTSSpeakFrame
from pipecat.transports.base_transport import BaseTransport

from pipeline.audio.g711 import ulaw_encode
from pipeline.audio.hold import HoldLoop
from pipeline.frames import TransferCallFrame, TransferOutcome, TransferOutcomeFrame
from pipeline.records import CallRecord
from telephony.errors import PlacementError, ProtocolError, TelephonyError
from telephony.playout import UtteranceState
from telephony.sip.dialer import DialOutcome
from telephony.twilio.messages import Mark, OutMedia, Start, Stop, parse_twilio
from telephony.twilio.outbound import OutboundCalls, PlacedCall, TwilioDialRequest, is_phone_number, masked
from telephony.twilio.rest import TwilioCallControl
from telephony.twilio.transport import StreamLink, TwilioOutputTransport
from telephony.twilio.twiml import stream_twiml

__all__ = ["BRIEFING_PARAM", "BRIEFING_TOKEN_PARAM", "WarmTransfer", "WarmTransfers"]

log = logging.getLogger(__name__)

BRIEFING_PARAM: Final = "parley_briefing"              # the caller's CallSid
BRIEFING_TOKEN_PARAM: Final = "parley_briefing_token"  # the transfer's secret
PACKET_S: Final = 0.02
HOLD_LEAD_S: Final = 0.06     # hold audio is sent this far ahead of Twilio's playout
LAST_WORDS_S: Final = 10.0    # the longest wait for the agent's words to the caller to go out
SUMMARY_S: Final = 45.0       # the longest a summary may take to play to the person
ANSWER_GRACE_S: Final = 3.0   # parley's deadline past Twilio's own ring timeout
TWILIO_MIN_RING_S: Final = 5
CLOSE_S: Final = 12.0         # the longest the caller's end waits for a join in flight
_NOBODY: Final = {DialOutcome.BUSY, DialOutcome.NO_ANSWER}


class TwilioCall(Protocol):
    """The caller's call, as a warm transfer uses it (:class:`telephony.twilio.call.TwilioCall`)."""

    call_id: str
    record: CallRecord
    transport: BaseTransport
    warm: WarmTransfer | None

    @property
    def link(self) -> StreamLink: ...

    async def inject(self, frame: Frame) -> bool: ...

    def sync(self) -> None: ...


def _stream_url(public_url: str) -> str:
    """parley's Media Streams path at its public URL (https -> wss)."""
    base = public_url.rstrip("/")
    scheme, _, rest = base.partition("://")
    return f"{'wss' if scheme == 'https' else 'ws'}://{rest}/twilio/stream"


class WarmTransfers:
    """The server's warm transfers over Twilio: what they need (the Calls API client, call
    control), and the person's streams they wait for."""

    def __init__(self, outbound: OutboundCalls, control: Callable[[], TwilioCallControl | None]):
        self.outbound = outbound
        self._control = control
        self._waiting: dict[str, WarmTransfer] = {}    # by secret: transfers waiting for the person's stream

    @property
    def control(self) -> TwilioCallControl | None:
        return self._control()

    def unavailable(self, frame: TransferCallFrame) -> str | None:
        """Why this warm transfer cannot be done over Twilio here, or None."""
        if self.control is None:
            return "no Twilio account is configured (TWILIO_ACCOUNT_SID)"
        if self.outbound.dialer is None:
            return "parley's public URL is not set (--public-url or PARLEY_PUBLIC_URL)"
        if frame.kind != "dial" or not is_phone_number(frame.target):
            return f"it calls phone numbers only, not {frame.kind}:{frame.target[:60]}"
        return None

    def start(self, call: TwilioCall, frame: TransferCallFrame) -> WarmTransfer:
        transfer = WarmTransfer(call, frame, self)
        self._waiting[transfer.token] = transfer
        return transfer

    def done(self, transfer: WarmTransfer) -> None:
        self._waiting.pop(transfer.token, None)

    @staticmethod
    def is_briefing(start: Start) -> bool:
        return BRIEFING_PARAM in start.custom_parameters

    async def take_briefing(self, ws: web.WebSocketResponse, start: Start, peer: str) -> None:
        """A person's stream (its parameters name a caller's call): hand it to the transfer that
        placed the call, once; any other is refused."""
        params = start.custom_parameters
        transfer = self._waiting.get(params.get(BRIEFING_TOKEN_PARAM, ""))   # the secret: a random key
        if transfer is None or transfer.call.call_id != params.get(BRIEFING_PARAM) \
                or transfer.person is not None \
                or (transfer.placed is not None and transfer.placed.call_sid != start.call_sid):
            log.warning("[%s] briefing stream from %s refused: no warm transfer is waiting for it",
                        start.call_sid[:64], peer)
            await ws.close(code=WSCloseCode.POLICY_VIOLATION, message=b"no warm transfer waits for this stream")
            return
        await transfer.briefing(ws, start)


class WarmTransfer:
    """One warm transfer of ``call`` to ``frame.target`` (module docstring); ``run`` is its task."""

    def __init__(self, call: TwilioCall, frame: TransferCallFrame, transfers: WarmTransfers):
        self.call = call
        self.frame = frame
        self._transfers = transfers
        self.token = secrets.token_urlsafe(24)
        self.room = f"warm-{call.call_id}-{secrets.token_hex(3)}"
        self.placed: PlacedCall | None = None
        self.person: StreamLink | None = None
        self.end_reason: str | None = None
        self._joined = False
        self._joining = False
        self._holding = False
        self._closed = False
        self._hold_task: asyncio.Task | None = None
        self._started_s = time.monotonic()
        self._person_in = asyncio.Event()
        self._person_gone = asyncio.Event()
        self._echoed = asyncio.Event()
        output = call.transport.output()
        assert isinstance(output, TwilioOutputTransport)
        self._output = output

    @property
    def joined(self) -> bool:
        return self._joined

    # -- the transfer -----------------------------------------------------------------------------

    async def run(self) -> None:
        call, frame = self.call, self.frame
        call.record.transfer = {"mode": "warm", "target": frame.target, "outcome": None}
        spoken_before = self._output.utterances_ended
        self._start_hold()
        try:
            self.placed = await self._transfers.outbound.place(self._request())
        except PlacementError as exc:
            log.warning("[%s] warm transfer: the person's call could not be placed: %s", call.call_id, exc)
            await self._give_back("failed", f"the person's call could not be placed: {exc}")
            return
        call.record.transfer["leg"] = self.placed.call_sid
        log.info("[%s] warm transfer: ringing %s (%s) for %.0f s", call.call_id, masked(frame.target),
                 self.placed.call_sid, frame.timeout_s)
        if not await self._answered():
            return
        # the agent's last words to the caller ("please hold ...") go out before it turns to the person
        await self._output.utterance_end(spoken_before, LAST_WORDS_S)
        person = self.person
        assert person is not None
        tracker = call.link.tracker
        said_before = len(tracker.utterances)
        self._output.route = person
        await call.inject(TTSSpeakFrame(frame.summary))
        heard = await self._summary_heard(said_before)
        self._output.route = None
        call.record.transfer["summary"] = tracker.set_aside(said_before)
        if self._person_gone.is_set():
            await self._give_back("failed", "the person hung up during the summary")
            return
        if not heard:
            await self._give_back("failed", f"the summary did not play to the person within {SUMMARY_S:.0f} s")
            return
        await self._join()

    def _request(self) -> TwilioDialRequest:
        call, frame = self.call, self.frame
        params = call.record.params
        ours = params.get("To", "") if params.get("Direction", "inbound") == "inbound" else params.get("From", "")
        dialer = self._transfers.outbound.dialer
        assert dialer is not None
        twiml = stream_twiml(_stream_url(dialer.public_url), None,
                             {BRIEFING_PARAM: call.call_id, BRIEFING_TOKEN_PARAM: self.token})
        return TwilioDialRequest(frame.target, ours, params=(("transfer_of", call.call_id),),
                                 ring_timeout_s=max(TWILIO_MIN_RING_S, min(600, math.ceil(frame.timeout_s))),
                                 machine_detection=False, twiml=twiml)

    async def _answered(self) -> bool:
        """Ring until the person's stream starts (True), or give the caller back (False)."""
        placed, timeout_s = self.placed, self.frame.timeout_s
        assert placed is not None
        deadline_s = timeout_s if timeout_s < TWILIO_MIN_RING_S else timeout_s + ANSWER_GRACE_S
        waits = [asyncio.ensure_future(self._person_in.wait()), asyncio.ensure_future(placed.done.wait())]
        try:
            await asyncio.wait(waits, timeout=deadline_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
        if self._person_in.is_set():
            return True
        if placed.done.is_set():
            outcome = placed.outcome or DialOutcome.FAILED
            detail = f"{outcome.value} (Twilio: {placed.reason or '-'})"
            await self._give_back("no-answer" if outcome in _NOBODY else "failed", detail)
            return False
        await self._hang_up_person("no answer in time")
        await self._give_back("no-answer", f"no answer within {timeout_s:g} s")
        return False

    async def _summary_heard(self, said_before: int) -> bool:
        """Until the summary's end mark comes back on the person's stream (True), or the person
        hangs up or ``SUMMARY_S`` passes (False)."""
        utterances = self.call.link.tracker.utterances
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SUMMARY_S
        while not self._person_gone.is_set():
            if len(utterances) > said_before and utterances[said_before].state is not UtteranceState.PLAYING:
                return utterances[said_before].state is UtteranceState.HEARD
            self._echoed.clear()
            try:
                async with asyncio.timeout(max(0.0, min(0.5, deadline - loop.time()))):
                    await self._echoed.wait()
            except TimeoutError:
                if loop.time() >= deadline:
                    return False
        return False

    async def _join(self) -> None:
        """Both calls into the conference, the person's first; the agent leaves."""
        call, frame = self.call, self.frame
        control = self._transfers.control
        person, placed = self.person, self.placed
        assert control is not None and person is not None and placed is not None
        self._joining = True
        person.leaving = "joined the conference"
        try:
            await control.join_conference(placed.call_sid, self.room)
        except TelephonyError as exc:
            self._joining = False
            person.leaving = None
            log.error("[%s] warm transfer: the person could not be joined: %s", call.call_id, exc)
            await self._give_back("failed", f"the person could not be joined: {exc}")
            return
        reason = f"warm transfer to {frame.target}: joined (conference {self.room})"
        call.link.leaving = reason
        try:
            await control.join_conference(call.call_id, self.room)
        except TelephonyError as exc:
            self._joining = False
            call.link.leaving = None
            log.error("[%s] warm transfer: the caller could not be joined: %s", call.call_id, exc)
            await self._hang_up_person("the caller could not be joined")
            await self._give_back("failed", f"the caller could not be joined: {exc}")
            return
        self._stop_hold()
        self._joined, self._joining = True, False
        self.end_reason = reason
        call.record.transfer["room"] = self.room
        self._record("joined", "")
        self._transfers.done(self)
        log.info("[%s] warm transfer: joined to %s in conference %s; the agent leaves", call.call_id,
                 masked(frame.target), self.room)
        await call.inject(TransferOutcomeFrame("joined", frame.target))
        await call.inject(EndFrame())

    async def _give_back(self, outcome: TransferOutcome, detail: str) -> None:
        """Nobody took the call: the caller is the agent's again, and the agent is told."""
        if self._closed:     # the caller left first
            return
        self._stop_hold()
        self._output.route = None
        self.call.link.held = False
        self._transfers.done(self)
        if self.person is not None and not self.person.ws.closed:
            await self.person.ws.close()     # the person's call ends with its stream
        self._record(outcome, detail)
        log.info("[%s] warm transfer to %s: %s (%s)", self.call.call_id, masked(self.frame.target), outcome, detail)
        await self.call.inject(TransferOutcomeFrame(outcome, detail))
        self.call.warm = None

    async def _hang_up_person(self, why: str) -> None:
        """End the person's call over REST (ringing: cancelled); a refusal is logged."""
        control, placed = self._transfers.control, self.placed
        if control is None or placed is None or not placed.call_sid or placed.done.is_set():
            return
        try:
            await control.hangup(placed.call_sid)
        except TelephonyError as exc:
            log.warning("[%s] warm transfer: the person's call (%s) could not be hung up (%s): %s",
                        self.call.call_id, placed.call_sid, why, exc)

    def _record(self, outcome: TransferOutcome, detail: str) -> None:
        self.call.record.transfer.update(outcome=outcome, detail=detail,
                                         held_s=round(time.monotonic() - self._started_s, 2))
        self.call.sync()

    # -- the person's stream ------------------------------------------------------------------------

    async def briefing(self, ws: web.WebSocketResponse, start: Start) -> None:
        """Read the person's stream until it ends: its audio goes nowhere (nobody hears the person
        before the join), its marks tell the caller's tracker what the person heard."""
        self.person = StreamLink(ws, start, start.call_sid, on_closed=self._no_op)
        self._person_in.set()
        log.info("[%s] warm transfer: %s answered; briefing", self.call.call_id, start.call_sid)
        tracker = self.call.link.tracker
        reason = "socket closed"
        try:
            async for msg in ws:
                if msg.type not in (WSMsgType.TEXT, WSMsgType.BINARY):
                    break
                try:
                    message = parse_twilio(msg.data)
                except ProtocolError:
                    continue
                if isinstance(message, Mark):
                    tracker.mark_echoed(message.name)
                    self._echoed.set()
                elif isinstance(message, Stop):
                    reason = "stop"
                    break
        finally:
            self._person_gone.set()
            self._echoed.set()
            if not ws.closed:
                await ws.close()
            if not self._joined and not self._joining and not self._closed:
                log.info("[%s] warm transfer: the person's stream ended (%s)", self.call.call_id, reason)

    @staticmethod
    async def _no_op(_reason: str) -> None:
        return None

    # -- hold audio -------------------------------------------------------------------------------

    def _start_hold(self) -> None:
        self.call.link.held = True
        self._holding = True
        self._hold_task = asyncio.get_running_loop().create_task(self._hold(), name=f"hold-{self.call.call_id}")

    def _stop_hold(self) -> None:
        self._holding = False
        if self._hold_task is not None:
            self._hold_task.cancel()
            self._hold_task = None

    async def _hold(self) -> None:
        """Hold audio, paced on an absolute clock ``HOLD_LEAD_S`` ahead, in every slot the agent
        is not speaking to the caller."""
        link, loop = self.call.link, asyncio.get_running_loop()
        music = HoldLoop(self.frame.hold_audio)
        start, n = loop.time(), 0
        while self._holding and not link.ws.closed:
            chunk = music.next(int(PACKET_S * 8000))
            if not self._output.speaking_to_caller:
                await link.send(OutMedia(link.start.stream_sid, ulaw_encode(chunk)))
            n += 1
            await asyncio.sleep(max(0.0, start + n * PACKET_S - HOLD_LEAD_S - loop.time()))

    # -- the caller's call ends ----------------------------------------------------------------------

    async def close(self, reason: str, task: asyncio.Task | None) -> None:
        """The caller's call is over: a join in flight is let finish; otherwise the transfer
        stops, the outcome says so, and the person's call (ringing or briefed) is ended."""
        if task is not None and self._joining and not task.done():
            await asyncio.wait([task], timeout=CLOSE_S)
        self._closed = True
        self._stop_hold()
        self._transfers.done(self)
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        if self._joined:
            return
        if self.call.record.transfer.get("outcome") is None:
            self._record("failed", f"the call ended on hold: {reason}")
        if self.person is not None and not self.person.ws.closed:
            await self.person.ws.close()
        elif self.person is None:
            await self._hang_up_person(f"the caller's call ended: {reason}")
