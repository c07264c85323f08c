"""One contract for every voice: open an utterance, iterate its speech as it is made, cancel.

    utt = voice.open(8000, seed=0)              # one per phrase of a reply
    async for chunk in utt.speak("Hello."):     # SpeechChunk: int16 pcm, start_s, words
        ...
    utt.cancel()                                # barge-in: no more audio, queued work dropped

``speak`` takes the whole text of the utterance (text in, end of input in one) and yields its
audio as the engine makes it; leaving the iteration early cancels the utterance too. The voices:
parley's SSM voice (``ssm_voice.SSMVoiceEngine``, its thread in this process, or
``voice_procs.VoiceProcess``, a worker process), the same voice on the model tier
(``remote_voice.RemoteVoiceEngine``) and espeak-ng (``espeak.EspeakVoice``). One pipecat service
speaks with any of them (``services.voice_tts.VoiceTTSService``).

A voice tells that service three things: ``voice_name`` (who failed, in an error line), ``errors``
(the engine errors that end one utterance with an ``ErrorFrame`` while the call goes on) and
``written_words`` (True when its chunks' words are the text as written, as espeak-ng reports
them; False when they are the words it spoke, as the SSM voice says "four four one seven" for
"4417", which the service maps back to the written text).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Protocol

import numpy as np

__all__ = ["SpeechChunk", "SpokenUtterance", "Voice"]


@dataclass(frozen=True)
class SpeechChunk:
    """``pcm``: int16 mono at the utterance's rate; ``start_s``: its offset in the utterance;
    ``words``: ``(word, start_s)`` of the words starting in it."""

    pcm: np.ndarray
    start_s: float
    words: tuple[tuple[str, float], ...] = ()


class SpokenUtterance(Protocol):
    @property
    def cancelled(self) -> bool: ...

    def cancel(self) -> None:
        """Stop: no more audio; any thread; idempotent."""
        ...

    def speak(self, text: str) -> AsyncGenerator[SpeechChunk, None]:
        """Speak ``text`` (once per utterance), yielding the audio as it is made."""
        ...


class Voice(Protocol):
    voice_name: str
    errors: tuple[type[Exception], ...]
    written_words: bool

    def open(self, sample_rate_hz: int, *, seed: int = 0) -> SpokenUtterance: ...
