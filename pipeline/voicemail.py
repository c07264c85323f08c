"""What an outbound call does about who answered, and the processor that leaves a voicemail message.

    plan = AnsweringPlan(message="Hi Dana, this is Acme about your order. Please call us back.",
                         on_machine="leave_message", on_unknown="greet")
    agent = VoicemailMessageProcessor(plan.message)     # stands where the agent stands

The call's edge feeds the callee's first seconds to an
:class:`~pipeline.answering.AnsweringDetector` (``plan.detector``) before the agent starts, and
acts on its decision:

* ``human``: the agent runs as on any call (it greets at once);
* ``machine``: the edge waits for the detector's final decision (the beep's end, the greeting's
  end, or ``max_wait_s``), then either runs :class:`VoicemailMessageProcessor` in the agent's place
  (``leave_message``: the message is spoken, then the pipeline ends and the call is hung up) or
  hangs up at once (``hang_up``);
* ``unknown`` (nobody spoke): the agent greets (``greet``) or the call is hung up (``hang_up``).

The plan's text is the agent's business (``agent.voicemail`` fills it from the spec's template and
the call's parameters); the edge takes a plan per call from a factory, as it takes the agent.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Literal, get_args

from pipecat.frames.frames import (
    BotStartedSpeakingFrame,
    BotStoppedSpeakingFrame,
    CancelFrame,
    EndFrame,
    EndWorkerFrame,
    Frame,
    LLMContextFrame,
    StartFrame,
    TTSSpeakFrame,
)
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor

from pipeline.answering import AnsweringConfig
from pipeline.errors import ConfigError

__all__ = ["AnsweringPlan", "OnMachine", "OnUnknown", "VoicemailMessageProcessor"]

log = logging.getLogger(__name__)

OnMachine = Literal["leave_message", "hang_up"]
OnUnknown = Literal["greet", "hang_up"]


@dataclass(frozen=True)
class AnsweringPlan:
    """One outbound call's plan for a machine or nobody answering (module docstring).

    ``message``: what is said after a machine's beep (already filled in: the words spoken), needed
    with ``on_machine="leave_message"``."""

    on_machine: OnMachine = "leave_message"
    message: str = ""
    on_unknown: OnUnknown = "greet"
    detector: AnsweringConfig = field(default_factory=AnsweringConfig)

    def __post_init__(self) -> None:
        if self.on_machine not in get_args(OnMachine):
            raise ConfigError(f"on_machine must be one of {get_args(OnMachine)}, not {self.on_machine!r}")
        if self.on_unknown not in get_args(OnUnknown):
            raise ConfigError(f"on_unknown must be one of {get_args(OnUnknown)}, not {self.on_unknown!r}")
        if self.on_machine == "leave_message" and not self.message.strip():
            raise ConfigError("on_machine 'leave_message' needs a message")


class VoicemailMessageProcessor(FrameProcessor):
    """In the agent's place once a machine has answered: speaks ``message`` at the start and,
    once its last audio has gone out (the output transport's ``BotStoppedSpeakingFrame``), sets
    ``spoken`` and ends the pipeline (``EndWorkerFrame`` upstream). The end is not queued behind
    the message from the start: a worker that is ending waits for its ``EndFrame`` to reach the
    output, so a hang-up (a cancel) meanwhile would let the whole message play to nobody.

    A message that never plays (a voice that fails) ends the pipeline after ``max_s``, unspoken.
    What the recogniser hears meanwhile is dropped: nobody is there to answer."""

    def __init__(self, message: str, *, max_s: float = 120.0, **kwargs):
        super().__init__(**kwargs)
        if not message.strip():
            raise ConfigError("a voicemail message must not be empty")
        self._message = message
        self._max_s = max_s
        self._speaking = False
        self._guard: asyncio.Task | None = None
        self.spoken = False

    async def process_frame(self, frame: Frame, direction: FrameDirection):
        await super().process_frame(frame, direction)
        if isinstance(frame, StartFrame):
            await self.push_frame(frame, direction)
            await self.push_frame(TTSSpeakFrame(self._message))
            self._guard = self.create_task(self._end_after(self._max_s), name="voicemail_guard")
            return
        if isinstance(frame, LLMContextFrame):
            return
        if isinstance(frame, BotStartedSpeakingFrame):
            self._speaking = True
        elif isinstance(frame, BotStoppedSpeakingFrame) and self._speaking and not self.spoken:
            self.spoken = True
            await self._end()
        elif isinstance(frame, (EndFrame, CancelFrame)):
            await self._stop_guard()
        await self.push_frame(frame, direction)

    async def _end_after(self, delay_s: float) -> None:
        await asyncio.sleep(delay_s)
        log.warning("%s: the voicemail message did not play in %g s; ending the call", self, delay_s)
        self._guard = None
        await self.push_frame(EndWorkerFrame(), FrameDirection.UPSTREAM)

    async def _end(self) -> None:
        await self._stop_guard()
        await self.push_frame(EndWorkerFrame(), FrameDirection.UPSTREAM)

    async def _stop_guard(self) -> None:
        if self._guard is not None:
            await self.cancel_task(self._guard)
            self._guard = None
