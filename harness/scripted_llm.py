"""A scripted OpenAI-compatible chat-completions server, for tests, benchmarks and offline demos.

    server = ScriptedChatServer([ScriptedReply(text="We open at eight."),
                                 ScriptedReply(tool_call=("end_call", {})),
                                 ScriptedReply(status=500)])
    base_url = await server.start()        # "http://127.0.0.1:<port>/v1", port read back after binding
    ...
    await server.stop()

It speaks the streaming protocol for real: ``POST /v1/chat/completions`` with ``"stream": true``
answers ``text/event-stream`` chunks (``data: {...}`` lines, ``data: [DONE]`` last), text as
``delta.content`` tokens and tool calls as ``delta.tool_calls`` fragments, the way OpenAI, vLLM,
llama.cpp and Ollama do. Each reply can stall before its first token, pace its tokens against an
absolute clock (``start + i * token_interval_s``), or fail with an HTTP status. Requests are kept
(``server.requests``) and streams the client abandoned are counted (``server.abandoned``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from aiohttp import web

log = logging.getLogger(__name__)

_TOKEN = re.compile(r"\s*\S+")


def tokenize(text: str) -> list[str]:
    """Split text into word tokens with their leading space, the way BPE models stream them."""
    return _TOKEN.findall(text)


@dataclass(frozen=True)
class ScriptedReply:
    """One completion: text and/or one tool call, or an HTTP error.

    text: streamed as word tokens (``delta.content``).
    tool_call: ``(name, arguments)``; the JSON arguments stream in ``arg_chunk_chars`` pieces.
    status: an HTTP status other than 200 answers a JSON error body instead of a stream.
    stall_s: the wait after the response headers and before the first token.
    token_interval_s: the pace of tokens after the first (0: as fast as the socket takes them).
    """

    text: str = ""
    tool_call: tuple[str, dict] | None = None
    status: int = 200
    stall_s: float = 0.0
    token_interval_s: float = 0.0
    arg_chunk_chars: int = 8


Script = Iterable[ScriptedReply] | Callable[[dict], ScriptedReply]


class ScriptedChatServer:
    """An aiohttp server on 127.0.0.1 that answers chat completions from a script."""

    def __init__(self, script: Script, *, model: str = "scripted"):
        self._next: Callable[[dict], ScriptedReply]
        if callable(script):
            self._next = script
        else:
            replies = iter(list(script))
            self._next = lambda _body: next(replies)
        self._model = model
        self._runner: web.AppRunner | None = None
        self.requests: list[dict] = []
        self.abandoned = 0
        self.port: int | None = None

    @property
    def base_url(self) -> str:
        if self.port is None:
            raise RuntimeError("the server is not started")
        return f"http://127.0.0.1:{self.port}/v1"

    async def start(self) -> str:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._completions)
        # handler_cancellation: a client that hangs up mid-stall cancels the handler at once
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None,
                                     handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]
        return self.base_url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> "ScriptedChatServer":
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.stop()

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        try:
            reply = self._next(body)
        except StopIteration:
            return web.json_response({"error": {"message": "script exhausted"}}, status=500)
        if reply.status != 200:
            return web.json_response(
                {"error": {"message": f"scripted failure {reply.status}", "type": "server_error"}},
                status=reply.status,
            )
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        try:
            await self._stream(response, reply)
        except asyncio.CancelledError:
            self.abandoned += 1
            log.debug("client abandoned a stream")
            raise
        except ConnectionResetError:
            self.abandoned += 1
            log.debug("client abandoned a stream")
        return response

    async def _stream(self, response: web.StreamResponse, reply: ScriptedReply) -> None:
        loop = asyncio.get_running_loop()
        await self._send(response, {"role": "assistant", "content": ""})
        if reply.stall_s > 0:
            await asyncio.sleep(reply.stall_s)
        start = loop.time()
        pieces: list[dict] = [{"content": t} for t in tokenize(reply.text)]
        if reply.tool_call is not None:
            name, arguments = reply.tool_call
            args = json.dumps(arguments)
            step = max(1, reply.arg_chunk_chars)
            pieces.append({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                           "function": {"name": name, "arguments": ""}}]})
            pieces += [{"tool_calls": [{"index": 0, "function": {"arguments": args[i:i + step]}}]}
                       for i in range(0, len(args), step)]
        for i, delta in enumerate(pieces):
            delay = start + i * reply.token_interval_s - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            await self._send(response, delta)
        finish = "tool_calls" if reply.tool_call is not None else "stop"
        await self._send(response, {}, finish_reason=finish)
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()

    async def _send(self, response: web.StreamResponse, delta: dict, *,
                    finish_reason: str | None = None) -> None:
        chunk = {
            "id": "chatcmpl-scripted",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": self._model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        }
        await response.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
