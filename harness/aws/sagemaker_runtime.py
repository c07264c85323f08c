"""A stand-in for the SageMaker runtime's response streaming, over loopback: botocore's own
``invoke_endpoint_with_response_stream`` talks to it (``endpoint_url``), and it relays the request
to a real container's ``POST /invocations`` (parley's model server), framing each piece of the
answer as the runtime does: an ``application/vnd.amazon.eventstream`` message per ``PayloadPart``.

moto has no response streaming, so this is the outside party the invoke tests need. The framing
is AWS's event-stream encoding (prelude with lengths and CRC32, string headers, payload, CRC32),
which botocore parses and checks.
"""

from __future__ import annotations

import asyncio
import struct
import threading
import zlib
from collections.abc import Callable, Coroutine
from typing import Any

import aiohttp
from aiohttp import web


def _header(name: str, value: str) -> bytes:
    n, v = name.encode(), value.encode()
    return struct.pack("!B", len(n)) + n + struct.pack("!BH", 7, len(v)) + v   # 7: string


def event_message(headers: dict[str, str], payload: bytes) -> bytes:
    """One event-stream message, byte for byte as AWS frames it."""
    head = b"".join(_header(k, v) for k, v in headers.items())
    total = 12 + len(head) + len(payload) + 4
    prelude = struct.pack("!II", total, len(head))
    prelude += struct.pack("!I", zlib.crc32(prelude))
    body = prelude + head + payload
    return body + struct.pack("!I", zlib.crc32(body))


def payload_part(data: bytes) -> bytes:
    return event_message({":event-type": "PayloadPart", ":message-type": "event",
                          ":content-type": "application/octet-stream"}, data)


def model_stream_error(message: str) -> bytes:
    return event_message({":exception-type": "ModelStreamError", ":message-type": "exception",
                          ":content-type": "application/json"},
                         ('{"Message": "%s", "ErrorCode": "ModelStreamError"}' % message).encode())


class FakeRuntime:
    """``POST /endpoints/{name}/invocations-response-stream`` -> the upstream container's
    ``/invocations``. ``fail_after`` parts, when set, ends the stream with a ModelStreamError."""

    def __init__(self, upstream: str, endpoint: str, fail_after: int | None = None) -> None:
        self.upstream = upstream
        self.endpoint = endpoint
        self.fail_after = fail_after
        self.requests: list[dict] = []

    async def handle(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        body = await request.read()
        self.requests.append({"endpoint": name, "content_type": request.content_type,
                              "accept": request.headers.get("X-Amzn-SageMaker-Accept"), "body": body})
        if name != self.endpoint:
            return web.json_response({"message": f"Endpoint {name} of account 123456789012 not found."},
                                     status=400, headers={"x-amzn-ErrorType": "ValidationError"})
        response = web.StreamResponse(headers={"Content-Type": "application/vnd.amazon.eventstream",
                                               "X-Amzn-SageMaker-Content-Type": "application/jsonlines"})
        await response.prepare(request)
        parts = 0
        try:
            async with aiohttp.ClientSession() as session:
                async with session.post(f"{self.upstream}/invocations", data=body,
                                        headers={"Content-Type": request.content_type}) as upstream:
                    async for piece in upstream.content.iter_any():
                        if self.fail_after is not None and parts >= self.fail_after:
                            await response.write(model_stream_error("the model container stopped"))
                            break
                        await response.write(payload_part(piece))
                        parts += 1
            await response.write_eof()
        except ConnectionResetError:   # the client stopped reading (it had the exception event)
            pass
        return response


class LoopThread:
    """An event loop on its own thread, for async servers under a synchronous client (boto3)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="aws-stand-in", daemon=True)
        self._thread.start()

    def run(self, coro_fn: Callable[[], Coroutine[Any, Any, Any]], timeout_s: float = 120.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro_fn(), self.loop).result(timeout_s)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


async def start_runtime(runtime: FakeRuntime) -> tuple[web.AppRunner, int]:
    app = web.Application()
    app.router.add_post("/endpoints/{name}/invocations-response-stream", runtime.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, port
