"""Small numpy audio helpers for data generation: WAV I/O, FFT resampling, G.711 mu-law.

    x, rate = read_wav("a.wav")            # float32 in [-1, 1], mono
    x, rate = read_audio("a.opus")         # WAV, or Ogg Opus/Vorbis (a packed data set, pack.py)
    y = resample(x, rate, 8000)            # band-limited (FFT) resampling of a whole clip
    write_wav("b.wav", y, 8000)            # 16-bit PCM
    z = mulaw_roundtrip(y)                 # what a G.711 phone channel does to the samples
"""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np

from .errors import AudioFileError

__all__ = ["read_wav", "read_audio", "write_wav", "wav_seconds", "unsigned_8bit", "resample",
           "mulaw_roundtrip", "COMPRESSED_SUFFIXES"]

COMPRESSED_SUFFIXES = (".opus", ".ogg")   # read through soundfile (libsndfile), imported on first use


def read_wav(path: str | Path) -> tuple[np.ndarray, int]:
    """16-bit PCM WAV -> (float32 mono samples in [-1, 1], sample rate in Hz)."""
    with wave.open(str(path), "rb") as w:
        if w.getsampwidth() != 2:
            raise AudioFileError(f"{path}: only 16-bit PCM WAV is supported")
        rate, channels = w.getframerate(), w.getnchannels()
        pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
    if channels > 1:
        pcm = pcm.reshape(-1, channels).mean(axis=1)
    return (pcm.astype(np.float32) / 32768.0), rate


def read_audio(path: str | Path) -> tuple[np.ndarray, int]:
    """A clip as ``read_wav`` gives it, from a WAV file or an Ogg (Opus or Vorbis) one."""
    if Path(path).suffix.lower() not in COMPRESSED_SUFFIXES:
        return read_wav(path)
    try:
        import soundfile
    except ImportError as exc:
        raise AudioFileError(f"{path}: reading Ogg audio needs the soundfile package "
                             f"(pip install soundfile)") from exc
    try:
        x, rate = soundfile.read(str(path), dtype="float32", always_2d=True)
    except (RuntimeError, soundfile.LibsndfileError) as exc:
        raise AudioFileError(f"{path}: {exc}") from exc
    return np.ascontiguousarray(x.mean(axis=1) if x.shape[1] > 1 else x[:, 0]), int(rate)


def wav_seconds(path: str | Path) -> float:
    """A WAV file's length from its header, without reading its samples."""
    with wave.open(str(path), "rb") as w:
        return w.getnframes() / float(w.getframerate())


def unsigned_8bit(data: bytes) -> np.ndarray:
    """Raw unsigned 8-bit PCM (old games' speech: silence at 128) -> float32 in [-1, 1)."""
    return (np.frombuffer(data, dtype=np.uint8).astype(np.float32) - 128.0) / 128.0


def write_wav(path: str | Path, samples: np.ndarray, sample_rate_hz: int) -> None:
    """float samples in [-1, 1] (clipped) -> 16-bit PCM mono WAV."""
    pcm = np.clip(np.round(np.asarray(samples, dtype=np.float64) * 32767.0), -32768, 32767)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(sample_rate_hz)
        w.writeframes(pcm.astype("<i2").tobytes())


def resample(x: np.ndarray, from_hz: int, to_hz: int) -> np.ndarray:
    """Resample a whole clip by zero-padding/truncating its spectrum (ideal low-pass)."""
    x = np.asarray(x, dtype=np.float32)
    if from_hz == to_hz or x.size == 0:
        return x.copy()
    n_out = int(round(x.size * to_hz / from_hz))
    spec = np.fft.rfft(x.astype(np.float64))
    n_bins = n_out // 2 + 1
    if n_bins <= spec.size:
        spec = spec[:n_bins]
    else:
        spec = np.concatenate([spec, np.zeros(n_bins - spec.size, dtype=spec.dtype)])
    return (np.fft.irfft(spec, n_out) * (n_out / x.size)).astype(np.float32)


_MU = 255.0


def mulaw_roundtrip(x: np.ndarray) -> np.ndarray:
    """Compand to 8-bit mu-law codes and back (the G.711 quantisation), float in [-1, 1]."""
    x = np.clip(np.asarray(x, dtype=np.float64), -1.0, 1.0)
    y = np.sign(x) * np.log1p(_MU * np.abs(x)) / np.log1p(_MU)
    codes = np.round((y + 1.0) * 127.5)                      # 256 levels
    y = codes / 127.5 - 1.0
    return (np.sign(y) * np.expm1(np.abs(y) * np.log1p(_MU)) / _MU).astype(np.float32)
