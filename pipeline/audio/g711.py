"""ITU-T G.711 mu-law and A-law codecs, numpy only, plus sample-rate conversion.

The tables are built once, at import, from the reference algorithm of the Sun Microsystems
``g711.c`` (the one CPython's ``audioop`` and most telephony stacks use), so encoding and
decoding are single table look-ups:

- ``ulaw_encode`` / ``alaw_encode``: int16 PCM -> one code byte per sample (65,536-entry table).
- ``ulaw_decode`` / ``alaw_decode``: code bytes -> int16 PCM (256-entry table).

Mu-law silence is ``0xFF`` (decodes to 0); A-law silence is ``0xD5`` (decodes to 8).

``resample`` converts int16 PCM between rates with libsoxr (``soxr``, a pipecat dependency).
Wrong dtypes, shapes or rates raise ``pipeline.errors.AudioFormatError``.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import soxr

from pipeline.errors import AudioFormatError

__all__ = [
    "ALAW_SILENCE",
    "ULAW_SILENCE",
    "alaw_decode",
    "alaw_encode",
    "resample",
    "ulaw_decode",
    "ulaw_encode",
]

ULAW_SILENCE: Final = 0xFF
ALAW_SILENCE: Final = 0xD5

_ULAW_BIAS: Final = 0x84  # added to the magnitude so every segment starts at a power of two
_ULAW_CLIP: Final = 8159  # largest 14-bit magnitude mu-law represents
_SEG_UEND: Final = np.array([0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF, 0x1FFF], dtype=np.int32)
_SEG_AEND: Final = np.array([0x1F, 0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF], dtype=np.int32)


def _ulaw_encode_reference(pcm: np.ndarray) -> np.ndarray:
    """linear2ulaw() of g711.c, vectorised. ``pcm``: int32 holding int16 values."""
    v = pcm.astype(np.int32) >> 2  # 16-bit -> 14-bit, arithmetic shift
    negative = v < 0
    mask = np.where(negative, 0x7F, 0xFF)
    v = np.where(negative, -v, v)
    v = np.minimum(v, _ULAW_CLIP) + (_ULAW_BIAS >> 2)
    seg = np.searchsorted(_SEG_UEND, v, side="left")  # first seg with v <= end
    code = (seg << 4) | ((v >> (seg + 1)) & 0xF)
    code = np.where(seg >= 8, 0x7F, code)
    return (code ^ mask).astype(np.uint8)


def _ulaw_decode_reference(codes: np.ndarray) -> np.ndarray:
    """ulaw2linear() of g711.c, vectorised."""
    u = ~codes.astype(np.int32) & 0xFF
    t = (((u & 0x0F) << 3) + _ULAW_BIAS) << ((u & 0x70) >> 4)
    return np.where(u & 0x80, _ULAW_BIAS - t, t - _ULAW_BIAS).astype(np.int16)


def _alaw_encode_reference(pcm: np.ndarray) -> np.ndarray:
    """linear2alaw() of g711.c, vectorised. ``pcm``: int32 holding int16 values."""
    v = pcm.astype(np.int32) >> 3  # 16-bit -> 13-bit
    negative = v < 0
    mask = np.where(negative, 0x55, 0xD5)
    v = np.where(negative, -v - 1, v)
    seg = np.searchsorted(_SEG_AEND, v, side="left")
    shift = np.where(seg < 2, 1, seg)
    code = (seg << 4) | ((v >> shift) & 0xF)
    code = np.where(seg >= 8, 0x7F, code)
    return (code ^ mask).astype(np.uint8)


def _alaw_decode_reference(codes: np.ndarray) -> np.ndarray:
    """alaw2linear() of g711.c, vectorised."""
    a = codes.astype(np.int32) ^ 0x55
    seg = (a & 0x70) >> 4
    t = (a & 0x0F) << 4
    t = np.where(seg == 0, t + 8, (t + 0x108) << np.maximum(seg - 1, 0))
    return np.where(a & 0x80, t, -t).astype(np.int16)


_ALL_PCM: Final = np.arange(-32768, 32768, dtype=np.int32)
_ALL_CODES: Final = np.arange(256, dtype=np.int32)
# Encode tables are indexed by the int16 sample reinterpreted as uint16.
_ULAW_ENC: Final = np.empty(65536, dtype=np.uint8)
_ULAW_ENC[_ALL_PCM.astype(np.int16).view(np.uint16)] = _ulaw_encode_reference(_ALL_PCM)
_ALAW_ENC: Final = np.empty(65536, dtype=np.uint8)
_ALAW_ENC[_ALL_PCM.astype(np.int16).view(np.uint16)] = _alaw_encode_reference(_ALL_PCM)
_ULAW_DEC: Final = _ulaw_decode_reference(_ALL_CODES)
_ALAW_DEC: Final = _alaw_decode_reference(_ALL_CODES)
for _table in (_ULAW_ENC, _ALAW_ENC, _ULAW_DEC, _ALAW_DEC):
    _table.flags.writeable = False


def _as_int16(pcm_int16: np.ndarray) -> np.ndarray:
    pcm = np.asarray(pcm_int16)
    if pcm.dtype != np.int16:
        raise AudioFormatError(f"expected int16 PCM, got {pcm.dtype}")
    return np.ascontiguousarray(pcm)


def _as_codes(data: bytes | bytearray | memoryview | np.ndarray) -> np.ndarray:
    if isinstance(data, np.ndarray):
        if data.dtype != np.uint8:
            raise AudioFormatError(f"expected uint8 codes, got {data.dtype}")
        return data
    return np.frombuffer(data, dtype=np.uint8)


def ulaw_encode(pcm_int16: np.ndarray) -> bytes:
    """Encode int16 PCM (any shape, flattened in C order) to mu-law bytes."""
    return _ULAW_ENC[_as_int16(pcm_int16).view(np.uint16)].tobytes()


def ulaw_decode(data: bytes | bytearray | memoryview | np.ndarray) -> np.ndarray:
    """Decode mu-law bytes to a new 1-D int16 array."""
    return _ULAW_DEC[_as_codes(data)].reshape(-1)


def alaw_encode(pcm_int16: np.ndarray) -> bytes:
    """Encode int16 PCM (any shape, flattened in C order) to A-law bytes."""
    return _ALAW_ENC[_as_int16(pcm_int16).view(np.uint16)].tobytes()


def alaw_decode(data: bytes | bytearray | memoryview | np.ndarray) -> np.ndarray:
    """Decode A-law bytes to a new 1-D int16 array."""
    return _ALAW_DEC[_as_codes(data)].reshape(-1)


def resample(pcm_int16: np.ndarray, from_hz: int, to_hz: int) -> np.ndarray:
    """Resample mono int16 PCM from ``from_hz`` to ``to_hz`` (libsoxr, high quality, one shot).

    For a continuous stream cut into chunks use ``soxr.ResampleStream`` instead: one-shot calls
    per chunk reset the filter state and click at chunk edges.
    """
    pcm = _as_int16(pcm_int16)
    if pcm.ndim != 1:
        raise AudioFormatError(f"expected mono 1-D PCM, got shape {pcm.shape}")
    if from_hz <= 0 or to_hz <= 0:
        raise AudioFormatError(f"sample rates must be positive, got {from_hz} -> {to_hz}")
    if from_hz == to_hz or pcm.size == 0:
        return pcm.copy()
    return np.asarray(soxr.resample(pcm, from_hz, to_hz, quality="HQ"), dtype=np.int16)
