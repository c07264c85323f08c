"""EspeakEngine: real libespeak-ng synthesis, streaming, word times, abort."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import pipeline.engines.espeak as espeak_mod
from pipeline.engines.espeak import EspeakEngine, SynthChunk
from pipeline.errors import AudioFormatError, EngineUnavailableError, PipelineError

TEXT = "Hello there, how are you doing today? I hope the weather is nice where you are."


def rms(pcm: np.ndarray) -> float:
    return float(np.sqrt(np.mean(pcm.astype(np.float64) ** 2)))


def test_synthesize_gives_audible_speech_and_ordered_word_times():
    out = EspeakEngine(sample_rate_hz=8000).synthesize("hello how are you")
    assert out.sample_rate_hz == 8000 and out.pcm.dtype == np.int16
    assert 0.6 < out.duration_s < 2.5
    assert rms(out.pcm) > 1000
    assert [w for w, _ in out.words] == ["hello", "how", "are", "you"]
    times = [t for _, t in out.words]
    assert times[0] == 0.0 and times == sorted(times) and times[-1] < out.duration_s


def test_stream_yields_several_chunks_that_add_up_to_the_whole():
    engine = EspeakEngine(sample_rate_hz=16000)
    chunks: list[SynthChunk] = []
    assert engine.synthesize_stream(TEXT, lambda c: chunks.append(c) or False) is True
    assert len(chunks) > 10
    whole = engine.synthesize(TEXT)
    # espeak-ng is not bit-exact from run to run (a few samples differ), so compare loosely.
    assert sum(len(c.pcm) for c in chunks) == pytest.approx(len(whole.pcm), rel=0.01)
    assert [w for c in chunks for w, _ in c.words] == [w for w, _ in whole.words]


@pytest.mark.parametrize("rate_hz", [8000, 16000, 24000])
def test_output_rate_keeps_duration(rate_hz):
    native = EspeakEngine(sample_rate_hz=22050).synthesize(TEXT)
    out = EspeakEngine(sample_rate_hz=rate_hz).synthesize(TEXT)
    assert out.sample_rate_hz == rate_hz
    assert out.duration_s == pytest.approx(native.duration_s, abs=0.01)


def test_returning_true_from_the_callback_aborts_mid_utterance():
    engine = EspeakEngine(sample_rate_hz=8000)
    full = engine.synthesize(TEXT)
    got: list[SynthChunk] = []

    def on_chunk(chunk: SynthChunk) -> bool:
        got.append(chunk)
        return len(got) == 2

    assert engine.synthesize_stream(TEXT, on_chunk) is False
    assert len(got) == 2
    assert sum(len(c.pcm) for c in got) < len(full.pcm) / 4


def test_cancel_event_aborts_and_engine_stays_usable():
    engine = EspeakEngine(sample_rate_hz=8000)
    cancel = threading.Event()
    got = []

    def on_chunk(chunk: SynthChunk) -> bool:
        got.append(chunk)
        cancel.set()  # as barge-in would, from another thread
        return False

    assert engine.synthesize_stream(TEXT, on_chunk, cancel) is False
    assert len(got) == 1
    assert engine.synthesize("yes").duration_s > 0.1


def test_callback_exception_aborts_and_is_reraised():
    def boom(chunk: SynthChunk) -> bool:
        raise RuntimeError("consumer failed")

    engine = EspeakEngine(sample_rate_hz=8000)
    with pytest.raises(RuntimeError, match="consumer failed"):
        engine.synthesize_stream(TEXT, boom)
    assert engine.synthesize("ok").duration_s > 0.1


def test_concurrent_threads_are_serialized_and_give_identical_audio():
    engine = EspeakEngine(sample_rate_hz=8000)
    expected = engine.synthesize(TEXT)
    results: list[SynthChunk] = []

    def work():
        results.append(engine.synthesize(TEXT))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 4
    for out in results:
        assert len(out.pcm) == pytest.approx(len(expected.pcm), rel=0.01)
        assert [w for w, _ in out.words] == [w for w, _ in expected.words]
        for (_, t), (_, t_expected) in zip(out.words, expected.words):
            assert t == pytest.approx(t_expected, abs=0.005)
        assert rms(out.pcm) == pytest.approx(rms(expected.pcm), rel=0.05)


def test_empty_text_produces_nothing():
    got = []
    assert EspeakEngine().synthesize_stream("   ", lambda c: got.append(c) or False) is True
    assert got == []


def test_bad_configuration_raises_our_errors():
    with pytest.raises(AudioFormatError):
        EspeakEngine(sample_rate_hz=11025)
    with pytest.raises(PipelineError, match="case-sensitive"):
        EspeakEngine(voice="en-us+F3")  # the variant file is "f3"
    with pytest.raises(PipelineError):
        EspeakEngine(voice="no-such-language")
    with pytest.raises(ValueError):
        EspeakEngine(rate_wpm=1000)
    assert EspeakEngine(voice="en-us+f3").synthesize("hi").duration_s > 0


def test_missing_library_names_the_package_to_install(monkeypatch):
    monkeypatch.setattr(espeak_mod.ctypes.util, "find_library", lambda name: None)
    monkeypatch.setattr(espeak_mod, "_KNOWN_LIBRARY_PATHS", ("/nonexistent/libespeak-ng.so.1",))
    with pytest.raises(EngineUnavailableError, match="apt-get install espeak-ng"):
        espeak_mod._load_library()
