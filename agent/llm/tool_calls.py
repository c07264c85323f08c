"""The LLM's function calls: the spec's tools, its tasks, and the built-in end_call / transfer_call.

    runner = ToolRunner(spec, toolbox)
    runner.register(llm)                 # one pipecat function handler per name, with timeouts
    runner.tools_schema()                # what the LLM is offered (pipecat ToolsSchema)

The LLM is offered:

- every tool of the spec (``ToolBox.schemas()``) but those a task calls; webhook tools run through ``ToolBox.call``
  (which validates the arguments and owns the HTTP timeout and retries), the result goes back to
  the LLM, which then phrases it for the caller;
- one function per task (``take_message(name, phone, message)``): the slots arrive as
  arguments, each is recorded as ``AgentEventFrame(kind="slot")``, the task's tool (if any) is
  called with them, and the LLM gets the task's ``done`` text to say;
- ``end_call`` and ``transfer_call`` when the spec has no tool of that kind (a transfer needs a
  hand-off in the spec).

Every call is bounded (the tool's ``timeout_s`` times its attempts, plus a margin; pipecat's
function-call timeout is the backstop) and recorded as ``AgentEventFrame(kind="tool_call",
data={"name", "arguments", "result" | "error", "duration_ms"})``. Ending and transferring do not
go back to the LLM: the canned message (``messages.goodbye`` / ``messages.transfer``)
is spoken, then ``EndWorkerFrame`` / ``TransferCallFrame`` goes upstream.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from pipecat.adapters.llm.schemas.function_schema import FunctionSchema
from pipecat.adapters.llm.schemas.tools_schema import ToolsSchema
from pipecat.frames.frames import FunctionCallResultProperties, TTSSpeakFrame
from pipecat.processors.frame_processor import FrameDirection
from pipecat.services.llm_service import FunctionCallParams, LLMService

from agent.errors import AgentError, ToolError
from agent.spec import AgentSpec, SlotSpec
from agent.tools import ToolBox, action_frames, tool_call_event
from pipeline.frames import AgentEventFrame

log = logging.getLogger(__name__)

END_CALL = "end_call"
TRANSFER_CALL = "transfer_call"
_MARGIN_S = 0.5

_SLOT_SCHEMAS: dict[str, dict] = {
    "name": {"type": "string", "description": "the person's name"},
    "phone": {"type": "string", "description": "the phone number, digits only"},
    "text": {"type": "string"},
    "number": {"type": "string", "description": "digits only"},
    "date": {"type": "string", "description": "an ISO date, YYYY-MM-DD"},
    "yes_no": {"type": "boolean"},
}


def _function(name: str, description: str, properties: dict, required: list[str]) -> dict:
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "properties": properties, "required": required},
    }}


def _slot_property(slot: SlotSpec) -> dict:
    prop = dict(_SLOT_SCHEMAS.get(slot.kind, {"type": "string"}))
    prop["description"] = f"{slot.prompt} ({prop.get('description', slot.kind)})"
    return prop


def _spoken_digits(value: Any) -> str:
    """Digits one by one ("555 0100" -> "5 5 5 0 1 0 0"); other values as they are."""
    digits = [c for c in str(value) if c.isdigit()]
    return " ".join(digits) if digits else str(value)


def fill(template: str, values: dict[str, Any]) -> str:
    """``template`` with ``{name}`` and ``{name_spoken}`` filled; unknown names stay blank."""
    table = {k: v for k, v in values.items()}
    table.update({f"{k}_spoken": _spoken_digits(v) for k, v in values.items()})

    class _Blank(dict):
        def __missing__(self, key):
            return ""

    return template.format_map(_Blank(table))


class ToolRunner:
    """Runs what the LLM calls and tells the pipeline what happened."""

    def __init__(self, spec: AgentSpec, toolbox: ToolBox):
        self._spec = spec
        self._toolbox = toolbox
        kinds = {tool.kind for tool in spec.tools}
        self._builtin_end = "end_call" not in kinds
        self._builtin_transfer = "transfer" not in kinds and bool(spec.handoffs)
        self._schemas = self._build_schemas()

    # --- what the LLM is offered -----------------------------------------------------------

    def _build_schemas(self) -> list[dict]:
        # a tool that a task calls is reached through the task, which records the slots
        by_task = {t.tool for t in self._spec.tasks if t.tool and t.slots}
        schemas = [s for s in self._toolbox.schemas()
                   if (s.get("function") or s)["name"] not in by_task]
        taken = {(s.get("function") or s)["name"] for s in schemas}
        for task in self._spec.tasks:
            if task.name in taken or not task.slots:
                continue
            slots = [self._spec.slot(name) for name in task.slots]
            schemas.append(_function(
                task.name,
                f"Complete '{task.name.replace('_', ' ')}' once the caller has given "
                + ", ".join(s.name for s in slots) + ".",
                {s.name: _slot_property(s) for s in slots},
                [s.name for s in slots],
            ))
        if self._builtin_end and END_CALL not in taken:
            schemas.append(_function(
                END_CALL, "End the call when the caller says goodbye or needs nothing else. "
                "The goodbye is said for you.", {}, []))
        if self._builtin_transfer and TRANSFER_CALL not in taken:
            names = [h.name for h in self._spec.handoffs]
            props: dict[str, dict] = {"reason": {"type": "string",
                                                 "description": "why, in a few words"}}
            if len(names) > 1:
                props["to"] = {"type": "string", "enum": names}
        # ToolBox's dtmf tools need nothing here: action_frames turns their result into tones
            schemas.append(_function(
                TRANSFER_CALL, "Transfer the caller to a person when they ask for one or you "
                "cannot help. The hold message is said for you.", props, []))
        return schemas

    def schemas(self) -> list[dict]:
        """OpenAI-style function schemas of everything the LLM may call."""
        return list(self._schemas)

    def tools_schema(self) -> ToolsSchema:
        functions = []
        for schema in self._schemas:
            fn = schema.get("function") or schema
            params = fn.get("parameters") or {}
            functions.append(FunctionSchema(
                name=fn["name"], description=fn.get("description", ""),
                properties=params.get("properties", {}), required=params.get("required", []),
            ))
        return ToolsSchema(standard_tools=functions)

    def register(self, llm: LLMService[Any]) -> None:
        for schema in self._schemas:
            name = (schema.get("function") or schema)["name"]
            llm.register_function(name, self._handle, cancel_on_interruption=True,
                                  timeout_secs=self._budget_s(name) + _MARGIN_S)

    def _budget_s(self, name: str) -> float:
        tool = self._spec.tool(name)
        task = next((t for t in self._spec.tasks if t.name == name), None)
        if task is not None and task.tool:
            tool = self._spec.tool(task.tool)
        if tool is None:
            return 1.0
        return tool.timeout_s * (1 + max(0, tool.retries)) + _MARGIN_S

    # --- running a call --------------------------------------------------------------------

    async def _handle(self, params: FunctionCallParams) -> None:
        name, arguments = params.function_name, dict(params.arguments)
        llm = params.llm
        started_ns = time.perf_counter_ns()
        error: str | None = None
        try:
            async with asyncio.timeout(self._budget_s(name)):
                result = await self._run(name, arguments, llm)
        except AgentError as exc:  # ToolError and its kin: the LLM hears what went wrong
            error = str(exc)
        except TimeoutError:
            error = f"{name}: no result within {self._budget_s(name):g} s"
        if error is not None:
            result = {"error": error}
        event = tool_call_event(name, arguments, result=None if error else result, error=error,
                                started_ns=started_ns)
        log.info("tool %s: %s in %.0f ms", name, "error" if error else "ok",
                 event.data["duration_ms"])
        await llm.push_frame(event)
        action = result.get("action")
        follow_up = action_frames(result)
        if action == "end_call":
            follow_up.insert(0, (TTSSpeakFrame(self._spec.messages.goodbye),
                                 FrameDirection.DOWNSTREAM))
        elif action == "transfer":
            follow_up.insert(0, (TTSSpeakFrame(self._spec.messages.transfer),
                                 FrameDirection.DOWNSTREAM))
        # ending and transferring are the last word; everything else goes back to the LLM
        run_llm = action not in ("end_call", "transfer")
        await params.result_callback(
            result, properties=FunctionCallResultProperties(run_llm=run_llm))
        for frame, direction in follow_up:
            await llm.push_frame(frame, direction)

    async def _run(self, name: str, arguments: dict, llm: LLMService) -> dict:
        if name == END_CALL and self._builtin_end:
            return {"action": "end_call", "reason": str(arguments.get("reason", ""))}
        if name == TRANSFER_CALL and self._builtin_transfer:
            handoff = self._spec.handoff(arguments.get("to") or None) or self._spec.handoff()
            if handoff is None:
                raise ToolError(f"{TRANSFER_CALL}: the spec has no hand-off target")
            return {"action": "transfer", "kind": handoff.kind, "target": handoff.target,
                    "handoff": handoff.name, "reason": str(arguments.get("reason", ""))}
        task = next((t for t in self._spec.tasks if t.name == name), None)
        if task is not None and self._spec.tool(name) is None:
            return await self._run_task(task, arguments, llm)
        return await self._toolbox.call(name, arguments)

    async def _run_task(self, task, arguments: dict, llm: LLMService) -> dict:
        missing = [s for s in task.slots if arguments.get(s) in (None, "")]
        if missing:
            raise ToolError(f"{task.name}: missing {', '.join(missing)}")
        values = {s: arguments[s] for s in task.slots}
        for slot, value in values.items():
            await llm.push_frame(AgentEventFrame(kind="slot", data={"name": slot, "value": value}))
        result: dict[str, Any] = {}
        if task.tool:
            reply = await self._toolbox.call(task.tool, values)
            result = dict(reply) if isinstance(reply, dict) else {"result": reply}
        say = fill(task.done, {**values, **result}) if task.done else ""
        return {**result, "status": "done", **({"say": say} if say else {})}
