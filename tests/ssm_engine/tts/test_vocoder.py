"""The source-filter vocoder: analysis finds the pitch it was given, synthesis streams exactly,
the postfilter deepens the envelope and keeps the level, fractional pulses keep the harmonics
harmonic, and band aperiodicity is measured as it was mixed."""

from __future__ import annotations

import numpy as np
import pytest

from ssm_engine.tts.errors import TTSError
from ssm_engine.tts.vocoder import (
    CEP0,
    HOP_SAMPLES,
    LF0,
    N_BAP,
    N_FEATURES,
    SAMPLE_RATE_HZ,
    VUV,
    StreamingVocoder,
    analyze,
    analyze_aperiodicity,
    synthesize,
)


def _vowel(f0_hz: float, seconds: float) -> np.ndarray:
    """A buzzy vowel: harmonics of f0 shaped by two formants, then 0.2 s of silence."""
    t = np.arange(int(seconds * SAMPLE_RATE_HZ)) / SAMPLE_RATE_HZ
    x = np.zeros_like(t)
    for h in range(1, int(7000 / f0_hz)):
        f = h * f0_hz
        gain = 1 / (1 + ((f - 700) / 150) ** 2) + 0.5 / (1 + ((f - 1200) / 200) ** 2)
        x += gain * np.sin(2 * np.pi * f * t)
    x = 0.3 * x / np.abs(x).max()
    return np.concatenate([x, np.zeros(int(0.2 * SAMPLE_RATE_HZ))])


def test_analysis_recovers_pitch_voicing_and_frame_count() -> None:
    x = _vowel(180.0, 0.5)
    feats = analyze(x)
    assert feats.shape == (int(np.ceil(x.size / HOP_SAMPLES)), N_FEATURES)
    voiced = feats[5:45]
    assert voiced[:, VUV].mean() > 0.95
    assert np.allclose(np.exp(voiced[:, LF0]), 180.0, rtol=0.02)
    assert feats[-10:, VUV].max() == 0.0          # the silence is unvoiced


def test_copy_synthesis_keeps_pitch_and_level() -> None:
    x = _vowel(150.0, 0.6)
    y = synthesize(analyze(x))
    assert y.dtype == np.float32 and y.size == int(np.ceil(x.size / HOP_SAMPLES)) * HOP_SAMPLES
    feats_y = analyze(y)
    assert np.allclose(np.exp(feats_y[10:50, LF0]), 150.0, rtol=0.03)
    level = lambda s: 10 * np.log10(np.mean(s[1600:8000] ** 2))  # noqa: E731
    assert abs(level(y) - level(x)) < 3.0


def test_streaming_equals_offline_sample_for_sample() -> None:
    feats = analyze(_vowel(200.0, 0.3))
    offline = synthesize(feats, seed=7)
    voc = StreamingVocoder(seed=7)
    streamed = np.concatenate([voc.push(row) for row in feats])
    assert np.array_equal(np.clip(streamed, -1, 1).astype(np.float32), offline)


def test_each_frame_gives_final_samples_at_once() -> None:
    """A frame only adds to samples at or after its own start: later frames cannot change the
    samples already returned (the vocoder adds no latency)."""
    feats = analyze(_vowel(120.0, 0.3))
    first = StreamingVocoder(seed=1)
    a = np.concatenate([first.push(row) for row in feats[:10]])
    changed = feats.copy()
    changed[10:, CEP0] += 2.0                      # very different future frames
    second = StreamingVocoder(seed=1)
    b = np.concatenate([second.push(row) for row in changed[:12]])[: a.size]
    assert np.array_equal(a, b)


def _band_db(y: np.ndarray, lo_hz: float, hi_hz: float) -> float:
    """Mean power (dB) of the vowel's steady part within a band."""
    seg = y[1600:8000]
    frames = np.stack([seg[i:i + 512] * np.hanning(512) for i in range(0, len(seg) - 512, 160)])
    power = np.mean(np.abs(np.fft.rfft(frames, 512)) ** 2, axis=0)
    f = np.fft.rfftfreq(512, 1 / SAMPLE_RATE_HZ)
    return float(10 * np.log10(power[(f >= lo_hz) & (f < hi_hz)].mean()))


@pytest.mark.parametrize("beta", [0.2, 0.4])
def test_the_postfilter_deepens_the_envelope_by_its_factor_and_keeps_the_level(beta) -> None:
    """The log envelope's swing about its mean grows by 1 + beta: the first formant's lead over
    the valley at 2.5-3.5 kHz (37 dB in this vowel) grows by that factor; the level stays."""
    feats = analyze(_vowel(150.0, 0.6))
    plain = synthesize(feats, seed=3)
    sharp = synthesize(feats, seed=3, postfilter=beta)
    lead = lambda y: _band_db(y, 550, 850) - _band_db(y, 2500, 3500)  # noqa: E731
    assert lead(plain) > 30.0
    assert lead(sharp) / lead(plain) == pytest.approx(1.0 + beta, rel=0.05)
    level = lambda y: 10 * np.log10(np.mean(y[1600:8000] ** 2))  # noqa: E731
    assert abs(level(sharp) - level(plain)) < 0.5
    assert np.array_equal(synthesize(feats, seed=3, postfilter=0.0), plain)


def test_a_postfilter_from_c3_leaves_the_tilt_and_deepens_the_formants() -> None:
    """``postfilter_from=3`` scales no coefficient below c3: an envelope that is only a tilt
    (c1, c2: 8 dB down from 0.45 to 2 kHz) comes out as it went in, where the default
    (from c1) steepens it; on the vowel the formant still rises over the valley between."""
    tilt = _steady()
    tilt[:, CEP0 + 1], tilt[:, CEP0 + 2] = 0.5, 0.25
    plain = synthesize(tilt, seed=3)
    slope = lambda y: _band_db(y, 300, 600) - _band_db(y, 1800, 2200)  # noqa: E731
    assert slope(plain) > 5.0
    kept = synthesize(tilt, seed=3, postfilter=0.4, postfilter_from=3)
    assert slope(kept) == pytest.approx(slope(plain), abs=0.3)
    steeper = slope(synthesize(tilt, seed=3, postfilter=0.4))            # from c1, the default
    assert steeper > slope(plain) + 2.5
    # from c2: c1 kept, c2 deepened: steeper than as predicted, less steep than from c1
    assert slope(plain) + 1.0 < slope(synthesize(tilt, seed=3, postfilter=0.4, postfilter_from=2)) < steeper - 1.0
    vowel = analyze(_vowel(150.0, 0.6))
    peak = lambda y: _band_db(y, 550, 850) - _band_db(y, 1400, 1800)  # noqa: E731
    deeper = synthesize(vowel, seed=3, postfilter=0.4, postfilter_from=3)
    assert peak(deeper) > peak(synthesize(vowel, seed=3)) + 2.0


def _steady(frames: int = 100, f0_hz: float = 123.4) -> np.ndarray:
    feats = np.zeros((frames, N_FEATURES), np.float32)
    feats[:, LF0] = np.log(f0_hz)
    feats[:, VUV] = 1.0
    feats[:, CEP0] = -2.0                   # a flat envelope
    return feats


def _harmonic_share(pcm: np.ndarray, f0_hz: float, lo: float, hi: float) -> float:
    """The share of the power between ``lo`` and ``hi`` Hz lying within 8 Hz of a harmonic."""
    x = pcm[1600:14400] * np.hanning(12800)
    power = np.abs(np.fft.rfft(x)) ** 2
    f = np.fft.rfftfreq(len(x), 1 / SAMPLE_RATE_HZ)
    band = (f >= lo) & (f < hi)
    near = np.abs(f / f0_hz - np.round(f / f0_hz)) * f0_hz < 8
    return float(power[band & near].sum() / power[band].sum())


def test_fractional_pulses_keep_the_harmonics_above_3_khz() -> None:
    """Pulses rounded to whole samples jitter by up to 62.5 us: at 3-4 kHz a seventh of the power
    falls between the harmonics (hoarse); at their exact instants almost none does."""
    feats = _steady()
    pure = np.zeros((len(feats), N_BAP))
    rounded = synthesize(feats, bap=pure)
    exact = synthesize(feats, bap=pure, fractional=True)
    assert _harmonic_share(rounded, 123.4, 3000, 4000) < 0.9
    assert _harmonic_share(exact, 123.4, 3000, 4000) > 0.95
    voc = StreamingVocoder(seed=3, fractional=True)
    streamed = np.concatenate([voc.push(row) for row in analyze(_vowel(200.0, 0.3))])
    offline = synthesize(analyze(_vowel(200.0, 0.3)), seed=3, fractional=True)
    assert np.array_equal(np.clip(streamed, -1, 1).astype(np.float32), offline)


def test_band_aperiodicity_is_measured_as_it_was_mixed() -> None:
    feats = _steady()
    for share in (0.0, 0.3, 0.6):
        pcm = synthesize(feats, seed=1, fractional=True, bap=np.full((len(feats), N_BAP), share))
        measured = np.median(analyze_aperiodicity(pcm, feats)[5:-5], axis=0)
        assert measured.shape == (N_BAP,)
        assert np.all(np.abs(measured - share) < 0.12), (share, measured)
    feats[40:60, VUV] = 0.0                  # unvoiced frames are all noise
    assert np.all(analyze_aperiodicity(synthesize(feats), feats)[45:55] == 1.0)
    with pytest.raises(TTSError, match="bap must have shape"):
        synthesize(feats, bap=np.zeros((3, N_BAP)))


def test_bad_input_raises_tts_error() -> None:
    with pytest.raises(TTSError, match="empty"):
        analyze(np.zeros(0))
    with pytest.raises(TTSError, match="NaN"):
        analyze(np.array([0.0, np.nan, 0.1]))
    with pytest.raises(TTSError, match="shape"):
        StreamingVocoder().push(np.zeros(3))
    bad = np.zeros(N_FEATURES)
    bad[LF0] = np.inf
    with pytest.raises(TTSError, match="NaN or infinite"):
        StreamingVocoder().push(bad)
    with pytest.raises(TTSError, match="shape"):
        synthesize(np.zeros((4, 3)))
    for postfilter in (-0.1, 1.5, float("nan")):
        with pytest.raises(TTSError, match="postfilter must be within"):
            StreamingVocoder(postfilter=postfilter)
    for first in (0, 40):
        with pytest.raises(TTSError, match="postfilter_from must be within"):
            StreamingVocoder(postfilter=0.4, postfilter_from=first)
