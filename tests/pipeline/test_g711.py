"""G.711 codecs: bit-exact with the reference g711.c, bounded error, code round trips."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from pipeline.audio.g711 import (
    ALAW_SILENCE,
    ULAW_SILENCE,
    alaw_decode,
    alaw_encode,
    resample,
    ulaw_decode,
    ulaw_encode,
)
from pipeline.errors import AudioFormatError

ALL_PCM = np.arange(-32768, 32768, dtype=np.int16)
ALL_CODES = bytes(range(256))

pcm_arrays = hnp.arrays(np.int16, st.integers(0, 400))


# --- A scalar transcription of Sun's g711.c, the slow reference next to the table codec. ---


def _search(val: int, table: list[int]) -> int:
    for i, end in enumerate(table):
        if val <= end:
            return i
    return len(table)


def ref_linear2ulaw(pcm: int) -> int:
    pcm >>= 2
    if pcm < 0:
        pcm, mask = -pcm, 0x7F
    else:
        mask = 0xFF
    pcm = min(pcm, 8159) + (0x84 >> 2)
    seg = _search(pcm, [0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF, 0x1FFF])
    if seg >= 8:
        return 0x7F ^ mask
    return ((seg << 4) | ((pcm >> (seg + 1)) & 0xF)) ^ mask


def ref_ulaw2linear(u: int) -> int:
    u = ~u & 0xFF
    t = (((u & 0x0F) << 3) + 0x84) << ((u & 0x70) >> 4)
    return 0x84 - t if u & 0x80 else t - 0x84


def ref_linear2alaw(pcm: int) -> int:
    pcm >>= 3
    if pcm >= 0:
        mask = 0xD5
    else:
        mask, pcm = 0x55, -pcm - 1
    seg = _search(pcm, [0x1F, 0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF])
    if seg >= 8:
        return 0x7F ^ mask
    aval = seg << 4
    aval |= (pcm >> 1) & 0xF if seg < 2 else (pcm >> seg) & 0xF
    return aval ^ mask


def ref_alaw2linear(a: int) -> int:
    a ^= 0x55
    t = (a & 0x0F) << 4
    seg = (a & 0x70) >> 4
    if seg == 0:
        t += 8
    elif seg == 1:
        t += 0x108
    else:
        t = (t + 0x108) << (seg - 1)
    return t if a & 0x80 else -t


def test_encoders_match_reference_for_every_int16() -> None:
    # Every 7th sample keeps the scalar loop fast while touching every segment and sign.
    sample = ALL_PCM[::7]
    assert ulaw_encode(sample) == bytes(ref_linear2ulaw(int(x)) for x in sample)
    assert alaw_encode(sample) == bytes(ref_linear2alaw(int(x)) for x in sample)
    edges = np.array([-32768, -32767, -32124, -8, -4, -1, 0, 1, 3, 4, 8, 32124, 32767], np.int16)
    assert ulaw_encode(edges) == bytes(ref_linear2ulaw(int(x)) for x in edges)
    assert alaw_encode(edges) == bytes(ref_linear2alaw(int(x)) for x in edges)


def test_decoders_match_reference_for_every_code() -> None:
    assert ulaw_decode(ALL_CODES).tolist() == [ref_ulaw2linear(c) for c in ALL_CODES]
    assert alaw_decode(ALL_CODES).tolist() == [ref_alaw2linear(c) for c in ALL_CODES]


def test_matches_audioop_when_available() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        audioop = pytest.importorskip("audioop")
    raw = ALL_PCM.tobytes()
    assert ulaw_encode(ALL_PCM) == audioop.lin2ulaw(raw, 2)
    assert alaw_encode(ALL_PCM) == audioop.lin2alaw(raw, 2)
    assert ulaw_decode(ALL_CODES).tobytes() == audioop.ulaw2lin(ALL_CODES, 2)
    assert alaw_decode(ALL_CODES).tobytes() == audioop.alaw2lin(ALL_CODES, 2)


def test_silence_codes() -> None:
    assert ulaw_encode(np.zeros(3, np.int16)) == bytes([ULAW_SILENCE]) * 3
    assert ulaw_decode(bytes([ULAW_SILENCE])).tolist() == [0]
    assert alaw_encode(np.zeros(1, np.int16)) == bytes([ALAW_SILENCE])
    assert alaw_decode(bytes([ALAW_SILENCE])).tolist() == [8]


def test_ulaw_code_round_trip_all_256() -> None:
    """Every mu-law code survives decode->encode, except 0x7F ("negative zero") -> 0xFF."""
    back = ulaw_encode(ulaw_decode(ALL_CODES))
    expected = bytearray(ALL_CODES)
    expected[0x7F] = 0xFF
    assert back == bytes(expected)


def test_alaw_code_round_trip_all_256() -> None:
    assert alaw_encode(alaw_decode(ALL_CODES)) == ALL_CODES


def _ulaw_bound(x: np.ndarray) -> np.ndarray:
    return np.maximum(11, np.abs(x) // 19 + 1)


def _alaw_bound(x: np.ndarray) -> np.ndarray:
    return np.maximum(8, -(-np.abs(x) // 32))


def test_error_bounds_exhaustive() -> None:
    x = ALL_PCM.astype(np.int32)
    assert np.all(np.abs(ulaw_decode(ulaw_encode(ALL_PCM)) - x) <= _ulaw_bound(x))
    assert np.all(np.abs(alaw_decode(alaw_encode(ALL_PCM)) - x) <= _alaw_bound(x))


@given(pcm_arrays)
def test_ulaw_round_trip_error_bounded(pcm: np.ndarray) -> None:
    x = pcm.astype(np.int32)
    out = ulaw_decode(ulaw_encode(pcm))
    assert out.dtype == np.int16 and out.shape == pcm.shape
    assert np.all(np.abs(out - x) <= _ulaw_bound(x))


@given(pcm_arrays)
def test_alaw_round_trip_error_bounded(pcm: np.ndarray) -> None:
    x = pcm.astype(np.int32)
    out = alaw_decode(alaw_encode(pcm))
    assert out.dtype == np.int16 and out.shape == pcm.shape
    assert np.all(np.abs(out - x) <= _alaw_bound(x))


@given(st.binary(max_size=400))
def test_encode_decode_codes_idempotent(codes: bytes) -> None:
    """Codes are a fixed point after one decode/encode pass (mu-law 0x7F settles on 0xFF)."""
    once = ulaw_encode(ulaw_decode(codes))
    assert ulaw_encode(ulaw_decode(once)) == once
    assert alaw_encode(alaw_decode(codes)) == codes


def test_rejects_wrong_dtypes() -> None:
    with pytest.raises(AudioFormatError):
        ulaw_encode(np.zeros(4, np.float32))
    with pytest.raises(AudioFormatError):
        alaw_decode(np.zeros(4, np.int16))


def test_resample_tone_keeps_frequency_and_level() -> None:
    t = np.arange(16000) / 16000
    tone = (10000 * np.sin(2 * math.pi * 440 * t)).astype(np.int16)
    out = resample(tone, 16000, 8000)
    assert out.dtype == np.int16 and out.shape == (8000,)
    spectrum = np.abs(np.fft.rfft(out.astype(np.float64)))
    assert int(np.argmax(spectrum)) == 440  # 1 s of audio: bin index == Hz
    rms = np.sqrt(np.mean(out[400:-400].astype(np.float64) ** 2))
    assert rms == pytest.approx(10000 / math.sqrt(2), rel=0.02)


def test_resample_identity_and_errors() -> None:
    x = np.arange(10, dtype=np.int16)
    same = resample(x, 8000, 8000)
    assert np.array_equal(same, x) and same is not x
    with pytest.raises(AudioFormatError):
        resample(np.zeros((2, 2), np.int16), 8000, 16000)
    with pytest.raises(AudioFormatError):
        resample(x, 0, 8000)
