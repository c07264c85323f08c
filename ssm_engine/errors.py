"""Exceptions raised by ``ssm_engine``.

Every error the engine raises on purpose is an ``SSMEngineError``; foreign exceptions
(safetensors, json, OS errors) are translated once, at the boundary, with ``raise ... from exc``::

    SSMEngineError
    ├── ConfigError              an invalid setting: a model config (or one read from disk), a
    │                            search or decoder config, a training or data recipe's option
    ├── StateError               a state has the wrong names/shapes/batch, or its bytes are bad
    ├── CheckpointError          .path names the file; str(err) always contains it
    │   ├── CheckpointFormatError    missing/corrupt file, bad JSON, unknown format or version
    │   └── CheckpointMismatchError  tensor names, shapes or dtypes disagree with the config
    ├── StreamError
    │   └── UnknownStreamError   a stream id that is not open (never opened, or closed)
    └── RunnerClosedError        work submitted to a BatchRunner that is not running
"""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "SSMEngineError",
    "ConfigError",
    "StateError",
    "CheckpointError",
    "CheckpointFormatError",
    "CheckpointMismatchError",
    "StreamError",
    "UnknownStreamError",
    "RunnerClosedError",
]


class SSMEngineError(Exception):
    """Base class of every error raised on purpose by ssm_engine."""


class ConfigError(SSMEngineError, ValueError):
    """An invalid setting: an SSMConfig (non-positive size, headdim not dividing d_inner, ...),
    a search or decoder config, a language model's or a data recipe's option."""


class StateError(SSMEngineError, ValueError):
    """A stream state does not fit the model, or serialized state bytes are unreadable."""


class CheckpointError(SSMEngineError):
    """A checkpoint cannot be used. ``path`` is the offending file; the message names it."""

    def __init__(self, path: str | Path, message: str) -> None:
        self.path = Path(path)
        super().__init__(f"{self.path}: {message}")


class CheckpointFormatError(CheckpointError):
    """The file is missing, unreadable, corrupt, or of an unknown format/version."""


class CheckpointMismatchError(CheckpointError):
    """The weights do not match the config (missing/unexpected names, wrong shape or dtype)."""


class StreamError(SSMEngineError):
    """A stream-level operation failed."""


class UnknownStreamError(StreamError, KeyError):
    """The stream id is not open: it was never opened or has been closed."""

    def __init__(self, stream_id: int) -> None:
        self.stream_id = stream_id
        super().__init__(f"stream {stream_id} is not open")

    def __str__(self) -> str:  # KeyError would quote the message
        return f"stream {self.stream_id} is not open"


class RunnerClosedError(SSMEngineError, RuntimeError):
    """Work was submitted to a BatchRunner that has not started or has been stopped."""
