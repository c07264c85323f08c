"""TurnGuard around a scripted LLM processor: filler, fallback, timeout, barge-in.

The fake LLM is a plain FrameProcessor that answers each LLMContextFrame the way pipecat LLM
services do (start, text tokens, end downstream; ErrorFrame upstream on failure), following a
script with real waits, so pipecat's own interruption machinery cancels it.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

import pytest
from pipecat.frames.frames import (
    ErrorFrame,
    Frame,
    InterruptionFrame,
    LLMContextFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    TTSSpeakFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.tests.utils import SleepFrame, run_test

from agent.errors import AgentError
from agent.llm.guards import GuardConfig, TurnGuard, guarded
from pipeline.frames import AgentEventFrame

CONFIG = GuardConfig(filler="One moment.", fallback="Sorry, try again.", filler_after_s=0.15,
                     timeout_s=0.5)


@dataclass
class Step:
    tokens: tuple[str, ...] = ()
    wait_s: float = 0.0  # before the first token
    error: bool = False


class ScriptedLLM(FrameProcessor):
    def __init__(self, steps: list[Step]):
        super().__init__()
        self._steps = iter(steps)
        self.cancelled = 0

    async def process_frame(self, frame: Frame, direction: FrameDirection):
        await super().process_frame(frame, direction)
        if not isinstance(frame, LLMContextFrame):
            await self.push_frame(frame, direction)
            return
        step = next(self._steps)
        await self.push_frame(LLMFullResponseStartFrame())
        try:
            await asyncio.sleep(step.wait_s)
            for token in step.tokens:
                await self.push_frame(LLMTextFrame(token))
            if step.error:
                await self.push_error("scripted failure")
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            await self.push_frame(LLMFullResponseEndFrame())


class FailingTTS(FrameProcessor):
    """Downstream of the guard: reports an error of its own for every text it gets."""

    async def process_frame(self, frame: Frame, direction: FrameDirection):
        await super().process_frame(frame, direction)
        if isinstance(frame, LLMTextFrame):
            await self.push_error("tts failed")
        await self.push_frame(frame, direction)


def ctx(text: str = "hello") -> LLMContextFrame:
    context = LLMContext()
    context.add_message({"role": "user", "content": text})
    return LLMContextFrame(context=context)


def said(frames) -> list[str]:
    out = []
    for f in frames:
        if isinstance(f, LLMTextFrame):
            out.append(f.text)
        elif isinstance(f, TTSSpeakFrame):
            out.append(f"<{f.text}>")
    return out


def llm_errors(frames) -> list[str]:
    return [f.data["reason"] for f in frames if isinstance(f, AgentEventFrame)
            and f.kind == "llm_error"]


async def test_a_fast_answer_passes_through_token_by_token():
    tokens = ("We", " open", " at", " eight,", " and", " close", " at", " six.")
    down, up = await run_test(guarded(ScriptedLLM([Step(tokens)]), CONFIG),
                              frames_to_send=[ctx(), SleepFrame(0.3)])
    assert said(down) == list(tokens)
    assert [type(f) for f in down if not isinstance(f, LLMTextFrame)] == [
        LLMFullResponseStartFrame, LLMFullResponseEndFrame]


async def test_a_slow_first_token_gets_the_filler_once_before_the_answer():
    steps = [Step(("Here", " it", " is."), wait_s=0.35)]
    down, _ = await run_test(guarded(ScriptedLLM(steps), CONFIG),
                             frames_to_send=[ctx(), SleepFrame(0.6)])
    assert said(down) == ["<One moment.>", "Here", " it", " is."]
    filler = next(f for f in down if isinstance(f, TTSSpeakFrame))
    assert filler.append_to_context is False
    assert llm_errors(down) == []


async def test_an_error_is_answered_with_the_fallback_and_the_next_turn_works(caplog):
    steps = [Step(error=True), Step(("Fine.",))]
    with caplog.at_level(logging.INFO, logger="agent.llm.guards"):
        down, up = await run_test(guarded(ScriptedLLM(steps), CONFIG, call_sid="CA-guard-1"),
                                  frames_to_send=[ctx(), SleepFrame(0.1), ctx(), SleepFrame(0.3)])
    assert said(down) == ["<Sorry, try again.>", "Fine."]
    assert llm_errors(down) == ["error"]
    assert any(isinstance(f, ErrorFrame) for f in up), "the error still goes upstream"
    lines = [r.getMessage() for r in caplog.records if "LLM request" in r.getMessage()]
    assert lines and all(line.startswith("[CA-guard-1] ") for line in lines)  # every line names the call


async def test_words_then_an_error_still_get_the_fallback():
    down, _ = await run_test(guarded(ScriptedLLM([Step(("Let", " me"), error=True)]), CONFIG),
                             frames_to_send=[ctx(), SleepFrame(0.2)])
    assert said(down) == ["Let", " me", "<Sorry, try again.>"]


async def test_an_empty_answer_gets_the_fallback():
    down, _ = await run_test(guarded(ScriptedLLM([Step()]), CONFIG),
                             frames_to_send=[ctx(), SleepFrame(0.2)])
    assert said(down) == ["<Sorry, try again.>"]
    assert llm_errors(down) == ["empty"]


async def test_a_hung_llm_is_cancelled_without_a_barge_in_downstream():
    llm = ScriptedLLM([Step(("Too", " late."), wait_s=30.0), Step(("Back.",))])
    down, _ = await run_test(guarded(llm, CONFIG),
                             frames_to_send=[ctx(), SleepFrame(0.8), ctx(), SleepFrame(0.3)])
    assert said(down) == ["<One moment.>", "<Sorry, try again.>", "Back."]
    assert llm.cancelled == 1
    assert llm_errors(down) == ["timeout"]
    assert not any(isinstance(f, InterruptionFrame) for f in down)


async def test_a_stall_between_tokens_counts_as_a_timeout():
    class Stalling(ScriptedLLM):
        async def process_frame(self, frame, direction):
            if isinstance(frame, LLMContextFrame):
                await FrameProcessor.process_frame(self, frame, direction)
                await self.push_frame(LLMFullResponseStartFrame())
                await self.push_frame(LLMTextFrame("Well,"))
                try:
                    await asyncio.sleep(30)
                except asyncio.CancelledError:
                    self.cancelled += 1
                    raise
            else:
                await super().process_frame(frame, direction)

    llm = Stalling([])
    down, _ = await run_test(guarded(llm, CONFIG), frames_to_send=[ctx(), SleepFrame(0.8)])
    assert said(down) == ["Well,", "<Sorry, try again.>"]
    assert llm.cancelled == 1


async def test_a_barge_in_silences_the_guard_for_the_interrupted_request():
    llm = ScriptedLLM([Step(("Late.",), wait_s=30.0)])
    down, _ = await run_test(
        guarded(llm, CONFIG),
        frames_to_send=[ctx(), SleepFrame(0.05), InterruptionFrame(), SleepFrame(0.8)])
    assert said(down) == []
    assert llm.cancelled == 1
    assert any(isinstance(f, InterruptionFrame) for f in down), "a real barge-in goes on"


async def test_errors_from_below_the_guard_are_not_llm_failures():
    guard = TurnGuard(CONFIG)
    pipeline = Pipeline([guard.before, ScriptedLLM([Step(("Hi.",))]), guard.after, FailingTTS()])
    down, up = await run_test(pipeline, frames_to_send=[ctx(), SleepFrame(0.2)])
    assert said(down) == ["Hi."]
    assert any(isinstance(f, ErrorFrame) for f in up)


@pytest.mark.parametrize("kwargs", [{"fallback": " "}, {"filler_after_s": 0.0},
                                    {"timeout_s": -1.0}])
def test_config_checks_itself(kwargs):
    values = {"filler": "One moment.", "fallback": "Sorry.", **kwargs}
    with pytest.raises(AgentError):
        GuardConfig(**values)


async def test_an_interruption_from_below_also_silences_the_guard():
    """Regression: an InterruptionFrame broadcast upstream from below the LLM cancels the LLM
    too; its empty response end must not be taken for a failure."""
    guard = TurnGuard(CONFIG)
    llm = ScriptedLLM([Step(("Late.",), wait_s=30.0)])

    class Interrupter(FrameProcessor):
        async def process_frame(self, frame, direction):
            await super().process_frame(frame, direction)
            await self.push_frame(frame, direction)
            if isinstance(frame, LLMFullResponseStartFrame):
                await self.push_frame(InterruptionFrame(), FrameDirection.UPSTREAM)

    pipeline = Pipeline([guard.before, llm, guard.after, Interrupter()])
    down, _ = await run_test(pipeline, frames_to_send=[ctx(), SleepFrame(0.8)])
    assert said(down) == []
    assert llm.cancelled == 1
