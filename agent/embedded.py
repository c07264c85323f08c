"""The embedded agent: follows an agent spec with no network, no keys and no model.

    agent = EmbeddedAgentProcessor(spec, ToolBox(spec))

A thin pipecat processor around :class:`agent.conversation.Conversation`. It stands where an
LLM service stands (like agent/echo.py): caller turns arrive as ``LLMContextFrame`` (the last
user message is the transcript) and keypresses as ``InputDTMFFrame``; each answer goes out as
``LLMFullResponseStartFrame`` / ``LLMTextFrame`` / ``LLMFullResponseEndFrame``.

Other actions become frames too: a transfer pushes ``TransferCallFrame`` upstream (after the
transfer message), ending pushes ``EndWorkerFrame`` upstream (after the farewell, so it plays),
filled slots, tool calls, transfers and hang-ups go downstream as ``AgentEventFrame`` for the
call record. A warm transfer's frame carries the summary for the person; until the transport's
``TransferOutcomeFrame`` the caller is on hold (no silence prompts), then the agent is done
(joined) or offers a message (nobody answered). After every step the conversation's expectation of the caller's next words goes
upstream to the recogniser as a ``RecognitionHintsFrame`` (when it changed), and the
recogniser's ``RecognitionFrame`` (a final's confidence and alternatives) is handed to the
conversation with the turn it belongs to. Tool calls run in a task, with a deadline, while frames keep flowing; caller input
that arrives meanwhile waits and is handled, in order, once the tool has answered.

A caller who goes on talking was not answered: when a turn ends inside a sentence ("hello," then
a pause, then "I would like to check my order") and the caller speaks again before the reply has
played ``CONTINUATION_S`` (barge-in stops that reply), the agent takes the turn back
(``Conversation.rollback``) and hears the two utterances as one; otherwise it would answer the
fragment and then run one turn behind. Only a turn whose actions were all speech is taken back
(a slot filled, a tool call, a transfer or a goodbye stands), and the joined turn goes to the
call record as a ``continued`` event.

Timers: the silence timer starts when the agent stops speaking (``BotStoppedSpeakingFrame``, which
the output transport sends both ways) or the caller stops speaking without a turn following, and
stops when anyone starts speaking or a turn arrives; at ``limits.silence_prompt_s`` the
conversation hears a silence event. The call-length timer ends the call at ``limits.max_call_s``.
Both are cancelled on ``EndFrame`` / ``CancelFrame``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from pipecat.frames.frames import (
    BotStartedSpeakingFrame,
    BotStoppedSpeakingFrame,
    CancelFrame,
    EndFrame,
    EndWorkerFrame,
    Frame,
    InputDTMFFrame,
    LLMContextFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    StartFrame,
    UserStartedSpeakingFrame,
    UserStoppedSpeakingFrame,
    VADUserStartedSpeakingFrame,
)
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor

from agent.conversation import (
    Action, CallTool, Checkpoint, Conversation, EndCall, Say, SlotFilled, Transfer,
)
from agent.echo import last_user_text
from agent.errors import ToolError
from agent.semantic import SentenceEncoder
from agent.spec import AgentSpec
from agent.tools import ToolBox, action_frames, tool_call_event
from pipeline.frames import (
    AgentEventFrame,
    Hints,
    Recognition,
    RecognitionFrame,
    RecognitionHintsFrame,
    TransferCallFrame,
    TransferOutcomeFrame,
)

__all__ = ["CONTINUATION_S", "EmbeddedAgentProcessor"]

log = logging.getLogger(__name__)

CONTINUATION_S = 0.5
"""A caller who starts speaking again before the reply to their last turn has played this long
(or before it started) was still talking, not answering it: the VAD reports speech 100 ms after
it starts, and a person needs more than the first few hundred milliseconds of a reply to react
to what it says."""


@dataclass
class _Answered:
    """The caller's last turn, while its reply may still go unheard."""

    text: str
    before: Checkpoint              # the dialogue before this turn (before its first part)
    playing_since: float | None = None   # monotonic s the reply started playing
    cut: bool = False               # the caller spoke again before hearing the reply


class EmbeddedAgentProcessor(FrameProcessor):
    """Greets, answers from the spec's knowledge, fills slots, calls tools, hands off, ends."""

    def __init__(self, spec: AgentSpec, toolbox: ToolBox | None = None, *,
                 call_sid: str = "", greet_on_start: bool = True,
                 encoder: SentenceEncoder | None = None, **kwargs):
        """``encoder``: match questions by meaning (``agent.semantic``); None: by words."""
        super().__init__(**kwargs)
        self._spec = spec
        self._toolbox = toolbox if toolbox is not None else ToolBox(spec)
        self._call_sid = call_sid
        self._greet = greet_on_start
        self._encoder = encoder
        self.conversation = Conversation(spec, encoder)
        self._silence_task: asyncio.Task | None = None
        self._limit_task: asyncio.Task | None = None
        self._tool_task: asyncio.Task | None = None
        self._deferred: list[Callable[[], list[Action]]] = []
        self._closed = False
        self._spoke = False
        self._hints: Hints | None = None
        self._heard: list[Recognition] = []
        self._answered: _Answered | None = None
        self._holding = False   # a warm transfer is ringing the person: the caller is on hold

    async def process_frame(self, frame: Frame, direction: FrameDirection):
        await super().process_frame(frame, direction)
        if isinstance(frame, StartFrame):
            await self.push_frame(frame, direction)
            self._limit_task = self.create_task(self._call_limit(), name="call_limit")
            if self._greet:
                await self._run(self.conversation.start())
        elif isinstance(frame, RecognitionFrame):
            self._heard.append(frame.recognition)
            self._heard = self._heard[-8:]
        elif isinstance(frame, LLMContextFrame):
            await self._stop_silence_timer()
            await self._hear(last_user_text(frame.context.get_messages()))
        elif isinstance(frame, InputDTMFFrame):
            await self._stop_silence_timer()
            self._answered = None
            await self.push_frame(frame, direction)
            key = str(frame.button.value)
            self._spoke = False
            await self._feed(lambda: self.conversation.dtmf(key))
            if not self._spoke:   # a digit typed into a number: the caller still owes us input
                await self._start_silence_timer()
        elif isinstance(frame, TransferOutcomeFrame):
            await self.push_frame(frame, direction)
            await self._transfer_over(frame)
        elif isinstance(frame, (EndFrame, CancelFrame)):
            await self._shutdown()
            await self.push_frame(frame, direction)
        else:
            if isinstance(frame, (UserStartedSpeakingFrame, VADUserStartedSpeakingFrame,
                                  BotStartedSpeakingFrame)):
                await self._stop_silence_timer()
            elif isinstance(frame, (BotStoppedSpeakingFrame, UserStoppedSpeakingFrame)):
                await self._start_silence_timer()
            self._follow_reply(frame)
            await self.push_frame(frame, direction)

    # --- a turn the caller had not finished ---------------------------------------------------

    async def _hear(self, text: str) -> None:
        """A caller turn; joined to the last one when the caller talked over its reply."""
        prev, self._answered = self._answered, None
        heard: Recognition | None
        if self._tool_task is not None:           # waits for the tool: nothing to take back
            heard = self._recognition_of(text)
            await self._encode(text)
            await self._feed(lambda: self.conversation.hear(text, heard))
            return
        if prev is not None and prev.cut and text.strip():
            self.conversation.rollback(prev.before)
            log.info("call %s: the caller went on before hearing the reply; this utterance is "
                     "joined to the turn before", self._call_sid)
            await self.push_frame(AgentEventFrame(kind="continued", data={
                "previous": prev.text, "text": text}))
            if not text.startswith(prev.text):
                text = f"{prev.text} {text}"
            heard = None                          # two utterances: no one confidence
            before = prev.before
        else:
            heard = self._recognition_of(text)
            before = self.conversation.checkpoint()
        await self._encode(text)
        actions = self.conversation.hear(text, heard)
        if text.strip() and actions and all(isinstance(a, Say) for a in actions):
            self._answered = _Answered(text, before)
        await self._run(actions)

    async def _encode(self, text: str) -> None:
        """Embed ``text`` off the event loop; it is cached, so the conversation's own lookup
        does not block."""
        if self._encoder is not None and text.strip():
            await asyncio.to_thread(self._encoder.encode, [text])

    def _follow_reply(self, frame: Frame) -> None:
        """Note when the last turn's reply starts playing, and whether the caller heard it."""
        ans = self._answered
        if ans is None or ans.cut:
            return
        if isinstance(frame, BotStartedSpeakingFrame):
            if ans.playing_since is None:
                ans.playing_since = time.monotonic()
        elif isinstance(frame, (UserStartedSpeakingFrame, VADUserStartedSpeakingFrame)):
            if ans.playing_since is None or time.monotonic() - ans.playing_since < CONTINUATION_S:
                ans.cut = True
            else:
                self._answered = None
        elif isinstance(frame, BotStoppedSpeakingFrame):
            self._answered = None                 # the reply played out: it was heard

    # --- conversation plumbing ------------------------------------------------------------

    async def _feed(self, step: Callable[[], list[Action]]) -> None:
        """Run one conversation step now, or after the tool call in flight."""
        if self._tool_task is not None:
            self._deferred.append(step)
            return
        await self._run(step())

    def _recognition_of(self, text: str) -> Recognition | None:
        """The recogniser's result for this turn: the latest whose text is the turn's (a turn
        of several utterances has no single confidence: None); it and older ones are used up."""
        want = " ".join(text.split())
        for i in range(len(self._heard) - 1, -1, -1):
            if " ".join(self._heard[i].text.split()) == want:
                found, self._heard = self._heard[i], self._heard[i + 1:]
                return found
        return None

    async def _send_hints(self) -> None:
        hints = self.conversation.expectation()
        if hints != self._hints:
            self._hints = hints
            await self.push_frame(RecognitionHintsFrame(hints), FrameDirection.UPSTREAM)

    async def _run(self, actions: list[Action]) -> None:
        await self._run_actions(actions)
        if not self._closed:
            await self._send_hints()

    async def _run_actions(self, actions: list[Action]) -> None:
        for action in actions:
            if isinstance(action, Say):
                self._spoke = True
                await self._stop_silence_timer()
                await self.push_frame(LLMFullResponseStartFrame())
                await self.push_frame(LLMTextFrame(action.text))
                await self.push_frame(LLMFullResponseEndFrame())
            elif isinstance(action, SlotFilled):
                await self.push_frame(AgentEventFrame(
                    kind="slot", data={"name": action.name, "value": action.value}))
            elif isinstance(action, Transfer):
                h = action.handoff
                log.info("call %s: transferring to %s (%s)", self._call_sid, h.name, h.kind)
                await self.push_frame(AgentEventFrame(kind="transfer", data={
                    "handoff": h.name, "kind": h.kind, "target": h.target,
                    "reason": action.reason}))
                warm = h.mode == "warm"
                if warm:             # no silence prompts to a caller who is on hold
                    self._holding = True
                    await self._stop_silence_timer()
                await self.push_frame(TransferCallFrame(
                    kind=h.kind, target=h.target, reason=action.reason, mode=h.mode,
                    summary=self.conversation.transfer_summary() if warm else "",
                    timeout_s=h.timeout_s, hold_audio=h.hold_audio), FrameDirection.UPSTREAM)
            elif isinstance(action, EndCall):
                log.info("call %s: ending the call (%s)", self._call_sid, action.reason)
                await self.push_frame(AgentEventFrame(kind="hangup",
                                                      data={"reason": action.reason}))
                await self.push_frame(EndWorkerFrame(), FrameDirection.UPSTREAM)
            elif isinstance(action, CallTool):
                self._tool_task = self.create_task(self._call_tool(action),
                                                   name=f"tool_{action.name}")

    async def _transfer_over(self, frame: TransferOutcomeFrame) -> None:
        """A warm transfer ended: joined (the agent's part is over) or the caller is back."""
        log.info("call %s: warm transfer %s", self._call_sid, frame.outcome)
        self._holding = False
        await self.push_frame(AgentEventFrame(kind="transfer_outcome", data={
            "outcome": frame.outcome, "detail": frame.detail}))
        await self._run(self.conversation.transfer_outcome(frame.outcome))

    async def _call_tool(self, action: CallTool) -> None:
        tool = self._spec.tool(action.name)
        budget_s = (tool.timeout_s * (1 + tool.retries) + 1.0) if tool else 5.0
        started_ns = time.perf_counter_ns()
        result: dict | None = None
        error: str | None = None
        try:
            async with asyncio.timeout(budget_s):
                result = await self._toolbox.call(action.name, action.arguments)
        except ToolError as exc:
            error = str(exc)
        except TimeoutError:
            error = f"tool {action.name}: no answer within {budget_s:g} s"
        if error is not None:
            log.warning("call %s: %s", self._call_sid, error)
        await self.push_frame(tool_call_event(action.name, action.arguments, result=result,
                                              error=error, started_ns=started_ns))
        self._tool_task = None
        if result is not None and result.get("action"):
            for frame, direction in action_frames(result):
                await self.push_frame(frame, direction)
            return
        if result is not None:
            await self._run(self.conversation.tool_result(action.name, result))
        else:
            await self._run(self.conversation.tool_failed(action.name, error or ""))
        while self._deferred and self._tool_task is None:
            await self._run(self._deferred.pop(0)())

    # --- timers ---------------------------------------------------------------------------

    async def _start_silence_timer(self) -> None:
        await self._stop_silence_timer()
        if self._closed or self._holding or self._tool_task is not None:
            return
        self._silence_task = self.create_task(self._silence_after(), name="silence")

    async def _stop_silence_timer(self) -> None:
        task, self._silence_task = self._silence_task, None
        if task is not None and task is not asyncio.current_task():
            await self.cancel_task(task)

    async def _silence_after(self) -> None:
        await asyncio.sleep(self._spec.limits.silence_prompt_s)
        self._silence_task = None
        self._answered = None
        await self._feed(self.conversation.silence)

    async def _call_limit(self) -> None:
        await asyncio.sleep(self._spec.limits.max_call_s)
        self._limit_task = None
        await self._feed(self.conversation.timeout)

    async def _shutdown(self) -> None:
        self._closed = True
        await self._stop_silence_timer()
        for name in ("_limit_task", "_tool_task"):
            task = getattr(self, name)
            setattr(self, name, None)
            if task is not None and task is not asyncio.current_task():
                await self.cancel_task(task)
        await self._toolbox.aclose()
