"""Who answered an outbound call: the callee's first seconds through the answering detector,
before the agent starts (``pipeline.answering``, ``pipeline.voicemail``).

    decision = await screen(read, AnsweringConfig(), ended=lambda: call.end_reason is not None,
                            on_decision=note,   # -> the final Decision, or None if the call ended first
                            words=words)        # the call's recogniser (GreetingWords), or None

``read(timeout_s)`` gives the callee's next audio (8 kHz 16-bit mono PCM, as the wire delivered
it) or None when none came within ``timeout_s``. A line that sends nothing is silence to the
detector: when no audio has come for ``GAP_S``, zeros stand in for the time the clock says has
passed, so each decision comes by its deadline even from a callee that sends no RTP; and at
``max_wait_s`` plus ``GAP_S`` of wall-clock time the detector is told the audio has ended.

``on_decision`` hears every decision as it is made: the first (``human``, ``machine`` or
``unknown``) and, after ``machine``, the final one that says when the message may start (the
beep's end, the greeting's end, or the maximum wait). ``screen`` returns the final one, or the
first one with ``first_only`` (a plan that hangs up on a machine need not wait for its beep).

``words`` (``pipeline.answering_words.GreetingWords``, from ``ScreenedCall._screening_words``:
the call's own recogniser, when it is parley's) hears the same audio before the detector does,
until the first decision; the detector reads its text (a voicemail phrase decides ``machine``).
``screen`` closes it.

The detector takes about 30 us of CPU per 20 ms frame, so it runs on the event loop; it runs at
most ``max_wait_s`` a call. The recogniser's steps and its final pass run in the engine's
runner and final-pass worker; the loop awaits them (about 0.35 s of CPU an answer, there).

:class:`ScreenedCall` is what an outbound call's edge does once it knows who answered
(``await self._act_on(kind, plan)``): the agent, the plan's message in the agent's place, or a
hang-up. SIP's :class:`~telephony.sip.dialer.DialedCall` and Twilio's
:class:`~telephony.twilio.call.TwilioCall` share it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from dataclasses import replace

import numpy as np

from pipeline.answering import FRAME_MS, AnsweringConfig, AnsweringDetector, Decision
from pipeline.answering_words import GreetingWords, screening_recogniser
from pipeline.voicemail import AnsweringPlan, VoicemailMessageProcessor
from telephony.core.supervisor import CallSupervisor

__all__ = ["GAP_S", "ScreenedCall", "screen"]

log = logging.getLogger(__name__)

GAP_S = 0.2
"""No audio for this long is silence (RTP's jitter stays well under it)."""

ReadAudio = Callable[[float], Awaitable[bytes | None]]


async def screen(read: ReadAudio, config: AnsweringConfig, *, ended: Callable[[], bool],
                 on_decision: Callable[[Decision], None] = lambda _d: None,
                 first_only: bool = False, words: GreetingWords | None = None) -> Decision | None:
    """Feed the callee's audio to a detector until its final decision (module docstring)."""
    try:
        return await _screen(read, config, ended, on_decision, first_only, words)
    finally:
        if words is not None:
            await words.aclose()


async def _screen(read: ReadAudio, config: AnsweringConfig, ended: Callable[[], bool],
                  on_decision: Callable[[Decision], None], first_only: bool,
                  words: GreetingWords | None) -> Decision | None:
    detector = AnsweringDetector(config, words=words.read if words is not None else None)
    loop = asyncio.get_running_loop()
    start = loop.time()
    deadline = start + config.max_wait_s + GAP_S
    hop = config.sample_rate_hz * FRAME_MS // 1000
    while not ended():
        pcm = await read(GAP_S)
        if pcm is None:  # a silent line: zeros for the time that passed, short of the last GAP_S
            behind = loop.time() - start - detector.heard_s - GAP_S
            frames = int(behind * 1000 / FRAME_MS)
            pcm = np.zeros(frames * hop, np.int16).tobytes() if frames > 0 else b""
        before = len(detector.decisions)
        if pcm:
            if words is not None:
                await words.push(pcm)
            detector.push(pcm)
            if words is not None:
                if detector.decisions:          # words count only before the first decision
                    await words.aclose()
                    words = None
                else:
                    words.heard_quiet(detector.quiet_s)
        if not detector.done and loop.time() >= deadline:
            detector.finish()
        for decision in detector.decisions[before:]:
            on_decision(decision)
        if detector.done or (first_only and detector.decisions):
            return detector.decisions[-1]
    return None


class ScreenedCall(CallSupervisor):
    """An outbound call that acts on who answered. Put it before the transport's call class in
    the bases (``class DialedCall(ScreenedCall, SipCall)``): its ``super()._run_pipeline`` then
    runs the agent (or the message) without screening again."""

    _message: VoicemailMessageProcessor | None = None   # set when a machine gets the message

    async def _screening_words(self) -> GreetingWords | None:
        """The call's recogniser listening to the answer (``pipeline.answering_words``), or None
        when the call's recogniser is not parley's or does not start (then timing alone)."""
        backend = screening_recogniser(self._config)
        if backend is None:
            return None
        return await GreetingWords.open(backend, call_id=self.call_id)

    async def _act_on(self, kind: str, plan: AnsweringPlan) -> None:
        """``human``: the agent runs (it greets at once); ``unknown``: the plan's ``on_unknown``;
        ``fax``: hang up; ``machine``: the plan's ``on_machine``, the message spoken in the agent's
        place with no barge-in (the pipeline ends once it has gone out) or a hang-up."""
        if kind == "human" or (kind == "unknown" and plan.on_unknown == "greet"):
            await super()._run_pipeline()
        elif kind == "unknown":
            await self.hang_up("nobody spoke")
        elif kind == "fax":
            await self.hang_up("a fax answered")
        else:
            self.record.voicemail_left = False
            if plan.on_machine == "hang_up":
                await self.hang_up("answering machine: no message left")
                return
            self._message = VoicemailMessageProcessor(plan.message, name=f"voicemail-{self.call_id}")
            await super()._run_pipeline(self._message, replace(self._config, allow_interruptions=False))
