"""Exceptions raised by the ``pipeline`` package.

Hierarchy::

    PipelineError                    base of everything this package raises
    ├── EngineUnavailableError   a speech engine's library or model is missing or won't load
    ├── AudioFormatError         audio of the wrong dtype, rate or frame size, or NaN/inf
    ├── ConfigError              an invalid setting of a service, engine or pool (a ValueError)
    ├── WorkerProtocolError      a malformed message between the server and an engine's worker
    └── WireError                a malformed message of the model tier's wire protocol

Foreign exceptions (ctypes ``OSError``, pocketsphinx ``RuntimeError``, ``webrtcvad`` errors) are
translated once, at the engine boundary, with ``raise ... from exc``.
"""

from __future__ import annotations


class PipelineError(Exception):
    """Base class of every error raised by ``pipeline``."""


class EngineUnavailableError(PipelineError):
    """A speech engine cannot run here: its library or model is missing or would not load.

    The message says what to install (for example ``apt-get install espeak-ng``).
    """


class AudioFormatError(PipelineError, ValueError):
    """Audio that cannot be processed: wrong dtype, unsupported rate or frame size, NaN/inf."""


class ConfigError(PipelineError, ValueError):
    """An invalid setting of a service, an engine or a pool (a size, a mode, a rate)."""


class WorkerProtocolError(PipelineError, ValueError):
    """A message between the server and an engine's worker process that is malformed."""


class WireError(PipelineError, ValueError):
    """A message of the model tier's wire protocol (``pipeline.model_wire``) that is malformed or
    asks for what the server does not do (an unknown encoding, a rate out of range)."""
