"""A browser call's recording: the caller's channel (the browser's microphone, as pipecat
resampled it) and the agent's as the browser played it, where the call's record says, with the
caller cutting into a long greeting (aiortc as the browser; the check itself:
tests/telephony/recording_checks.py)."""

from __future__ import annotations

import asyncio

from agent.echo import EchoAgentConfig, EchoAgentProcessor
from harness.callers.webrtc import place_call
from pipeline.audio.recordings import read_recording
from pipeline.builder import PipelineConfig

from ..recording_checks import assert_lines_up, sound_spans
from .conftest import started_webrtc_server

GREETING = ("Hello, this is parley, the voice agent of the example company. Please tell me, in a few "
            "words, how I can help you today, and I will do my best.")  # about 7 s of espeak


def replied(messages: list[dict]) -> bool:
    return any(m.get("type") == "transcript" and m.get("role") == "agent" and m.get("turn") == 1
               and m.get("final") for m in messages)


async def test_a_browser_call_is_recorded_on_both_channels_where_its_record_says(speech, tmp_path):
    pcm, rate_hz = speech
    async with started_webrtc_server(lambda _info: EchoAgentProcessor(EchoAgentConfig(greeting=GREETING)),
                                     pipeline=PipelineConfig(recordings_dir=str(tmp_path))) as server:
        # the caller speaks 2.5 s into the call, while the 7 s greeting plays
        result = await place_call(f"http://127.0.0.1:{server.port}", pcm, rate_hz, until=replied,
                                  timeout_s=30.0, lead_s=2.5)
        record = server.store.get(result.call_id)
        for _ in range(50):
            if record.ended:
                break
            await asyncio.sleep(0.1)
    assert record.ended and record.recording and record.recording.endswith(".opus"), record
    assert 0 < len(record.greeting_heard) < len(record.greeting), record.greeting_heard   # cut by the caller

    recorded, rate = read_recording(record.recording)
    assert recorded.shape[1] == 2
    # the caller's channel holds the microphone: its one utterance, as long as it sounds in flite's clip
    [said] = sound_spans(recorded[:, 0], rate)
    [spoken] = sound_spans(pcm, rate_hz)
    assert abs((said[1] - said[0]) - (spoken[1] - spoken[0])) < 0.1, (said, spoken)   # Opus twice: edges soften
    worst = assert_lines_up(record, expect_cut=True)
    assert {"speech_start", "speech_end", "agent_start", "agent_cut"} <= set(worst), worst
