"""A SIP call's recording: both channels, where the call's record says (the scripted RTP caller
against a real SipServer on loopback; the check itself: tests/telephony/recording_checks.py)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from harness.callers.sip import place_sip_call
from harness.flite import synthesize_flite
from pipeline.audio.g711 import resample
from pipeline.audio.recordings import read_recording
from pipeline.builder import PipelineConfig

from ..recording_checks import assert_lines_up, sound_spans
from .conftest import wait_for

SAID = ("hello how are you", "i would like to check my account")


@pytest.fixture(scope="module")
def utterances() -> list[np.ndarray]:
    out = []
    for text in SAID:
        pcm, rate_hz = asyncio.run(synthesize_flite(text))
        out.append(resample(pcm, rate_hz, 8000))
    return out


async def test_a_sip_call_is_recorded_where_its_record_says(make_sip_server, utterances, tmp_path):
    server = await make_sip_server(pipeline=PipelineConfig(vad="webrtc", recordings_dir=str(tmp_path)))
    report = await place_sip_call("127.0.0.1", server.port, utterances, greeting_wait_s=0.5,
                                  reply_timeout_s=15.0, timeout_s=40.0)
    assert len(report.turns) == 2 and not report.timed_out, report.turns
    [record] = server.store.list()
    await wait_for(lambda: record.ended)
    assert record.transport == "sip" and record.recording and record.recording.endswith(".opus"), record.recording
    assert [t.agent_text.startswith("You said") for t in record.turns] == [True, True], record.turns

    pcm, rate = read_recording(record.recording)
    assert rate == 8000 and pcm.shape[1] == 2
    # every packet the caller sent is on the caller's channel, and both utterances sound on it
    assert abs(pcm.shape[0] - report.packets_sent * 160) <= 10 * 160, (pcm.shape, report.packets_sent)
    assert len(sound_spans(pcm[:, 0], rate)) == 2
    worst = assert_lines_up(record)
    assert set(worst) == {"speech_start", "speech_end", "agent_start"}, worst
