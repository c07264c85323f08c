"""Exceptions raised by ``ssm_engine.stt`` (the streaming speech recogniser).

All derive from ssm_engine's own tree, so callers can catch ``SSMEngineError`` for everything::

    SSMEngineError
    └── STTError
        ├── AudioInputError      audio the model cannot take: wrong rate, empty, NaN/inf, bad shape
        └── TranscriptError      text that cannot be encoded (no characters of the vocabulary)
"""

from __future__ import annotations

from ..errors import SSMEngineError

__all__ = ["STTError", "AudioInputError", "TranscriptError"]


class STTError(SSMEngineError):
    """Base class of the speech recogniser's errors."""


class AudioInputError(STTError, ValueError):
    """Audio the recogniser cannot take (wrong sample rate, empty, NaN or inf samples, bad shape)."""


class TranscriptError(STTError, ValueError):
    """A transcript that normalises to nothing the model's vocabulary can spell."""
