"""The call recordings' file formats: Ogg/Opus (the default) or 16-bit WAV, written as they go.

    w = open_recording(stem, "opus", sample_rate_hz=8000)   # stem + ".opus" (or ".wav")
    w.write(interleaved_int16_bytes); w.close()
    pcm, rate = read_recording(w.path)                       # (n, channels) int16, either format
    media_type(w.path)                                       # "audio/ogg" or "audio/wav"

A file is known by its first bytes (``RIFF``, ``OggS``), not its name. Both writers are
synchronous and keep what reached the disk when their process dies (``wav_stream``,
``opus_stream``); the caller runs them off the event loop.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Protocol

import numpy as np

from pipeline.audio.opus_stream import OpusStreamWriter, read_opus_frames
from pipeline.audio.wav_stream import WavStreamWriter, read_wav_frames
from pipeline.errors import AudioFormatError
from pipeline.options import RecordingFormat

__all__ = ["MEDIA_TYPES", "SUFFIXES", "RecordingFormat", "RecordingWriter", "media_type", "open_recording",
           "read_recording", "recording_format"]

SUFFIXES: dict[RecordingFormat, str] = {"opus": ".opus", "wav": ".wav"}   # .opus: RFC 7845's name for Ogg/Opus
MEDIA_TYPES: dict[RecordingFormat, str] = {"opus": "audio/ogg", "wav": "audio/wav"}
_MAGIC: dict[bytes, RecordingFormat] = {b"OggS": "opus", b"RIFF": "wav"}


class RecordingWriter(Protocol):
    path: Path
    sample_rate_hz: int
    channels: int

    def write(self, interleaved: bytes) -> None: ...

    def close(self) -> None: ...


def open_recording(stem: str | os.PathLike, fmt: RecordingFormat, *, sample_rate_hz: int,
                   channels: int = 2) -> RecordingWriter:
    """A writer for ``stem`` + the format's suffix (the file is created now)."""
    path = Path(f"{os.fspath(stem)}{SUFFIXES[fmt]}")
    if fmt == "opus":
        return OpusStreamWriter(path, sample_rate_hz=sample_rate_hz, channels=channels)
    return WavStreamWriter(path, sample_rate_hz=sample_rate_hz, channels=channels)


def recording_format(path: str | os.PathLike) -> RecordingFormat:
    """What the file is, by its first four bytes; raises AudioFormatError for anything else."""
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic not in _MAGIC:
        raise AudioFormatError(f"{path}: neither Ogg/Opus nor WAV")
    return _MAGIC[magic]


def media_type(path: str | os.PathLike) -> str:
    return MEDIA_TYPES[recording_format(path)]


def read_recording(path: str | os.PathLike) -> tuple[np.ndarray, int]:
    """``((n, channels) int16, sample_rate_hz)`` of a recording in either format, read to its last
    readable byte when its writer never closed it."""
    if recording_format(path) == "opus":
        return read_opus_frames(path)
    return read_wav_frames(path)
