"""One STT stream of the model server: Cartesia's ``/stt/websocket`` over parley's SSM recogniser.

The client sends its caller's audio as it comes, silences included (pipecat's Cartesia service
does), and ``finalize`` when its VAD says the turn ended. parley's recogniser hears one utterance
at a time, from a little before the speech, so the stream gates it itself:

- between utterances the last ``PREROLL_S`` of audio is kept and each 20 ms frame goes through
  WebRTC's VAD (mode 0, the least likely to miss speech); when ``OPEN_VOICED`` of the last
  ``OPEN_WINDOW`` frames are voiced, an utterance opens with the kept audio;
- while it is open every frame is pushed; interim transcripts go out as the greedy text changes;
- ``{"type": "pause", "paused": true}`` (parley's client, when its VAD's stop timer starts) lets the
  open utterance begin its final, so the ``finalize`` that follows finds it decoded or under way;
  ``"paused": false`` (speech again) makes that one stale;
- ``finalize`` finishes it: the final transcript (the beam search with the turn's hints), then
  ``flush_done``. A ``finalize`` with no utterance open answers ``flush_done`` alone;
- with ``vad=off`` (parley's own client, which sends only utterances) the first audio after a
  final opens the next utterance;
- an utterance that runs ``MAX_UTTERANCE_S`` without a ``finalize`` is finalized here, so a client
  whose VAD never stops still gets its words.

Messages are handled in order by one task; the socket's reader only decodes and queues them. A
client that sends faster than the recogniser can follow (``MAX_QUEUED`` messages behind) is told so
and closed; its stream's words so far have been sent.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
import uuid

import numpy as np
import webrtcvad
from aiohttp import WSMsgType, web

from pipeline.audio.g711 import alaw_decode, ulaw_decode
from pipeline.errors import PipelineError, WireError
from pipeline.model_wire import (SttEnd, SttFinalize, SttHints, SttParams, SttPause, parse_stt_text, stt_done,
                                 stt_error, stt_flush_done, stt_transcript)
from pipeline.engines.ssm_recognizer import RecognizerUtterance, SSMSTTEngine
from ssm_engine import SSMEngineError
from ssm_engine.stt.hints import NO_HINTS, Hints

from .metrics import ModelServerMetrics

log = logging.getLogger(__name__)

FRAME_MS = 20
PREROLL_S = 0.5
OPEN_WINDOW, OPEN_VOICED = 4, 2
MAX_UTTERANCE_S = 30.0
MAX_QUEUED = 1000            # 20 s of 20 ms messages
MAX_AUDIO_MESSAGE_BYTES = 64 * 1024


def decode(data: bytes, encoding: str) -> np.ndarray:
    """Client audio -> int16 samples."""
    if encoding == "pcm_mulaw":
        return ulaw_decode(data)
    if encoding == "pcm_alaw":
        return alaw_decode(data)
    if len(data) % 2:
        raise WireError(f"pcm_s16le audio needs an even byte count, got {len(data)}")
    return np.frombuffer(data, "<i2")


class SttSession:
    """Serves one ``/stt/websocket`` socket until the client ends it (or the server does)."""

    def __init__(self, ws: web.WebSocketResponse, engine: SSMSTTEngine, params: SttParams,
                 metrics: ModelServerMetrics) -> None:
        self._ws = ws
        self._engine = engine
        self._params = params
        self._metrics = metrics
        self._rate = params.sample_rate_hz
        self._frame = self._rate * FRAME_MS // 1000
        self._vad = webrtcvad.Vad(0)
        self._kept: collections.deque[np.ndarray] = collections.deque(maxlen=round(PREROLL_S * 1000 / FRAME_MS))
        self._voiced: collections.deque[bool] = collections.deque(maxlen=OPEN_WINDOW)
        self._rest = np.zeros(0, np.int16)
        self._utt: RecognizerUtterance | None = None
        self._utt_samples = 0
        self._hints: Hints = NO_HINTS
        self._queue: asyncio.Queue[np.ndarray | SttFinalize | SttEnd | SttHints | SttPause | None] = asyncio.Queue()
        self.request_id = uuid.uuid4().hex
        self._finalize_at: collections.deque[float] = collections.deque()

    async def run(self) -> None:
        self._metrics.streams.labels("stt").inc()
        self._metrics.live.labels("stt").inc()
        worker = asyncio.create_task(self._work(), name="stt-stream")
        try:
            await self._read()
        finally:
            self._queue.put_nowait(None)
            try:
                await worker
            finally:
                self._metrics.live.labels("stt").dec()
                if self._utt is not None:
                    self._utt.abort()

    async def _read(self) -> None:
        async for msg in self._ws:
            if self._queue.qsize() >= MAX_QUEUED:
                log.info("stt: a client ran %d messages ahead of the recogniser; closing its stream", MAX_QUEUED)
                await self._send(stt_error(f"audio arrives faster than it can be recognised ({MAX_QUEUED} "
                                           f"messages behind): send it in real time", self.request_id))
                await self._ws.close(code=1008, message=b"flooded")
                return
            try:
                if msg.type == WSMsgType.BINARY:
                    if len(msg.data) > MAX_AUDIO_MESSAGE_BYTES:
                        raise WireError(f"an audio message of {len(msg.data)} bytes, over "
                                        f"{MAX_AUDIO_MESSAGE_BYTES}: send 20-100 ms at a time")
                    self._queue.put_nowait(decode(msg.data, self._params.encoding))
                elif msg.type == WSMsgType.TEXT:
                    item = parse_stt_text(msg.data)
                    if isinstance(item, SttFinalize):
                        self._finalize_at.append(time.perf_counter())
                    self._queue.put_nowait(item)
                    if isinstance(item, SttEnd):
                        return
            except WireError as exc:
                log.info("stt: refused a message: %s", exc)
                await self._send(stt_error(str(exc), self.request_id))

    async def _send(self, text: str) -> None:
        if not self._ws.closed:
            try:
                await self._ws.send_str(text)
            except ConnectionResetError:
                pass

    async def _work(self) -> None:
        try:
            while (item := await self._queue.get()) is not None:
                if isinstance(item, np.ndarray):
                    await self._audio(item)
                elif isinstance(item, SttFinalize):
                    await self._finalize(self._finalize_at.popleft())
                elif isinstance(item, SttPause):
                    await self._pause(item.paused)
                elif isinstance(item, SttHints):
                    try:
                        self._hints = Hints(expect=frozenset(item.expect), phrases=item.phrases,
                                            keywords=item.keywords)
                    except SSMEngineError as exc:
                        await self._send(stt_error(f"bad hints: {exc}", self.request_id))
                else:                                   # SttEnd: the final, then done
                    await self._finalize(time.perf_counter(), flush=False)
                    await self._send(stt_done(self.request_id))
                    await self._ws.close()
                    return
        except (SSMEngineError, PipelineError) as exc:
            log.warning("stt: the recogniser failed a stream: %s", exc)
            await self._send(stt_error(f"the recogniser failed: {exc}", self.request_id))
            await self._ws.close(code=1011, message=b"recogniser failed")

    async def _audio(self, pcm: np.ndarray) -> None:
        x = np.concatenate([self._rest, pcm]) if self._rest.size else pcm
        n = len(x) // self._frame * self._frame
        self._rest = x[n:].copy()
        if self._utt is None and not self._params.gate:
            self._open()
        if self._utt is not None:
            if n:
                await self._push(x[:n])
            return
        for i in range(0, n, self._frame):
            frame = x[i:i + self._frame]
            self._kept.append(frame)
            self._voiced.append(self._vad.is_speech(frame.tobytes(), self._rate))
            if sum(self._voiced) >= OPEN_VOICED:
                self._open()
                self._voiced.clear()
                kept = np.concatenate(list(self._kept))
                self._kept.clear()
                await self._push(np.concatenate([kept, x[i + self._frame:n]]))
                return

    def _open(self) -> None:
        self._utt = self._engine.open(self._rate, self._hints)
        self._utt_samples = 0

    async def _push(self, pcm: np.ndarray) -> None:
        assert self._utt is not None
        self._utt_samples += len(pcm)
        fut = self._utt.push(pcm)
        if fut is not None and await self._utt.take_async(fut) and self._utt.text:
            await self._send(stt_transcript(self._utt.text, is_final=False, request_id=self.request_id,
                                            duration_s=self._utt_samples / self._rate))
        if self._utt_samples > MAX_UTTERANCE_S * self._rate:
            log.info("stt: an utterance ran %.0f s without a finalize; finalizing it here", MAX_UTTERANCE_S)
            await self._finalize(time.perf_counter(), flush=False)

    async def _pause(self, paused: bool) -> None:
        """The client's VAD paused (or heard speech again) after the audio queued before it,
        the frame not yet whole included."""
        if self._utt is not None and self._rest.size:
            rest, self._rest = self._rest, np.zeros(0, np.int16)
            await self._push(rest)
        if self._utt is not None:
            self._utt.pause(paused)

    async def _finalize(self, asked_s: float, *, flush: bool = True) -> None:
        utt, self._utt = self._utt, None
        if utt is not None:
            rest, self._rest = self._rest, np.zeros(0, np.int16)
            if rest.size and (fut := utt.push(rest)) is not None:
                await utt.take_async(fut)
            for fut in utt.finish():
                await utt.take_async(fut)
            rec = utt.recognition
            await self._send(stt_transcript(utt.text, is_final=True, request_id=self.request_id,
                                            duration_s=self._utt_samples / self._rate,
                                            confidence=rec.confidence if rec is not None else None,
                                            spotted=rec.spotted if rec is not None else ()))
            self._metrics.final_ms.labels("stt").observe((time.perf_counter() - asked_s) * 1000)
            self._metrics.finals.labels("yes" if utt.early_final else "no").inc()
            self._hints = NO_HINTS                    # hints are for one turn
        if flush:
            await self._send(stt_flush_done(self.request_id))
