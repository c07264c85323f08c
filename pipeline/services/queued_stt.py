"""The decode queue both streaming STT services share (pocketsphinx and the SSM recognizer).

Audio and the VAD's start/stop signals go into one queue, in arrival order; one task drains it,
joining consecutive audio into a single decode call, so the event loop never waits on a model.
The queue holds typed commands (:data:`Command`: ``AudioIn``, ``SpeechStarted``,
``SpeechStopped``, ``CloseQueue``). A subclass starts ``_decode_loop`` as ``self._worker`` in
``start()`` and writes ``_on_audio(bytes)``, ``_on_speech_started()`` and
``_on_speech_stopped(received_s)``; ``stop()`` finishes what is queued, then ``cancel()``
drops it, and both end with the subclass's ``_release()`` (its engine, its utterance); engine
errors listed in ``_decode_errors`` become ErrorFrames and the call goes on. The base also keeps
the last ``preroll_s`` of audio heard outside an utterance (``_keep_preroll``/``_take_preroll``:
the VAD fires after speech began) and pushes finals with their latency (``_push_final``).
The agent's ``RecognitionHintsFrame`` (upstream) stops here: ``self.hints`` holds the latest, for
the next utterance a subclass opens; a final pushed with a ``Recognition`` is followed by a
``RecognitionFrame`` carrying it (and the ``TranscriptionFrame``'s ``result`` is it too).
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import TypeAlias

from pipecat.frames.frames import (
    CancelFrame,
    EndFrame,
    ErrorFrame,
    Frame,
    TranscriptionFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.processors.frame_processor import FrameDirection
from pipecat.services.stt_service import STTService
from pipecat.transcriptions.language import Language
from pipecat.utils.time import time_now_iso8601

from pipeline.errors import PipelineError
from pipeline.frames import RecognitionFrame, RecognitionHintsFrame
from ssm_engine.stt.hints import NO_HINTS, Hints, Recognition

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class AudioIn:
    """Caller audio (16-bit PCM at the service's rate), in arrival order."""

    pcm: bytes


@dataclass(frozen=True, slots=True)
class SpeechStarted:
    """The VAD heard the caller start: open an utterance (with the preroll)."""


@dataclass(frozen=True, slots=True)
class SpeechStopped:
    """The VAD heard the caller stop: finish the utterance and push its final.

    ``received_s``: ``time.perf_counter()`` when the stop arrived (the final's latency is from it)."""

    received_s: float


@dataclass(frozen=True, slots=True)
class CloseQueue:
    """Nothing follows: the decode task ends once what came before is done."""


Command: TypeAlias = AudioIn | SpeechStarted | SpeechStopped | CloseQueue


class QueuedSTTService(STTService):
    _decode_errors: tuple[type[Exception], ...] = (PipelineError,)

    def __init__(self, *, preroll_s: float = 0.5, **kwargs) -> None:
        # the caller's audio stops here: nothing downstream uses it, and passing every 20 ms
        # frame through the aggregators, agent, voice and output (pipecat's default) cost ~6
        # frame hops per frame per call on the event loop
        kwargs.setdefault("audio_passthrough", False)
        super().__init__(**kwargs)
        self._preroll_s = preroll_s
        self._queue: asyncio.Queue[Command] = asyncio.Queue()
        self._worker: asyncio.Task | None = None
        self._preroll: collections.deque[bytes] = collections.deque()
        self._preroll_bytes = 0
        self.final_latencies_s: collections.deque[float] = collections.deque(maxlen=1000)
        """Seconds from receiving ``VADUserStoppedSpeakingFrame`` to pushing the transcript."""
        self.hints: Hints = NO_HINTS
        """What the agent last said to listen for (``RecognitionHintsFrame``)."""

    async def stop(self, frame: EndFrame) -> None:
        """Finish what is queued (an open utterance is finalized), release, then stop."""
        await self._drain()
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
        """What the subclass lets go once its decode task has ended (default: nothing)."""

    async def _drain(self) -> None:
        """Finish what is queued (an open utterance is finalized), then end the decode task."""
        if self._worker is not None:
            await self._queue.put(SpeechStopped(time.perf_counter()))
            await self._queue.put(CloseQueue())
            await self._worker
            self._worker = None

    def _keep_preroll(self, audio: bytes) -> None:
        self._preroll.append(audio)
        self._preroll_bytes += len(audio)
        limit = int(self._preroll_s * self.sample_rate) * 2
        while self._preroll and self._preroll_bytes - len(self._preroll[0]) >= limit:
            self._preroll_bytes -= len(self._preroll.popleft())

    def _take_preroll(self) -> bytes:
        preroll = b"".join(self._preroll)
        self._preroll.clear()
        self._preroll_bytes = 0
        return preroll

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
        await self._queue.put(AudioIn(audio))
        yield None

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        if isinstance(frame, RecognitionHintsFrame):
            self.hints = frame.hints          # for the recogniser only: it goes no further
            return
        await super().process_frame(frame, direction)
        if isinstance(frame, VADUserStartedSpeakingFrame):
            await self._queue.put(SpeechStarted())
        elif isinstance(frame, VADUserStoppedSpeakingFrame):
            await self._queue.put(SpeechStopped(time.perf_counter()))

    async def _decode_loop(self) -> None:
        """Apply queued commands in order; consecutive audio is decoded in one call."""
        while True:
            batch = [await self._queue.get()]
            while not self._queue.empty():
                batch.append(self._queue.get_nowait())
            for kind, group in itertools.groupby(batch, key=type):
                commands = list(group)
                if kind is CloseQueue:
                    return
                try:
                    if kind is AudioIn:
                        await self._on_audio(b"".join(c.pcm for c in commands
                                                      if isinstance(c, AudioIn)))
                        continue
                    for command in commands:
                        if isinstance(command, SpeechStarted):
                            await self._on_speech_started()
                        elif isinstance(command, SpeechStopped):
                            await self._on_speech_stopped(command.received_s)
                except self._decode_errors as exc:
                    await self.push_error_frame(ErrorFrame(error=f"{self}: {exc}", exception=exc))

    async def _on_audio(self, audio: bytes) -> None:
        raise NotImplementedError

    async def _on_speech_started(self) -> None:
        """Open an utterance, fed the preroll (``_take_preroll``), unless one is open."""
        raise NotImplementedError

    async def _on_speech_stopped(self, received_s: float) -> None:
        """Finish the open utterance, if any, and push its final (``_push_final``)."""
        raise NotImplementedError
