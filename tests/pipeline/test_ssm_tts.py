"""The SSM voice as a pipecat TTS service: real pipelines, a real (randomly initialised) voice.

The voice babbles (it is untrained) but everything the service promises is checked on it: 20 ms
frames at the pipeline's rate, the same samples as offline synthesis, word timestamps, barge-in,
text arriving in pieces, calls sharing one voice, and bad input. Its duration read-out is set to
80 ms a phone so utterances last as long as real speech.
"""

from __future__ import annotations

import time

import asyncio
import contextlib
import math

import numpy as np
import pytest
import torch
from pipecat.frames.frames import (
    AggregatedTextFrame,
    ErrorFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    TTSAudioRawFrame,
    TTSSpeakFrame,
    TTSStartedFrame,
    TTSStoppedFrame,
    TTSTextFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.tests.utils import SleepFrame, run_test

from pipeline.builder import PipelineConfig, _make_tts
from pipeline.errors import ConfigError, EngineUnavailableError, PipelineError
from pipeline.engines.ssm_voice import HalfRateFilter, SSMVoiceEngine
from pipeline.services.ssm_tts import SSMTTSService
from ssm_engine.tts import SYMBOLS
from ssm_engine.tts.model import TTSConfig, TTSModel, save_tts
from ssm_engine.tts.synth import TTSVoice

from .test_services import BargeIn, of


def random_voice_dir(path, frames_per_phone: int = 8):
    """An untrained voice whose every phone lasts ``frames_per_phone`` 10 ms frames."""
    torch.manual_seed(0)
    model = TTSModel(TTSConfig(n_symbols=len(SYMBOLS)))
    with torch.no_grad():
        model.dur_head.weight.zero_()
        model.dur_head.bias.fill_(math.log1p(frames_per_phone))
    save_tts(model, path)
    return path


@pytest.fixture(scope="module")
def voice_dir(tmp_path_factory):
    torch.set_num_threads(1)
    return random_voice_dir(tmp_path_factory.mktemp("ssm-voice"))


@pytest.fixture(scope="module")
def engine(voice_dir):
    eng = SSMVoiceEngine(TTSVoice.load(voice_dir))
    yield eng
    eng.close()


def audio_of(frames) -> np.ndarray:
    return np.concatenate([np.frombuffer(f.audio, np.int16) for f in of(frames, TTSAudioRawFrame)])


def assert_same_speech(batched: np.ndarray, alone: np.ndarray) -> None:
    """int16 audio of decoder steps shared with other calls == the utterance made alone, up to
    float rounding: batched matmuls round differently (~1e-7 in the features), and this
    untrained voice's vocoder (wild features, output clipped at full scale) amplifies that to
    small drifts late in an utterance (a trained voice stays within 1e-6: test_synth). Another
    call's audio, or a shifted one, is uncorrelated with it."""
    assert len(batched) == len(alone)
    a, b = batched.astype(np.float64), alone.astype(np.float64)
    assert np.mean(np.abs(a - b) > 1) < 0.02
    assert np.corrcoef(a, b)[0, 1] > 0.999


def offline(engine: SSMVoiceEngine, text: str) -> np.ndarray:
    pcm = engine.voice.synthesize(text).pcm
    return (np.clip(pcm, -1.0, 1.0) * 32767.0).astype(np.int16)


def test_half_rate_filter_is_sample_exact_for_any_split():
    rng = np.random.default_rng(0)
    x = rng.standard_normal(16000).astype(np.float32) * 0.3
    whole = HalfRateFilter().process(x)
    f, parts, i = HalfRateFilter(), [], 0
    while i < len(x):
        n = int(rng.integers(0, 700))  # empty and odd-length pieces too
        parts.append(f.process(x[i:i + n]))
        i += n
    assert len(whole) == 8000 and np.array_equal(np.concatenate(parts), whole)
    t = np.arange(16000) / 16000
    passed = HalfRateFilter().process(np.sin(2 * np.pi * 1000 * t).astype(np.float32))[100:]
    aliased = HalfRateFilter().process(np.sin(2 * np.pi * 5500 * t).astype(np.float32))[100:]
    rms = lambda y: float(np.sqrt(np.mean(y ** 2)) * np.sqrt(2))  # noqa: E731 - 1.0 for a full sine
    assert 0.95 < rms(passed) < 1.05  # the speech band is kept
    assert rms(aliased) < 0.01  # above 4 kHz is removed before it folds into the band


async def test_pipeline_gets_whole_20ms_chunks_at_8khz_with_word_timestamps(engine):
    text = "Hello there, how are you today?"
    down, _ = await run_test(SSMTTSService(engine=engine, sample_rate=8000),
                             frames_to_send=[TTSSpeakFrame(text), SleepFrame()])
    audio = of(down, TTSAudioRawFrame)
    assert of(down, TTSStartedFrame) and of(down, TTSStoppedFrame)
    assert all(f.sample_rate == 8000 and f.num_channels == 1 for f in audio)
    # the first frame is the start buffer (200 ms made before any leaves); each later one what
    # one answer of the voice held: whole 20 ms chunks, at most lead_chunks
    most = 320 * engine.lead_chunks
    assert len(audio[0].audio) % 320 == 0 and 3200 <= len(audio[0].audio) < 3200 + most
    assert all(len(f.audio) % 320 == 0 and 0 < len(f.audio) <= most for f in audio[1:-1])
    assert 0 < len(audio[-1].audio) <= most
    assert len(audio_of(down)) == len(engine.voice.synthesize(text).pcm) // 2
    words = of(down, TTSTextFrame)
    assert [w.text for w in words] == text.split()  # as written, each at its spoken time
    pts = [w.pts for w in words]
    assert all(pts) and pts == sorted(pts) and len(set(pts)) == len(pts)
    assert down.index(audio[0]) < down.index(words[-1])


async def test_speak_yields_every_chunk_made_ahead_as_one(engine):
    """One frame per answer of the voice's thread, not one per 20 ms: a fifth of the frames
    through a call's pipeline when the voice runs ahead (the usual case)."""
    text = "This sentence goes on for a while so that the voice has plenty to make ahead."
    utt = engine.open(8000)
    got = []
    async with asyncio.timeout(60), contextlib.aclosing(utt.speak(text)) as chunks:
        async for chunk in chunks:
            got.append(chunk)
            if len(got) == 1:
                # speak() asked again before yielding: that request takes the next chunk made,
                # the one after it every chunk the voice's thread ran ahead meanwhile
                while len(utt._ready) < engine.lead_chunks:
                    await asyncio.sleep(0.005)
            elif len(got) == 3:
                break
    assert len(got[2].pcm) >= 160 * engine.lead_chunks and len(got[2].pcm) % 160 == 0
    for before, after in zip(got, got[1:]):
        assert after.start_s == pytest.approx(before.start_s + len(before.pcm) / 8000)
    assert all(c.start_s <= t < c.start_s + len(c.pcm) / 8000 for c in got for _, t in c.words)
    words = [w for c in got for w, _ in c.words]
    assert words and words == text.lower().split()[:len(words)]  # none lost in the merge


@pytest.mark.parametrize("start_buffer_s", [0.0, 0.2, 5.0])
async def test_a_reply_leaves_once_its_start_buffer_is_made_and_later_phrases_at_once(
        engine, start_buffer_s):
    """The start buffer (run_tts): a reply's first phrase waits until start_buffer_s of it is
    made; later phrases never wait; the audio is the same, sample for sample."""
    tokens = ["Sure", ", I", " think", " that we could,", " maybe", " try again", " tomorrow."]
    frames = [LLMFullResponseStartFrame(), *[LLMTextFrame(t) for t in tokens],
              LLMFullResponseEndFrame()]
    down, _ = await run_test(SSMTTSService(engine=engine, sample_rate=8000, min_phrase_chars=8,
                                           start_buffer_s=start_buffer_s),
                             frames_to_send=[*frames, SleepFrame()])
    audio = of(down, TTSAudioRawFrame)
    first_phrase = len(await _at_8k(engine, "Sure,"))
    most = 320 * engine.lead_chunks
    if start_buffer_s == 0.0:          # as it comes: one answer of the voice
        assert 0 < len(audio[0].audio) <= most
    elif start_buffer_s == 0.2:        # 1,600 samples made first (whole 20 ms chunks)
        assert first_phrase > 1600 and 3200 <= len(audio[0].audio) < 3200 + most
    else:                              # longer than the phrase: all of it at once
        assert len(audio[0].audio) == 2 * first_phrase
    after = audio[1:]
    assert after and all(len(f.audio) <= most for f in after)   # later phrases: as they come
    spoken = ["Sure,", "I think that we could,", "maybe try again tomorrow."]
    assert np.array_equal(audio_of(down), np.concatenate([await _at_8k(engine, p) for p in spoken]))


def test_a_negative_start_buffer_is_refused(engine):
    with pytest.raises(ConfigError, match="start_buffer_s"):
        SSMTTSService(engine=engine, sample_rate=8000, start_buffer_s=-0.1)


async def test_streamed_audio_is_the_offline_synthesis_sample_for_sample(engine):
    text = "Your order ships on Tuesday, the third of May."
    down, _ = await run_test(SSMTTSService(engine=engine, sample_rate=16000),
                             frames_to_send=[TTSSpeakFrame(text), SleepFrame()])
    assert np.array_equal(audio_of(down), offline(engine, text))


async def test_barge_in_stops_the_audio_within_a_chunk_and_the_synthesis_with_it(engine, monkeypatch):
    made: list[int] = []
    real_pull_many = engine.voice.pull_many

    def counting(streams, **kwargs):
        got = real_pull_many(streams, **kwargs)
        made.extend(len(chunks) for chunks in got)
        return got

    monkeypatch.setattr(engine.voice, "pull_many", counting)
    long_text = " ".join(["This sentence goes on and on so that it takes a while to speak."] * 40)
    barge_in = BargeIn(after_frames=1)  # a frame is up to lead_chunks (5) of the voice's chunks
    down, _ = await run_test(
        Pipeline([SSMTTSService(engine=engine, sample_rate=8000, aggregation="sentence"), barge_in]),
        frames_to_send=[TTSSpeakFrame(long_text), SleepFrame(sleep=1.0)],
    )
    # a frame or two pushed just before the interruption may still sit in BargeIn's own queue
    # (as in the espeak test); the call test checks that no audio reaches the caller after it
    assert barge_in.interrupted and barge_in.audio_after <= 2
    # the voice stopped too: a few chunks beyond what played, of about two minutes of speech
    assert sum(made) < 20, sum(made)
    assert len(audio_of(down)) / 8000 < 1.0


async def test_text_arriving_token_by_token_is_spoken_phrase_by_phrase(engine):
    tokens = ["Sure", ", I", " think", " that we could,", " maybe", " try again", " tomorrow."]
    frames = [LLMFullResponseStartFrame(), *[LLMTextFrame(t) for t in tokens],
              LLMFullResponseEndFrame()]
    down, _ = await run_test(SSMTTSService(engine=engine, sample_rate=8000, min_phrase_chars=8),
                             frames_to_send=[*frames, SleepFrame()])
    spoken = [f.text for f in of(down, AggregatedTextFrame) if not isinstance(f, TTSTextFrame)]
    assert spoken == ["Sure,", "I think that we could,", "maybe try again tomorrow."]
    # each phrase is its own utterance: the same samples as speaking the phrases one by one
    alone = [await _at_8k(engine, p) for p in spoken]
    assert np.array_equal(audio_of(down), np.concatenate(alone))
    words = of(down, TTSTextFrame)
    assert [w.text for w in words] == " ".join(spoken).split()
    pts = [w.pts for w in words]
    assert pts == sorted(pts) and len(set(pts)) == len(pts)  # later phrases offset, not restarted


async def _at_8k(engine: SSMVoiceEngine, text: str) -> np.ndarray:
    return np.concatenate([c.pcm async for c in engine.open(8000).speak(text)])


async def test_calls_sharing_one_voice_keep_their_streams_apart(engine):
    texts = ["Good morning, how can I help?", "Your package arrives tomorrow afternoon."]

    async def call(text):
        down, _ = await run_test(SSMTTSService(engine=engine, sample_rate=16000),
                                 frames_to_send=[TTSSpeakFrame(text), SleepFrame()])
        return audio_of(down)

    outs = await asyncio.gather(*(call(t) for t in texts))
    for text, out in zip(texts, outs):
        assert_same_speech(out, offline(engine, text))


@pytest.mark.parametrize("text", ["...", "?!", "\U0001f642\U0001f642", "( )"])
async def test_text_with_nothing_to_say_is_a_moment_of_silence_and_the_voice_goes_on(engine, text):
    down, _ = await run_test(
        SSMTTSService(engine=engine, sample_rate=8000),
        frames_to_send=[TTSSpeakFrame(text), TTSSpeakFrame("Hello.")],
    )
    assert not [f for f in down if isinstance(f, ErrorFrame)]
    assert [w.text for w in of(down, TTSTextFrame)] == [text, "Hello."]  # pipecat passes text on
    audio = audio_of(down)
    hello = len(engine.voice.synthesize("Hello.").pcm) // 2
    assert len(audio) == 160 + hello and not audio[:160].any()


async def test_text_with_emoji_and_unknown_symbols_speaks_the_words(engine):
    down, _ = await run_test(
        SSMTTSService(engine=engine, sample_rate=8000),
        frames_to_send=[TTSSpeakFrame("Great \U0001f44d see you \u2603 soon ~~"), SleepFrame()],
    )
    assert [w.text for w in of(down, TTSTextFrame)] == ["Great", "see", "you", "soon"]
    assert not [f for f in down if isinstance(f, ErrorFrame)]


async def test_a_word_no_lexicon_knows_is_spelled_out_by_rule(engine):
    text = "Call " + "zxqv" * 4 + " now."
    down, _ = await run_test(SSMTTSService(engine=engine, sample_rate=8000),
                             frames_to_send=[TTSSpeakFrame(text), SleepFrame()])
    assert [w.text for w in of(down, TTSTextFrame)] == text.split()
    assert not [f for f in down if isinstance(f, ErrorFrame)]
    assert len(audio_of(down)) == len(engine.voice.synthesize(text).pcm) // 2


async def test_numbers_and_abbreviations_are_timed_as_written(engine):
    """Regression guard: the voice says "four four one seven" for "4417"; reporting the spoken
    words made pipecat drop them as not in the LLM's text, so they came out untimed at the end."""
    text = "Order 4417 ships Tue. to Dr. Lee, $42.50 paid."
    down, _ = await run_test(SSMTTSService(engine=engine, sample_rate=8000),
                             frames_to_send=[TTSSpeakFrame(text), SleepFrame()])
    words = of(down, TTSTextFrame)
    assert [w.text for w in words] == text.split()
    pts = [w.pts for w in words]
    assert all(pts) and pts == sorted(pts) and len(set(pts)) == len(pts)
    # "4417" takes four spoken words: "ships" starts well after it
    assert pts[2] - pts[1] > 2 * (pts[1] - pts[0]) > 0


def test_the_voice_thread_serves_the_earliest_deadline_first(engine):
    one_at_a_time = SSMVoiceEngine(engine.voice, max_batch=1)
    order: list[float] = []
    try:
        with engine.voice.lock:          # the thread blocks inside its first tick
            blocker = one_at_a_time.request(one_at_a_time.open(16000), 0.0, "Hold on.")
            futures = []
            for d in (3.0, 1.0, 2.0):
                fut = one_at_a_time.request(one_at_a_time.open(16000), d, f"Number {d}.")
                fut.add_done_callback(lambda _f, d=d: order.append(d))
                futures.append(fut)
            cancelled = one_at_a_time.request(one_at_a_time.open(16000), 0.5, "Never.")
            cancelled.cancel()
        assert blocker.result(timeout=10) is not None
        assert all(f.result(timeout=10) is not None for f in futures)
        assert order == [1.0, 2.0, 3.0]
    finally:
        one_at_a_time.close()


async def test_calls_starting_together_share_batched_steps_and_keep_their_samples(
        engine, monkeypatch):
    batches: list[int] = []
    real_pull_many = engine.voice.pull_many

    def recording(streams, **kwargs):
        batches.append(len(streams))
        return real_pull_many(streams, **kwargs)

    monkeypatch.setattr(engine.voice, "pull_many", recording)
    texts = [f"Caller {n}, your order ships on day {n + 3}." for n in range(7)]
    texts.append(", , , ; ; ; ... Caller 7, hold on.")   # its first words say nothing
    # the queue's lock (reentrant) held here: every call asks for its first chunk before the
    # voice's thread can take any request
    with engine._cond:
        tasks = [asyncio.create_task(_at_8k(engine, t)) for t in texts]
        await asyncio.sleep(0.1)
    together = await asyncio.gather(*tasks)
    monkeypatch.undo()
    assert batches[0] == len(texts)           # all eight first chunks in one tick
    for text, audio in zip(texts, together, strict=True):
        assert_same_speech(audio, await _at_8k(engine, text))


def test_the_voice_runs_lead_chunks_ahead_of_each_call_in_shared_steps(voice_dir, monkeypatch):
    engine = SSMVoiceEngine(TTSVoice.load(voice_dir), lead_chunks=3)
    batches: list[int] = []
    real_pull_many = engine.voice.pull_many

    def recording(streams, **kwargs):
        batches.append(len(streams))
        return real_pull_many(streams, **kwargs)

    def settled(want: int) -> None:   # the thread stops on its own once every call is 3 ahead
        deadline = time.monotonic() + 10
        while len(batches) < want or any(len(u._ready) < 3 for u in utts):
            assert time.monotonic() < deadline, f"the voice never got ahead: {batches}"
            time.sleep(0.01)
        time.sleep(0.05)

    monkeypatch.setattr(engine.voice, "pull_many", recording)
    try:
        utts = [engine.open(16000) for _ in range(4)]
        with engine._cond:
            firsts = [engine.request(u, 0.0, f"Caller {n}, please hold the line for me.")
                      for n, u in enumerate(utts)]
        assert all(f.result(timeout=10) is not None for f in firsts)
        settled(4)
        assert batches == [4, 4, 4, 4]      # the asked chunk, then three ahead, all four together
        with engine._cond:                   # a request of each takes all that was made ...
            nexts = [engine.request(u, 0.02) for u in utts]
        assert [len(f.result(timeout=10)) for f in nexts] == [3, 3, 3, 3]
        settled(7)
        assert batches == [4] * 7            # ... and three shared steps top all four up again
        utts[0].cancel()                     # a cancelled call is never stepped again
        with engine._cond:
            more = [engine.request(u, 0.04) for u in utts]
        assert more[0].result(timeout=10) is None
        assert all(f.result(timeout=10) is not None for f in more[1:])
        deadline = time.monotonic() + 10
        while len(batches) < 10 or any(len(u._ready) < 3 for u in utts[1:]):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert batches[7:] == [3, 3, 3]
    finally:
        engine.close()


def test_a_missing_voice_is_a_clear_error_at_startup(tmp_path):
    missing = tmp_path / "no-voice"
    with pytest.raises(EngineUnavailableError, match="no SSM voice at .*config.json"):
        SSMTTSService(model_dir=missing)
    with pytest.raises(EngineUnavailableError, match="--tts espeak"):
        PipelineConfig(tts="ssm", tts_model_dir=str(missing))
    with pytest.raises(PipelineError, match="tts must be one of"):
        PipelineConfig(tts="festival")


def test_parley_serve_refuses_to_start_without_the_voice(tmp_path, monkeypatch, capsys):
    from deploy import cli

    monkeypatch.setattr(cli, "configure_logging", lambda level: None)  # keep pytest's logging
    missing = tmp_path / "no-voice"
    assert cli.main(["serve", "--tts", "ssm", "--tts-model", str(missing), "--insecure-dev"]) == 2
    assert f"parley serve: no SSM voice at {missing}" in capsys.readouterr().err


def test_the_builder_makes_the_voice_the_config_names(voice_dir):
    tts = _make_tts(PipelineConfig(tts="ssm", tts_model_dir=str(voice_dir)))
    assert isinstance(tts, SSMTTSService)
    assert type(_make_tts(PipelineConfig())).__name__ == "EspeakTTSService"  # still the default


def test_a_voice_whose_compile_fails_is_unavailable_and_serve_runs_it_eagerly(voice_dir, monkeypatch,
                                                                               caplog):
    """No C++ compiler (say): ``SSMVoiceEngine(compile=True)`` raises EngineUnavailableError
    naming the compile, and ``parley serve`` logs one line and loads the voice eagerly rather
    than not at all; a voice that cannot load at all still stops it."""
    from deploy.serve_cli import _load_ssm_voice

    def no_compiler(self):
        raise RuntimeError("InvalidCxxCompiler: No working C++ compiler found")

    monkeypatch.setattr(TTSVoice, "compile_steps", no_compiler)
    with pytest.raises(EngineUnavailableError, match="compiling its steps failed: InvalidCxx"):
        SSMVoiceEngine(voice_dir, compile=True)
    try:
        with caplog.at_level("WARNING", logger="parley"):
            assert _load_ssm_voice(voice_dir, procs=False, compile=True) is None
        engine = SSMVoiceEngine.shared(voice_dir)
        assert not engine.voice.compiled
        assert "running them eagerly instead" in caplog.text
    finally:
        SSMVoiceEngine._shared.pop(voice_dir.resolve()).close()
    with pytest.raises(EngineUnavailableError, match="no SSM voice"):
        _load_ssm_voice(voice_dir / "missing", procs=False, compile=True)
