"""SphinxEngine on real (flite) speech at 8 and 16 kHz, and on bad input."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.engines.sphinx import SphinxEngine, as_int16
from pipeline.errors import AudioFormatError, PipelineError

# Calibrated on pocketsphinx 5.1.1 with flite's slt voice: at 16 kHz these come back (nearly)
# word for word; at 8 kHz (upsampled) "hello how are you" and "no thank you" do, longer phrases
# lose words, in line with the ~69 % WER FACTS.md reports on real phone audio.
PHRASES_16K = ("hello how are you", "what time is it", "please call me tomorrow morning")
PHRASES_8K = ("hello how are you", "no thank you", "please call me tomorrow morning")


@pytest.fixture(scope="module")
def engine16() -> SphinxEngine:
    return SphinxEngine(sample_rate_hz=16000)


@pytest.fixture(scope="module")
def engine8() -> SphinxEngine:
    return SphinxEngine(sample_rate_hz=8000)


def recall(reference: str, hypothesis: str) -> float:
    hyp = hypothesis.split()
    return sum(1 for w in reference.split() if w in hyp) / len(reference.split())


def stream(engine: SphinxEngine, pcm: np.ndarray) -> tuple[str, list[str]]:
    """Feed 20 ms frames as a transport would; return the final text and the partials."""
    step = engine.sample_rate_hz // 50
    engine.start_utt()
    partials = [p for i in range(0, len(pcm), step) if (p := engine.feed(pcm[i : i + step]))]
    return engine.end_utt(), partials


def test_16k_phrases_are_recognized(engine16, flite_speech):
    scores = []
    for text in PHRASES_16K:
        final, partials = stream(engine16, flite_speech(text, 16000))
        scores.append(recall(text, final))
        assert partials, "no partial hypothesis while streaming"
        assert partials[-1].split()[0] == final.split()[0]
    assert min(scores) >= 0.75 and np.mean(scores) >= 0.9


def test_8k_phone_rate_is_upsampled_and_recognized(flite_speech):
    engine8 = SphinxEngine(sample_rate_hz=8000)  # fresh: the first utterance of a call counts
    scores = []
    for text in PHRASES_8K:
        final, partials = stream(engine8, flite_speech(text, 8000))
        scores.append(recall(text, final))
        assert partials
    assert scores[0] >= 0.75 and np.mean(scores) >= 0.6


def test_engine_is_reused_across_utterances(engine16, flite_speech):
    first, _ = stream(engine16, flite_speech("hello how are you", 16000))
    second, _ = stream(engine16, flite_speech("what time is it", 16000))
    assert "hello" in first and "time" in second and "hello" not in second


def test_bytes_input_equals_array_input(engine16, flite_speech):
    pcm = flite_speech("hello how are you", 16000)
    assert engine16.transcribe(pcm.tobytes()) == engine16.transcribe(pcm)


def test_silence_and_empty_audio_give_empty_or_short_text(engine8):
    engine8.start_utt()
    assert engine8.feed(np.zeros(0, np.int16)) is None
    assert engine8.feed(b"") is None
    assert engine8.end_utt() == ""
    assert len(engine8.transcribe(np.zeros(8000, np.int16)).split()) <= 1


@pytest.mark.parametrize(
    "bad",
    [
        np.full(160, np.nan, np.float32),
        np.zeros(160, np.float64),
        np.zeros((2, 160), np.int16),
        b"\x00\x01\x02",
        [0, 1, 2],
    ],
    ids=["nan-float32", "float64", "2-d", "odd-bytes", "list"],
)
def test_bad_input_raises_audio_format_error(engine8, bad):
    engine8.start_utt()
    with pytest.raises(AudioFormatError):
        engine8.feed(bad)
    assert engine8.end_utt() == ""  # the engine is still usable


def test_misuse_raises_pipeline_errors():
    with pytest.raises(AudioFormatError):
        SphinxEngine(sample_rate_hz=11025)
    with pytest.raises(AudioFormatError):
        as_int16(np.zeros(4, np.int32))


def test_feed_or_end_outside_an_utterance_raises(engine16):
    with pytest.raises(PipelineError):
        engine16.feed(np.zeros(160, np.int16))
    with pytest.raises(PipelineError):
        engine16.end_utt()
