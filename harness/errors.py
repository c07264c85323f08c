"""Exceptions raised by the harness (parley's callers, judges and evaluations).

::

    HarnessError                   base of everything below
     ├── CallerError               a scripted caller (Twilio, SIP, WebRTC) could not run its call
     │    └── CallerAudioError     the caller's speech could not be made (flite failed, or a
     │                             --wav file is unreadable)
     └── AnswerSetError            a question set (tests/agent/data/*_questions.yaml) that cannot
                                   be read; names the file and the field

The product never raises these (it never imports the harness). The harness raises the product's
own errors where they fit (flite missing or failing is an ``EngineUnavailableError``, as for any
engine; a bad Twilio message a ``ProtocolError``) and translates foreign exceptions once, at the
boundary, with ``raise X from exc``.
"""

from __future__ import annotations

__all__ = ["AnswerSetError", "CallerAudioError", "CallerError", "HarnessError"]


class HarnessError(Exception):
    """Base class for harness errors."""


class CallerError(HarnessError):
    """A scripted caller could not connect, or its call could not run."""


class CallerAudioError(CallerError):
    """Caller audio could not be produced (flite failed, or a WAV file is unreadable)."""



class AnswerSetError(HarnessError):
    """A question set that is not valid: ``path: field: what is wrong``."""
