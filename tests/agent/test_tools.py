"""Webhook tools against a real local HTTP server; the built-in call-control tools."""

import asyncio
import time

import pytest
from aiohttp import web
from pipecat.frames.frames import EndWorkerFrame, OutputDTMFFrame
from pipecat.processors.frame_processor import FrameDirection

from agent.errors import ToolArgumentsError, ToolError
from agent.examples.order_api import make_app
from agent.spec import parse_spec
from agent.tools import ToolBox, action_frames, tool_call_event
from pipeline.frames import AgentEventFrame, TransferCallFrame


class Server:
    """A scripted webhook service on 127.0.0.1:0 that records every request."""

    def __init__(self):
        self.requests: list[dict] = []
        self.script: list = []   # per request: a status code, "slow", "garbage", or a dict

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json() if request.method == "POST" else dict(request.query)
        self.requests.append({"method": request.method, "path": request.path, "body": body})
        step = self.script.pop(0) if self.script else {"ok": True}
        if step == "slow":
            await asyncio.sleep(0.6)
            return web.json_response({"late": True})
        if step == "garbage":
            return web.Response(text="<html>oops</html>")
        if isinstance(step, int):
            return web.json_response({"error": "nope"}, status=step)
        return web.json_response(step)


@pytest.fixture
async def server():
    srv = Server()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", srv.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    srv.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    yield srv
    await runner.cleanup()


def spec_for(url: str, *, method: str = "POST", timeout_s: float = 0.3, retries: int = 1):
    return parse_spec(f"""
name: t
greeting: hi
handoffs:
  - {{name: desk, kind: dial, target: "+15550100"}}
  - {{name: flex, kind: enqueue, target: WW0123456789abcdef0123456789abcdef}}
tools:
  - name: lookup_order
    description: Look up an order.
    url: ${{API}}/orders/lookup
    method: {method}
    timeout_s: {timeout_s}
    retries: {retries}
    input_schema:
      type: object
      properties:
        order_number: {{type: string, pattern: "^[0-9]{{3,12}}$"}}
      required: [order_number]
      additionalProperties: false
  - {{name: hang_up, kind: end_call, description: End the call.}}
  - {{name: transfer, kind: transfer, description: Talk to a person.}}
  - {{name: press, kind: dtmf, description: Press keys.}}
""", env={"API": url})


async def test_webhook_success_posts_json_and_returns_the_reply(server):
    server.script = [{"status": "shipped"}]
    box = ToolBox(spec_for(server.url))
    try:
        assert await box.call("lookup_order", {"order_number": "12345"}) == {"status": "shipped"}
    finally:
        await box.aclose()
    assert server.requests == [{"method": "POST", "path": "/orders/lookup",
                                "body": {"order_number": "12345"}}]


async def test_webhook_get_sends_query_parameters(server):
    box = ToolBox(spec_for(server.url, method="GET"))
    try:
        await box.call("lookup_order", {"order_number": "777"})
    finally:
        await box.aclose()
    assert server.requests == [{"method": "GET", "path": "/orders/lookup",
                                "body": {"order_number": "777"}}]


async def test_timeout_then_retry_succeeds(server):
    server.script = ["slow", {"status": "shipped"}]
    box = ToolBox(spec_for(server.url, timeout_s=0.2, retries=1))
    t0 = time.monotonic()
    try:
        assert await box.call("lookup_order", {"order_number": "123"}) == {"status": "shipped"}
    finally:
        await box.aclose()
    assert len(server.requests) == 2
    assert 0.2 <= time.monotonic() - t0 < 0.9


async def test_timeouts_exhaust_the_retries(server):
    server.script = ["slow", "slow"]
    box = ToolBox(spec_for(server.url, timeout_s=0.15, retries=1))
    try:
        with pytest.raises(ToolError, match=r"lookup_order: no reply within 0.15 s \(after 2 "):
            await box.call("lookup_order", {"order_number": "123"})
    finally:
        await box.aclose()


async def test_500_is_retried_then_reported(server):
    server.script = [500, 503]
    box = ToolBox(spec_for(server.url, retries=1))
    try:
        with pytest.raises(ToolError, match=r"HTTP 503 .* \(after 2 attempts\)"):
            await box.call("lookup_order", {"order_number": "123"})
    finally:
        await box.aclose()
    assert len(server.requests) == 2


async def test_4xx_is_not_retried(server):
    server.script = [404]
    box = ToolBox(spec_for(server.url, retries=3))
    try:
        with pytest.raises(ToolError, match=r"HTTP 404 .*nope"):
            await box.call("lookup_order", {"order_number": "123"})
    finally:
        await box.aclose()
    assert len(server.requests) == 1


async def test_arguments_not_matching_the_schema_send_nothing(server):
    box = ToolBox(spec_for(server.url))
    try:
        with pytest.raises(ToolArgumentsError, match=r"order_number does not match"):
            await box.call("lookup_order", {"order_number": "12ab"})
        with pytest.raises(ToolArgumentsError, match=r"order_number is required"):
            await box.call("lookup_order", {})
        with pytest.raises(ToolArgumentsError, match=r"arguments.extra is not allowed"):
            await box.call("lookup_order", {"order_number": "123", "extra": 1})
        with pytest.raises(ToolArgumentsError, match=r"must be of type string, not int"):
            await box.call("lookup_order", {"order_number": 123})
    finally:
        await box.aclose()
    assert server.requests == []


async def test_a_reply_that_is_not_json_is_an_error(server):
    server.script = ["garbage"]
    box = ToolBox(spec_for(server.url))
    try:
        with pytest.raises(ToolError, match=r"reply is not JSON: <html>oops</html>"):
            await box.call("lookup_order", {"order_number": "123"})
    finally:
        await box.aclose()


async def test_unreachable_service_is_a_tool_error():
    box = ToolBox(spec_for("http://127.0.0.1:9", timeout_s=0.5, retries=0))
    try:
        with pytest.raises(ToolError, match=r"cannot connect"):
            await box.call("lookup_order", {"order_number": "123"})
    finally:
        await box.aclose()


async def test_unknown_tool():
    with pytest.raises(ToolError, match=r"unknown tool 'nope'"):
        await ToolBox(spec_for("http://x")).call("nope", {})


async def test_the_demo_order_api_answers_the_example_tool():
    runner = web.AppRunner(make_app({"12345": {"status": "has shipped", "detail": "Soon."}}))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    box = ToolBox(spec_for(f"http://127.0.0.1:{runner.addresses[0][1]}"))
    try:
        found = await box.call("lookup_order", {"order_number": "12345"})
        missing = await box.call("lookup_order", {"order_number": "999"})
    finally:
        await box.aclose()
        await runner.cleanup()
    assert found == {"found": True, "order_number": "12345", "status": "has shipped",
                     "detail": "Soon."}
    assert missing["found"] is False and missing["status"] == "was not found"


async def test_builtin_tools_say_which_frames_to_push():
    box = ToolBox(spec_for("http://x"))
    end = await box.call("hang_up", {"reason": "done"})
    assert end == {"action": "end_call", "reason": "done"}
    (event, d1), (frame, d2) = action_frames(end)
    assert event.kind == "hangup" and d1 is FrameDirection.DOWNSTREAM
    assert isinstance(frame, EndWorkerFrame) and d2 is FrameDirection.UPSTREAM

    moved = await box.call("transfer", {"handoff": "flex", "reason": "billing"})
    assert moved["kind"] == "enqueue" and moved["target"].startswith("WW")
    frames = action_frames(moved)
    transfer = frames[1][0]
    assert isinstance(transfer, TransferCallFrame) and frames[1][1] is FrameDirection.UPSTREAM
    assert (transfer.kind, transfer.reason) == ("enqueue", "billing")
    assert (await box.call("transfer", {}))["target"] == "+15550100"   # the first hand-off
    with pytest.raises(ToolError, match="no hand-off nobody"):
        await box.call("transfer", {"handoff": "nobody"})

    keys = await box.call("press", {"digits": "12#"})
    [(dtmf, direction)] = action_frames(keys)
    assert isinstance(dtmf, OutputDTMFFrame) and direction is FrameDirection.DOWNSTREAM
    assert [b.value for b in dtmf.buttons] == ["1", "2", "#"]
    with pytest.raises(ToolArgumentsError):
        await box.call("press", {"digits": "12x"})
    assert action_frames({"status": "shipped"}) == []


def test_schemas_for_llm_backends():
    box = ToolBox(spec_for("http://x"))
    schemas = {s["function"]["name"]: s for s in box.schemas()}
    assert set(schemas) == {"lookup_order", "hang_up", "transfer", "press"}
    lookup = schemas["lookup_order"]
    assert lookup["type"] == "function"
    assert lookup["function"]["parameters"]["required"] == ["order_number"]
    assert schemas["press"]["function"]["parameters"]["required"] == ["digits"]
    assert "lookup_order(order_number): Look up an order." in box.describe()


def test_tool_call_event_records_result_or_error():
    ok = tool_call_event("t", {"a": 1}, result={"r": 2}, started_ns=time.perf_counter_ns())
    assert isinstance(ok, AgentEventFrame) and ok.kind == "tool_call"
    assert ok.data["result"] == {"r": 2} and "error" not in ok.data
    assert ok.data["duration_ms"] >= 0
    bad = tool_call_event("t", {}, error="boom", started_ns=time.perf_counter_ns())
    assert bad.data["error"] == "boom" and "result" not in bad.data
