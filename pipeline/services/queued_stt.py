"""The decode queue both streaming STT services share (pocketsphinx and the SSM recognizer).

Audio and the VAD's start/stop signals go into one queue, in arrival order; one task drains it,
joining consecutive audio into a single decode call, so the event loop never waits on a model.
A subclass creates ``self._queue`` (an ``asyncio.Queue``), runs ``_decode_loop`` as a task, and
writes ``_on_audio(bytes)`` and ``_on_command(kind, arg)``; engine errors listed in
``_decode_errors`` become ErrorFrames and the call goes on.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncGenerator

from pipecat.frames.frames import ErrorFrame, Frame, VADUserStartedSpeakingFrame, VADUserStoppedSpeakingFrame
from pipecat.processors.frame_processor import FrameDirection
from pipecat.services.stt_service import STTService

from pipeline.errors import PipelineError

_AUDIO, _START, _STOP, _CLOSE = "audio", "start", "stop", "close"


class QueuedSTTService(STTService):
    _queue: asyncio.Queue
    _decode_errors: tuple[type[Exception], ...] = (PipelineError,)

    async def run_stt(self, audio: bytes) -> AsyncGenerator[Frame | None, None]:
        """Queue audio for the decode task; results are pushed from there."""
        await self._queue.put((_AUDIO, audio))
        yield None

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, VADUserStartedSpeakingFrame):
            await self._queue.put((_START, None))
        elif isinstance(frame, VADUserStoppedSpeakingFrame):
            await self._queue.put((_STOP, time.perf_counter()))

    async def _decode_loop(self) -> None:
        """Apply queued commands in order; consecutive audio is decoded in one call."""
        while True:
            batch = [await self._queue.get()]
            while not self._queue.empty():
                batch.append(self._queue.get_nowait())
            for kind, group in itertools.groupby(batch, key=lambda item: item[0]):
                args = [arg for _, arg in group]
                if kind == _CLOSE:
                    return
                try:
                    if kind == _AUDIO:
                        await self._on_audio(b"".join(args))
                    else:
                        for arg in args:
                            await self._on_command(kind, arg)
                except self._decode_errors as exc:
                    await self.push_error_frame(ErrorFrame(error=f"{self}: {exc}", exception=exc))

    async def _on_audio(self, audio: bytes) -> None:
        raise NotImplementedError

    async def _on_command(self, kind: str, arg: object) -> None:
        raise NotImplementedError
