"""A recording's waveform for the call page: the loudest sample of each channel in each of
``buckets`` equal slices, 0..1. Computed on the server (the page draws it on a canvas), from the
two-channel recording the recorder writes, Ogg/Opus (decoded) or WAV (channel 0 the caller, 1 the
agent as the caller heard it).

Synchronous (it reads and decodes the whole file): the server runs it in a thread.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pipeline.audio.recordings import read_recording, recording_format

__all__ = ["MAX_OPUS_BYTES", "MAX_WAV_BYTES", "peaks", "too_long"]

MAX_WAV_BYTES = 256 * 1024 * 1024  # past this (hours of audio) the page plays the file with no waveform
MAX_OPUS_BYTES = MAX_WAV_BYTES // 8  # the same hours at 8 kHz: 32 kbit/s against 256
CHANNELS = ("caller", "agent")


def too_long(path: str | Path) -> bool:
    """Whether the file holds too many hours to decode for a waveform (the page plays it without);
    raises OSError or ``AudioFormatError`` for a file it cannot read."""
    limit = MAX_OPUS_BYTES if recording_format(path) == "opus" else MAX_WAV_BYTES
    return Path(path).stat().st_size > limit


def peaks(path: str | Path, buckets: int = 1000) -> dict:
    """``{"duration_s", "sample_rate_hz", "channels": {"caller": [...], "agent": [...]}}``;
    raises OSError or ``pipeline.errors.AudioFormatError`` for a file it cannot read."""
    pcm, rate_hz = read_recording(path)
    n = pcm.shape[0]
    out: dict[str, list[float]] = {}
    edges = np.linspace(0, n, min(buckets, n) + 1).astype(int) if n else np.zeros(1, int)
    for index, name in enumerate(CHANNELS[: pcm.shape[1]]):
        level = np.abs(pcm[:, index].astype(np.int32))
        out[name] = ([round(float(v) / 32768.0, 3) for v in np.maximum.reduceat(level, edges[:-1])]
                     if n else [])
    return {"duration_s": round(n / rate_hz, 3), "sample_rate_hz": rate_hz, "channels": out}
