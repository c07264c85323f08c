"""A browser caller cuts into the agent: only the words its playout clock sent stay in the context."""

from __future__ import annotations

import asyncio

import aiohttp
import numpy as np

from agent.echo import EchoAgentConfig
from harness.callers.webrtc import place_call
from tests.metrics_text import sample

from ..conftest import ContextKeepingAgent, words

GREETING = ("Hello, this is parley, the voice agent of the example company. Please tell me, in a few "
            "words, how I can help you today, and I will do my best.")  # about 7 s of espeak


async def test_barge_in_keeps_only_the_played_words(webrtc_server, speech):
    contexts: list = []
    webrtc_server.webrtc.agent_factory = lambda _info: ContextKeepingAgent(contexts, EchoAgentConfig(greeting=GREETING))
    pcm, rate_hz = speech

    def replied(messages: list[dict]) -> bool:
        return any(m.get("type") == "transcript" and m.get("role") == "agent" and m.get("turn") == 1
                   and m.get("final") for m in messages)

    base = f"http://127.0.0.1:{webrtc_server.port}"
    # the caller speaks 2.5 s into the call, while the 7 s greeting plays
    result = await place_call(base, pcm, rate_hz, until=replied, timeout_s=30.0, lead_s=2.5)
    assert replied(result.messages), [m.get("type") for m in result.messages]
    record = webrtc_server.store.get(result.call_id)
    for _ in range(50):
        if record.ended:
            break
        await asyncio.sleep(0.1)
    said, heard = words(record.greeting), words(record.greeting_heard)
    assert said == words(GREETING)
    assert 0 < len(heard) < len(said) and said[: len(heard)] == heard, (heard, said)
    # the agent's conversation holds the greeting as heard, not as generated
    assistant = [m["content"] for m in contexts[-1] if m.get("role") == "assistant"]
    assert words(assistant[0]) == heard, (assistant, heard)
    assert record.turns[0].agent_text.startswith("You said")
    # the caller's audio all arrived (loopback loses nothing); the agent's went out
    stats = record.stats
    assert stats["frames_in"] > 100 and stats["frames_in_lost"] == 0, stats
    assert stats["frames_out"] > 50, stats
    agent_audio = result.agent_audio
    assert np.abs(agent_audio.astype(np.int32)).max() > 3000
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{base}/metrics") as r:
            text = await r.text()
    assert sample(text, 'parley_calls_total{transport="webrtc"}') == 1
    assert sample(text, 'parley_audio_frames_total{transport="webrtc",direction="in"}') == stats["frames_in"]
