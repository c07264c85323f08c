"""Whisper tiny.en as a pipecat STT service: accurate, not streaming (``--stt whisper``).

    stt = WhisperSTTService()       # one shared WhisperRecognizer per process, loaded at start

The same contract as the other recognisers (``QueuedSTTService``): the VAD's start opens an
utterance with the pre-roll, its stop ends it and the final ``TranscriptionFrame`` follows
(``finalized=True``). In between the audio is only kept: Whisper reads the whole utterance after
its end, on a worker thread (never on the event loop), so the final comes ~0.5-1 s after the
caller stops (``final_latencies_s``) and there are no partials. Its finals carry no confidence.

This is the accuracy upper bound in live calls (``benchmarks/bench_conversations.py`` runs the
same calls with it and with parley's streaming SSM recogniser), and a choice for deployments
that put understanding before speed. An utterance longer than ``max_utterance_s`` keeps only its
last ``max_utterance_s`` seconds (Whisper reads 30 s at most).
"""

from __future__ import annotations

from pipecat.services.settings import STTSettings
from pipecat.transcriptions.language import Language

from pipeline.engines.whisper import WhisperBackend, WhisperRecognizer
from pipeline.services.queued_stt import QueuedSTTService

__all__ = ["WhisperSTTService"]


class WhisperSTTService(QueuedSTTService):
    """``QueuedSTTService`` on a ``WhisperBackend`` (one shared Whisper per process unless
    ``recognizer`` is given)."""

    def __init__(self, *, recognizer: WhisperRecognizer | None = None,
                 sample_rate: int | None = None, preroll_s: float = 0.5,
                 max_utterance_s: float = 28.0, ttfs_p99_latency: float = 1.5, **kwargs) -> None:
        super().__init__(backend=WhisperBackend(recognizer, max_utterance_s),
                         sample_rate=sample_rate, ttfs_p99_latency=ttfs_p99_latency,
                         settings=STTSettings(model="whisper-tiny.en", language=Language.EN),
                         preroll_s=preroll_s, **kwargs)
