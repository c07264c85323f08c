"""The echo agent inside a real pipecat pipeline: greeting, answer, goodbye ends the call."""

from pipecat.frames.frames import (
    EndWorkerFrame,
    LLMContextFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
)
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.tests.utils import run_test

from agent.echo import EchoAgentConfig, EchoAgentProcessor


def _context(user_text: str) -> LLMContextFrame:
    ctx = LLMContext()
    ctx.add_message({"role": "user", "content": user_text})
    return LLMContextFrame(context=ctx)


async def test_greets_then_answers_what_it_heard():
    down, up = await run_test(
        EchoAgentProcessor(),
        frames_to_send=[_context("check my order")],
        expected_down_frames=[
            LLMFullResponseStartFrame, LLMTextFrame, LLMFullResponseEndFrame,  # greeting
            LLMFullResponseStartFrame, LLMTextFrame, LLMFullResponseEndFrame,  # answer
        ],
    )
    texts = [f.text for f in down if isinstance(f, LLMTextFrame)]
    assert texts == [EchoAgentConfig().greeting, "You said: check my order."]
    assert not any(isinstance(f, EndWorkerFrame) for f in up)


async def test_goodbye_says_farewell_and_ends_the_call():
    down, up = await run_test(
        EchoAgentProcessor(EchoAgentConfig(greet_on_start=False)),
        frames_to_send=[_context("okay goodbye")],
        expected_down_frames=[LLMFullResponseStartFrame, LLMTextFrame, LLMFullResponseEndFrame],
        expected_up_frames=[EndWorkerFrame],
    )
    assert [f.text for f in down if isinstance(f, LLMTextFrame)] == [EchoAgentConfig().farewell]
