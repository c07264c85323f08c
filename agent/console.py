"""An agent in text: the call's pipeline without the phone, for ``parley chat`` and ``parley test``.

    async with AgentConsole(spec) as console:     # the agent ``build_agent`` makes for a call
        turn = await console.started()            # the greeting
        turn = await console.say("how much is a cleaning")
        turn.said, turn.events, console.slots     # its words, its actions, the slots so far
        turn = await console.press("12345#")      # keypad presses (DTMF)

The agent is the one a call gets (:func:`agent.factory.build_agent`: the embedded agent or an LLM
backend, its tools and hand-offs), between the same frames a call's pipeline gives it: a caller
turn is the user message of an ``LLMContextFrame`` (as the user aggregator sends it), a key is an
``InputDTMFFrame``, and pipecat's assistant aggregator keeps the agent's side of the context (an
LLM's function calls go round through it). No speech: the text goes in as heard and the agent's
words come out as written, so a console run is the agent's own behaviour before any recogniser's
error. What a call's transport would carry out is reported instead: a transfer
(``TransferCallFrame``) and a hang-up (``EndWorkerFrame``, which also ends the console's call).

A step is over when the agent has answered (or the call ended) and nothing more came for
``settle_s``, with no tool call out; ``reply_timeout_s`` bounds it. ``tools`` replaces webhook
tools by canned replies (``MockToolBox``), so a test needs no service.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pipecat.audio.dtmf.types import KeypadEntry
from pipecat.frames.frames import (
    EndWorkerFrame,
    Frame,
    FunctionCallInProgressFrame,
    FunctionCallResultFrame,
    InputDTMFFrame,
    LLMContextFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    StartFrame,
    TTSSpeakFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.workers.runner import WorkerRunner

from agent.actions import State
from agent.embedded import EmbeddedAgentProcessor
from agent.errors import AgentError, ToolError
from agent.factory import build_agent
from agent.spec import AgentSpec
from agent.tools import ToolBox
from pipeline.frames import AgentEventFrame, TransferCallFrame

__all__ = ["AgentConsole", "ConsoleTurn", "MockToolBox"]

DTMF_KEYS = "0123456789*#"


class MockToolBox(ToolBox):
    """A toolbox whose webhook tools answer canned replies: ``{"lookup_order": {...}}``. A reply
    ``{"error": "..."}`` fails the call (``ToolError``). Arguments are still checked against the
    tool's schema; tools without a canned reply are called for real."""

    def __init__(self, spec: AgentSpec, replies: Mapping[str, dict[str, Any]], **kwargs: Any):
        super().__init__(spec, **kwargs)
        self._replies = dict(replies)

    async def call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        tool = self._spec.tool(name)
        if tool is None or tool.kind != "webhook" or name not in self._replies:
            return await super().call(name, arguments)
        from agent.schema import validate

        problems = validate(arguments, tool.input_schema)
        if problems:
            raise ToolError(f"tool {name}: " + "; ".join(problems))
        reply = self._replies[name]
        if set(reply) == {"error"}:
            raise ToolError(f"tool {name}: {reply['error']}")
        return dict(reply)


@dataclass
class ConsoleTurn:
    """What the agent did in one step: its words, and its actions as the call record keeps them
    (``{"kind": "slot" | "tool_call" | "transfer" | "hangup" | ..., "data": {...}}``)."""

    said: list[str] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    ended: bool = False

    @property
    def text(self) -> str:
        return " ".join(self.said)


class _Tap(FrameProcessor):
    """Where the console sees frames: at the top (upstream: transfers, hang-ups) and at the
    bottom (downstream: words and events)."""

    def __init__(self, console: AgentConsole, direction: FrameDirection):
        super().__init__()
        self._console = console
        self._direction = direction

    async def process_frame(self, frame: Frame, direction: FrameDirection):
        await super().process_frame(frame, direction)
        if direction is self._direction and not isinstance(frame, StartFrame):
            self._console._seen(frame)
        await self.push_frame(frame, direction)


class AgentConsole:
    """One call with an agent, in text (see the module docstring)."""

    def __init__(self, spec: AgentSpec, *, tools: Mapping[str, dict[str, Any]] | None = None,
                 env: Mapping[str, str] | None = None, call_sid: str = "console",
                 settle_s: float = 0.25, reply_timeout_s: float = 20.0):
        self.spec = spec
        self.slots: dict[str, str] = {}
        self._tools = tools
        self._env = env
        self._call_sid = call_sid
        self._settle_s = settle_s
        self._reply_timeout_s = reply_timeout_s
        self._context = LLMContext()
        self._turn = ConsoleTurn()
        self._text: list[str] = []           # the words of the reply in progress
        self._responding = False
        self._calls_out = 0                  # an LLM's function calls in flight
        self._last_frame_s = time.monotonic()
        self._changed = asyncio.Event()
        self._ended = False
        self._transferred = False
        self._agent: FrameProcessor | None = None
        self._worker: PipelineWorker | None = None
        self._run_task: asyncio.Task | None = None

    async def __aenter__(self) -> AgentConsole:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    @property
    def ended(self) -> bool:
        return self._ended

    async def start(self) -> None:
        """Build the agent and its pipeline and start them (the greeting is ``started()``)."""
        toolbox = MockToolBox(self.spec, self._tools) if self._tools else None
        self._agent = build_agent(self.spec, call_sid=self._call_sid, params={}, env=self._env,
                                  toolbox=toolbox)
        aggregators = LLMContextAggregatorPair(self._context)
        pipeline = Pipeline([_Tap(self, FrameDirection.UPSTREAM), self._agent,
                             _Tap(self, FrameDirection.DOWNSTREAM), aggregators.assistant()])
        self._worker = PipelineWorker(pipeline, enable_rtvi=False, idle_timeout_secs=None,
                                      cancel_on_idle_timeout=False,
                                      cancel_runner_on_idle_timeout=False)
        started = asyncio.Event()

        @self._worker.event_handler("on_pipeline_started")
        async def _on_started(worker, frame):
            started.set()

        runner = WorkerRunner(handle_sigint=False)
        await runner.add_workers(self._worker)
        self._run_task = asyncio.create_task(self._run(runner), name=f"console_{self._call_sid}")
        try:
            async with asyncio.timeout(self._reply_timeout_s):
                await started.wait()
        except TimeoutError as exc:
            await self.aclose()
            raise AgentError(f"the agent {self.spec.name!r} did not start within "
                             f"{self._reply_timeout_s:g} s") from exc

    async def _run(self, runner: WorkerRunner) -> None:
        try:
            await runner.run()
        finally:
            self._ended = True
            self._changed.set()

    async def started(self) -> ConsoleTurn:
        """What the agent said when the call started (its greeting)."""
        return await self._settle(expect_reply=True)

    async def say(self, text: str) -> ConsoleTurn:
        """One caller turn, as the recogniser would have heard it."""
        self._context.add_message({"role": "user", "content": text})
        await self._queue(LLMContextFrame(context=self._context))
        return await self._settle(expect_reply=True)

    async def press(self, keys: str) -> ConsoleTurn:
        """Keypad presses, one after another ("1", "12345#")."""
        bad = [k for k in keys if k not in DTMF_KEYS]
        if bad or not keys:
            raise AgentError(f"not keypad keys: {keys!r} (use 0-9, * and #)")
        for key in keys:
            await self._queue(InputDTMFFrame(button=KeypadEntry(key)))
        return await self._settle(expect_reply=False)

    async def aclose(self) -> None:
        """End the call (if the agent has not) and wait for its pipeline to stop."""
        task, self._run_task = self._run_task, None
        if task is None:
            return
        if not task.done() and self._worker is not None:
            await self._worker.cancel(reason="console closed")
        try:
            async with asyncio.timeout(10):
                await task
        except TimeoutError:
            task.cancel()

    # --- plumbing ---------------------------------------------------------------------------

    async def _queue(self, frame: Frame) -> None:
        if self._ended or self._worker is None:
            raise AgentError("the call has ended")
        self._last_frame_s = time.monotonic()
        await self._worker.queue_frame(frame)

    def _busy(self) -> bool:
        """A reply being written or a tool call out: the step is not over however quiet."""
        waiting_tool = (isinstance(self._agent, EmbeddedAgentProcessor)
                        and self._agent.conversation.state is State.WAITING_TOOL)
        return self._responding or self._calls_out > 0 or waiting_tool

    async def _settle(self, *, expect_reply: bool) -> ConsoleTurn:
        deadline = time.monotonic() + self._reply_timeout_s
        answered = not expect_reply
        while not self._ended and time.monotonic() < deadline:
            answered = answered or bool(self._turn.said) or bool(self._turn.events)
            quiet_s = time.monotonic() - self._last_frame_s
            if answered and not self._busy() and quiet_s >= self._settle_s:
                break
            self._changed.clear()
            wait_s = max(0.01, self._settle_s - quiet_s) if answered else deadline - time.monotonic()
            try:
                async with asyncio.timeout(max(0.01, min(wait_s, deadline - time.monotonic()))):
                    await self._changed.wait()
            except TimeoutError:
                pass
        self._flush_text()
        turn, self._turn = self._turn, ConsoleTurn()
        if self._transferred and not self._ended:   # the caller is with a person now
            await self.aclose()
            self._ended = True
        turn.ended = self._ended
        return turn

    def _flush_text(self) -> None:
        text = "".join(self._text).strip()
        self._text = []
        if text:
            self._turn.said.append(" ".join(text.split()))

    def _seen(self, frame: Frame) -> None:
        """A frame the agent sent: words, actions, or the end of the call."""
        self._last_frame_s = time.monotonic()
        if isinstance(frame, LLMFullResponseStartFrame):
            self._responding = True
        elif isinstance(frame, LLMTextFrame):
            self._text.append(frame.text)
        elif isinstance(frame, LLMFullResponseEndFrame):
            self._responding = False
            self._flush_text()
        elif isinstance(frame, TTSSpeakFrame):
            self._turn.said.append(frame.text)
        elif isinstance(frame, AgentEventFrame):
            self._turn.events.append({"kind": frame.kind, "data": dict(frame.data)})
            if frame.kind == "slot":
                self.slots[str(frame.data.get("name"))] = str(frame.data.get("value"))
        elif isinstance(frame, FunctionCallInProgressFrame):
            self._calls_out += 1
        elif isinstance(frame, FunctionCallResultFrame):
            self._calls_out = max(0, self._calls_out - 1)
        elif isinstance(frame, TransferCallFrame):
            self._transferred = True           # the transport would take the caller away
        elif isinstance(frame, EndWorkerFrame):
            pass                               # the worker ends the call: _run notes it
        self._changed.set()
