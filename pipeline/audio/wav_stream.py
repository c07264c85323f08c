"""A WAV file written as it goes, and read back even when its writer died before closing it.

    w = WavStreamWriter(path, sample_rate_hz=8000, channels=2)   # a header with sizes 0
    w.write(interleaved_int16_bytes)     # appended; every ``fixup_every_s`` the sizes are rewritten
    w.close()                            # sizes fixed, file closed
    pcm, rate = read_wav_frames(path)    # (n, channels) int16, whatever the header's sizes say

Nothing is held in memory but the file handle. A writer killed mid-call leaves a file whose
header counts what was written up to its last fix-up (or 0 before the first): ``read_wav_frames``
reads the data chunk to the end of the file instead of trusting the size, so everything that
reached the disk is kept. Synchronous: the caller runs it off the event loop.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import numpy as np

from pipeline.errors import AudioFormatError

__all__ = ["HEADER_BYTES", "WavStreamWriter", "read_wav_frames"]

HEADER_BYTES = 44


def _header(sample_rate_hz: int, channels: int, data_bytes: int) -> bytes:
    block = 2 * channels
    return (b"RIFF" + struct.pack("<I", 36 + data_bytes) + b"WAVE"
            + b"fmt " + struct.pack("<IHHIIHH", 16, 1, channels, sample_rate_hz, sample_rate_hz * block, block, 16)
            + b"data" + struct.pack("<I", data_bytes))


class WavStreamWriter:
    """16-bit PCM, ``channels`` interleaved; not thread-safe (one writer thread owns it)."""

    def __init__(self, path: str | os.PathLike, *, sample_rate_hz: int, channels: int = 2, fixup_every_s: float = 5.0):
        self.path = Path(path)
        self.sample_rate_hz = sample_rate_hz
        self.channels = channels
        self.data_bytes = 0
        self._fixup_bytes = max(1, int(fixup_every_s * sample_rate_hz)) * 2 * channels
        self._since_fixup = 0
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._f = open(self.path, "wb")  # noqa: SIM115 - open until close()
        self._f.write(_header(sample_rate_hz, channels, 0))

    def write(self, interleaved: bytes) -> None:
        block = 2 * self.channels
        if len(interleaved) % block:
            raise AudioFormatError(f"{self.path}: {len(interleaved)} bytes is not whole {self.channels}-channel frames")
        self._f.write(interleaved)
        self.data_bytes += len(interleaved)
        self._since_fixup += len(interleaved)
        if self._since_fixup >= self._fixup_bytes:
            self._fix_header()

    def _fix_header(self) -> None:
        self._f.flush()
        self._f.seek(4)
        self._f.write(struct.pack("<I", 36 + self.data_bytes))
        self._f.seek(40)
        self._f.write(struct.pack("<I", self.data_bytes))
        self._f.seek(0, os.SEEK_END)
        self._f.flush()
        self._since_fixup = 0

    def close(self) -> None:
        if self._f.closed:
            return
        self._fix_header()
        self._f.close()

    @property
    def seconds(self) -> float:
        return self.data_bytes / (2 * self.channels * self.sample_rate_hz)


def read_wav_frames(path: str | os.PathLike) -> tuple[np.ndarray, int]:
    """``((n, channels) int16, sample_rate_hz)`` of a 16-bit PCM WAV, its data chunk read to the end
    of the file when the header's size is 0 or runs past it (a writer that never closed it)."""
    raw = Path(path).read_bytes()
    if len(raw) < 12 or raw[:4] != b"RIFF" or raw[8:12] != b"WAVE":
        raise AudioFormatError(f"{path}: not a WAV file")
    pos, fmt = 12, None
    while pos + 8 <= len(raw):
        kind, size = raw[pos:pos + 4], struct.unpack("<I", raw[pos + 4:pos + 8])[0]
        body = pos + 8
        if kind == b"fmt ":
            fmt = struct.unpack("<HHIIHH", raw[body:body + 16])
        elif kind == b"data":
            if fmt is None:
                raise AudioFormatError(f"{path}: data before the format chunk")
            audio_format, channels, rate_hz, _, _, bits = fmt
            if audio_format != 1 or bits != 16 or channels < 1:
                raise AudioFormatError(f"{path}: only 16-bit PCM is read here")
            end = len(raw) if size == 0 or body + size > len(raw) else body + size
            usable = (end - body) // (2 * channels) * 2 * channels
            pcm = np.frombuffer(raw[body:body + usable], "<i2").reshape(-1, channels)
            return pcm, rate_hz
        pos = body + size + (size & 1)
    raise AudioFormatError(f"{path}: no data chunk")
