"""A warm transfer over SIP: parley calls the person, briefs them, then bridges the two legs.

::

    caller ──RTP── parley ──RTP── person            (both legs are parley's own RTP sessions)

1. ``hold``: the caller's audio reaches nobody (``RtpSession.tap``), and hold audio
   (:class:`~pipeline.audio.hold.HoldLoop`) fills every 20 ms slot in which the agent sends the
   caller nothing, from the moment the transfer starts: the agent's own words ("please hold ...")
   go first, the hold audio fills the rest, and no gap is longer than the pattern's own (600 ms
   at most).
2. ``dialling``: a second leg (:class:`PersonLeg`, a :class:`~telephony.sip.dialer.DialedCall`
   that runs no agent) rings the person for ``timeout_s``. Nobody answering (a CANCEL at the
   ring timeout, 480, 486, 603) or the call failing gives the caller back: hold stops, the agent
   hears the caller again and is told (``TransferOutcomeFrame``), and offers a message.
3. ``briefing``: answered, the agent's voice is routed to the person's leg once its last words
   to the caller have played, and the summary is spoken there by the same TTS.
4. ``joined``: each leg's decoded audio is sent on the other's session (transcoded through PCM,
   so PCMU meets PCMA), and each key pressed is pressed again on the other leg (RFC 4733), the agent's output is detached, the agent is told and its pipeline ends.
   The caller's call stays up (:meth:`SipCall._pipeline_ended`) until either side hangs up; the
   other side then gets a BYE.

The caller's record keeps ``transfer``: ``mode``, ``target``, ``outcome`` (``joined``,
``no-answer``, ``failed``), ``detail``, ``held_s``, ``leg`` (the person's leg's Call-ID),
``summary`` (what the person heard: set aside from what the caller heard) and, once joined,
``ended_by``; the leg has a record of its own (``params.transfer_of`` names the caller's call).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Final

import numpy as np
from pipecat.frames.frames import EndFrame, TTSSpeakFrame
from pipecat.processors.frame_processor import FrameProcessor

from pipeline.audio.hold import HoldLoop
from pipeline.builder import PipelineConfig
from pipeline.frames import TransferCallFrame, TransferOutcome, TransferOutcomeFrame
from telephony.sip.call import CallState, SipCall
from telephony.sip.dialer import DialedCall, DialOutcome, DialRequest, DialResult
from telephony.sip.errors import DialError, SipError
from telephony.sip.media import SAMPLES_PER_PACKET, RtpSession
from telephony.sip.transport import SipOutputTransport

__all__ = ["PersonLeg", "WarmTransfer"]

log = logging.getLogger(__name__)

PACKET_S: Final = 0.02
AGENT_GAP_S: Final = 0.06     # the agent sent the caller nothing this long: hold audio fills in
LAST_WORDS_S: Final = 10.0     # the longest wait for the agent's words to the caller to play out
SUMMARY_S: Final = 45.0        # the longest a summary may take to play to the person
LEG_CLOSE_S: Final = 5.0      # the longest wait for the person's leg to end (its CANCEL or BYE answered)
_NOBODY: Final = {DialOutcome.NO_ANSWER, DialOutcome.BUSY, DialOutcome.DECLINED}


class PersonLeg(DialedCall):
    """The leg to the person: dialled like any call, but no agent runs on it. Answered, it waits
    (its audio going nowhere until the bridge) for the transfer to use it or to hang it up."""

    far_end = "person"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.answered = asyncio.Event()
        self.gone = asyncio.Event()
        self.session.tap = lambda pcm: None  # the person is heard by nobody until the bridge

    async def _run_pipeline(self, agent: FrameProcessor | None = None, config: PipelineConfig | None = None) -> None:
        self.answered.set()
        await self.gone.wait()

    async def _on_hang_up(self, reason: str) -> None:
        self.gone.set()
        await super()._on_hang_up(reason)

    async def _close(self) -> None:
        self.gone.set()
        await super()._close()


def _pcm_to(session: RtpSession) -> Callable[[bytes], None]:
    def send(pcm: bytes) -> None:
        if not session.closed:
            session.send_audio(np.frombuffer(pcm, dtype=np.int16))
    return send


class WarmTransfer:
    """One warm transfer of ``call`` to ``frame.target`` (module docstring); ``run`` is its task."""

    def __init__(self, call: SipCall, frame: TransferCallFrame, dial: Callable[..., Awaitable[DialResult]]):
        self.call = call
        self.frame = frame
        self._dial = dial            # SipServer.dial
        self.leg: PersonLeg | None = None
        self.result: DialResult | None = None
        self._joined = False
        self._holding = False
        self._closed = False
        self._dial_task: asyncio.Task | None = None
        self._hold_task: asyncio.Task | None = None
        self._started_s = time.monotonic()
        self._leg_made = asyncio.Event()
        self._key_tasks: set[asyncio.Task] = set()
        output = call.transport.output()
        assert isinstance(output, SipOutputTransport)
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
            request = DialRequest(frame.target, ring_timeout_s=max(1.0, frame.timeout_s),
                                  params=(("transfer_of", call.call_id),))
        except DialError as exc:
            await self._give_back("failed", str(exc))
            return
        self._dial_task = asyncio.ensure_future(self._dial(request, make_call=self._make_leg))
        log.info("[%s] warm transfer: ringing %s for %.0f s", call.call_id, frame.target, frame.timeout_s)
        if not await self._answered():
            result = self.result
            if result is None:
                await self._give_back("failed", "the person's leg could not be placed")
            elif result.outcome in _NOBODY:
                await self._give_back("no-answer", f"{result.outcome.value} ({result.status or '-'} {result.reason})")
            else:
                await self._give_back("failed", f"{result.outcome.value}: {result.reason}")
            return
        leg = self.leg
        assert leg is not None
        call._step("transfer-answered")
        # the agent's last words to the caller ("please hold ...") play out before it turns to the person
        await self._output.utterance_end(spoken_before, LAST_WORDS_S)
        self._output.route = leg.session
        before, said_before = self._output.utterances_ended, len(self._output.tracker.utterances)
        call._step("transfer-briefing")
        await self.call.inject(TTSSpeakFrame(frame.summary))
        summary = asyncio.ensure_future(self._output.utterance_end(before, SUMMARY_S))
        try:
            person_left = await self._first(leg.gone, summary)
        finally:
            summary.cancel()
        call.record.transfer["summary"] = self._output.tracker.set_aside(said_before)
        if person_left:
            self._output.route = None
            await self._give_back("failed", "the person hung up during the summary")
            return
        self._join(leg)
        await self.call.inject(TransferOutcomeFrame("joined", frame.target))
        await self.call.inject(EndFrame())   # the agent leaves; the call stays up for the bridge

    def _make_leg(self, *args, **kwargs) -> PersonLeg:
        self.leg = PersonLeg(*args, **kwargs)
        self.call.record.transfer["leg"] = self.leg.call_id
        self._leg_made.set()
        return self.leg

    async def _answered(self) -> bool:
        """Ring until the person answers (True), or the dial ends without them (False)."""
        assert self._dial_task is not None
        if await self._first(self._leg_made, self._dial_task) and self.leg is not None \
                and await self._first(self.leg.answered, self._dial_task):
            return True
        try:
            self.result = self._dial_task.result()
        except DialError as exc:
            log.warning("[%s] warm transfer: %s", self.call.call_id, exc)
        return False

    @staticmethod
    async def _first(event: asyncio.Event, other: asyncio.Future) -> bool:
        """Wait for ``event`` or ``other`` to finish; whether ``event`` came."""
        waiting = asyncio.ensure_future(event.wait())
        try:
            await asyncio.wait([other, waiting], return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiting.cancel()
        return event.is_set()

    def _join(self, leg: PersonLeg) -> None:
        call = self.call
        self._stop_hold()
        self._output.route = None
        self._output.detached = True
        call.session.tap = _pcm_to(leg.session)
        leg.session.tap = _pcm_to(call.session)
        call.session.key_tap = self._keys_to(leg.session)
        leg.session.key_tap = self._keys_to(call.session)
        self._joined = True
        self._record("joined", "")
        call._step("transfer-joined")
        log.info("[%s] warm transfer: joined to %s; the agent leaves", call.call_id, self.frame.target)

    def _keys_to(self, session: RtpSession) -> Callable[[str], None]:
        """A key pressed on one leg, pressed again (RFC 4733) on ``session``'s."""
        async def press(digit: str) -> None:
            try:
                await session.send_dtmf(digit)
            except SipError as exc:   # the other side did not negotiate telephone-event
                log.info("[%s] key %s not passed on: %s", self.call.call_id, digit, exc)

        def on_key(digit: str) -> None:
            if not session.closed:
                task = asyncio.ensure_future(press(digit))
                self._key_tasks.add(task)
                task.add_done_callback(self._key_tasks.discard)
        return on_key

    async def _give_back(self, outcome: TransferOutcome, detail: str) -> None:
        """Nobody took the call: the caller is the agent's again, and the agent is told."""
        if self._closed:     # the caller left first: the leg ended because we hung it up
            return
        self._stop_hold()
        self.call.session.tap = None
        self._record(outcome, detail)
        self.call._step(f"transfer-{outcome}")
        log.info("[%s] warm transfer to %s: %s (%s)", self.call.call_id, self.frame.target, outcome, detail)
        await self.call.inject(TransferOutcomeFrame(outcome, detail))
        self.call.warm = None

    def _record(self, outcome: TransferOutcome, detail: str) -> None:
        self.call.record.transfer.update(outcome=outcome, detail=detail,
                                         held_s=round(time.monotonic() - self._started_s, 2))
        self.call.sync()

    # -- hold audio -------------------------------------------------------------------------------

    def _start_hold(self) -> None:
        self.call.session.tap = lambda pcm: None   # nobody listens to the caller on hold
        self._holding = True
        self._hold_task = asyncio.get_running_loop().create_task(self._hold(), name=f"hold-{self.call.call_id}")

    def _stop_hold(self) -> None:
        self._holding = False
        if self._hold_task is not None:
            self._hold_task.cancel()
            self._hold_task = None

    async def _hold(self) -> None:
        """Hold audio, paced on an absolute clock, in every slot the agent leaves empty."""
        session, loop = self.call.session, asyncio.get_running_loop()
        music = HoldLoop(self.frame.hold_audio)
        start, n = loop.time(), 0
        while self._holding and not session.closed:
            chunk = music.next(SAMPLES_PER_PACKET)
            if time.monotonic() - self._output.last_sent_s >= AGENT_GAP_S:
                session.send_audio(chunk)
            n += 1
            await asyncio.sleep(max(0.0, start + n * PACKET_S - loop.time()))

    # -- the caller's call asks ---------------------------------------------------------------------

    async def bridged(self, hung_up: asyncio.Event) -> str:
        leg = self.leg
        assert leg is not None
        waits = [asyncio.ensure_future(hung_up.wait()), asyncio.ensure_future(leg.gone.wait())]
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for w in waits:
            w.cancel()
        by = "caller" if hung_up.is_set() else "person"
        self.call.record.transfer["ended_by"] = by
        return f"warm transfer to {self.frame.target}: joined; the {by} hung up"

    async def close(self, reason: str) -> None:
        self._closed = True
        self._stop_hold()
        for task in list(self._key_tasks):
            task.cancel()
        if not self._joined and self.call.record.transfer.get("outcome") is None:
            self._record("failed", f"the call ended on hold: {reason}")
        leg, dial = self.leg, self._dial_task
        if dial is None:
            return
        if leg is None:        # not yet placed: it never will be
            dial.cancel()
        elif leg.state is not CallState.ENDED:
            await leg.hang_up(f"caller's call ended: {reason}")
        await asyncio.wait([dial], timeout=LEG_CLOSE_S)
        if dial.done() and not dial.cancelled() and dial.exception() is not None:
            log.warning("[%s] the person's leg failed: %s", self.call.call_id, dial.exception())
