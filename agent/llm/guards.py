"""Turn guards around an LLM service: a spoken filler when it is slow, a fallback when it fails.

    agent = guarded(llm, GuardConfig(filler="One moment.", fallback="Sorry, something went wrong.",
                                     filler_after_s=1.2, timeout_s=8.0))
    # -> Pipeline([guard.before, llm, guard.after])

An LLM service answers each ``LLMContextFrame`` (downstream from the user aggregator at the end
of a caller turn, or upstream from the assistant aggregator after a tool result) with
``LLMFullResponseStartFrame``, ``LLMTextFrame`` tokens and ``LLMFullResponseEndFrame``
downstream, and reports failures as an ``ErrorFrame`` upstream. ``before`` sits on the LLM's
upstream side and ``after`` on its downstream side, so between them the guard sees every request
go in and everything come out:

- **filler**: nothing said ``filler_after_s`` after the caller's turn went in (the LLM is slow
  to start, or a tool it called is slow to answer): the filler is spoken as a ``TTSSpeakFrame``
  (its own utterance, left out of the LLM context), at most once per caller turn and never after
  the agent has started answering.
- **timeout**: nothing out for ``timeout_s`` (before the first token or between tokens): the
  guard cancels the request by pushing an ``InterruptionFrame`` into the LLM (pipecat cancels
  the task running the completion, which closes the HTTP stream) and swallows that frame on the
  other side so the TTS and transport never see a barge-in; then the fallback is spoken.
- **error**: a response that ends with an ``ErrorFrame`` from the LLM, or with neither text nor
  a tool call: the fallback is spoken after it. The LLM stays in the pipeline, so the caller's
  next turn is answered normally.

Text passes through untouched, token by token: the TTS does the phrase aggregation. A real
barge-in (an ``InterruptionFrame`` from either side, which cancels the LLM as well) stops the
guard's timers and silences it for the interrupted requests. Each case is recorded as ``AgentEventFrame(kind="llm_error")``.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from dataclasses import dataclass

from pipecat.frames.frames import (
    CancelFrame,
    EndFrame,
    ErrorFrame,
    Frame,
    FunctionCallInProgressFrame,
    FunctionCallsStartedFrame,
    InterruptionFrame,
    LLMContextFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    TTSSpeakFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor

from agent.errors import AgentError
from pipeline.frames import AgentEventFrame

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GuardConfig:
    """What the guard says and when. Validates itself."""

    filler: str
    fallback: str
    filler_after_s: float = 1.2
    timeout_s: float = 8.0

    def __post_init__(self):
        if not self.fallback.strip():
            raise AgentError("the fallback message must not be empty")
        if self.filler_after_s <= 0 or self.timeout_s <= 0:
            raise AgentError(f"filler_after_s ({self.filler_after_s}) and timeout_s "
                             f"({self.timeout_s}) must be positive")


@dataclass
class _Request:
    """One LLM request, from its context frame going in to its response end coming out."""

    number: int
    last_output_s: float
    produced: bool = False  # text or a tool call came out
    failed: bool = False  # the LLM pushed an ErrorFrame
    ended: bool = False  # its LLMFullResponseEndFrame went out
    settled: bool = False  # fallback spoken or barge-in: nothing more to say for it


class TurnGuard:
    """Filler and fallback for one LLM service; ``before`` and ``after`` go either side of it."""

    def __init__(self, config: GuardConfig, *, call_sid: str = "-"):
        self.config = config
        self.call_sid = call_sid  # every log line about the call carries it
        self.before = _GuardBefore(self)
        self.after = _GuardAfter(self)
        self._count = 0
        self._current: _Request | None = None  # the latest request to go in
        self._waiting: deque[_Request] = deque()  # gone in, response not started (FIFO: the
        # LLM answers its context frames in order)
        self._responding: _Request | None = None  # the one whose response is coming out
        self._filler_said = False
        self._spoke = False
        self._turn_start_s = 0.0
        self._watchdog: asyncio.Task | None = None
        self._cancel_frame: InterruptionFrame | None = None

    # --- events, from the two processors ------------------------------------------------

    async def on_request(self, *, caller_turn: bool) -> None:
        if caller_turn:
            self._filler_said = False
            self._spoke = False
            self._turn_start_s = self._now()
        await self._stop_watchdog()
        self._count += 1
        self._current = _Request(self._count, self._now())
        self._waiting.append(self._current)
        self._watchdog = self.after.create_task(self._watch(self._current),
                                                f"turn-guard-{self._count}")

    def on_response_start(self) -> None:
        self._responding = self._waiting.popleft() if self._waiting else self._current

    def on_spoken(self) -> None:
        """Something else was said for the turn (a tool's goodbye or hold message)."""
        self._spoke = True

    def on_output(self, *, text: bool) -> None:
        request = self._responding or self._current
        if request is None:
            return
        request.produced = True
        request.last_output_s = self._now()
        if text:
            self._spoke = True

    async def on_response_end(self) -> None:
        request = self._responding or self._current
        self._responding = None
        if request is None:
            return
        request.ended = True
        if request.settled:
            return
        if request is self._current:
            await self._stop_watchdog()
        if request.failed or not request.produced:
            await self._fall_back(request, "error" if request.failed else "empty")
        elif not self._spoke and request is self._current:
            # a tool call: the caller waits for the tool and the LLM's next request
            self._watchdog = self.after.create_task(self._filler_later(request),
                                                    f"turn-guard-tool-{request.number}")

    async def on_error(self, frame: ErrorFrame) -> None:
        request = self._responding or self._current
        if request is None or request.settled:
            return
        request.failed = True
        log.warning("[%s] LLM request %d failed: %s", self.call_sid, request.number, frame.error)
        if request.ended:  # the error came up after the response end went down
            await self._fall_back(request, "error")

    async def on_barge_in(self) -> None:
        await self._stop_watchdog()
        self._settle_all()

    def _settle_all(self) -> None:
        """An interruption empties the LLM's queue: nothing in flight will be spoken for."""
        for request in (self._current, self._responding, *self._waiting):
            if request is not None:
                request.settled = True
        self._waiting.clear()

    def is_own_cancel(self, frame: Frame) -> bool:
        return frame is self._cancel_frame

    async def close(self) -> None:
        await self._stop_watchdog()

    # --- the watchdog --------------------------------------------------------------------

    async def _filler_later(self, request: _Request) -> None:
        """Say the filler at the turn's deadline unless something has been said by then."""
        config = self.config
        if not config.filler or self._filler_said or self._spoke:
            return
        await asyncio.sleep(max(0.0, self._turn_start_s + config.filler_after_s - self._now()))
        if not self._spoke and not self._filler_said and not request.settled \
                and (not request.produced or request.ended):
            self._filler_said = True
            log.debug("LLM request %d: nothing said after %.1f s, saying the filler",
                      request.number, config.filler_after_s)
            await self.after.push_frame(TTSSpeakFrame(config.filler, append_to_context=False))

    async def _watch(self, request: _Request) -> None:
        config = self.config
        await self._filler_later(request)
        while not request.settled:
            remaining = request.last_output_s + config.timeout_s - self._now()
            if remaining <= 0:
                break
            await asyncio.sleep(remaining)
        if request.settled:
            return
        log.warning("[%s] LLM request %d: nothing for %.1f s, cancelling it", self.call_sid, request.number,
                    config.timeout_s)
        self._cancel_frame = InterruptionFrame()
        self._settle_all()  # before the cancel: the end it causes must not speak again
        await self.before.push_frame(self._cancel_frame, FrameDirection.DOWNSTREAM)
        await self._speak_fallback(request, "timeout")

    async def _fall_back(self, request: _Request, reason: str) -> None:
        request.settled = True
        await self._speak_fallback(request, reason)

    async def _speak_fallback(self, request: _Request, reason: str) -> None:
        log.info("[%s] LLM request %d: %s, saying the fallback", self.call_sid, request.number, reason)
        await self.after.push_frame(AgentEventFrame(
            kind="llm_error", data={"reason": reason, "request": request.number}))
        await self.after.push_frame(TTSSpeakFrame(self.config.fallback))

    async def _stop_watchdog(self) -> None:
        task, self._watchdog = self._watchdog, None
        if task is not None and task is not asyncio.current_task() and not task.done():
            await self.after.cancel_task(task)

    def _now(self) -> float:
        return asyncio.get_running_loop().time()


class _GuardBefore(FrameProcessor):
    """Upstream of the LLM: caller turns going in, errors and cancels coming back."""

    def __init__(self, guard: TurnGuard, **kwargs):
        super().__init__(name="TurnGuardBefore", **kwargs)
        self._guard = guard

    async def process_frame(self, frame: Frame, direction: FrameDirection):
        if self._guard.is_own_cancel(frame):
            return  # our cancel coming back up from the LLM: it ends here
        await super().process_frame(frame, direction)
        if direction == FrameDirection.DOWNSTREAM:
            if isinstance(frame, LLMContextFrame):
                await self._guard.on_request(caller_turn=True)
            elif isinstance(frame, InterruptionFrame):
                await self._guard.on_barge_in()
            elif isinstance(frame, (EndFrame, CancelFrame)):
                await self._guard.close()
        elif isinstance(frame, ErrorFrame) and frame.processor is self.next:
            await self._guard.on_error(frame)  # the LLM's own; the TTS's are not its failures
        await self.push_frame(frame, direction)


class _GuardAfter(FrameProcessor):
    """Downstream of the LLM: its output going out, tool-result re-runs coming up."""

    def __init__(self, guard: TurnGuard, **kwargs):
        super().__init__(name="TurnGuardAfter", **kwargs)
        self._guard = guard

    async def process_frame(self, frame: Frame, direction: FrameDirection):
        if self._guard.is_own_cancel(frame):
            return  # the TTS and the transport must not take our cancel for a barge-in
        await super().process_frame(frame, direction)
        guard = self._guard
        if direction == FrameDirection.UPSTREAM:
            if isinstance(frame, LLMContextFrame):
                await guard.on_request(caller_turn=False)
            elif isinstance(frame, InterruptionFrame):
                await guard.on_barge_in()  # broadcast from below: it cancels the LLM too
            await self.push_frame(frame, direction)
            return
        if isinstance(frame, LLMFullResponseStartFrame):
            guard.on_response_start()
        elif isinstance(frame, LLMTextFrame):
            if frame.text.strip():
                guard.on_output(text=True)
        elif isinstance(frame, (FunctionCallsStartedFrame, FunctionCallInProgressFrame)):
            guard.on_output(text=False)
        elif isinstance(frame, TTSSpeakFrame):
            guard.on_spoken()
        elif isinstance(frame, LLMFullResponseEndFrame):
            await self.push_frame(frame, direction)
            await guard.on_response_end()
            return
        elif isinstance(frame, (EndFrame, CancelFrame)):
            await guard.close()
        await self.push_frame(frame, direction)

    async def cleanup(self):
        await self._guard.close()
        await super().cleanup()


def guarded(llm: FrameProcessor, config: GuardConfig, *, call_sid: str = "-") -> Pipeline:
    """``llm`` between a new :class:`TurnGuard`'s two halves, as one processor."""
    guard = TurnGuard(config, call_sid=call_sid)
    return Pipeline([guard.before, llm, guard.after])
