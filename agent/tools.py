"""Tools an agent can call: HTTP webhooks from the spec, and the call-control built-ins.

    toolbox = ToolBox(spec)                       # owns an aiohttp session unless given one
    result = await toolbox.call("lookup_order", {"order_number": "12345"})   # -> dict
    toolbox.schemas()                             # OpenAI-style function schemas for LLM backends
    await toolbox.aclose()

A webhook tool validates its arguments against the tool's ``input_schema`` (nothing is sent when
they do not match), POSTs them as JSON (or GETs them as query parameters) with ``timeout_s`` per
attempt, retries ``retries`` times on a timeout, a connection error or a 5xx reply (never on a
4xx), and returns the JSON object the service answered. Every failure raises
:class:`agent.errors.ToolError` (or :class:`~agent.errors.ToolArgumentsError`) naming the tool.

Built-in kinds do no I/O; they return what the caller's processor must do, and
:func:`action_frames` turns that into pipecat frames:

- ``end_call`` -> ``{"action": "end_call"}``: ``EndWorkerFrame`` upstream;
- ``transfer`` -> ``{"action": "transfer", "kind", "target", "handoff", "reason"}``:
  ``TransferCallFrame`` upstream;
- ``dtmf`` -> ``{"action": "dtmf", "digits"}``: ``OutputDTMFFrame`` downstream (tones in-band).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from typing import Any

import aiohttp
from pipecat.frames.frames import EndWorkerFrame, Frame, OutputDTMFFrame
from pipecat.processors.frame_processor import FrameDirection

from agent.errors import ToolArgumentsError, ToolError
from agent.schema import validate
from agent.spec import AgentSpec, ToolSpec
from pipeline.frames import AgentEventFrame, TransferCallFrame

__all__ = ["BUILTIN_SCHEMAS", "ToolBox", "action_frames", "tool_call_event"]

log = logging.getLogger(__name__)

MAX_REPLY_BYTES = 256 * 1024
_RETRY_BACKOFF_S = 0.05

BUILTIN_SCHEMAS: dict[str, dict] = {
    "end_call": {"type": "object", "properties": {
        "reason": {"type": "string", "description": "Why the call ends."}}},
    "transfer": {"type": "object", "properties": {
        "handoff": {"type": "string", "description": "Which hand-off target (default: the first)."},
        "reason": {"type": "string", "description": "Why the caller needs a person."}}},
    "dtmf": {"type": "object", "properties": {
        "digits": {"type": "string", "pattern": "^[0-9*#]{1,32}$",
                   "description": "Keys to press, e.g. 123#."}},
        "required": ["digits"]},
}


class ToolBox:
    """Runs the tools of one agent spec; one per call (or shared: it keeps no call state)."""

    def __init__(self, spec: AgentSpec, *, http: aiohttp.ClientSession | None = None):
        self._spec = spec
        self._tools = {t.name: t for t in spec.tools}
        self._http = http
        self._owns_http = http is None

    def _schema(self, tool: ToolSpec) -> dict:
        if tool.kind != "webhook" and tool.input_schema.get("properties") in (None, {}):
            return BUILTIN_SCHEMAS[tool.kind]
        return tool.input_schema

    def schemas(self) -> list[dict]:
        """OpenAI-style function schemas: ``[{"type": "function", "function": {...}}]``."""
        return [{"type": "function", "function": {
            "name": t.name, "description": t.description, "parameters": self._schema(t)}}
            for t in self._spec.tools]

    def describe(self) -> str:
        """One line per tool, for a system prompt or a log."""
        lines = []
        for t in self._spec.tools:
            params = ", ".join(self._schema(t).get("properties", {}))
            lines.append(f"- {t.name}({params}): {t.description}")
        return "\n".join(lines)

    async def call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """Run tool ``name``; the reply as a dict, or raise ToolError."""
        tool = self._tools.get(name)
        if tool is None:
            raise ToolError(f"unknown tool {name!r} (known: {', '.join(self._tools) or 'none'})")
        if not isinstance(arguments, dict):
            raise ToolArgumentsError(f"tool {name}: arguments must be a JSON object")
        problems = validate(arguments, self._schema(tool))
        if problems:
            raise ToolArgumentsError(f"tool {name}: " + "; ".join(problems))
        if tool.kind == "end_call":
            return {"action": "end_call", "reason": str(arguments.get("reason", ""))}
        if tool.kind == "transfer":
            handoff = self._spec.handoff(arguments.get("handoff") or None)
            if handoff is None:
                raise ToolError(f"tool {name}: no hand-off {arguments.get('handoff') or '(any)'}")
            return {"action": "transfer", "kind": handoff.kind, "target": handoff.target,
                    "handoff": handoff.name, "reason": str(arguments.get("reason", ""))}
        if tool.kind == "dtmf":
            return {"action": "dtmf", "digits": arguments["digits"]}
        return await self._webhook(tool, arguments)

    async def _webhook(self, tool: ToolSpec, arguments: dict[str, Any]) -> dict[str, Any]:
        assert tool.url is not None
        attempts = 1 + max(0, tool.retries)
        last: str = ""
        for attempt in range(1, attempts + 1):
            try:
                async with asyncio.timeout(tool.timeout_s):
                    return await self._request(tool, arguments)
            except TimeoutError:
                last = f"no reply within {tool.timeout_s:g} s"
            except aiohttp.ClientConnectionError as exc:
                last = f"cannot connect: {exc}"
            except _Retryable as exc:
                last = str(exc)
            log.info("tool %s attempt %d/%d failed: %s", tool.name, attempt, attempts, last)
            if attempt < attempts:
                await asyncio.sleep(_RETRY_BACKOFF_S * attempt)
        raise ToolError(f"tool {tool.name}: {last} (after {attempts} attempt"
                        f"{'s' if attempts > 1 else ''})")

    async def _request(self, tool: ToolSpec, arguments: dict[str, Any]) -> dict[str, Any]:
        http = self._session()
        assert tool.url is not None
        if tool.method == "GET":
            params = {k: v if isinstance(v, str) else json.dumps(v) for k, v in arguments.items()}
            request = http.get(tool.url, params=params)
        else:
            request = http.post(tool.url, json=arguments)
        async with request as resp:
            body = await resp.content.read(MAX_REPLY_BYTES + 1)
            if resp.status >= 500:
                raise _Retryable(f"HTTP {resp.status} from {tool.url}")
            if resp.status >= 400:
                raise ToolError(f"tool {tool.name}: HTTP {resp.status} from {tool.url}: "
                                f"{_snippet(body)}")
        if len(body) > MAX_REPLY_BYTES:
            raise ToolError(f"tool {tool.name}: reply larger than {MAX_REPLY_BYTES} bytes")
        try:
            reply = json.loads(body) if body.strip() else {}
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ToolError(f"tool {tool.name}: reply is not JSON: {_snippet(body)}") from exc
        if not isinstance(reply, dict):
            return {"result": reply}
        return reply

    def _session(self) -> aiohttp.ClientSession:
        if self._http is None or self._http.closed:
            self._http = aiohttp.ClientSession()
            self._owns_http = True
        return self._http

    async def aclose(self) -> None:
        """Close the HTTP session if this toolbox opened it."""
        if self._owns_http and self._http is not None and not self._http.closed:
            await self._http.close()
        self._http = None if self._owns_http else self._http


class _Retryable(Exception):
    """A webhook reply worth trying again (5xx). Never leaves this module."""


def _snippet(body: bytes, limit: int = 200) -> str:
    text = body[:limit].decode("utf-8", "replace")
    return re.sub(r"\s+", " ", text).strip() or "(empty)"


def tool_call_event(name: str, arguments: dict, *, result: dict | None = None,
                    error: str | None = None, started_ns: int) -> AgentEventFrame:
    """The record of one tool call (``AgentEventFrame(kind="tool_call")``)."""
    data: dict[str, Any] = {"name": name, "arguments": arguments,
                            "duration_ms": round((time.perf_counter_ns() - started_ns) / 1e6, 1)}
    if error is not None:
        data["error"] = error
    else:
        data["result"] = result
    return AgentEventFrame(kind="tool_call", data=data)


def action_frames(result: dict[str, Any]) -> list[tuple[Frame, FrameDirection]]:
    """The frames a built-in tool's result asks for (none for a webhook's reply)."""
    action = result.get("action")
    if action == "end_call":
        return [(AgentEventFrame(kind="hangup", data={"reason": result.get("reason", "")}),
                 FrameDirection.DOWNSTREAM),
                (EndWorkerFrame(), FrameDirection.UPSTREAM)]
    if action == "transfer":
        data = {k: result.get(k, "") for k in ("kind", "target", "handoff", "reason")}
        return [(AgentEventFrame(kind="transfer", data=data), FrameDirection.DOWNSTREAM),
                (TransferCallFrame(kind=result["kind"], target=result["target"],
                                   reason=result.get("reason", "")), FrameDirection.UPSTREAM)]
    if action == "dtmf":
        return [(OutputDTMFFrame.from_string(result["digits"]), FrameDirection.DOWNSTREAM)]
    return []
