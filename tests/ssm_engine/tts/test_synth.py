"""Streaming synthesis: text pushed piece by piece gives the very samples of the whole text,
chunks are small and arrive before the text ends, cancel stops at once, bad text is handled,
yes/no questions rise.

The voice here is untrained (random weights, durations biased to ~6 frames a phone): the
arithmetic and the streaming contract do not depend on training. The question rise is heard
in the shipped voice (models/tts), whose pitch is a voice's."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ssm_engine.tts.errors import TextError, TTSError
from ssm_engine.tts.model import TTSConfig, TTSModel
from ssm_engine.tts.phonemes import SYMBOLS
from ssm_engine.tts.synth import TTSVoice
from ssm_engine.tts.vocoder import HOP_SAMPLES, LF0, VUV, analyze

TEXT = "Your order 4521 ships on Tuesday, the 3rd. Is that OK?"


@pytest.fixture(scope="module")
def voice() -> TTSVoice:
    torch.manual_seed(3)
    cfg = TTSConfig(n_symbols=len(SYMBOLS),
                    enc_ssm=dict(d_model=48, n_layers=1, d_state=8, headdim=24, expand=2),
                    ssm=dict(d_model=48, n_layers=2, d_state=16, headdim=24, expand=2))
    model = TTSModel(cfg)
    with torch.no_grad():
        model.dur_head.bias.fill_(2.0)
    return TTSVoice(model)


def _stream(voice: TTSVoice, pieces: list[str]) -> np.ndarray:
    stream = voice.open_stream(seed=5)
    chunks = []
    for piece in pieces:
        stream.push_text(piece)
        chunks += stream.pull()
    stream.end_text()
    chunks += stream.pull()
    assert stream.done
    return np.concatenate([c.pcm for c in chunks])


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cuts=st.lists(st.integers(min_value=1, max_value=len(TEXT) - 1), max_size=8, unique=True))
def test_any_split_of_the_text_gives_the_same_samples(voice: TTSVoice, cuts: list[int]) -> None:
    bounds = [0, *sorted(cuts), len(TEXT)]
    pieces = [TEXT[a:b] for a, b in zip(bounds, bounds[1:])]
    whole = voice.synthesize(TEXT, seed=5)
    assert np.array_equal(_stream(voice, pieces), whole.pcm)


def test_audio_starts_before_the_text_ends_in_small_chunks(voice: TTSVoice) -> None:
    stream = voice.open_stream()
    stream.push_text("Thank you for calling the order desk, ")
    early = stream.pull()
    assert early, "words whose look-ahead is known must be spoken before end_text"
    assert all(len(c.pcm) == 2 * HOP_SAMPLES for c in early)       # 20 ms chunks
    assert early[0].words[0] == ("thank", 0.0)
    stream.push_text("how can I help?")
    stream.end_text()
    rest = stream.pull()
    starts = [c.start_s for c in early + rest]
    assert starts == sorted(starts) and stream.done
    words = [w for c in early + rest for w, _ in c.words]
    assert words[:4] == ["thank", "you", "for", "calling"] and words[-1] == "help"


def test_word_times_match_the_whole_synthesis(voice: TTSVoice) -> None:
    syn = voice.synthesize("Please hold while I transfer you.")
    assert [w for w, _ in syn.words] == ["please", "hold", "while", "i", "transfer", "you"]
    times = [t for _, t in syn.words]
    assert times == sorted(times) and times[-1] < syn.duration_s


def test_cancel_stops_output_at_once(voice: TTSVoice) -> None:
    stream = voice.open_stream()
    stream.push_text("This is a long answer that the caller will interrupt, ")
    first = next(stream.iter_pull())
    assert first.pcm.size
    stream.cancel()
    assert stream.pull() == [] and stream.done
    stream.push_text("more text is ignored after a cancel")
    stream.end_text()
    assert stream.pull() == []


def test_bad_input(voice: TTSVoice) -> None:
    with pytest.raises(TextError):
        voice.synthesize("")
    with pytest.raises(TextError):
        voice.synthesize("?!... ,")
    odd = voice.synthesize("Call me \U0001f600 at 5 o'clock ~~ ok")   # emoji and symbols dropped
    assert odd.pcm.size and all(np.isfinite(odd.pcm))
    long = voice.synthesize("one two three four five six seven eight nine ten " * 30)
    assert long.duration_s > 10 and np.abs(long.pcm).max() <= 1.0
    stream = voice.open_stream()
    stream.end_text()
    with pytest.raises(TTSError, match="after end_text"):
        stream.push_text("late")


def test_pace_stretches_every_phone(voice: TTSVoice) -> None:
    text = "Your order ships on Tuesday."
    plain, slow = voice.synthesize(text), voice.synthesize(text, pace=1.5)
    assert len(slow.pcm) / len(plain.pcm) == pytest.approx(1.5, rel=0.1)
    assert [w for w, _ in slow.words] == [w for w, _ in plain.words]
    assert slow.words[-1][1] > plain.words[-1][1]
    for pace in (0.4, 2.5):
        with pytest.raises(TTSError, match="pace must be within"):
            voice.open_stream(pace=pace)
    for postfilter in (-0.2, 2.0):
        with pytest.raises(TTSError, match="postfilter must be within"):
            voice.open_stream(postfilter=postfilter)


def test_a_yes_no_question_rises_at_its_end_and_nothing_else_changes() -> None:
    shipped = TTSVoice.load("models/tts")

    def say(text: str, rise: float) -> np.ndarray:
        return shipped.synthesize(text, question_rise_st=rise).pcm

    for text in ("Can I have your name?", "Your number is 555-1234, is that right?",
                 "And do you have an account?"):
        flat, risen = say(text, 0.0), say(text, 4.0)
        assert len(flat) == len(risen)                 # the timing is the voice's own
        first = int(np.nonzero(flat != risen)[0][0])
        assert first > len(flat) // 3                  # only the last phones change
        a, b = analyze(flat), analyze(risen)
        voiced = np.nonzero((a[:, VUV] > 0.5) & (b[:, VUV] > 0.5))[0]
        last = voiced[-4:]
        gain_st = 12 / np.log(2) * float(np.median(b[last, LF0] - a[last, LF0]))
        assert 1.5 < gain_st < 5.0, (text, gain_st)
        assert abs(12 / np.log(2) * float(np.median(b[voiced[:10], LF0] - a[voiced[:10], LF0]))) < 0.2
    # wh-questions fall as statements do; a statement that starts like a question is one
    for text in ("What time works for you?", "Is it ready. Thanks.", "Thank you for calling."):
        assert np.array_equal(say(text, 0.0), say(text, 4.0)), text
    for rise in (-1.0, 13.0):
        with pytest.raises(TTSError, match="question_rise_st"):
            shipped.open_stream(question_rise_st=rise)
