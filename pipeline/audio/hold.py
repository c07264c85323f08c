"""Hold audio made here, from sines (nothing downloaded): what a caller hears while a warm
transfer rings the person.

    loop = HoldLoop("music", sample_rate_hz=8000)
    pcm = loop.next(160)          # int16, the next 20 ms; the pattern repeats without a seam

``music``: a slow arpeggio from middle C (C, E, G, E), each note 300 ms
with a soft attack and release, at about -18 dBFS. ``tone``: a 440 Hz beep of 400 ms every second.
Neither pattern is silent for more than 600 ms, so a caller never hears a second of nothing.
"""

from __future__ import annotations

import numpy as np

from pipeline.frames import HoldAudio

__all__ = ["HoldLoop", "hold_pattern"]

_NOTES_HZ = (261.63, 329.63, 392.00, 329.63)
_NOTE_S = 0.3
_AMPLITUDE = 4000  # of 32767: about -18 dBFS


def _note(freq_hz: float, seconds: float, sample_rate_hz: int, fade_s: float = 0.03) -> np.ndarray:
    t = np.arange(int(seconds * sample_rate_hz)) / sample_rate_hz
    wave = np.sin(2 * np.pi * freq_hz * t) + 0.3 * np.sin(4 * np.pi * freq_hz * t)
    envelope = np.ones_like(t)
    fade = int(fade_s * sample_rate_hz)
    envelope[:fade] = np.linspace(0.0, 1.0, fade)
    envelope[-fade:] = np.linspace(1.0, 0.0, fade)
    return wave * envelope / 1.3


def hold_pattern(kind: HoldAudio, sample_rate_hz: int = 8000) -> np.ndarray:
    """One period of the pattern, int16 mono."""
    if kind == "music":
        wave = np.concatenate([_note(f, _NOTE_S, sample_rate_hz) for f in _NOTES_HZ])
    elif kind == "tone":
        wave = np.concatenate([_note(440.0, 0.4, sample_rate_hz, fade_s=0.01),
                               np.zeros(int(0.6 * sample_rate_hz))])
    else:
        raise ValueError(f"unknown hold audio {kind!r}")
    return np.round(wave * _AMPLITUDE).astype(np.int16)


class HoldLoop:
    """The pattern, endlessly, a chunk at a time."""

    def __init__(self, kind: HoldAudio, sample_rate_hz: int = 8000):
        self._pattern = hold_pattern(kind, sample_rate_hz)
        self._at = 0

    def next(self, samples: int) -> np.ndarray:
        idx = (self._at + np.arange(samples)) % len(self._pattern)
        self._at = (self._at + samples) % len(self._pattern)
        return self._pattern[idx]
