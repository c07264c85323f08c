"""The one voice contract (``pipeline.engines.speaking``): the same scenarios on every real
in-process voice, parley's SSM voice and espeak-ng."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import torch

from pipeline.engines.espeak import EspeakVoice
from pipeline.engines.speaking import SpeechChunk
from pipeline.engines.ssm_voice import DEFAULT_MODEL_DIR, SSMVoiceEngine

RATE = 8000


@pytest.fixture(scope="module")
def voices():
    torch.set_num_threads(1)
    ssm = SSMVoiceEngine(DEFAULT_MODEL_DIR)
    yield {"ssm": ssm, "espeak": EspeakVoice("en-us")}
    ssm.close()


async def spoken(utt, text: str) -> list[SpeechChunk]:
    return [chunk async for chunk in utt.speak(text)]


@pytest.mark.parametrize("kind", ["ssm", "espeak"])
async def test_a_voice_speaks_in_chunks_with_its_words_in_order(voices, kind):
    voice = voices[kind]
    chunks = await asyncio.wait_for(spoken(voice.open(RATE), "Your order 4417 ships today."), 30)
    pcm = np.concatenate([c.pcm for c in chunks])
    assert pcm.dtype == np.int16 and 1.0 < len(pcm) / RATE < 4.0
    assert np.abs(pcm.astype(np.float64)).max() > 1000        # speech, not silence
    starts = [c.start_s for c in chunks]
    assert starts == sorted(starts) and starts[0] == 0.0
    words = [w for c in chunks for w in c.words]
    times = [t for _, t in words]
    assert times == sorted(times) and times[-1] < len(pcm) / RATE
    said = [w.lower().strip(".") for w, _ in words]
    if voice.written_words:        # espeak-ng reports the text as written
        assert said == ["your", "order", "4417", "ships", "today"], said
    else:                          # the SSM voice reports what it said; the service maps it back
        assert said[:2] == ["your", "order"] and "four" in said and said[-1] == "today", said


@pytest.mark.parametrize("kind", ["ssm", "espeak"])
async def test_cancel_stops_the_speech_and_leaving_early_cancels(voices, kind):
    voice = voices[kind]
    long_text = "Thank you for calling. " * 12
    whole = await asyncio.wait_for(spoken(voice.open(RATE), long_text), 60)
    utt = voice.open(RATE)
    got = []
    async for chunk in utt.speak(long_text):
        got.append(chunk)
        if len(got) == 2:
            utt.cancel()
    assert utt.cancelled
    # a chunk already made may still come out; nothing close to the whole text does
    assert sum(len(c.pcm) for c in got) < 0.2 * sum(len(c.pcm) for c in whole)
    utt = voice.open(RATE)
    speech = utt.speak(long_text)
    await anext(speech)
    await speech.aclose()          # the consumer stopped: the utterance is cancelled
    assert utt.cancelled
    again = await asyncio.wait_for(spoken(voice.open(RATE), "One moment, please."), 30)
    assert sum(len(c.pcm) for c in again) > 0.3 * RATE      # and the voice speaks on
