"""Phone-channel augmentation: speed, reverb, band-pass, noise, level, mu-law (numpy only).

    aug = PhoneChannel(AugmentConfig())          # probabilities and ranges below
    y = aug(x, 8000, rng)                        # x: float32 clip at 8 kHz -> new clip

Each effect fires with its own probability, so a share of the clips stays clean.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .audio import mulaw_roundtrip

__all__ = ["AugmentConfig", "PhoneChannel", "speed_perturb", "band_pass"]


@dataclass(frozen=True)
class AugmentConfig:
    p_speed: float = 0.5
    speed_range: tuple[float, float] = (0.88, 1.12)
    p_reverb: float = 0.25
    rt60_range_s: tuple[float, float] = (0.1, 0.5)
    p_bandpass: float = 0.7
    p_noise: float = 0.7
    snr_range_db: tuple[float, float] = (3.0, 35.0)
    level_range_dbfs: tuple[float, float] = (-38.0, -12.0)   # RMS level of the clip
    p_mulaw: float = 0.7
    pad_range_s: tuple[float, float] = (0.1, 0.6)            # silence before and after


def speed_perturb(x: np.ndarray, factor: float) -> np.ndarray:
    """Play ``factor`` times faster (pitch moves with it), by linear interpolation."""
    n_out = max(1, int(round(x.size / factor)))
    t = np.arange(n_out, dtype=np.float64) * factor
    return np.interp(t, np.arange(x.size), x).astype(np.float32)


def band_pass(x: np.ndarray, rate_hz: int, low_hz: float = 300.0, high_hz: float = 3400.0
              ) -> np.ndarray:
    """Telephone band: a smooth (raised-cosine edged) FFT mask between low_hz and high_hz."""
    spec = np.fft.rfft(x.astype(np.float64))
    f = np.fft.rfftfreq(x.size, 1.0 / rate_hz)
    mask = np.ones_like(f)
    lo = np.clip((f - (low_hz - 150.0)) / 300.0, 0.0, 1.0)
    hi = np.clip(((high_hz + 150.0) - f) / 300.0, 0.0, 1.0)
    mask *= 0.5 - 0.5 * np.cos(np.pi * lo)
    mask *= 0.5 - 0.5 * np.cos(np.pi * hi)
    return np.fft.irfft(spec * mask, x.size).astype(np.float32)


def _noise(n: int, rng: np.random.Generator) -> np.ndarray:
    white = rng.standard_normal(n)
    kind = rng.integers(0, 3)
    if kind == 0:
        return white
    spec = np.fft.rfft(white)
    f = np.arange(spec.size, dtype=np.float64) + 1.0
    spec /= np.sqrt(f) if kind == 1 else f                  # pink or brown
    out = np.fft.irfft(spec, n)
    if rng.random() < 0.3:                                  # a slowly pulsing hum/babble level
        env = 1.0 + 0.5 * np.sin(2 * np.pi * rng.uniform(0.2, 3.0) * np.arange(n) / 8000.0)
        out *= env
    return out


def _reverb(x: np.ndarray, rate_hz: int, rt60_s: float, rng: np.random.Generator) -> np.ndarray:
    n_ir = int(rt60_s * rate_hz)
    t = np.arange(n_ir) / rate_hz
    ir = rng.standard_normal(n_ir) * np.exp(-6.9 * t / rt60_s)
    ir[0] = 1.0 / rng.uniform(0.3, 1.0)                      # direct path vs room
    ir /= np.sqrt(np.sum(ir**2))
    n = x.size + n_ir - 1
    size = 1 << (n - 1).bit_length()
    y = np.fft.irfft(np.fft.rfft(x, size) * np.fft.rfft(ir, size), size)[: x.size]
    return y.astype(np.float32)


def _rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.asarray(x, dtype=np.float64) ** 2)) + 1e-9)


class PhoneChannel:
    """Callable augmentation chain; see AugmentConfig for what it does and how often."""

    def __init__(self, config: AugmentConfig | None = None) -> None:
        self.config = config or AugmentConfig()

    def __call__(self, x: np.ndarray, rate_hz: int, rng: np.random.Generator) -> np.ndarray:
        c = self.config
        x = np.asarray(x, dtype=np.float32)
        if rng.random() < c.p_speed:
            x = speed_perturb(x, rng.uniform(*c.speed_range))
        pad = [int(rng.uniform(*c.pad_range_s) * rate_hz) for _ in range(2)]
        x = np.concatenate([np.zeros(pad[0], np.float32), x, np.zeros(pad[1], np.float32)])
        if rng.random() < c.p_reverb:
            x = _reverb(x, rate_hz, rng.uniform(*c.rt60_range_s), rng)
        speech_rms = _rms(x[pad[0]: x.size - pad[1]] if x.size > sum(pad) else x)
        if rng.random() < c.p_noise:
            noise = _noise(x.size, rng)
            snr_db = rng.uniform(*c.snr_range_db)
            x = x + noise * (speech_rms / _rms(noise)) * 10 ** (-snr_db / 20.0)
        if rng.random() < c.p_bandpass:
            x = band_pass(x, rate_hz, rng.uniform(200.0, 400.0), rng.uniform(3200.0, 3600.0))
        level = 10 ** (rng.uniform(*c.level_range_dbfs) / 20.0)
        x = x * (level / speech_rms)
        x = np.clip(x, -1.0, 1.0)
        if rng.random() < c.p_mulaw:
            x = mulaw_roundtrip(x)
        return x.astype(np.float32)
