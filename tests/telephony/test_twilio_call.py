"""Loopback Twilio calls against the real server, pipeline and engines, placed by the scripted caller."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import jiwer
import numpy as np

from agent.echo import EchoAgentProcessor
from harness.callers.twilio import CallerConfig, CallerUtterance, run_call
from telephony.twilio.signature import SIGNATURE_HEADER, compute_signature
from tests.metrics_text import sample

from .conftest import TOKEN, ContextKeepingAgent, answer, words


def _wer(said: list[str], heard: list[str]) -> float:
    return jiwer.wer(" ".join(said), " ".join(heard))


async def test_three_turns_with_barge_ins(server):
    contexts: list = []
    server.agent_factory = lambda _info: ContextKeepingAgent(contexts)
    url = f"ws://127.0.0.1:{server.port}/twilio/stream"
    report = await run_call(CallerConfig(
        url=url,
        auth_token=TOKEN,
        utterances=(
            CallerUtterance(text="hello how are you"),
            CallerUtterance(text="i would like to check my account"),  # cuts into the first reply
            CallerUtterance(text="hello how are you"),                  # cuts into the second
        ),
        barge_in_ms=700,
        params={"customer": "test"},
        timeout_s=60,
    ))
    turns = report.turns
    assert len(turns) == 3, [t.to_json_line() for t in turns]

    # the agent heard the caller (pocketsphinx at 8 kHz is rough: allow recognizer errors)
    said = [t.caller_said for t in turns]
    heard = [t.agent_transcript or "" for t in turns]
    assert _wer(said, heard) <= 0.5, list(zip(said, heard))

    # every turn was answered with audio, measured end to end
    for t in turns:
        assert t.agent_audio_bytes > 0, t.to_json_line()
        assert t.latency_ms.stt_final is not None
    assert all(json.loads(t.to_json_line())["v2v_ms"] > 0 for t in turns)
    assert np.abs(report.agent_audio.astype(np.int32)).max() > 1000  # real speech was recorded

    # the barge-ins: clear arrived and no audio of the interrupted reply came after it
    for t in turns[1:]:
        assert t.barged_in and t.clear_received, t.to_json_line()
        assert t.media_after_clear_bytes == 0, t.to_json_line()

    # the caller hung up after its last turn; the record is complete
    record = server.store.get(report.call_sid)
    assert record is not None and record.ended and record.end_reason == "caller hung up (stop)"
    # the caller's own parameter, and those Twilio passes on from the webhook's <Stream> (the answer
    # token is the server's own and stays out of the record)
    assert record.params["customer"] == "test" and record.params["From"] == "+15550100"
    assert "parley_answered" not in record.params
    assert len(record.turns) == 3 and record.greeting.startswith("Hello")

    # the interrupted reply is kept only as far as the caller heard it ...
    first = record.turns[0]
    assert first.interrupted
    sent_words, heard_words = first.agent_text.split(), first.agent_text_heard.split()
    assert 0 < len(heard_words) < len(sent_words)
    assert sent_words[: len(heard_words)] == heard_words
    # ... and that is what the agent's conversation holds
    assistant = [m["content"] for m in contexts[-1] if m["role"] == "assistant"]
    assert any(words(m) == [w.lower() for w in heard_words] for m in assistant), (assistant, heard_words)


async def test_garbage_oversized_and_out_of_order_messages_leave_the_call_up(server, caplog):
    url = f"ws://127.0.0.1:{server.port}/twilio/stream"
    big = json.dumps({"event": "media", "media": {"payload": "A" * 100_000}})
    report = await run_call(CallerConfig(
        url=url,
        auth_token=TOKEN,
        utterances=(
            CallerUtterance(raw="this is not json"),
            CallerUtterance(raw=big),
            CallerUtterance(raw='{"event": "media"}'),
            CallerUtterance(raw='{"event": "teleport", "streamSid": "MZ1"}'),
            CallerUtterance(raw='{"event": "media", "streamSid": "MZ1", "media": {"payload": "!!!"}}'),
            CallerUtterance(raw='{"event": "start", "sequenceNumber": "9", "start": {}}'),
            CallerUtterance(raw='{"event": "mark", "sequenceNumber": "10", "streamSid": "MZ1", "mark": {"name": "u99:0"}}'),
            CallerUtterance(dtmf="5"),
            CallerUtterance(text="hello how are you"),
        ),
        timeout_s=45,
    ))
    assert len(report.turns) == 1
    assert report.turns[0].agent_audio_bytes > 0  # the call went on and was answered
    assert "bad Media Streams message skipped" in caplog.text
    assert server.store.get(report.call_sid).stats["bad_messages"] >= 5
    assert report.call_sid in caplog.text  # logged with the call id
    async with aiohttp.ClientSession() as s:  # and the server is still up
        async with s.get(f"http://127.0.0.1:{server.port}/healthz") as r:
            assert r.status == 200


async def test_garbage_before_start_and_a_dropped_socket_are_handled(server, caplog):
    url = f"ws://127.0.0.1:{server.port}/twilio/stream"
    headers = {SIGNATURE_HEADER: compute_signature(TOKEN, url, {})}
    async with aiohttp.ClientSession() as s:
        # no start at all: the stream is refused after the garbage, the server stays up
        async with s.ws_connect(url, headers=headers) as ws:
            await ws.send_str("{{{")
            await ws.send_str('{"event": "media", "streamSid": "MZ1", "sequenceNumber": "1", '
                              '"media": {"track": "inbound", "chunk": "1", "timestamp": "5", "payload": ""}}')
            await ws.close()
        # a proper start, then the socket just drops mid-call
        sid = "CA" + "2" * 32
        await answer(server.port, sid)
        async with s.ws_connect(url, headers=headers) as ws:
            await ws.send_str('{"event": "connected", "protocol": "Call", "version": "1.0.0"}')
            await ws.send_str(json.dumps({
                "event": "start", "sequenceNumber": "1", "streamSid": "MZ" + "2" * 32,
                "start": {"streamSid": "MZ" + "2" * 32, "accountSid": "AC" + "2" * 32, "callSid": sid,
                          "tracks": ["inbound"], "customParameters": {},
                          "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}},
            }))
            for _ in range(200):  # wait until the greeting's audio is flowing
                live = server.live.get(sid)
                if live is not None and live.transport.link.stats.media_out_bytes > 0:
                    break
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.5)
        for _ in range(50):
            record = server.store.get(sid)
            if record is not None and record.ended:
                break
            await asyncio.sleep(0.1)
        assert record is not None and record.ended, "the dropped call was not ended"
        assert record.greeting  # what was said so far is kept
        async with s.get(f"http://127.0.0.1:{server.port}/healthz") as r:
            assert r.status == 200
    assert "bad message before 'start' skipped" in caplog.text


async def test_goodbye_gets_a_farewell_and_the_agent_hangs_up(server):
    url = f"ws://127.0.0.1:{server.port}/twilio/stream"
    report = await run_call(CallerConfig(url=url, auth_token=TOKEN, utterances=(CallerUtterance(text="bye bye"),),
                                         timeout_s=30))
    assert report.server_hung_up
    record = server.store.get(report.call_sid)
    assert record.end_reason == "agent ended the call"
    assert record.turns[0].agent_text == "Thank you for calling Goodbye"
    assert record.turns[0].agent_text_heard == record.turns[0].agent_text  # played to the end first
    assert report.turns[0].agent_audio_bytes > 8000  # about a second of farewell reached the caller
    async with aiohttp.ClientSession() as s:  # the call shows in the Prometheus metrics
        async with s.get(f"http://127.0.0.1:{server.port}/metrics") as r:
            text = await r.text()
    assert sample(text, 'parley_calls_total{transport="twilio"}') == 1
    assert sample(text, 'parley_live_calls{transport="twilio"}') == 0
    assert sample(text, 'parley_turn_latency_ms_count{transport="twilio",mark="transport_first_byte"}') == 1


async def test_a_loopback_call_transcribed_by_the_ssm_recognizer():
    """The shipped SSM model (models/stt) in the live pipeline of a Twilio call."""
    from pipeline.builder import PipelineConfig
    from telephony.server import CallServer, ServerConfig

    srv = CallServer(ServerConfig(port=0, auth_token=TOKEN, pipeline=PipelineConfig(stt="ssm")),
                     agent_factory=lambda _info: EchoAgentProcessor())
    port = await srv.start()
    try:
        said = ["i would like to check my account", "my phone number is five five five"]
        report = await run_call(CallerConfig(url=f"ws://127.0.0.1:{port}/twilio/stream", auth_token=TOKEN,
                                             utterances=tuple(CallerUtterance(text=t) for t in said), timeout_s=60))
    finally:
        await srv.stop()
    heard = [t.agent_transcript or "" for t in report.turns]
    assert len(heard) == 2 and all(t.agent_audio_bytes > 0 for t in report.turns)
    assert _wer(said, heard) <= 0.5, list(zip(said, heard))
