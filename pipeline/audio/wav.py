"""WAV files in and out (stdlib ``wave``), and trimming silence off the ends of speech.

``read_wav`` returns mono int16 PCM and its rate: 8-, 16- and 32-bit integer PCM, any rate,
channels averaged. Anything else raises ``AudioFormatError``; a missing file raises ``OSError``.
"""

from __future__ import annotations

import wave
from pathlib import Path
from typing import BinaryIO

import numpy as np

from pipeline.errors import AudioFormatError

__all__ = ["read_wav", "trim_silence", "write_wav"]


def read_wav(path: str | Path) -> tuple[np.ndarray, int]:
    """Read a PCM WAV file as ``(mono int16 samples, sample_rate_hz)``."""
    try:
        with wave.open(str(path), "rb") as w:
            channels, width, rate_hz = w.getnchannels(), w.getsampwidth(), w.getframerate()
            raw = w.readframes(w.getnframes())
    except (wave.Error, EOFError) as exc:
        raise AudioFormatError(f"{path}: not a PCM WAV file ({exc})") from exc
    if width == 1:
        pcm = (np.frombuffer(raw, np.uint8).astype(np.int32) - 128) << 8
    elif width == 2:
        pcm = np.frombuffer(raw, "<i2").astype(np.int32)
    elif width == 4:
        pcm = np.frombuffer(raw, "<i4").astype(np.int32) >> 16
    else:
        raise AudioFormatError(f"{path}: {8 * width}-bit samples are not supported")
    usable = pcm.size - pcm.size % channels
    mono = pcm[:usable].reshape(-1, channels).mean(axis=1)
    return np.round(mono).astype(np.int16), rate_hz


def write_wav(path: str | Path | BinaryIO, pcm_int16: np.ndarray, sample_rate_hz: int) -> None:
    """Write mono int16 PCM as a 16-bit WAV file (a path, or a binary file object)."""
    pcm = np.asarray(pcm_int16)
    if pcm.dtype != np.int16 or pcm.ndim != 1:
        raise AudioFormatError(f"expected 1-D int16 PCM, got {pcm.dtype} {pcm.shape}")
    with wave.open(str(path) if isinstance(path, (str, Path)) else path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(sample_rate_hz)
        w.writeframes(pcm.astype("<i2").tobytes())


def trim_silence(
    pcm_int16: np.ndarray, sample_rate_hz: int, threshold_ratio: float = 0.02, margin_ms: int = 20
) -> np.ndarray:
    """Cut leading and trailing samples quieter than ``threshold_ratio`` of the peak, keeping
    ``margin_ms`` on each side. All-silent input gives an empty array."""
    pcm = np.asarray(pcm_int16)
    magnitude = np.abs(pcm.astype(np.int32))
    peak = int(magnitude.max(initial=0))
    if peak == 0:
        return pcm[:0].copy()
    loud = np.flatnonzero(magnitude > threshold_ratio * peak)
    margin = sample_rate_hz * margin_ms // 1000
    return pcm[max(0, loud[0] - margin) : loud[-1] + 1 + margin].copy()
