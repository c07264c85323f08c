"""The LLM agent over a real OpenAI-compatible streaming server on loopback.

The server (``harness.scripted_llm``) speaks the chat-completions SSE protocol for real;
the agent is what ``build_agent`` makes for ``llm.backend: openai``. A scripted caller sends a
turn (a user message and an ``LLMContextFrame``, as the user aggregator does) once the agent's
previous answer is complete; the assistant aggregator after the agent writes the answers and tool
results back into the context, exactly as in ``build_pipeline``.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import pytest
from aiohttp import web
from pipecat.frames.frames import (
    EndWorkerFrame,
    Frame,
    LLMContextFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    StartFrame,
    TTSSpeakFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.tests.utils import run_test

from agent.factory import build_agent
from harness.scripted_llm import ScriptedChatServer, ScriptedReply, tokenize
from agent.spec import parse_spec
from pipeline.frames import AgentEventFrame, AgentSpeechHeardFrame, TransferCallFrame
from pipeline.heard import HeardContextProcessor

SPEC = """
name: Riverside Dental reception
persona: You are the receptionist of Riverside Dental.
greeting: Thank you for calling Riverside Dental. How can I help?
knowledge:
  - question: What are your opening hours?
    answer: Monday to Friday, eight to six, and Saturday nine to one.
slots:
  - {name: name, kind: name, prompt: "May I have your name?"}
  - {name: phone, kind: phone, prompt: "What number can we call you back on?"}
  - {name: message, kind: text, prompt: "What is your message?", confirm: false}
tasks:
  - name: take_message
    triggers: [message]
    slots: [name, phone, message]
    tool: send_message
    done: Thank you, {name}. Someone will call you back at {phone_spoken}.
tools:
  - name: send_message
    kind: webhook
    url: ${WEBHOOK_URL}
    description: Pass a message on to the front desk.
    timeout_s: 2
    input_schema:
      type: object
      properties: {name: {type: string}, phone: {type: string}, message: {type: string}}
      required: [name, phone, message]
handoffs:
  - {name: front_desk, kind: dial, target: "+15550100"}
llm:
  backend: openai
  model: scripted-model
  base_url: ${LLM_URL}
  filler_after_s: FILLER_S
  timeout_s: TIMEOUT_S
messages:
  filler: One moment please.
  fallback: Sorry, I am having trouble right now.
  transfer: Please hold while I put you through.
  goodbye: Thank you for calling. Goodbye!
"""

FAQ = "We are open Monday to Friday, eight to six, and Saturday nine to one."


def load(llm_url: str, webhook_url: str = "http://127.0.0.1:9/none", *,
         filler_s: float = 0.3, timeout_s: float = 8.0, text: str = SPEC):
    text = text.replace("FILLER_S", str(filler_s)).replace("TIMEOUT_S", str(timeout_s))
    return parse_spec(text, source="test.yaml",
                      env={"LLM_URL": llm_url, "WEBHOOK_URL": webhook_url})


@dataclass
class Transcript:
    """What came out of the agent, in order: (seconds since start, kind, text)."""

    t0: float = field(default_factory=time.monotonic)
    events: list[tuple[float, str, str]] = field(default_factory=list)
    answers: int = 0
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def add(self, kind: str, text: str, *, answer: bool) -> None:
        self.events.append((time.monotonic() - self.t0, kind, text))
        self.answers += answer
        self.changed.set()

    async def wait_answers(self, n: int, timeout_s: float = 10.0) -> None:
        async with asyncio.timeout(timeout_s):
            while self.answers < n:
                self.changed.clear()
                await self.changed.wait()

    def spoken(self) -> list[str]:
        return [text for _, kind, text in self.events if kind in ("llm", "speak")]


class Listener(FrameProcessor):
    """Where the TTS stands: turns responses and spoken frames into a transcript."""

    def __init__(self, transcript: Transcript, filler: str):
        super().__init__()
        self._t = transcript
        self._filler = filler
        self._tokens: list[str] = []
        self.token_counts: list[int] = []

    async def process_frame(self, frame: Frame, direction: FrameDirection):
        await super().process_frame(frame, direction)
        if direction == FrameDirection.DOWNSTREAM:
            if isinstance(frame, LLMFullResponseStartFrame):
                self._tokens = []
            elif isinstance(frame, LLMTextFrame):
                self._tokens.append(frame.text)
            elif isinstance(frame, LLMFullResponseEndFrame) and "".join(self._tokens).strip():
                self.token_counts.append(len(self._tokens))
                self._t.add("llm", "".join(self._tokens).strip(), answer=True)
                self._tokens = []
            elif isinstance(frame, TTSSpeakFrame):
                self._t.add("speak", frame.text, answer=frame.text != self._filler)
        await self.push_frame(frame, direction)


class Caller(FrameProcessor):
    """At the start of the pipeline: says each line once the agent has answered the last.

    A line is its text, or ``(text, n)`` when the agent answers it with ``n`` utterances.
    """

    def __init__(self, context: LLMContext, transcript: Transcript,
                 lines: list[str | tuple[str, int]], heard: HeardContextProcessor | None = None):
        super().__init__()
        self._context = context
        self._t = transcript
        self._lines = lines
        self._heard = heard
        self.sent_at: list[float] = []

    async def process_frame(self, frame: Frame, direction: FrameDirection):
        await super().process_frame(frame, direction)
        await self.push_frame(frame, direction)
        if isinstance(frame, StartFrame):
            self.create_task(self._talk(), "scripted-caller")

    async def _talk(self) -> None:
        try:
            await self._script()
        except TimeoutError:
            # the agent never answered: end the call so the test fails on what was said
            await self.push_frame(EndWorkerFrame(), FrameDirection.UPSTREAM)
            raise

    async def _script(self) -> None:
        expected = 1  # the greeting
        await self._t.wait_answers(expected)
        for i, item in enumerate(self._lines):
            line, answers = (item, 1) if isinstance(item, str) else item
            if self._heard is not None and i == 1:
                # the caller cut into the FAQ answer: the transport reports what was heard
                await self._heard.queue_frame(AgentSpeechHeardFrame(
                    utterance=2, text_sent=FAQ, text_heard="We are open Monday to Friday",
                    complete=False), FrameDirection.UPSTREAM)
            self._context.add_message({"role": "user", "content": line})
            self.sent_at.append(time.monotonic() - self._t.t0)
            await self.push_frame(LLMContextFrame(context=self._context))
            expected += answers
            await self._t.wait_answers(expected)


async def _webhook_server(received: list[dict], delay_s: float = 0.0):
    async def handle(request: web.Request) -> web.Response:
        received.append(await request.json())
        await asyncio.sleep(delay_s)
        return web.json_response({"ticket": "T-7"})

    app = web.Application()
    app.router.add_post("/messages", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}/messages"


def agent_pipeline(spec, lines, transcript, *, heard=True):
    """caller -> heard -> build_agent(spec) -> listener -> assistant aggregator."""
    context = LLMContext()
    heard_proc = HeardContextProcessor()
    caller = Caller(context, transcript, lines, heard_proc if heard else None)
    listener = Listener(transcript, spec.messages.filler)
    agent = build_agent(spec, call_sid="CAtest", params={"caller_city": "Springfield"}, env={})
    # the listener stands where the TTS stands: between the agent and the assistant aggregator
    pipeline = Pipeline([caller, heard_proc, agent, listener,
                         LLMContextAggregatorPair(context).assistant()])
    return pipeline, caller, listener, context


async def test_receptionist_conversation_over_a_real_streaming_server():
    lines = [
        "What are your opening hours?",
        "I'd like to leave a message. I'm Ann Lee, 555 0100, please call me back.",
        "Are you open on Sundays?",
        "Is there parking?",
        "Can I talk to a person?",
        "Okay, goodbye.",
    ]
    script = [
        ScriptedReply(text=FAQ),
        ScriptedReply(tool_call=("take_message", {
            "name": "Ann Lee", "phone": "5550100", "message": "please call me back"})),
        ScriptedReply(text="Thank you, Ann. Someone will call you back at 5 5 5 0 1 0 0."),
        ScriptedReply(text="No, we are closed on Sundays.", stall_s=5.0),
        ScriptedReply(status=500),
        ScriptedReply(tool_call=("transfer_call", {"reason": "caller asked for a person"})),
        ScriptedReply(tool_call=("end_call", {})),
    ]
    received: list[dict] = []
    hook_runner, hook_url = await _webhook_server(received)
    transcript = Transcript()
    try:
        async with ScriptedChatServer(script) as server:
            spec = load(server.base_url, hook_url, filler_s=1.0)
            pipeline, caller, listener, _ = agent_pipeline(spec, lines, transcript)
            down, up = await run_test(pipeline, frames_to_send=[], send_end_frame=False)
    finally:
        await hook_runner.cleanup()

    # what the caller heard, in order: filler before the late answer, fallback after the 500
    assert transcript.spoken() == [
        spec.greeting,
        FAQ,
        "Thank you, Ann. Someone will call you back at 5 5 5 0 1 0 0.",
        "One moment please.",
        "No, we are closed on Sundays.",
        "Sorry, I am having trouble right now.",
        "Please hold while I put you through.",
        "Thank you for calling. Goodbye!",
    ]
    # tokens go on as they stream: nothing in the agent re-aggregates them into sentences
    assert listener.token_counts[0] == len(tokenize(FAQ))
    # the filler came filler_after_s after the stalled turn went in, long before the answer
    times = {text: t for t, _, text in transcript.events}
    sunday_sent = caller.sent_at[2]
    assert 0.95 <= times["One moment please."] - sunday_sent < 2.0
    assert times["No, we are closed on Sundays."] - sunday_sent >= 4.9

    # call control went upstream: a transfer to the front desk, then the end of the call
    transfers = [f for f in up if isinstance(f, TransferCallFrame)]
    assert [(t.kind, t.target) for t in transfers] == [("dial", "+15550100")]
    assert any(isinstance(f, EndWorkerFrame) for f in up)

    # the call record: slots, tool calls with timings, the LLM failure, transfer, hang-up
    events = [f for f in down if isinstance(f, AgentEventFrame)]
    slots = {e.data["name"]: e.data["value"] for e in events if e.kind == "slot"}
    assert slots == {"name": "Ann Lee", "phone": "5550100", "message": "please call me back"}
    calls = [e.data for e in events if e.kind == "tool_call"]
    assert [c["name"] for c in calls] == ["take_message", "transfer_call", "end_call"]
    assert calls[0]["result"]["ticket"] == "T-7" and calls[0]["duration_ms"] >= 0
    assert [e.data["reason"] for e in events if e.kind == "llm_error"] == ["error"]
    assert [e.kind for e in events if e.kind in ("transfer", "hangup")] == ["transfer", "hangup"]
    assert received == [{"name": "Ann Lee", "phone": "5550100", "message": "please call me back"}]

    # what the server was asked: prompt, tools, tool results, the heard-only history
    first = server.requests[0]
    assert first["stream"] is True and first["model"] == "scripted-model"
    system = first["messages"][0]
    assert system["role"] == "system" and "eight to six" in system["content"]
    assert "caller_city: Springfield" in system["content"]
    offered = {t["function"]["name"] for t in first["tools"]}
    assert offered == {"take_message", "end_call", "transfer_call"}  # send_message: via the task
    second = server.requests[1]["messages"]
    assert {"role": "assistant", "content": "We are open Monday to Friday"} in second
    assert FAQ not in [m.get("content") for m in second]
    after_tool = server.requests[2]["messages"]
    tool_msgs = [m for m in after_tool if m["role"] == "tool"]
    assert len(tool_msgs) == 1 and '"status": "done"' in tool_msgs[0]["content"]
    # after the 500 the call went on: the next turn reached the server as usual
    assert server.requests[5]["messages"][-1] == {"role": "user",
                                                  "content": "Can I talk to a person?"}
    assert len(server.requests) == 7


async def test_a_silent_llm_is_cancelled_and_the_next_turn_works():
    script = [
        ScriptedReply(text="This answer comes far too late.", stall_s=5.0),
        ScriptedReply(text="Yes, there is free parking behind the building."),
        ScriptedReply(tool_call=("end_call", {})),
    ]
    transcript = Transcript()
    async with ScriptedChatServer(script) as server:
        spec = load(server.base_url, filler_s=0.2, timeout_s=0.6)
        lines = ["When do you open?", "Is there parking?", "Bye."]
        pipeline, caller, _, _ = agent_pipeline(spec, lines, transcript, heard=False)
        started = time.monotonic()
        down, up = await run_test(pipeline, frames_to_send=[], send_end_frame=False)
        elapsed_s = time.monotonic() - started
        await asyncio.sleep(0.05)  # the server's handler sees the disconnect
        abandoned = server.abandoned

    assert transcript.spoken() == [
        spec.greeting,
        "One moment please.",
        "Sorry, I am having trouble right now.",
        "Yes, there is free parking behind the building.",
        "Thank you for calling. Goodbye!",
    ]
    times = {text: t for t, _, text in transcript.events}
    assert 0.55 <= times["Sorry, I am having trouble right now."] - caller.sent_at[0] < 2.0
    assert elapsed_s < 4.0, "the stalled stream was waited out instead of cancelled"
    assert abandoned == 1
    assert [e.data["reason"] for e in down
            if isinstance(e, AgentEventFrame) and e.kind == "llm_error"] == ["timeout"]
    # the cancel never reached the TTS side as a barge-in
    from pipecat.frames.frames import InterruptionFrame
    assert not any(isinstance(f, InterruptionFrame) for f in down)


@pytest.mark.parametrize("missing", ["model", "base_url"])
def test_openai_backend_needs_a_model_and_an_endpoint(missing):
    from agent.errors import LLMError

    line = {"model": "  model: scripted-model\n", "base_url": "  base_url: ${LLM_URL}\n"}[missing]
    spec = load("http://127.0.0.1:9/v1", text=SPEC.replace(line, ""))
    with pytest.raises(LLMError, match=missing):
        build_agent(spec, call_sid="CA1", params={}, env={})


async def test_a_failing_tool_is_recorded_and_the_llm_hears_the_error():
    script = [
        ScriptedReply(tool_call=("take_message", {
            "name": "Ann Lee", "phone": "5550100", "message": "call me"})),
        ScriptedReply(text="Sorry, I could not pass that on. Please call again later."),
        ScriptedReply(tool_call=("end_call", {})),
    ]
    transcript = Transcript()
    async with ScriptedChatServer(script) as server:
        # nothing listens on port 9 (discard): the webhook fails at once, twice (one retry)
        spec = load(server.base_url, "http://127.0.0.1:9/messages")
        lines = ["Please take a message: Ann Lee, 555 0100, call me.", "Bye."]
        pipeline, _, _, _ = agent_pipeline(spec, lines, transcript, heard=False)
        down, _ = await run_test(pipeline, frames_to_send=[], send_end_frame=False)

    assert transcript.spoken()[1] == "Sorry, I could not pass that on. Please call again later."
    call = next(f.data for f in down if isinstance(f, AgentEventFrame) and f.kind == "tool_call")
    assert call["name"] == "take_message" and "send_message" in call["error"]
    assert "result" not in call
    tool_msg = next(m for m in server.requests[1]["messages"] if m["role"] == "tool")
    assert "cannot connect" in tool_msg["content"]


async def test_a_slow_tool_gets_the_filler_while_the_caller_waits():
    script = [
        ScriptedReply(tool_call=("take_message", {
            "name": "Ann Lee", "phone": "5550100", "message": "call me"})),
        ScriptedReply(text="Done, Ann."),
        ScriptedReply(tool_call=("end_call", {})),
    ]
    received: list[dict] = []
    hook_runner, hook_url = await _webhook_server(received, delay_s=0.8)
    transcript = Transcript()
    try:
        async with ScriptedChatServer(script) as server:
            spec = load(server.base_url, hook_url, filler_s=0.3)
            lines = ["Take a message: Ann Lee, 555 0100, call me.", "Bye."]
            pipeline, caller, _, _ = agent_pipeline(spec, lines, transcript, heard=False)
            await run_test(pipeline, frames_to_send=[], send_end_frame=False)
    finally:
        await hook_runner.cleanup()
    assert transcript.spoken() == [spec.greeting, "One moment please.", "Done, Ann.",
                                   "Thank you for calling. Goodbye!"]
    filler_at = next(t for t, _, text in transcript.events if text == "One moment please.")
    assert 0.25 <= filler_at - caller.sent_at[0] < 0.8  # while the webhook was still busy
