"""WAV read/write and silence trimming."""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np
import pytest

from pipeline.audio.wav import read_wav, trim_silence, write_wav
from pipeline.errors import AudioFormatError


def test_write_then_read_round_trip(tmp_path: Path) -> None:
    pcm = np.array([0, 1, -1, 32767, -32768, 1234], np.int16)
    write_wav(tmp_path / "a.wav", pcm, 8000)
    back, rate_hz = read_wav(tmp_path / "a.wav")
    assert rate_hz == 8000 and back.dtype == np.int16 and np.array_equal(back, pcm)


def _write_raw(path: Path, channels: int, width: int, rate_hz: int, frames: bytes) -> None:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(width)
        w.setframerate(rate_hz)
        w.writeframes(frames)


def test_stereo_is_averaged_and_8_bit_is_widened(tmp_path: Path) -> None:
    stereo = np.array([[1000, 3000], [-2000, -4000]], "<i2")
    _write_raw(tmp_path / "s.wav", 2, 2, 44100, stereo.tobytes())
    mono, rate_hz = read_wav(tmp_path / "s.wav")
    assert rate_hz == 44100 and mono.tolist() == [2000, -3000]
    _write_raw(tmp_path / "u8.wav", 1, 1, 8000, bytes([128, 255, 0]))
    assert read_wav(tmp_path / "u8.wav")[0].tolist() == [0, 127 << 8, -128 << 8]


def test_bad_files(tmp_path: Path) -> None:
    (tmp_path / "junk.wav").write_bytes(b"not a wav file at all")
    with pytest.raises(AudioFormatError):
        read_wav(tmp_path / "junk.wav")
    with pytest.raises(OSError):
        read_wav(tmp_path / "missing.wav")
    _write_raw(tmp_path / "24.wav", 1, 3, 8000, b"\x00" * 9)
    with pytest.raises(AudioFormatError, match="24-bit"):
        read_wav(tmp_path / "24.wav")
    with pytest.raises(AudioFormatError):
        write_wav(tmp_path / "f.wav", np.zeros(4, np.float32), 8000)


def test_trim_silence_keeps_margin() -> None:
    pcm = np.zeros(8000, np.int16)
    pcm[3000:5000] = 10000
    pcm[2000] = 50  # below 2 % of the peak: trimmed
    out = trim_silence(pcm, 8000, margin_ms=20)
    assert out.size == 2000 + 2 * 160
    assert np.array_equal(out[160:-160], pcm[3000:5000])
    assert trim_silence(np.zeros(100, np.int16), 8000).size == 0
    edge = np.full(10, 5000, np.int16)
    assert np.array_equal(trim_silence(edge, 8000), edge)
