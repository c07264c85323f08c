"""The ``sagemaker://`` bridge: the call server's model streams, carried to SageMaker endpoints.

parley's remote engines (``pipeline.engines.remote_voice``, ``remote_recognizer``) speak the model
tier's WebSocket API (``pipeline.model_wire``). A SageMaker endpoint is not reached by WebSocket:
its client calls ``InvokeEndpointWithBidirectionalStream``, an HTTP/2 event stream signed with
SigV4, whose only client is AWS's ``aws-sdk-sagemaker-runtime-http2`` (Python >= 3.12; the call
server runs 3.11 for torch). So ``parley serve --model-url sagemaker://ENDPOINT`` starts this
program in its own Python 3.12 venv (``.venv-aws``, made by ``make install``) and points the engines
at it over loopback::

    engine --ws://127.0.0.1:P/t/0/tts/websocket--> bridge --HTTP/2 + SigV4, port 8443-->
        SageMaker runtime --> an instance's sidecar --ws /invocations-bidirectional-stream-->
        parley model-server (X-Amzn-SageMaker-Model-Invocation-Path: tts/websocket)

Each WebSocket from an engine is one bidirectional stream: text frames go as ``PayloadPart``
events with ``DataType: UTF8``, binary frames as ``BINARY``, and the answers come back the same
way; parts marked ``PARTIAL`` are joined until ``COMPLETE``. When the stream fails (the endpoint
refuses it, the instance dies: ``ModelStreamError``, ``InternalStreamFailure``, a reset), the
engine's socket is closed with code 1011 and the reason, and the engine goes on on a new stream,
which SageMaker routes to a live instance (least outstanding requests), with no word lost. A
draining instance's ``goaway`` passes through unchanged, so new utterances open new streams.

Run by hand (it prints one JSON line when ready, then logs a line per stream failure)::

    .venv-aws/bin/python -m deploy.sagemaker_stream.bridge --target sagemaker://parley-models?region=us-east-1

Credentials and Region come from the usual places (environment, profile, ECS task role, instance
metadata); ``AWS_CA_BUNDLE`` names extra trusted certificates (a TLS-inspecting proxy, a test).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

from aiohttp import WSMsgType, web

from deploy.errors import BridgeError, ModelUrlError
from deploy.sagemaker_stream.targets import Target

log = logging.getLogger("parley.sagemaker_bridge")

MAX_MESSAGE_BYTES = 1 << 20        # an engine's largest message is ~1 s of audio (32 KB)
STREAM_OPEN_TIMEOUT_S = 5.0        # SageMaker's answer to a new stream (its headers)
WS_CLOSE_FAILED = 1011             # "the server met a condition that prevented it": engines fail over
PARENT_POLL_S = 1.0
CREDENTIALS_TIMEOUT_S = 10.0       # the chain ends at instance metadata, which may not answer


def _sdk() -> Any:
    """AWS's HTTP/2 client, imported late so ``--help`` and URL errors need no SDK."""
    try:
        from aws_sdk_sagemaker_runtime_http2 import client, config, models
        from awscrt import io as crt_io
        from awscrt.exceptions import AwsCrtError
        from smithy_core.exceptions import SmithyError
        from smithy_http.aio.crt import AWSCRTHTTPClient
    except ImportError as exc:
        raise BridgeError(f"the sagemaker:// bridge needs aws-sdk-sagemaker-runtime-http2[awscrt] "
                          f"(Python >= 3.12): {exc}; run `make install`, which builds .venv-aws") from None

    class Transport(AWSCRTHTTPClient):
        """awscrt's HTTP/2 transport (the one that streams both ways), trusting AWS_CA_BUNDLE too."""

        def __init__(self) -> None:
            super().__init__()
            bundle = os.environ.get("AWS_CA_BUNDLE")
            if bundle:
                options = crt_io.TlsContextOptions()
                options.override_default_trust_store_from_path(None, bundle)
                self._tls_ctx = crt_io.ClientTlsContext(options)

    # what a refused, broken or misconfigured stream raises: the SDK's errors, the transport's, sockets'
    errors = (SmithyError, AwsCrtError, OSError)
    return SimpleNamespace(client=client, config=config, models=models, Transport=Transport, errors=errors)


class Endpoint:
    """One target's client: its config resolved once (Region, credentials, URL)."""

    def __init__(self, target: Target, sdk: Any) -> None:
        self.target = target
        self.sdk = sdk
        self.client: Any = None
        self.region = ""

    async def resolve(self) -> None:
        """Region, URL and credentials, once; a missing one is a BridgeError that says how to set it."""
        overrides: dict[str, Any] = {"transport": self.sdk.Transport()}
        if self.target.region:
            overrides["region"] = self.target.region
        try:
            config = await self.sdk.config.AsyncSageMakerRuntimeHTTP2Config.resolve(**overrides)
        except self.sdk.errors as exc:  # ConfigValidationError (no Region), a bad config file: one line
            hint = "; add ?region=REGION to the URL or set AWS_REGION" if "region" in str(exc).lower() else ""
            raise BridgeError(f"{self.target.url()}: {str(exc).rstrip('.')}{hint}") from None
        self.region = config.region
        # the operation's regional URL is on port 8443 (its endpoint rules); a VPC endpoint without
        # private DNS, or a stand-in, is named in the URL
        config.endpoint_uri = self.target.endpoint_url or f"https://runtime.sagemaker.{config.region}.amazonaws.com:8443"
        client = self.sdk.client.AsyncSageMakerRuntimeHTTP2Client(config=config)
        # the client builds its credential chain (environment, profile, container, instance
        # metadata) on first use; build it now and ask it once, so that no credentials is a
        # start-up error rather than every call's first stream failing
        ready = await client._ensure_setup()
        resolver = ready.aws_credentials_identity_resolver
        try:
            async with asyncio.timeout(CREDENTIALS_TIMEOUT_S):
                await resolver.get_identity(properties={})
        except self.sdk.errors as exc:  # no provider had credentials (or IMDS timed out): one line, then exit
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise BridgeError(f"{self.target.url()}: no AWS credentials ({first[:160]}); set them as for "
                              "the AWS CLI (environment, profile, task role, instance role)") from None
        self.client = client

    def request(self, path: str, query: str) -> Any:
        return self.sdk.models.InvokeEndpointWithBidirectionalStreamInput(
            endpoint_name=self.target.endpoint, target_variant=self.target.variant,
            model_invocation_path=path, model_query_string=query or None)

    def part(self, data: bytes, text: bool) -> Any:
        m = self.sdk.models
        return m.RequestStreamEventPayloadPart(value=m.RequestPayloadPart(
            bytes_=data, data_type="UTF8" if text else "BINARY"))


def no_nagle() -> int:
    """Set TCP_NODELAY on this process's TCP sockets that lack it; how many were set.

    awscrt (0.32) leaves Nagle's algorithm on for its connections, so an event written while the
    one before it is unacknowledged waits for that ACK, which the runtime may delay by 40 ms: a
    reply asked for just after a barge-in's cancel started ~40 ms late (benchmarks/RESULTS.md).
    awscrt has no option for it, so the bridge sets it on the socket itself (Linux: /proc)."""
    count = 0
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return 0
    for name in names:
        try:
            if not os.readlink(f"/proc/self/fd/{name}").startswith("socket:"):
                continue
            sock = socket.socket(fileno=os.dup(int(name)))
        except (OSError, ValueError):
            continue
        with sock:
            try:
                if sock.type != socket.SOCK_STREAM or sock.family not in (socket.AF_INET, socket.AF_INET6):
                    continue
                if not sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY):
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    count += 1
            except OSError:
                continue
    return count


def _loop_error(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """awscrt's own body-writer task fails with STREAM_HAS_COMPLETED when a stream ends before its
    last write (the runtime or the engine closed it): expected, one debug line, no traceback."""
    exc = context.get("exception")
    if isinstance(exc, RuntimeError) and "AWS_ERROR_HTTP_STREAM_HAS_COMPLETED" in str(exc):
        log.debug("a stream ended before awscrt's last write: %s", exc)
        return
    loop.default_exception_handler(context)


def _reason(exc: BaseException) -> str:
    """A stream failure in one line (an AWS error's code and message; otherwise the exception)."""
    code = getattr(exc, "error_code", None) or getattr(exc, "code", None) or type(exc).__name__
    message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    return f"{code}: {message}"[:200]


class Bridge:
    def __init__(self, endpoints: Sequence[Endpoint]) -> None:
        self.endpoints = list(endpoints)
        self.app = web.Application()
        self.app.add_routes([web.get("/ping", self._ping), web.get("/t/{index}/{tail:.+}", self._stream)])
        self.live = 0
        self.opened = 0
        self.failed = 0

    async def _ping(self, request: web.Request) -> web.Response:
        return web.json_response({"ok": True, "live": self.live, "opened": self.opened, "failed": self.failed,
                                  "targets": [e.target.url() for e in self.endpoints]})

    async def _stream(self, request: web.Request) -> web.StreamResponse:
        try:
            endpoint = self.endpoints[int(request.match_info["index"])]
        except (ValueError, IndexError):
            return web.json_response({"error": f"no target {request.match_info['index']!r}"}, status=404)
        ws = web.WebSocketResponse(heartbeat=None, max_msg_size=MAX_MESSAGE_BYTES)
        await ws.prepare(request)
        self.live += 1
        self.opened += 1
        try:
            why = await self._relay(endpoint, request.match_info["tail"], request.query_string, ws)
        finally:
            self.live -= 1
        if why is not None:
            self.failed += 1
            log.warning("sagemaker://%s %s: %s; the engine goes on on a new stream", endpoint.target.endpoint,
                        request.match_info["tail"], why)
            await ws.close(code=WS_CLOSE_FAILED, message=why.encode()[:120])
        else:
            await ws.close()
        return ws

    async def _relay(self, endpoint: Endpoint, path: str, query: str, ws: web.WebSocketResponse) -> str | None:
        """Carry one engine socket over one bidirectional stream; the failure's reason, or None."""
        t0 = time.perf_counter()
        try:
            stream = await endpoint.client.invoke_endpoint_with_bidirectional_stream(endpoint.request(path, query))
        except endpoint.sdk.errors as exc:  # not found, throttled, unsigned, unreachable: each one line
            return f"the stream was refused: {_reason(exc)}"
        if (fixed := no_nagle()) and log.isEnabledFor(logging.DEBUG):
            log.debug("TCP_NODELAY set on %d new connection(s)", fixed)
        pump = asyncio.create_task(self._engine_to_aws(endpoint, ws, stream))
        try:
            try:
                async with asyncio.timeout(STREAM_OPEN_TIMEOUT_S):
                    _, receiver = await stream.await_output()
            except TimeoutError:
                return f"no answer to a new stream in {STREAM_OPEN_TIMEOUT_S:.0f} s"
            except endpoint.sdk.errors as exc:
                return f"the stream was refused: {_reason(exc)}"
            log.debug("stream to %s open in %.0f ms", endpoint.target.endpoint, (time.perf_counter() - t0) * 1000)
            return await self._aws_to_engine(endpoint, receiver, ws, pump)
        finally:
            pump.cancel()
            try:
                await stream.input_stream.close()
            except endpoint.sdk.errors:  # already closed or broken: nothing more to send either way
                pass

    async def _engine_to_aws(self, endpoint: Endpoint, ws: web.WebSocketResponse, stream: Any) -> None:
        try:
            async for msg in ws:
                if msg.type == WSMsgType.TEXT:
                    await stream.input_stream.send(endpoint.part(msg.data.encode(), text=True))
                elif msg.type == WSMsgType.BINARY:
                    await stream.input_stream.send(endpoint.part(msg.data, text=False))
                else:
                    break
            await stream.input_stream.close()   # the engine left: the end of the request stream
        except endpoint.sdk.errors as exc:     # the stream broke under us: the reading side reports it
            log.debug("sending on a broken stream: %s", _reason(exc))

    async def _aws_to_engine(self, endpoint: Endpoint, receiver: Any, ws: web.WebSocketResponse,
                             pump: asyncio.Task[None]) -> str | None:
        pending = bytearray()
        try:
            async for event in receiver:
                part = getattr(event, "value", None)
                kind = type(event).__name__
                if kind.endswith("PayloadPart") and part is not None:
                    pending += part.bytes_ or b""
                    if part.completion_state == "PARTIAL":
                        continue
                    data, pending = bytes(pending), bytearray()
                    if ws.closed:
                        return None
                    if part.data_type == "UTF8":
                        await ws.send_str(data.decode("utf-8", errors="replace"))
                    else:
                        await ws.send_bytes(data)
                elif kind.endswith(("ModelStreamError", "InternalStreamFailure")):
                    return _reason(part) if part is not None else kind
                else:
                    log.info("ignored an unknown event from SageMaker: %s", kind)
        except endpoint.sdk.errors as exc:  # a reset or broken connection, as the SDK reports it
            if ws.closed or pump.done():
                return None       # the engine had already left: the stream's end is ours
            return f"the stream broke: {_reason(exc)}"
        return None


async def _watch_parent(parent_pid: int, stop: asyncio.Event) -> None:
    while not stop.is_set():
        if os.getppid() != parent_pid:
            log.info("the call server (pid %d) is gone; the bridge stops", parent_pid)
            stop.set()
        await asyncio.sleep(PARENT_POLL_S)


async def run(targets: Sequence[Target], host: str, port: int, parent_pid: int | None) -> None:
    sdk = _sdk()
    endpoints = [Endpoint(t, sdk) for t in targets]
    for e in endpoints:
        await e.resolve()
    bridge = Bridge(endpoints)
    runner = web.AppRunner(bridge.app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    print(json.dumps({"ready": True, "port": bound,
                      "targets": [{"url": e.target.url(), "region": e.region} for e in endpoints]}), flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(_loop_error)
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    watcher = asyncio.create_task(_watch_parent(parent_pid, stop)) if parent_pid else None
    await stop.wait()
    if watcher is not None:
        watcher.cancel()
    await runner.cleanup()
    for e in endpoints:
        transport = getattr(e.client._config, "transport", None) if e.client is not None else None
        if transport is not None:
            await transport.close()


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m deploy.sagemaker_stream.bridge",
        description="Carry parley's model streams (WebSocket, loopback) to SageMaker endpoints over "
        "InvokeEndpointWithBidirectionalStream. `parley serve --model-url sagemaker://ENDPOINT` starts "
        "it for you; run it by hand to check an endpoint's credentials and Region.")
    p.add_argument("--target", action="append", required=True, metavar="sagemaker://ENDPOINT[?region=R]",
                   help="an endpoint to stream to (repeat for more); served at /t/INDEX/ in the order given")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default %(default)s: loopback only)")
    p.add_argument("--port", type=int, default=0, help="port to listen on (default: any free one, printed)")
    p.add_argument("--parent-pid", type=int, default=None, help="stop when this process is gone")
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING"])
    args = p.parse_args(argv)
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s sagemaker-bridge: %(message)s")
    for name in ("smithy_core", "smithy_http", "smithy_aws_core", "aws_sdk_sagemaker_runtime_http2"):
        logging.getLogger(name).setLevel(logging.WARNING)
    try:
        targets = [Target.parse(t) for t in args.target]
        asyncio.run(run(targets, args.host, args.port, args.parent_pid))
    except (ModelUrlError, BridgeError) as exc:
        print(f"parley: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
