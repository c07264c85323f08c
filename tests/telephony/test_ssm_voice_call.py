"""A loopback Twilio call answered in parley's SSM voice, with a barge-in.

Real server, pipeline (Silero, pocketsphinx, the echo agent, ``SSMTTSService``), scripted caller.
The voice is an untrained one with 80 ms phones (it babbles, in time with real speech), so the
test does not depend on which trained voice is shipped.
"""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.audio.g711 import ulaw_decode, ulaw_encode
from pipeline.builder import PipelineConfig
from pipeline.engines.ssm_voice import SSMVoiceEngine
from harness.callers.twilio import CallerConfig, CallerUtterance, run_call
from telephony.server import CallServer, ServerConfig

from ..pipeline.test_ssm_tts import random_voice_dir
from .conftest import TOKEN, ContextKeepingAgent, words


@pytest.fixture
def voice_dir(tmp_path):
    return random_voice_dir(tmp_path / "voice")


async def test_the_agent_speaks_in_the_ssm_voice_and_a_barge_in_keeps_only_what_was_heard(voice_dir):
    contexts: list = []
    config = ServerConfig(port=0, auth_token=TOKEN,
                          pipeline=PipelineConfig(tts="ssm", tts_model_dir=str(voice_dir)))
    srv = CallServer(config, agent_factory=lambda _info: ContextKeepingAgent(contexts))
    port = await srv.start()
    try:
        report = await run_call(CallerConfig(
            url=f"ws://127.0.0.1:{port}/twilio/stream", auth_token=TOKEN,
            utterances=(CallerUtterance(text="hello how are you"),
                        CallerUtterance(text="i would like to check my account")),  # cuts into reply 1
            barge_in_ms=700, timeout_s=60))
        record = srv.store.get(report.call_sid)
    finally:
        await srv.stop()
    turns = report.turns
    assert len(turns) == 2 and all(t.agent_audio_bytes > 0 for t in turns), turns

    # what the caller heard first is the SSM voice's greeting, sample for sample (through mu-law)
    greeting = [c.pcm async for c in SSMVoiceEngine.shared(voice_dir).open(8000).speak(
        "Hello, this is parley.")]
    expected = ulaw_decode(ulaw_encode(np.concatenate(greeting)))[:1600]
    heard = report.agent_audio
    start = int(np.flatnonzero(heard)[0])
    window = heard[max(0, start - 160):start + 1760]
    assert any(np.array_equal(window[i:i + 1600], expected) for i in range(0, 161)), "not the SSM voice"

    # the barge-in: clear came and no audio of the interrupted reply after it
    assert turns[1].barged_in and turns[1].clear_received, turns[1].to_json_line()
    assert turns[1].media_after_clear_bytes == 0, turns[1].to_json_line()

    # the interrupted reply is kept, as the LLM wrote it, only as far as it was played (the
    # voice's word timestamps against Twilio's marks) ...
    first = record.turns[0]
    assert first.interrupted
    sent_words, heard_words = first.agent_text.split(), first.agent_text_heard.split()
    assert 0 < len(heard_words) < len(sent_words), (sent_words, heard_words)
    assert sent_words[: len(heard_words)] == heard_words
    # ... and that is what the agent's conversation holds
    assistant = [m["content"] for m in contexts[-1] if m["role"] == "assistant"]
    assert any(words(m) == words(" ".join(heard_words)) for m in assistant), (assistant, heard_words)
