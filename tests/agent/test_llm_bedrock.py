"""The Bedrock backend against a local endpoint that answers real AWS event-stream bytes.

The endpoint (aiohttp on 127.0.0.1:0, given to the agent as ``llm.base_url``) answers
``POST /model/{modelId}/converse-stream`` the way Bedrock does: ``application/vnd.amazon.eventstream``
messages (prelude, CRC32s, typed headers, JSON payloads) that botocore's own parser decodes, an
HTTP 500 with ``x-amzn-ErrorType``, and an exception event in the middle of a stream. Nothing of
ours is patched: aiobotocore signs the request, botocore parses the stream, pipecat's Bedrock
service turns it into frames.
"""

from __future__ import annotations

import json
import struct
import zlib

import pytest

pytest.importorskip("aiobotocore")  # pipecat-ai[aws]; it brings botocore

from aiohttp import web  # noqa: E402
from botocore.eventstream import EventStreamBuffer  # noqa: E402
from pipecat.frames.frames import EndWorkerFrame  # noqa: E402
from pipecat.tests.utils import run_test  # noqa: E402

from harness.scripted_llm import tokenize  # noqa: E402
from agent.spec import parse_spec  # noqa: E402
from pipeline.frames import AgentEventFrame  # noqa: E402
from tests.agent.test_llm_openai import Transcript, agent_pipeline  # noqa: E402

MODEL = "anthropic.claude-3-haiku-20240307-v1:0"
HOURS = "We are open Monday to Friday, eight to six."

SPEC = f"""
name: Riverside Dental reception
persona: You are the receptionist of Riverside Dental.
greeting: Thank you for calling Riverside Dental.
knowledge:
  - question: What are your opening hours?
    answer: Monday to Friday, eight to six.
llm:
  backend: bedrock
  model: "{MODEL}"
  region: us-east-1
  base_url: ${{BEDROCK_URL}}
  filler_after_s: 2.0
  timeout_s: 5
messages:
  fallback: Sorry, I am having trouble right now.
  goodbye: Goodbye!
"""


# --- AWS event stream encoding (application/vnd.amazon.eventstream) --------------------------

def _header(name: str, value: str) -> bytes:
    n, v = name.encode(), value.encode()
    return struct.pack("!B", len(n)) + n + struct.pack("!BH", 7, len(v)) + v  # 7: string


def event_message(headers: dict[str, str], payload: dict) -> bytes:
    """One event-stream message: prelude + prelude CRC, headers, payload, message CRC."""
    head = b"".join(_header(k, v) for k, v in headers.items())
    body = json.dumps(payload).encode()
    prelude = struct.pack("!II", 12 + len(head) + len(body) + 4, len(head))
    message = prelude + struct.pack("!I", zlib.crc32(prelude)) + head + body
    return message + struct.pack("!I", zlib.crc32(message))


def event(event_type: str, payload: dict) -> bytes:
    return event_message({":event-type": event_type, ":content-type": "application/json",
                          ":message-type": "event"}, payload)


def stream_exception(exception_type: str, message: str) -> bytes:
    return event_message({":exception-type": exception_type, ":content-type": "application/json",
                          ":message-type": "exception"}, {"message": message})


def text_reply(text: str) -> list[bytes]:
    return ([event("messageStart", {"role": "assistant"})]
            + [event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": t}})
               for t in tokenize(text)]
            + [event("contentBlockStop", {"contentBlockIndex": 0}),
               event("messageStop", {"stopReason": "end_turn"}),
               event("metadata", {"usage": {"inputTokens": 50, "outputTokens": 9,
                                            "totalTokens": 59}, "metrics": {"latencyMs": 12}})])


def tool_reply(name: str, arguments: dict) -> list[bytes]:
    args = json.dumps(arguments)
    return [event("messageStart", {"role": "assistant"}),
            event("contentBlockStart", {"contentBlockIndex": 0, "start": {
                "toolUse": {"toolUseId": "tooluse_1", "name": name}}}),
            event("contentBlockDelta", {"contentBlockIndex": 0,
                                        "delta": {"toolUse": {"input": args[:4]}}}),
            event("contentBlockDelta", {"contentBlockIndex": 0,
                                        "delta": {"toolUse": {"input": args[4:]}}}),
            event("contentBlockStop", {"contentBlockIndex": 0}),
            event("messageStop", {"stopReason": "tool_use"})]


def test_the_encoder_speaks_what_botocore_parses():
    buffer = EventStreamBuffer()
    buffer.add_data(b"".join(text_reply("Hi there.")) + stream_exception("throttlingException",
                                                                          "slow down"))
    messages = list(buffer)
    assert [m.headers[":event-type"] for m in messages[:3]] == [
        "messageStart", "contentBlockDelta", "contentBlockDelta"]
    assert json.loads(messages[1].payload) == {"contentBlockIndex": 0, "delta": {"text": "Hi"}}
    assert messages[-1].headers[":message-type"] == "exception"


# --- the endpoint ------------------------------------------------------------------------------

class FakeBedrock:
    """``POST /model/{modelId}/converse-stream`` answered from a script of byte lists or 500s."""

    def __init__(self, script: list[list[bytes] | int]):
        self._script = iter(script)
        self.requests: list[tuple[str, dict, str]] = []
        self._runner: web.AppRunner | None = None

    async def __aenter__(self) -> str:
        app = web.Application()
        app.router.add_post("/model/{model}/converse-stream", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        return f"http://127.0.0.1:{self._runner.addresses[0][1]}"

    async def __aexit__(self, *exc) -> None:
        await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.requests.append((request.match_info["model"], await request.json(),
                              request.headers.get("Authorization", "")))
        reply = next(self._script)
        if isinstance(reply, int):
            return web.json_response({"message": "scripted failure"}, status=reply,
                                     headers={"x-amzn-ErrorType": "InternalServerException"})
        response = web.StreamResponse(
            headers={"Content-Type": "application/vnd.amazon.eventstream"})
        await response.prepare(request)
        for message in reply:
            await response.write(message)
        await response.write_eof()
        return response


@pytest.fixture
def aws_env(monkeypatch, tmp_path):
    """Static test credentials; no shared config, no instance metadata lookups."""
    for name, value in {"AWS_ACCESS_KEY_ID": "AKIDTEST", "AWS_SECRET_ACCESS_KEY": "secret",
                        "AWS_EC2_METADATA_DISABLED": "true",
                        "AWS_CONFIG_FILE": str(tmp_path / "none"),
                        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none")}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)


async def test_bedrock_stream_errors_and_a_tool_call_through_the_agent(aws_env):
    script = [
        text_reply(HOURS),
        500,
        [event("messageStart", {"role": "assistant"}),
         event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "Let me"}}),
         stream_exception("modelStreamErrorException", "the model fell over")],
        tool_reply("end_call", {"reason": "caller said goodbye"}),
    ]
    transcript = Transcript()
    bedrock = FakeBedrock(script)
    async with bedrock as url:
        spec = parse_spec(SPEC, source="bedrock.yaml", env={"BEDROCK_URL": url})
        lines = ["What are your opening hours?", "Is there parking?",
                 ("And on Sundays?", 2),  # the words before the failure, then the fallback
                 "Goodbye."]
        pipeline, _, listener, _ = agent_pipeline(spec, lines, transcript, heard=False)
        down, up = await run_test(pipeline, frames_to_send=[], send_end_frame=False)

    assert transcript.spoken() == [
        spec.greeting,
        HOURS,
        "Sorry, I am having trouble right now.",
        "Let me",
        "Sorry, I am having trouble right now.",
        "Goodbye!",
    ]
    assert listener.token_counts[0] == len(tokenize(HOURS))  # streamed, not re-aggregated
    assert any(isinstance(f, EndWorkerFrame) for f in up)
    events = [f for f in down if isinstance(f, AgentEventFrame)]
    assert [e.data["reason"] for e in events if e.kind == "llm_error"] == ["error", "error"]
    assert [e.data["name"] for e in events if e.kind == "tool_call"] == ["end_call"]

    # what Bedrock was asked: a signed Converse request with the prompt and the tools
    assert len(bedrock.requests) == 4  # no botocore retry after the 500
    model, body, authorization = bedrock.requests[0]
    assert model == MODEL
    assert authorization.startswith("AWS4-HMAC-SHA256 Credential=AKIDTEST/")
    assert "/us-east-1/bedrock/aws4_request" in authorization
    assert "eight to six" in body["system"][0]["text"]
    assert {t["toolSpec"]["name"] for t in body["toolConfig"]["tools"]} == {"end_call"}
    assert body["messages"][-1] == {"role": "user",
                                    "content": [{"text": "What are your opening hours?"}]}
    assert body["inferenceConfig"]["maxTokens"] == 300
    # the turn after the 500 went out as usual
    assert bedrock.requests[2][1]["messages"][-1]["content"] == [{"text": "And on Sundays?"}]
