"""The one pipecat service every recogniser runs in: a ``TranscriptStream`` fed by the frames.

    stt = QueuedSTTService(backend=SphinxBackend(pool))   # or SSMSTTService(), WhisperSTTService()

Caller audio (``run_stt``) and the VAD's start and stop go into the stream as commands, in
arrival order (``pipeline.engines.transcripts``: its executor joins consecutive audio into one
decode call and keeps the pre-roll, so the event loop never waits on a model); one task iterates
the stream's events and pushes them: a ``Partial`` as an ``InterimTranscriptionFrame``, a
``Final`` as a ``TranscriptionFrame`` with ``finalized=True`` (its latency from the stop frame
kept in ``final_latencies_s``; with a ``Recognition``, a ``RecognitionFrame`` follows and the
transcript's ``result`` is it), a ``Failed`` as an ``ErrorFrame``, and the call goes on.
``stop()`` finishes what is queued (an open utterance is finalized), ``cancel()`` drops it; both
end with the stream closed, which lets the engine go. The agent's ``RecognitionHintsFrame``
(upstream) stops here: ``self.hints`` holds the latest, for the next utterance; so does the VAD's
``SpeechPauseFrame``, which goes into the stream as a pause (the final may begin there).
What differs between recognisers is the backend (``SSMSTTService``, ``SphinxSTTService`` and
``WhisperSTTService`` only choose one).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import AsyncGenerator

from pipecat.frames.frames import (
    CancelFrame,
    EndFrame,
    ErrorFrame,
    Frame,
    InterimTranscriptionFrame,
    StartFrame,
    TranscriptionFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.processors.frame_processor import FrameDirection
from pipecat.services.stt_service import STTService
from pipecat.transcriptions.language import Language
from pipecat.utils.time import time_now_iso8601

from pipeline.engines.transcripts import Failed, Final, Partial, RecognizerBackend, TranscriptStream
from pipeline.frames import RecognitionFrame, RecognitionHintsFrame, SpeechPauseFrame
from ssm_engine.stt.hints import NO_HINTS, Hints, Recognition

logger = logging.getLogger(__name__)


class QueuedSTTService(STTService):
    """A recogniser (``backend``) as a pipecat STT service (see the module docstring).

    preroll_s: audio kept before the VAD's start signal, fed at the start of each utterance.
    """

    def __init__(self, *, backend: RecognizerBackend, preroll_s: float = 0.5, **kwargs) -> None:
        # the caller's audio stops here: nothing downstream uses it, and passing every 20 ms
        # frame through the aggregators, agent, voice and output (pipecat's default) cost ~6
        # frame hops per frame per call on the event loop
        kwargs.setdefault("audio_passthrough", False)
        super().__init__(**kwargs)
        self.backend = backend
        self._preroll_s = preroll_s
        self._stream: TranscriptStream | None = None
        self._worker: asyncio.Task | None = None
        self.final_latencies_s: collections.deque[float] = collections.deque(maxlen=1000)
        """Seconds from receiving ``VADUserStoppedSpeakingFrame`` to pushing the transcript."""
        self.hints: Hints = NO_HINTS
        """What the agent last said to listen for (``RecognitionHintsFrame``)."""

    def can_generate_metrics(self) -> bool:
        return True

    async def start(self, frame: StartFrame) -> None:
        await super().start(frame)
        self._stream = TranscriptStream(self.backend, self.sample_rate, preroll_s=self._preroll_s)
        await self._stream.start()
        self._worker = self.create_task(self._read(self._stream), name=f"{self.name}_decode")

    async def stop(self, frame: EndFrame) -> None:
        """Finish what is queued (an open utterance is finalized), release, then stop."""
        if self._worker is not None and self._stream is not None:
            self._stream.end_input()
            await self._worker
            self._worker = None
        await self._release()
        await super().stop(frame)

    async def cancel(self, frame: CancelFrame) -> None:
        """Drop what is queued (the decode task is cancelled), release, then cancel."""
        if self._worker is not None:
            await self.cancel_task(self._worker)
            self._worker = None
        await self._release()
        await super().cancel(frame)

    async def _release(self) -> None:
        if self._stream is not None:
            await self._stream.aclose()

    async def _read(self, stream: TranscriptStream) -> None:
        async for event in stream:
            if isinstance(event, Partial):
                await self.push_frame(InterimTranscriptionFrame(
                    event.text, self._user_id, time_now_iso8601(), Language.EN))
            elif isinstance(event, Final):
                await self._push_final(event.text, event.received_s, event.recognition)
            elif isinstance(event, Failed):
                await self.push_error_frame(ErrorFrame(error=f"{self}: {event.error}",
                                                       exception=event.error))

    async def _push_final(self, text: str, stop_received: float,
                          recognition: Recognition | None = None) -> None:
        if text:
            await self.emit_stt_usage_metrics()
            frame = TranscriptionFrame(text, self._user_id, time_now_iso8601(), Language.EN,
                                       result=recognition)
            frame.finalized = True
            await self.push_frame(frame)
            if recognition is not None:
                await self.push_frame(RecognitionFrame(recognition))
        latency = time.perf_counter() - stop_received
        self.final_latencies_s.append(latency)
        logger.debug("%s final (%d chars) %.1f ms after end of speech", self, len(text),
                     latency * 1000)

    async def run_stt(self, audio: bytes) -> AsyncGenerator[Frame | None, None]:
        """Queue audio for the decode task; results are pushed from there."""
        if self._stream is not None:
            self._stream.push(audio)
        yield None

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        if isinstance(frame, RecognitionHintsFrame):
            self.hints = frame.hints          # for the recogniser only: it goes no further
            return
        if isinstance(frame, SpeechPauseFrame):   # the recogniser's too
            if self._stream is not None:
                self._stream.pause(frame.paused)
            return
        await super().process_frame(frame, direction)
        if self._stream is None:
            return
        if isinstance(frame, VADUserStartedSpeakingFrame):
            logger.debug("%s utterance starts, hints %s", self, sorted(self.hints.expect))
            self._stream.start_utterance(self.hints)
        elif isinstance(frame, VADUserStoppedSpeakingFrame):
            self._stream.flush(time.perf_counter())
