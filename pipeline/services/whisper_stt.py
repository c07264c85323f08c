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

import asyncio
import functools
import logging

import numpy as np
from pipecat.services.settings import STTSettings
from pipecat.transcriptions.language import Language

from pipeline.engines.whisper import WhisperRecognizer
from pipeline.errors import EngineUnavailableError
from pipeline.services.queued_stt import QueuedSTTService

__all__ = ["WhisperSTTService", "shared_recognizer"]

logger = logging.getLogger(__name__)


@functools.lru_cache(maxsize=1)
def shared_recognizer() -> WhisperRecognizer:
    """One Whisper per process (calls are serialised by its lock)."""
    asr = WhisperRecognizer(beam_size=1)
    asr.load()
    return asr


class WhisperSTTService(QueuedSTTService):
    _decode_errors = (EngineUnavailableError,)

    def __init__(self, *, recognizer: WhisperRecognizer | None = None,
                 sample_rate: int | None = None, preroll_s: float = 0.5,
                 max_utterance_s: float = 28.0, ttfs_p99_latency: float = 1.5, **kwargs) -> None:
        super().__init__(sample_rate=sample_rate, ttfs_p99_latency=ttfs_p99_latency,
                         settings=STTSettings(model="whisper-tiny.en", language=Language.EN),
                         preroll_s=preroll_s, **kwargs)
        self._asr = recognizer
        self._max_s = max_utterance_s
        self._chunks: list[bytes] | None = None
        self._bytes = 0

    def can_generate_metrics(self) -> bool:
        return True

    async def start(self, frame) -> None:
        await super().start(frame)
        if self._asr is None:
            self._asr = await asyncio.to_thread(shared_recognizer)
        self._worker = self.create_task(self._decode_loop(), name="whisper_stt_decode")

    async def _release(self) -> None:
        self._chunks = None            # an utterance cut off by a cancel is dropped

    async def _on_audio(self, audio: bytes) -> None:
        if self._chunks is None:
            self._keep_preroll(audio)
            return
        self._chunks.append(audio)
        self._bytes += len(audio)
        limit = int(self._max_s * self.sample_rate) * 2
        while self._chunks and self._bytes - len(self._chunks[0]) >= limit:
            self._bytes -= len(self._chunks.pop(0))

    async def _on_speech_started(self) -> None:
        if self._chunks is None:
            preroll = self._take_preroll()
            self._chunks, self._bytes = ([preroll] if preroll else []), len(preroll)

    async def _on_speech_stopped(self, received_s: float) -> None:
        if self._chunks is not None:
            pcm = np.frombuffer(b"".join(self._chunks), dtype="<i2")
            self._chunks = None
            assert self._asr is not None
            text = (await asyncio.to_thread(self._asr.transcribe, pcm, self.sample_rate)
                    if pcm.size else "")
            await self._push_final(" ".join(text.split()), received_s)
