"""Audio helpers: G.711 codecs, resampling, WAV files, PCM validation."""

from pipeline.audio.g711 import (
    ALAW_SILENCE,
    ULAW_SILENCE,
    alaw_decode,
    alaw_encode,
    resample,
    ulaw_decode,
    ulaw_encode,
)
from pipeline.audio.pcm import as_int16
from pipeline.audio.wav import read_wav, trim_silence, write_wav

__all__ = [
    "ALAW_SILENCE",
    "ULAW_SILENCE",
    "alaw_decode",
    "alaw_encode",
    "as_int16",
    "read_wav",
    "resample",
    "trim_silence",
    "ulaw_decode",
    "ulaw_encode",
    "write_wav",
]
