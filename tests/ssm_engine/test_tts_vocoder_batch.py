"""Vocoding every stream of a step at once gives each stream exactly what its own vocoder's
frame-by-frame ``push`` gives, and leaves every vocoder where ``push`` would."""

from __future__ import annotations

import numpy as np
import pytest

from ssm_engine.tts.errors import TTSError
from ssm_engine.tts.vocoder import (
    CEP0,
    LF0,
    N_FEATURES,
    VUV,
    StreamingVocoder,
    vocode_streams,
)


def _frames(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    f = np.zeros((n, N_FEATURES))
    f[:, LF0] = np.log(rng.uniform(40.0, 500.0, n))        # past both ends of the clip too
    f[:, VUV] = rng.uniform(0.0, 1.0, n)                   # voiced and unvoiced frames mixed
    f[:, CEP0] = rng.normal(-4.0, 0.5, n)
    f[:, CEP0 + 1:] = rng.normal(0.0, 0.3, (n, N_FEATURES - CEP0 - 1)) / np.arange(1, N_FEATURES - CEP0)
    return f


@pytest.mark.parametrize("settings", [
    {"postfilter": 0.0},
    {"postfilter": 0.6, "postfilter_from": 4},               # the shipped voice's
    {"postfilter": 0.4, "postfilter_from": 1},
    {"postfilter": 0.6, "postfilter_from": 4, "fractional": True},
])
def test_streams_vocoded_together_equal_each_vocoded_alone(settings):
    alone = [StreamingVocoder(seed=s, **settings) for s in range(5)]
    together = [StreamingVocoder(seed=s, **settings) for s in range(5)]
    for step in range(6):                                   # steps with 0..4 frames a stream
        frames = [_frames((step + k) % 5, seed=100 * step + k) for k in range(5)]
        want = [np.concatenate([v.push(row) for row in f]) if len(f) else np.zeros(0)
                for v, f in zip(alone, frames, strict=True)]
        got = vocode_streams(together, frames)
        for w, g in zip(want, got, strict=True):
            assert g.shape == w.shape
            np.testing.assert_allclose(g, w, atol=1e-9, rtol=1e-7)
        for a, t in zip(alone, together, strict=True):        # the states moved alike
            assert a._phase == pytest.approx(t._phase, abs=1e-12)
            np.testing.assert_allclose(a._tail, t._tail, atol=1e-9)


def test_bad_batches_are_refused_with_the_reason():
    with pytest.raises(TTSError, match="settings differ"):
        vocode_streams([StreamingVocoder(postfilter=0.6), StreamingVocoder()],
                       [_frames(1, 0), _frames(1, 1)])
    with pytest.raises(TTSError, match="2 vocoders, 1 frame arrays"):
        vocode_streams([StreamingVocoder(), StreamingVocoder()], [_frames(1, 0)])
    bad = _frames(2, 0)
    bad[1, CEP0] = np.nan
    with pytest.raises(TTSError, match="NaN"):
        vocode_streams([StreamingVocoder()], [bad])
    assert vocode_streams([], []) == []
