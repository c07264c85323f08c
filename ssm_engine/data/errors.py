"""Exceptions raised by ``ssm_engine.data`` (training data generation).

    SSMEngineError
    └── DataError
        ├── VoiceUnavailableError   unknown voice name, or its program is not installed
        ├── SynthesisError          the synthesiser failed or produced no audio
        ├── ManifestError           a manifest line is malformed (path<TAB>text) or names no file
        └── AudioFileError          a WAV file parley cannot read (not 16-bit PCM)
"""

from __future__ import annotations

from ..errors import SSMEngineError

__all__ = ["AudioFileError", "DataError", "ManifestError", "SynthesisError", "VoiceUnavailableError"]


class DataError(SSMEngineError):
    """Base class of the data generator's errors."""


class VoiceUnavailableError(DataError):
    """A voice that cannot be used here."""


class SynthesisError(DataError):
    """A synthesiser run failed."""


class ManifestError(DataError, ValueError):
    """A malformed manifest."""


class AudioFileError(DataError, ValueError):
    """A WAV file parley cannot read: not 16-bit PCM."""
