"""Many streams through one voice with batched decoder steps (``TTSVoice.pull_many``): every
stream gets the samples it gets alone, streams join, leave and are cancelled between steps.

The voice is untrained (as in test_synth) but its feature statistics are those of speech (f0
around 150 Hz, a modest spectral envelope), as a trained voice's are: with wild features the
vocoder (pulse phases, exp of the cepstrum) amplifies float rounding without bound. Batched
matmuls round differently from batch-1 ones (~1e-7), which is all that may differ."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ssm_engine.tts.errors import TTSError
from ssm_engine.tts.model import TTSConfig, TTSModel
from ssm_engine.tts.phonemes import SYMBOLS
from ssm_engine.tts.synth import TTSVoice
from ssm_engine.tts.vocoder import N_FEATURES

# lf0 (log Hz), vuv, then the cepstrum: c0 (log gain) and the envelope's shape
SPEECH_MEAN = (5.0, 0.0, -6.0) + (0.0,) * (N_FEATURES - 3)
SPEECH_STD = (0.2, 1.0, 0.5) + (0.1,) * (N_FEATURES - 3)

TEXTS = ["Your order 4521 ships on Tuesday.", "Hello, how can I help you today?",
         "Thanks.", "The total is 42 dollars and 50 cents, paid by card."]


def _voice(seed: int) -> TTSVoice:
    torch.manual_seed(seed)
    cfg = TTSConfig(n_symbols=len(SYMBOLS), feat_mean=SPEECH_MEAN, feat_std=SPEECH_STD,
                    enc_ssm=dict(d_model=48, n_layers=1, d_state=8, headdim=24, expand=2),
                    ssm=dict(d_model=48, n_layers=2, d_state=16, headdim=24, expand=2))
    model = TTSModel(cfg)
    with torch.no_grad():
        model.dur_head.bias.fill_(2.0)
    return TTSVoice(model)


@pytest.fixture(scope="module")
def voice() -> TTSVoice:
    return _voice(3)


def _alone(voice: TTSVoice, text: str, seed: int) -> np.ndarray:
    return voice.synthesize(text, seed=seed).pcm


def test_streams_decoded_together_equal_each_decoded_alone(voice: TTSVoice) -> None:
    streams = [voice.open_stream(seed=i) for i in range(len(TEXTS))]
    got: list[list[np.ndarray]] = [[] for _ in TEXTS]
    steps: list[int] = []
    real = voice.decode_groups

    def counting(groups):
        steps.append(len(groups))
        real(groups)

    voice.decode_groups = counting                       # instance attribute: this test only
    try:
        # text arrives word by word, at different times; the last stream joins late
        words = [t.split(" ") for t in TEXTS]
        for tick in range(max(len(w) for w in words) + 4):
            live = []
            for i, (s, w) in enumerate(zip(streams, words, strict=True)):
                k = tick - (3 if i == len(TEXTS) - 1 else 0)
                if 0 <= k < len(w):
                    s.push_text(w[k] + " ")
                elif k == len(w):
                    s.end_text()
                if k >= 0:
                    live.append(i)
            for i, chunks in zip(live, voice.pull_many([streams[i] for i in live], max_chunks=3),
                                 strict=True):
                assert len(chunks) <= 3
                got[i] += [c.pcm for c in chunks]
        for i, chunks in enumerate(voice.pull_many(streams)):
            got[i] += [c.pcm for c in chunks]
    finally:
        del voice.decode_groups
    assert all(s.done for s in streams)
    assert max(steps) >= 3                               # streams shared decoder steps
    for i, text in enumerate(TEXTS):
        together, alone = np.concatenate(got[i]), _alone(voice, text, i)
        assert together.shape == alone.shape
        assert np.abs(together - alone).max() < 1e-5


def test_first_chunks_of_many_streams_take_one_step_each_round(voice: TTSVoice) -> None:
    streams = [voice.open_stream(seed=i) for i in range(8)]
    for i, s in enumerate(streams):
        s.push_text(f"Caller {i}, please hold.")
        s.end_text()
    first = voice.pull_many(streams, max_chunks=1)
    assert [len(c) for c in first] == [1] * 8
    rest = voice.pull_many(streams)
    for i, s in enumerate(streams):
        pcm = np.concatenate([c.pcm for c in first[i] + rest[i]])
        alone = _alone(voice, f"Caller {i}, please hold.", i)
        assert s.done and pcm.shape == alone.shape and np.abs(pcm - alone).max() < 1e-5


def test_a_cancelled_stream_leaves_the_batch_and_the_others_go_on(voice: TTSVoice) -> None:
    a, b, c = (voice.open_stream(seed=i) for i in range(3))
    for s, text in zip((a, b, c), TEXTS[:3], strict=True):
        s.push_text(text)
        s.end_text()
    start = voice.pull_many([a, b, c], max_chunks=2)
    b.cancel()
    rest = voice.pull_many([a, b, c])
    assert rest[1] == [] and b.done
    for k, _stream in ((0, a), (2, c)):
        pcm = np.concatenate([ch.pcm for ch in start[k] + rest[k]])
        assert np.abs(pcm - _alone(voice, TEXTS[k], k)).max() < 1e-5


def test_bad_batches(voice: TTSVoice) -> None:
    s = voice.open_stream()
    s.push_text("Hello.")
    with pytest.raises(TTSError, match="max_chunks"):
        voice.pull_many([s], max_chunks=0)
    with pytest.raises(TTSError, match="another voice"):
        voice.pull_many([s, _voice(4).open_stream()])
    assert voice.pull_many([]) == []
    twice = voice.pull_many([s, s], max_chunks=1)       # one stream given twice: pulled once
    assert twice[0] == twice[1]


def test_compiled_lone_steps_give_the_eager_samples_and_never_recompile() -> None:
    """``TTSVoice.compile_steps``: a lone stream's phone and frame steps run compiled, with the
    samples of the eager voice (float rounding aside); batches stay eager; a stream whose state
    became a row of a batch (a view at an offset) goes on compiled, and nothing is compiled in
    the middle of a call (a recompile costs seconds)."""
    from torch._dynamo.utils import counters

    compiled, eager = _voice(5), _voice(5)
    assert not compiled.compiled
    compiled.compile_steps()
    assert compiled.compiled
    graphs = counters["stats"]["unique_graphs"]
    calls: list[str] = []
    phone, frames = compiled._lone_phone, compiled._lone_frames
    assert phone is not None and frames is not None
    compiled._lone_phone = lambda *a: calls.append("phone") or phone(*a)
    compiled._lone_frames = lambda *a: calls.append("frames") or frames(*a)
    for k, text in enumerate(TEXTS):
        np.testing.assert_allclose(_alone(compiled, text, k), _alone(eager, text, k), atol=1e-5)
    assert {"phone", "frames"} <= set(calls)
    # three streams start together (batched, eager), then one goes on alone (compiled)
    outs = []
    calls.clear()
    for voice in (compiled, eager):
        streams = [voice.open_stream(seed=i) for i in range(3)]
        for stream, text in zip(streams, TEXTS, strict=False):
            stream.push_text(text)
            stream.end_text()
        first = voice.pull_many(streams, max_chunks=3)
        rest = streams[2].pull()
        outs.append(np.concatenate([c.pcm for c in first[2] + rest]))
    np.testing.assert_allclose(outs[0], outs[1], atol=1e-5)
    assert "frames" in calls                                   # the lone stream, compiled
    assert counters["stats"]["unique_graphs"] == graphs        # nothing compiled mid-stream
