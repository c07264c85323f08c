"""parley's own streaming SSM recogniser as a pipecat STT service, finalized by the VAD.

    stt = SSMSTTService()                 # models/stt, rate from the pipeline (8 or 16 kHz)
    Pipeline([transport.input(), VADProcessor(vad_analyzer=...), stt, user_aggregator, ...])

Same contract as ``SphinxSTTService`` (read its docstring): between utterances the last
``preroll_s`` of audio is kept; ``VADUserStartedSpeakingFrame`` opens an utterance with that
pre-roll; ``InterimTranscriptionFrame``s follow as the greedy transcript grows;
``VADUserStoppedSpeakingFrame`` feeds ``flush_s`` (0.1 s) of silence (the CTC model emits its
last characters 100-200 ms late; the VAD has already waited ``stop_secs`` of silence, which the
model has seen, so a short flush suffices), pushes the final ``TranscriptionFrame`` with
``finalized=True`` and records the time from the stop signal in ``final_latencies_s``.

The engine (``pipeline.engines.ssm_recognizer.SSMSTTEngine``, in process, or the model tier's
``RemoteRecognizerEngine``) does the stepping and decoding; its docstring says how. When the
engine's worker process dies mid-utterance, the service waits for the replacement and replays
the utterance into it: the caller's words are heard whole, one line is logged, and no error
reaches the pipeline.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from pathlib import Path

from pipecat.frames.frames import (
    InterimTranscriptionFrame,
    StartFrame,
)
from pipecat.services.settings import STTSettings
from pipecat.transcriptions.language import Language
from pipecat.utils.time import time_now_iso8601

from pipeline.engines.remote_recognizer import RemoteRecognizerEngine, RemoteRecognizerUtterance
from pipeline.engines.ssm_recognizer import (
    DEFAULT_COMPILE,
    DEFAULT_DECODER,
    DEFAULT_MODEL_DIR,
    SUPPORTED_RATES_HZ,
    Decoder,
    RecognizerUtterance,
    Runner,
    SSMSTTEngine,
)
from pipeline.errors import AudioFormatError, PipelineError
from pipeline.services.queued_stt import QueuedSTTService
from ssm_engine import SSMEngineError

__all__ = ["SSMSTTService"]

logger = logging.getLogger(__name__)


class SSMSTTService(QueuedSTTService):
    _decode_errors = (PipelineError, SSMEngineError)

    """Streaming SSM recogniser for pipecat (see module docstring).

    engine: an SSMSTTEngine, or a RemoteRecognizerEngine (the model tier) (default: ``SSMSTTEngine.shared(model_dir, decoder, compile=compile,
        runner=runner)``, loaded at start); decoder: how finals are decoded, "beam" (lexicon +
        LM), "greedy" or a baseline ("char-beam", "phone-beam", see ``Decoder``; default
        ``DEFAULT_DECODER``); compile, runner: the shared engine's (``SSMSTTEngine``).
    sample_rate: input rate; None takes the pipeline's ``audio_in_sample_rate``.
    preroll_s: audio kept before the VAD's start signal, fed at the start of each utterance.
    """

    def __init__(self, *, engine: SSMSTTEngine | RemoteRecognizerEngine | None = None,
                 model_dir: str | Path = DEFAULT_MODEL_DIR, decoder: Decoder | None = None,
                 compile: bool = DEFAULT_COMPILE, runner: Runner = "thread",
                 sample_rate: int | None = None,
                 preroll_s: float = 0.5, ttfs_p99_latency: float = 0.1, **kwargs) -> None:
        super().__init__(sample_rate=sample_rate, ttfs_p99_latency=ttfs_p99_latency,
                         settings=STTSettings(model="parley-ssm-stt", language=Language.EN),
                         preroll_s=preroll_s, **kwargs)
        self._engine = engine
        self._model_dir = model_dir
        self._decoder: Decoder = decoder or DEFAULT_DECODER
        self._compile = compile
        self._runner: Runner = runner
        self._utt: RecognizerUtterance | RemoteRecognizerUtterance | None = None

    def can_generate_metrics(self) -> bool:
        return True

    async def start(self, frame: StartFrame) -> None:
        await super().start(frame)
        if self.sample_rate not in SUPPORTED_RATES_HZ:
            raise AudioFormatError(f"SSMSTTService: sample rate {self.sample_rate} not in "
                                   f"{SUPPORTED_RATES_HZ}")
        if self._engine is None:
            self._engine = await asyncio.to_thread(functools.partial(
                SSMSTTEngine.shared, self._model_dir, self._decoder, compile=self._compile,
                runner=self._runner))
        self._worker = self.create_task(self._decode_loop(), name="ssm_stt_decode")

    async def _release(self) -> None:
        if self._utt is not None:      # cancelled mid-utterance (stop finalizes it first)
            self._utt.abort()
            self._utt = None

    async def _on_audio(self, audio: bytes) -> None:
        if self._utt is None:
            self._keep_preroll(audio)
            return
        await self._feed(audio)

    async def _feed(self, audio: bytes) -> None:
        assert self._utt is not None
        try:
            fut = self._utt.push(audio)
            changed = fut is not None and await self._utt.take_async(fut)
        except SSMEngineError:
            if await self._recovered(self._utt):
                return
            self._drop_utterance()  # its stream is gone (the runner failed): one error, not one
            raise                   # per chunk; the next utterance opens a fresh stream
        if changed:
            await self.push_frame(InterimTranscriptionFrame(
                self._utt.text, self._user_id, time_now_iso8601(), Language.EN))

    async def _recovered(self, utt: RecognizerUtterance | RemoteRecognizerUtterance | None) -> bool:
        """After the runner lost the utterance's stream: replay it onto the restarted runner.
        True when it was (the caller's words so far are not lost)."""
        if not isinstance(utt, RecognizerUtterance):
            return False
        try:
            seconds = await utt.recover()
        except SSMEngineError as exc:
            logger.warning("STT: the recogniser's stream was lost and could not be replayed: %s", exc)
            return False
        logger.warning("STT: the recogniser restarted; the utterance so far (%.1f s) was replayed into it",
                       seconds)
        return True

    def _drop_utterance(self) -> None:
        utt, self._utt = self._utt, None
        if utt is not None:
            try:
                utt.abort()
            except SSMEngineError:
                pass  # the runner forgot the stream already

    async def _on_speech_started(self) -> None:
        assert self._engine is not None
        if self._utt is None:
            preroll = self._take_preroll()
            self._utt = self._engine.open(self.sample_rate, self.hints)
            if preroll:
                await self._feed(preroll)

    async def _on_speech_stopped(self, received_s: float) -> None:
        if self._utt is not None:
            utt, self._utt = self._utt, None
            try:
                for fut in utt.finish():
                    await utt.take_async(fut)
            except SSMEngineError:
                if not await self._recovered(utt):
                    if utt.text:  # what was heard before the runner failed is kept
                        await self._push_final(utt.text, received_s)
                    raise
                for fut in utt.finish():    # the replayed utterance, finished again
                    await utt.take_async(fut)
            await self._push_final(utt.text, received_s, utt.recognition)
