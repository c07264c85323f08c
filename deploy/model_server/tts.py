"""One TTS stream of the model server: Cartesia's ``/tts/websocket`` over parley's SSM voice.

A socket carries any number of contexts (one per reply) at once; each context speaks its
transcripts in order, one ``VoiceUtterance`` each, and sends its audio as it is made (20 ms chunks
or more, base64 in ``chunk`` messages), with word timestamps when asked. Every utterance of every
socket shares the process's engine of its voice (Cartesia's ``voice: {"mode": "id", "id"}``,
picked per context: the server's default voice, or joe, ...), whose thread steps them all
together.

Bad messages get an ``error`` (the context's, when it has one) and the socket goes on; a socket that
sends nothing but bad messages is closed after ``MAX_BAD_MESSAGES``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from aiohttp import WSMsgType, web

from pipeline.audio.g711 import alaw_encode, ulaw_encode
from pipeline.engines.ssm_voice import SSMVoiceEngine, SpeechChunk
from pipeline.errors import PipelineError, WireError
from pipeline.model_wire import (OutputFormat, TTSCancel, TTSGenerate, parse_tts_message, tts_chunk, tts_done,
                                 tts_error, tts_timestamps)
from ssm_engine import SSMEngineError

from .metrics import ModelServerMetrics

log = logging.getLogger(__name__)

MAX_CONTEXTS = 256
"""Contexts one socket may have open at once: a call has one or two (a reply, and the next), and
parley's call servers carry every call of the process on one socket per replica."""
MAX_QUEUED_TRANSCRIPTS = 64
MAX_BAD_MESSAGES = 20


def encode(pcm: np.ndarray, encoding: str) -> bytes:
    if encoding == "pcm_mulaw":
        return ulaw_encode(pcm)
    if encoding == "pcm_alaw":
        return alaw_encode(pcm)
    return pcm.astype("<i2", copy=False).tobytes()


@dataclass
class _Context:
    context_id: str
    fmt: OutputFormat
    timestamps: bool
    texts: asyncio.Queue[tuple[str, float] | None] = field(default_factory=asyncio.Queue)
    ended: bool = False            # its last transcript (continue: false) has arrived
    offset_s: float = 0.0          # audio sent so far, seconds
    task: asyncio.Task[None] | None = None
    voice: str = ""                # the voice id its first message named ("": the default)
    engine: SSMVoiceEngine | None = None


class TtsSession:
    """Serves one ``/tts/websocket`` socket until the client closes it (or the server ends)."""

    def __init__(self, ws: web.WebSocketResponse, voices: Callable[[str], SSMVoiceEngine],
                 metrics: ModelServerMetrics) -> None:
        """``voices``: voice id -> its engine ("" the default), WireError for one not served."""
        self._ws = ws
        self._voices = voices
        self._metrics = metrics
        self._contexts: dict[str, _Context] = {}
        self._send_lock = asyncio.Lock()
        self._bad = 0

    async def run(self) -> None:
        self._metrics.streams.labels("tts").inc()
        self._metrics.live.labels("tts").inc()
        try:
            async for msg in self._ws:
                if msg.type == WSMsgType.TEXT:
                    await self._on_text(msg.data)
                elif msg.type == WSMsgType.BINARY:
                    await self._refuse("", "binary messages are not part of the TTS API: send JSON text")
                if self._bad > MAX_BAD_MESSAGES:
                    log.info("tts: closing a socket after %d bad messages", self._bad)
                    await self._ws.close(code=1008, message=b"too many bad messages")
                    break
        finally:
            for ctx in list(self._contexts.values()):
                if ctx.task is not None:
                    ctx.task.cancel()
            tasks = [c.task for c in self._contexts.values() if c.task is not None]
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)
            self._contexts.clear()
            self._metrics.live.labels("tts").dec()

    async def _send(self, text: str) -> None:
        if self._ws.closed:
            return
        async with self._send_lock:
            with contextlib.suppress(ConnectionResetError):
                await self._ws.send_str(text)

    async def _refuse(self, context_id: str, why: str, status_code: int = 400) -> None:
        self._bad += status_code == 400
        log.info("tts: refused a message: %s", why)
        await self._send(tts_error(context_id, why, status_code))

    async def _on_text(self, raw: str) -> None:
        received_s = time.perf_counter()
        try:
            msg = parse_tts_message(raw)
        except WireError as exc:
            await self._refuse(_context_of(raw), str(exc))
            return
        if isinstance(msg, TTSCancel):
            ctx = self._contexts.pop(msg.context_id, None)
            if ctx is not None and ctx.task is not None:
                ctx.task.cancel()
            return
        await self._generate(msg, received_s)

    async def _generate(self, msg: TTSGenerate, received_s: float) -> None:
        ctx = self._contexts.get(msg.context_id)
        if ctx is None:
            if len(self._contexts) >= MAX_CONTEXTS:
                await self._refuse(msg.context_id, f"{MAX_CONTEXTS} contexts are open on this socket: "
                                                   f"finish or cancel one first", 429)
                return
            try:
                engine = self._voices(msg.voice)
            except WireError as exc:
                await self._refuse(msg.context_id, str(exc))
                return
            ctx = self._contexts[msg.context_id] = _Context(msg.context_id, msg.output_format, msg.add_timestamps,
                                                            voice=msg.voice, engine=engine)
            ctx.task = asyncio.create_task(self._speak(ctx), name=f"tts-context-{msg.context_id[:16]}")
        elif ctx.ended:
            await self._refuse(msg.context_id, "this context has ended (continue: false); use a new context_id")
            return
        elif msg.output_format != ctx.fmt:
            await self._refuse(msg.context_id, "output_format cannot change within a context")
            return
        elif msg.voice != ctx.voice:
            await self._refuse(msg.context_id, "the voice cannot change within a context")
            return
        if ctx.texts.qsize() >= MAX_QUEUED_TRANSCRIPTS:
            await self._refuse(msg.context_id, f"over {MAX_QUEUED_TRANSCRIPTS} transcripts waiting in "
                                               f"this context")
            return
        if msg.transcript.strip():
            ctx.texts.put_nowait((msg.transcript, received_s))
        if not msg.more:
            ctx.ended = True
            ctx.texts.put_nowait(None)

    async def _speak(self, ctx: _Context) -> None:
        """The context's transcripts, in order, then ``done``."""
        try:
            while (item := await ctx.texts.get()) is not None:
                text, received_s = item
                await self._utterance(ctx, text, received_s)
            await self._send(tts_done(ctx.context_id))
        except (SSMEngineError, PipelineError) as exc:
            log.warning("tts: context %s failed in the voice: %s", ctx.context_id[:16], exc)
            await self._send(tts_error(ctx.context_id, f"the voice failed: {exc}", 500))
        finally:
            if self._contexts.get(ctx.context_id) is ctx:
                del self._contexts[ctx.context_id]

    async def _utterance(self, ctx: _Context, text: str, received_s: float) -> None:
        rate = ctx.fmt.sample_rate_hz
        assert ctx.engine is not None
        utt = ctx.engine.open(rate)
        first = True
        samples = 0
        try:
            async with contextlib.aclosing(utt.speak(text)) as chunks:
                async for chunk in chunks:
                    t0 = time.perf_counter()
                    if ctx.timestamps and chunk.words:   # before the audio they start in
                        await self._send(tts_timestamps(ctx.context_id,
                                                        _word_times(chunk, ctx.offset_s, rate)))
                    await self._send(tts_chunk(ctx.context_id, encode(chunk.pcm, ctx.fmt.encoding),
                                               (t0 - received_s) * 1000))
                    if first:
                        self._metrics.ttfb_ms.labels("tts").observe((time.perf_counter() - received_s) * 1000)
                        first = False
                    samples += len(chunk.pcm)
                    received_s = t0
        finally:
            utt.cancel()
            ctx.offset_s += samples / rate


def _word_times(chunk: SpeechChunk, offset_s: float, rate: int) -> list[tuple[str, float, float]]:
    """The chunk's words as (word, start, end) in the context's audio: a word ends where the next
    one in the chunk starts, the last at the chunk's end (the voice reports starts only)."""
    end_s = chunk.start_s + len(chunk.pcm) / rate
    starts = [t for _, t in chunk.words]
    ends = [*starts[1:], end_s]
    return [(w, offset_s + s, offset_s + max(s, e)) for (w, s), e in zip(chunk.words, ends)]


def _context_of(raw: str) -> str:
    """The context id of a message that failed to parse, when it has a readable one."""
    try:
        cid = json.loads(raw).get("context_id", "")
    except (ValueError, AttributeError):
        return ""
    return cid if isinstance(cid, str) and len(cid) <= 256 else ""
