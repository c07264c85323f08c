"""Twilio Flex hand-off through ``<Connect action>``: when the agent hands the caller to a person
and no REST account is set, the stream closes and the action callback Twilio then makes is
answered with ``<Enqueue workflowSid><Task>`` whose attributes carry the summary, the slots and a
link to the transcript; a call that just ended gets ``<Hangup/>``; an unsigned callback 403."""

from __future__ import annotations

import json
import re
from xml.etree import ElementTree

import aiohttp
import pytest
from pipecat.frames.frames import InputDTMFFrame
from pipecat.processors.frame_processor import FrameDirection

from agent.echo import EchoAgentProcessor
from harness.callers.twilio import CallerConfig, CallerUtterance, run_call
from pipeline.frames import AgentEventFrame, TransferCallFrame
from telephony.server import CallServer, ServerConfig
from telephony.twilio.signature import SIGNATURE_HEADER, compute_signature

from .conftest import TOKEN

WORKFLOW = "WW" + "0123456789abcdef" * 2


class HandingOffAgent(EchoAgentProcessor):
    """The echo agent; key 2 fills a slot, key * asks for a person (the Flex workflow)."""

    async def process_frame(self, frame, direction):
        if isinstance(frame, InputDTMFFrame) and frame.button.value == "2":
            await self.push_frame(AgentEventFrame(kind="slot", data={"name": "account", "value": "A-42"}))
        elif isinstance(frame, InputDTMFFrame) and frame.button.value == "*":
            await self.push_frame(TransferCallFrame(kind="enqueue", target=WORKFLOW), FrameDirection.UPSTREAM)
        await super().process_frame(frame, direction)


@pytest.fixture
async def server():
    srv = CallServer(ServerConfig(host="127.0.0.1", port=0, auth_token=TOKEN),
                     agent_factory=lambda _info: HandingOffAgent())
    await srv.start()
    try:
        yield srv
    finally:
        await srv.stop()


async def _post(port: int, path: str, form: dict[str, str], signed: bool = True) -> tuple[int, str]:
    url = f"http://127.0.0.1:{port}{path}"
    headers = {SIGNATURE_HEADER: compute_signature(TOKEN, url, form)} if signed else {}
    async with aiohttp.ClientSession() as s, s.post(url, data=form, headers=headers) as r:
        return r.status, await r.text()


async def test_the_voice_webhook_asks_twilio_to_call_back_when_the_stream_ends(server):
    status, twiml = await _post(server.port, "/twilio/voice", {"CallSid": "CA" + "1" * 32, "From": "+1555"})
    connect = ElementTree.fromstring(twiml).find("Connect")
    assert status == 200 and connect is not None
    assert connect.get("action") == f"http://127.0.0.1:{server.port}/twilio/connect-done"


async def test_a_handoff_enqueues_the_caller_into_flex_with_the_calls_facts(server):
    report = await run_call(CallerConfig(
        url=f"ws://127.0.0.1:{server.port}/twilio/stream", auth_token=TOKEN, timeout_s=45,
        utterances=(CallerUtterance(text="hello how are you"), CallerUtterance(dtmf="2"),
                    CallerUtterance(dtmf="*"))))
    sid = report.call_sid
    record = server.store.get(sid)
    assert record.ended and record.end_reason == f"handed to Twilio: enqueue:{WORKFLOW}"
    # what Twilio does once the stream has closed: POST the <Connect action> URL, signed
    status, twiml = await _post(server.port, "/twilio/connect-done",
                                {"CallSid": sid, "CallStatus": "in-progress", "StreamSid": "MZ1"})
    assert status == 200
    enqueue = ElementTree.fromstring(twiml).find("Enqueue")
    assert enqueue is not None and enqueue.get("workflowSid") == WORKFLOW
    attributes = json.loads(enqueue.findtext("Task"))
    assert attributes["parley_call_sid"] == sid and attributes["slots"] == {"account": "A-42"}
    assert attributes["turns"] >= 1 and "you said" in attributes["summary"].lower()
    assert attributes["transcript_url"] == f"http://127.0.0.1:{server.port}/calls/{sid}"
    # Twilio asks once; a second callback for the same call just hangs up
    status, again = await _post(server.port, "/twilio/connect-done", {"CallSid": sid, "CallStatus": "in-progress"})
    assert status == 200 and ElementTree.fromstring(again).find("Hangup") is not None


async def test_a_call_that_simply_ended_hangs_up_and_unsigned_callbacks_are_refused(server):
    status, twiml = await _post(server.port, "/twilio/connect-done", {"CallSid": "CA" + "2" * 32})
    assert status == 200 and re.search(r"<Hangup\s*/>", twiml)
    status, _ = await _post(server.port, "/twilio/connect-done", {"CallSid": "CA" + "2" * 32}, signed=False)
    assert status == 403
