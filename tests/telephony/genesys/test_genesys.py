"""Genesys Cloud's Audio Connector over loopback: a scripted AudioHook client (harness.callers.genesys,
written from the protocol) calls a real call server's /genesys/audiohook with the echo agent:
signed upgrades, open/opened, the greeting, turns, DTMF, ping/pong, barge-in, the hand-back with
outputVariables, a connection probe, pause/resume, refusals, a sequence error and the drain."""

from __future__ import annotations

import asyncio
import json
import shutil
import uuid

import aiohttp
import numpy as np
import pytest

from agent.echo import EchoAgentProcessor
from harness.callers.genesys import GenesysCallerConfig, run_genesys_call
from harness.callers.script import CallerUtterance
from pipeline.audio.g711 import ulaw_encode
from telephony.genesys import GenesysConfig
from telephony.genesys.routes import new_session_headers
from telephony.genesys.signature import sign
from telephony.server import CallServer, ServerConfig

from ..conftest import TOKEN

KEY = "parley-genesys-test-key"
SECRET = b"the integration's client secret, 32+ bytes"

pytestmark = pytest.mark.skipif(shutil.which("flite") is None, reason="flite is not installed")


@pytest.fixture
async def server():
    srv = CallServer(ServerConfig(host="127.0.0.1", port=0, auth_token=TOKEN, genesys=GenesysConfig(KEY, SECRET),
                                  drain_grace_s=0.0),
                     agent_factory=lambda _info: EchoAgentProcessor())
    await srv.start()
    try:
        yield srv
    finally:
        await srv.stop()


def _config(server, path: str = "/genesys/audiohook", **kwargs) -> GenesysCallerConfig:
    return GenesysCallerConfig(url=f"ws://127.0.0.1:{server.port}{path}", api_key=KEY, client_secret=SECRET, **kwargs)


async def test_a_call_greets_answers_takes_a_key_and_hands_back_with_output_variables(server):
    report = await run_genesys_call(_config(   # Genesys appends the action's connector id to the base URI
        server, path="/genesys/audiohook/receptionist-7", input_variables={"queue": "billing"},
        utterances=(CallerUtterance(text="hello how are you"), CallerUtterance(dtmf="5"),
                    CallerUtterance(text="bye bye"))))
    assert report.faults == [] and report.status == 0
    assert report.opened == {"startPaused": False,
                             "media": [{"type": "audio", "format": "PCMU", "channels": ["external"], "rate": 8000}]}
    assert report.agent_audio_s[0] > 1.0 and all(s > 0.3 for s in report.agent_audio_s[1:])
    assert report.pongs >= 2
    assert report.disconnect is not None and report.disconnect["reason"] == "completed"
    variables = report.disconnect["outputVariables"]
    assert all(isinstance(v, str) for v in variables.values())
    assert variables["parley_call_id"] == f"genesys-{report.session_id}" and int(variables["turns"]) >= 2
    assert "you said" in variables["summary"].lower()
    assert report.closed
    record = server.store.get(f"genesys-{report.session_id}")
    assert record.transport == "genesys" and record.ended and record.end_reason == "handed back to Genesys"
    assert record.params["from"] == "+15550100" and record.params["var_queue"] == "billing"
    assert record.params["connector_id"] == "receptionist-7"
    assert record.turns[0].user_text and record.stats["dtmf"] == 1 and record.stats["pings"] >= 2
    assert server.live_calls() == 0


async def test_the_caller_cutting_into_the_greeting_sends_barge_in(server):
    report = await run_genesys_call(_config(server, greeting_barge_in_s=0.8,
                                            utterances=(CallerUtterance(text="i need to speak to someone now"),)))
    assert {"type": "barge_in", "data": {}} in report.events, report.events
    record = server.store.get(f"genesys-{report.session_id}")
    assert record.greeting_heard and len(record.greeting_heard) < len(record.greeting)
    assert report.faults == [] and report.closed


async def test_a_connection_probe_is_opened_and_closed_without_a_call(server):
    report = await run_genesys_call(_config(server, probe=True))
    assert report.opened is not None and report.closed and report.faults == []
    assert server.store.list() == []


async def test_a_sequence_error_is_a_disconnect_with_the_reason(server):
    bad_ping = json.dumps({"version": "2", "id": "{id}", "type": "ping", "seq": 99, "serverseq": 1,
                           "position": "PT0S", "parameters": {}})
    report = await run_genesys_call(_config(server, extra_messages=(bad_ping,), utterances=()))
    assert report.disconnect is not None and report.disconnect["reason"] == "error"
    assert "invalid seq value 99" in report.disconnect["info"]
    assert report.closed


@pytest.mark.parametrize("how", ["unsigned", "wrong secret", "unknown key", "replayed", "no session headers"])
async def test_an_upgrade_that_fails_authentication_is_refused_before_the_socket(server, how):
    url = f"ws://127.0.0.1:{server.port}/genesys/audiohook"
    headers = new_session_headers()
    authority = f"127.0.0.1:{server.port}"
    signed = sign(headers, target="/genesys/audiohook", authority=authority, api_key=KEY, secret=SECRET)
    attempt = {
        "unsigned": {**headers, "x-api-key": KEY},
        "wrong secret": sign(headers, target="/genesys/audiohook", authority=authority, api_key=KEY, secret=b"nope"),
        "unknown key": sign(headers, target="/genesys/audiohook", authority=authority, api_key="other", secret=SECRET),
        "replayed": signed,
        "no session headers": {k: v for k, v in signed.items() if not k.startswith("audiohook-")},
    }[how]
    async with aiohttp.ClientSession() as s:
        if how == "replayed":
            async with s.ws_connect(url, headers=signed) as ws:   # the first use is fine
                await ws.close()
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await s.ws_connect(url, headers=attempt)
    assert refused.value.status == (400 if how == "no session headers" else 401)


async def test_pause_drops_audio_until_resumed_and_ping_update_close_are_answered(server):
    headers = sign(new_session_headers(), target="/genesys/audiohook", authority=f"127.0.0.1:{server.port}",
                   api_key=KEY, secret=SECRET)
    sid = headers["audiohook-session-id"]
    seq = seen = 0

    def message(type_, parameters=None):
        nonlocal seq
        seq += 1
        return json.dumps({"version": "2", "id": sid, "type": type_, "seq": seq, "serverseq": seen,
                           "position": "PT0S", "parameters": parameters or {}})

    async def text(ws):
        nonlocal seen
        while True:
            msg = await ws.receive(timeout=10)
            if msg.type == aiohttp.WSMsgType.TEXT:
                reply = json.loads(msg.data)
                seen = reply["seq"]
                return reply
            assert msg.type == aiohttp.WSMsgType.BINARY

    silence = ulaw_encode(np.zeros(1600, np.int16))
    async with aiohttp.ClientSession() as s, s.ws_connect(f"ws://127.0.0.1:{server.port}/genesys/audiohook",
                                                          headers=headers) as ws:
        await ws.send_str(message("open", {
            "organizationId": headers["audiohook-organization-id"], "conversationId": str(uuid.uuid4()),
            "participant": {"id": str(uuid.uuid4()), "ani": "+1555", "aniName": "", "dnis": "+1800"},
            "media": [{"type": "audio", "format": "PCMU", "channels": ["external", "internal"], "rate": 8000}]}))
        opened = await text(ws)
        assert opened["type"] == "opened", opened
        assert opened["parameters"]["media"][0]["channels"] == ["external", "internal"]
        await ws.send_str(message("paused"))
        await ws.send_bytes(silence * 2)                       # 2 channels interleaved: dropped while paused
        await ws.send_str(message("resumed", {"start": "PT0.4S", "discarded": "PT0.4S"}))
        await ws.send_bytes(silence * 2)
        await ws.send_str(message("ping"))
        pong = await text(ws)
        assert pong["type"] == "pong" and pong["clientseq"] == seq
        await ws.send_str(message("update", {"language": "en-GB"}))
        assert (await text(ws))["type"] == "updated"
        await ws.send_str(message("close", {"reason": "end"}))
        assert (await text(ws))["type"] == "closed"
    for _ in range(50):
        record = server.store.get(f"genesys-{sid}")
        if record is not None and record.ended:
            break
        await asyncio.sleep(0.1)
    assert record.end_reason == "Genesys closed the session (end)"
    assert record.stats["audio_dropped_paused"] == 3200 and record.stats["audio_in_bytes"] == 3200
    assert record.stats["frames_in"] == 10                     # 200 ms of the caller's channel, 20 ms frames


async def test_the_drain_ends_a_live_session_with_a_farewell_and_a_hand_back(server):
    call = asyncio.create_task(run_genesys_call(_config(
        server, utterances=(CallerUtterance(text="hello how are you"), CallerUtterance(text="i am still here")))))
    for _ in range(100):
        if server.live_calls():
            break
        await asyncio.sleep(0.1)
    await asyncio.sleep(1.0)
    await server.drain()
    report = await asyncio.wait_for(call, 60)
    assert report.disconnect is not None and report.disconnect["reason"] == "completed"
    assert report.disconnect["outputVariables"]["end_reason"] == "server shutting down"
    assert report.closed
    async with aiohttp.ClientSession() as s:
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await s.ws_connect(f"ws://127.0.0.1:{server.port}/genesys/audiohook",
                               headers=sign(new_session_headers(), target="/genesys/audiohook",
                                            authority=f"127.0.0.1:{server.port}", api_key=KEY, secret=SECRET))
    assert refused.value.status == 503


def test_output_variables_carry_slots_transfer_and_summary_as_strings():
    from pipeline.records import CallRecord, TurnRecord
    from telephony.genesys.call import output_variables

    record = CallRecord(call_sid="genesys-1", transport="genesys", turns=[
        TurnRecord(turn=1, user_text="my name is ann", agent_text="Thanks Ann. Your number?",
                   events=[{"kind": "slot", "data": {"name": "name", "value": "Ann"}}]),
        TurnRecord(turn=2, user_text="five five five", agent_text="Putting you through.",
                   events=[{"kind": "slot", "data": {"name": "phone", "value": 5550100}},
                           {"kind": "transfer", "data": {"target": "+15550111"}}]),
    ])
    out = output_variables(record, transfer=("phone", "+15550111"), reason="completed")
    assert out == {"parley_call_id": "genesys-1", "end_reason": "completed", "turns": "2", "slot_name": "Ann",
                   "slot_phone": "5550100", "transfer_kind": "phone", "transfer_target": "+15550111",
                   "summary": "caller: my name is ann / agent: Thanks Ann. Your number? | "
                              "caller: five five five / agent: Putting you through."}
    long = CallRecord(call_sid="x", transport="genesys",
                      turns=[TurnRecord(turn=i + 1, user_text="word " * 50) for i in range(20)])
    assert len(output_variables(long, transfer=None, reason="r")["summary"]) == 1000


class KeyAgent(EchoAgentProcessor):
    """The echo agent; the keys it is handed are kept, and ``*`` asks for a person."""

    def __init__(self, keys: list[str]):
        super().__init__()
        self._keys = keys

    async def process_frame(self, frame, direction):
        from pipecat.frames.frames import InputDTMFFrame
        from pipecat.processors.frame_processor import FrameDirection

        from pipeline.frames import TransferCallFrame

        if isinstance(frame, InputDTMFFrame):
            self._keys.append(frame.button.value)
            if frame.button.value == "*":
                await self.push_frame(TransferCallFrame(kind="dial", target="+15550111"), FrameDirection.UPSTREAM)
        await super().process_frame(frame, direction)


async def test_keys_reach_the_agent_and_a_transfer_hands_the_call_back_with_its_target():
    keys: list[str] = []
    srv = CallServer(ServerConfig(host="127.0.0.1", port=0, auth_token=TOKEN, genesys=GenesysConfig(KEY, SECRET)),
                     agent_factory=lambda _info: KeyAgent(keys))
    await srv.start()
    try:
        report = await run_genesys_call(_config(srv, utterances=(CallerUtterance(dtmf="1"), CallerUtterance(dtmf="*"),
                                                                  CallerUtterance(text="hello are you there"))))
    finally:
        await srv.stop()
    assert keys == ["1", "*"]
    assert report.disconnect is not None and report.disconnect["reason"] == "completed"
    variables = report.disconnect["outputVariables"]
    assert (variables["transfer_kind"], variables["transfer_target"]) == ("dial", "+15550111")
    record = srv.store.get(f"genesys-{report.session_id}")
    assert record.end_reason == "handed back to Genesys: transfer to dial:+15550111"
    assert report.closed and report.faults == []
