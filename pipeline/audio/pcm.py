"""Validation of 16-bit mono PCM handed to parley's audio consumers (recognisers, detectors), and
the voices' float samples made 16-bit."""

from __future__ import annotations

import numpy as np

from pipeline.errors import AudioFormatError

__all__ = ["as_int16", "float_to_int16"]


def as_int16(pcm: bytes | bytearray | memoryview | np.ndarray) -> np.ndarray:
    """Validate mono 16-bit PCM (bytes or an int16 array) and return it as a 1-D int16 array.

    Raises ``AudioFormatError`` for other dtypes (float arrays included: scale them yourself),
    more than one dimension, or an odd number of bytes.
    """
    if isinstance(pcm, (bytes, bytearray, memoryview)):
        raw = bytes(pcm)
        if len(raw) % 2:
            raise AudioFormatError(f"16-bit PCM needs an even byte count, got {len(raw)}")
        return np.frombuffer(raw, dtype="<i2")
    if not isinstance(pcm, np.ndarray):
        raise AudioFormatError(f"expected bytes or an int16 array, got {type(pcm).__name__}")
    if pcm.dtype != np.int16:
        raise AudioFormatError(f"expected int16 samples, got dtype {pcm.dtype}")
    if pcm.ndim != 1:
        raise AudioFormatError(f"expected mono 1-D samples, got shape {pcm.shape}")
    return pcm


def float_to_int16(pcm: np.ndarray) -> np.ndarray:
    """Float samples in [-1, 1] (a voice's output; beyond it clipped) as int16."""
    return (np.clip(pcm, -1.0, 1.0) * 32767.0).astype(np.int16)
