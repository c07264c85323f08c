"""pocketsphinx as a streaming pipecat STT service, finalized by the VAD's end of speech.

    stt = SphinxSTTService()                     # rate from the pipeline (8 kHz for phone calls)
    Pipeline([transport.input(), VADProcessor(vad_analyzer=...), stt, user_aggregator, ...])

How it follows the user's speech:

* Audio is decoded as it arrives, on one worker thread that owns the ``SphinxEngine``; the event
  loop only queues it, so audio passes through this service without waiting on the decoder.
* The engine is taken from a pool (``pipeline.engines.sphinx.default_pool()`` unless one is
  given: in-process, or worker processes under ``parley serve``) in ``start()`` and handed back
  on the same worker thread in ``stop()``/``cancel()``, after the decode work already queued
  there, so it is never in two calls at once. Building an engine takes ~0.4 s; prewarm the pool
  at server start so a new call never builds one.
* If the engine's worker process dies, the error is pushed as an ``ErrorFrame``, the utterance
  in progress is lost, and the call goes on with a fresh engine (the pool starts a new worker).
* Between utterances the last ``preroll_s`` of audio is kept, not decoded. pipecat's VAD reports
  a start ``start_secs`` after speech began, so on ``VADUserStartedSpeakingFrame`` the utterance
  starts with that pre-roll, and ``InterimTranscriptionFrame``s follow as partials change.
* ``VADUserStoppedSpeakingFrame`` is pipecat 1.14's "the user stopped speaking" signal to STT
  services (Deepgram finalizes on it too). It reaches this service from an upstream
  ``VADProcessor`` (downstream copy) or from the user aggregator's own VAD (the upstream copy
  of its broadcast). The utterance is ended at once and the final ``TranscriptionFrame`` is
  pushed with ``finalized=True``, which lets the turn-stop strategies end the turn without
  waiting out their STT timeout. The time from receiving that frame to pushing the transcript
  is kept in ``final_latencies_s``.

Without VAD frames in the pipeline nothing is ever transcribed.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor

from pipecat.frames.frames import (
    ErrorFrame,
    InterimTranscriptionFrame,
    StartFrame,
)
from pipecat.services.settings import STTSettings
from pipecat.transcriptions.language import Language
from pipecat.utils.time import time_now_iso8601

from pipeline.engines.sphinx import SphinxEngine, SphinxPool, default_pool
from pipeline.errors import EngineUnavailableError
from pipeline.services.queued_stt import QueuedSTTService

logger = logging.getLogger(__name__)

# Commands for the decode worker, in arrival order.


class SphinxSTTService(QueuedSTTService):
    """Streaming pocketsphinx recognizer (en-us) for pipecat.

    sample_rate: input rate; None takes the pipeline's ``audio_in_sample_rate``.
    preroll_s: audio kept before the VAD's start signal, fed at the start of each utterance.
    partial_every_ms: audio between two partial hypotheses.
    ttfs_p99_latency: end of speech to final transcript, p99, announced to turn strategies.
    pool: where engines come from and go back to (``SphinxPool`` or ``SphinxProcessPool``);
        None means ``default_pool()``.
    """

    def __init__(
        self,
        *,
        sample_rate: int | None = None,
        preroll_s: float = 0.5,
        partial_every_ms: int = 100,
        ttfs_p99_latency: float = 0.15,
        pool: SphinxPool | None = None,
        **kwargs,
    ) -> None:
        super().__init__(
            sample_rate=sample_rate,
            ttfs_p99_latency=ttfs_p99_latency,
            settings=STTSettings(model="pocketsphinx-en-us", language=Language.EN),
            preroll_s=preroll_s,
            **kwargs,
        )
        self._partial_every_ms = partial_every_ms
        self._pool = pool if pool is not None else default_pool()
        self._engine: SphinxEngine | None = None
        self._executor: ThreadPoolExecutor | None = None

    def can_generate_metrics(self) -> bool:
        return True

    async def start(self, frame: StartFrame) -> None:
        await super().start(frame)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sphinx-stt")
        loop = asyncio.get_running_loop()
        self._engine = await loop.run_in_executor(
            self._executor, self._pool.acquire, self.sample_rate, self._partial_every_ms
        )
        self._worker = self.create_task(self._decode_loop(), name="sphinx_decode")

    async def _release(self) -> None:
        """Hand the engine back after the work already queued on its thread, then shut that down.

        Shielded: if this await is cancelled, the release still runs (``shutdown(wait=False)``
        lets queued work finish), so the engine goes back to the pool all the same."""
        engine, self._engine = self._engine, None
        executor, self._executor = self._executor, None
        if executor is None:
            return
        released = executor.submit(self._pool.release, engine) if engine is not None else None
        executor.shutdown(wait=False)
        if released is not None:
            await asyncio.shield(asyncio.wrap_future(released))

    async def _on_audio(self, audio: bytes) -> None:
        engine = self._engine
        if engine is None:  # lost, and no replacement could be had: nothing to decode with
            return
        if not engine.in_utterance:
            self._keep_preroll(audio)
            return
        loop = asyncio.get_running_loop()
        try:
            partial = await loop.run_in_executor(self._executor, engine.feed, audio)
        except EngineUnavailableError:
            await self._replace_engine()
            raise
        if partial:
            await self.push_frame(
                InterimTranscriptionFrame(partial, self._user_id, time_now_iso8601(), Language.EN)
            )

    async def _on_speech_started(self) -> None:
        engine = self._engine
        if engine is None or engine.in_utterance:
            return
        loop = asyncio.get_running_loop()
        preroll = self._take_preroll()
        try:
            await loop.run_in_executor(self._executor, self._start_with, engine, preroll)
        except EngineUnavailableError as exc:
            # the worker died between utterances, so nothing is lost yet: report it and start
            # this utterance on a fresh engine
            await self._replace_engine()
            await self.push_error_frame(ErrorFrame(error=f"{self}: {exc}", exception=exc))
            if self._engine is not None:
                try:
                    await loop.run_in_executor(self._executor, self._start_with, self._engine, preroll)
                except EngineUnavailableError:
                    await self._replace_engine()
                    raise

    async def _on_speech_stopped(self, received_s: float) -> None:
        engine = self._engine
        if engine is None or not engine.in_utterance:
            return
        loop = asyncio.get_running_loop()
        try:
            text = await loop.run_in_executor(self._executor, engine.end_utt)
        except EngineUnavailableError:
            await self._replace_engine()
            raise
        await self._push_final(text, received_s)

    async def _replace_engine(self) -> None:
        """The engine's worker failed: drop it and take a fresh engine, so the call goes on
        (the utterance in progress is lost). If none can be had, the call goes on unheard."""
        broken, self._engine = self._engine, None
        loop = asyncio.get_running_loop()
        if broken is not None:
            await loop.run_in_executor(self._executor, self._pool.release, broken)
        try:
            self._engine = await loop.run_in_executor(
                self._executor, self._pool.acquire, self.sample_rate, self._partial_every_ms)
        except EngineUnavailableError:
            logger.error("%s: no pocketsphinx engine to replace the failed one; the rest of this "
                         "call is not transcribed", self, exc_info=True)
            return
        logger.warning("%s: the pocketsphinx engine failed; went on with a fresh one", self)

    @staticmethod
    def _start_with(engine: SphinxEngine, preroll: bytes) -> None:
        engine.start_utt()
        engine.feed(preroll)
