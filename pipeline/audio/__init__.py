"""Audio helpers: G.711 codecs, resampling, WAV files."""

from pipeline.audio.g711 import (
    ALAW_SILENCE,
    ULAW_SILENCE,
    alaw_decode,
    alaw_encode,
    resample,
    ulaw_decode,
    ulaw_encode,
)
from pipeline.audio.wav import read_wav, trim_silence, write_wav

__all__ = [
    "ALAW_SILENCE",
    "ULAW_SILENCE",
    "alaw_decode",
    "alaw_encode",
    "read_wav",
    "resample",
    "trim_silence",
    "ulaw_decode",
    "ulaw_encode",
    "write_wav",
]
