"""Exceptions raised by ``ssm_engine.tts`` (the streaming text-to-speech voice).

All derive from ssm_engine's own tree, so callers can catch ``SSMEngineError`` for everything::

    SSMEngineError
    └── TTSError
        ├── TextError       nothing to speak (empty, only punctuation or symbols), or an
        │                   unknown phone symbol given to ``encode``
        ├── LexiconError    the packaged lexicon or LTS rules are missing or corrupt, or
        │                   festival's source dictionary cannot be read
        └── TeacherError    the festival teacher is missing or failed, or its output cannot
                            be aligned to our phone tokens
"""

from __future__ import annotations

from ..errors import SSMEngineError

__all__ = ["TTSError", "TextError", "LexiconError", "TeacherError"]


class TTSError(SSMEngineError):
    """Base class of the text-to-speech errors."""


class TextError(TTSError, ValueError):
    """Text that normalises to nothing speakable (empty, only punctuation, only unknown symbols)."""


class LexiconError(TTSError):
    """The pronunciation lexicon cannot be read or built."""


class TeacherError(TTSError):
    """The festival teacher voice is missing, failed, or gave output we cannot align."""
