"""The SSM recogniser on model servers (``parley model-server``), behind the in-process interface.

    engine = RemoteRecognizerEngine(Replicas.parse("ws://a:8080,ws://b:8080"))
    SSMSTTService(engine=engine)          # the service's VAD, hints and finals, unchanged

Each utterance is its own stream (``/stt/websocket?...&vad=off``: the service sends it from its
pre-roll on, then ``finalize``), opened when the caller starts speaking; its audio is sent as it
comes, interim transcripts come back as the server hears them, and the final answers the
``finalize``. The VAD's pauses (``pause``) go as ``{"type": "pause"}`` messages where they fell in
the audio, so the server begins the final when the stop timer starts, as the in-process
recogniser does.

**Failover with no lost word.** The utterance keeps its audio. When its stream breaks (the replica
died), is refused, or the final does not come within ``final_timeout_s``, it opens a stream on
another replica and sends all of it again (the recogniser's state is rebuilt by prefill: a few
milliseconds per second of speech), then ``finalize`` if it had been asked for. The final then
holds every word; its latency grows by the reconnect and the replay.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import logging
from typing import Any

import aiohttp
import numpy as np

from pipeline.engines.replicas import Replicas
from pipeline.errors import AudioFormatError, EngineUnavailableError
from pipeline.model_wire import STT_PATH, STT_RATES_HZ, parse_spotted
from ssm_engine.stt.hints import NO_HINTS, Hints, Recognition

__all__ = ["RemoteRecognizerEngine", "RemoteRecognizerUtterance"]

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 2.0
FINAL_TIMEOUT_S = 3.0
BATCH_BYTES = 32_000
"""Audio that waited (a replay, a slow connect) goes in messages of up to 1 s at 16 kHz: the
server takes 64 KB a message and refuses a client thousands of messages ahead."""


class RemoteRecognizerEngine:
    """The recogniser of a set of model servers, for every call of the process."""

    def __init__(self, replicas: Replicas, *, connect_timeout_s: float = CONNECT_TIMEOUT_S,
                 final_timeout_s: float = FINAL_TIMEOUT_S) -> None:
        self.replicas = replicas
        self.connect_timeout_s = connect_timeout_s
        self.final_timeout_s = final_timeout_s
        self.failovers = 0
        self._session: aiohttp.ClientSession | None = None

    _shared: dict[tuple[tuple[str, ...], int], RemoteRecognizerEngine] = {}

    @classmethod
    def shared(cls, urls: tuple[str, ...]) -> RemoteRecognizerEngine:
        """The engine for these model servers on the running event loop (every call of the
        process shares it: one set of cool-downs)."""
        key = (tuple(urls), id(asyncio.get_running_loop()))
        engine = cls._shared.get(key)
        if engine is None:
            engine = cls._shared[key] = cls(Replicas(tuple(urls)))
        return engine

    def open(self, sample_rate_hz: int, hints: Hints = NO_HINTS) -> RemoteRecognizerUtterance:
        if sample_rate_hz not in STT_RATES_HZ:
            raise AudioFormatError(f"sample_rate_hz={sample_rate_hz} not in {STT_RATES_HZ}")
        return RemoteRecognizerUtterance(self, sample_rate_hz, hints)

    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    def transcribe_url(self, url: str, sample_rate_hz: int) -> str:
        return f"{url}{STT_PATH}?encoding=pcm_s16le&sample_rate={sample_rate_hz}&vad=off"


class RemoteRecognizerUtterance:
    """One utterance of one call on the model tier (``RecognizerUtterance``'s interface)."""

    def __init__(self, engine: RemoteRecognizerEngine, sample_rate_hz: int, hints: Hints) -> None:
        self._engine = engine
        self._rate = sample_rate_hz
        self._hints = hints
        self._audio: list[bytes] = []          # all of it: replayed on another replica if need be
        self._pauses: list[tuple[int, bool]] = []   # (chunks of _audio before it, paused), in order
        self._wake = asyncio.Event()
        self._finishing = False
        self._final: asyncio.Future[Recognition] = asyncio.get_running_loop().create_future()
        self._heard = ""                         # the server's latest interim
        self._told = ""                          # the interim last handed to the service
        self._task: asyncio.Task[None] | None = None
        self.text = ""
        self.recognition: Recognition | None = None
        self.url: str | None = None              # the replica hearing it now

    # -- the service's side (RecognizerUtterance's interface) -----------------------------------------
    def push(self, pcm: bytes | np.ndarray) -> concurrent.futures.Future | None:
        """Send int16 audio. -> a done future holding a newer interim transcript, or None."""
        data = pcm if isinstance(pcm, (bytes, bytearray)) else np.asarray(pcm, "<i2").tobytes()
        if len(data) % 2:
            raise AudioFormatError(f"16-bit PCM needs an even byte count, got {len(data)}")
        self._audio.append(bytes(data))
        self._start()
        self._wake.set()
        if self._heard == self._told:
            return None
        self._told = self._heard
        fut: concurrent.futures.Future = concurrent.futures.Future()
        fut.set_result(self._told)
        return fut

    def pause(self, paused: bool) -> None:
        """The VAD's stop timer started (``paused``) or speech came again: told to the server
        after the audio pushed so far (and again, in place, to a replica replaying it)."""
        self._pauses.append((len(self._audio), paused))
        self._start()
        self._wake.set()

    def finish(self) -> list[Any]:
        """Ask for the final. -> one future, for ``take_async``."""
        self._finishing = True
        self._start()
        self._wake.set()
        return [self._final]

    async def take_async(self, fut: Any) -> bool:
        result = await (asyncio.wrap_future(fut) if isinstance(fut, concurrent.futures.Future) else fut)
        if isinstance(result, Recognition):
            self.recognition = result
            result = result.text
        changed = result != self.text
        self.text = result
        return changed

    def abort(self) -> None:
        if self._task is not None:
            self._task.cancel()
        if not self._final.done():
            self._final.cancel()

    # -- the stream -------------------------------------------------------------------------------------
    def _start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="remote-stt-utterance")

    async def _run(self) -> None:
        replicas = self._engine.replicas
        avoid: str | None = None
        why = ""
        for attempt in range(2 * len(replicas.urls)):
            url = self.url = replicas.pick(avoid)
            if attempt:
                self._engine.failovers += 1
                log.info("stt: replaying %.2f s of an utterance on %s (%s)",
                         sum(map(len, self._audio)) / 2 / self._rate, url, why)
            try:
                done = await self._stream(url)
            except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                done, why = False, f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            else:
                why = why if done else "the stream broke before the final"
            if done:
                return
            replicas.failed(url, why)
            avoid = url
        if not self._final.done():
            self._final.set_exception(EngineUnavailableError(f"the recogniser failed on every model server: {why}"))

    async def _stream(self, url: str) -> bool:
        """One try on one replica: True once the final is in."""
        session = self._engine.session()
        async with asyncio.timeout(self._engine.connect_timeout_s):
            ws = await session.ws_connect(self._engine.transcribe_url(url, self._rate), heartbeat=None)
        reader = asyncio.create_task(self._read(ws), name="remote-stt-read")
        try:
            if self._hints:
                await ws.send_str(json.dumps({"type": "hints", "expect": sorted(self._hints.expect),
                                              "phrases": list(self._hints.phrases),
                                              "keywords": list(self._hints.keywords)[:128]}))
            sent, told, finalized = 0, 0, False
            while not reader.done():
                while sent < len(self._audio) or told < len(self._pauses):
                    # what came meanwhile (a replay: all of it) in few messages, each pause in its place
                    if told < len(self._pauses) and self._pauses[told][0] <= sent:
                        await ws.send_str(json.dumps({"type": "pause", "paused": self._pauses[told][1]}))
                        told += 1
                        continue
                    upto = self._pauses[told][0] if told < len(self._pauses) else len(self._audio)
                    batch: list[bytes] = []
                    size = 0
                    while sent < upto and (not batch or size + len(self._audio[sent]) <= BATCH_BYTES):
                        batch.append(self._audio[sent])
                        size += len(self._audio[sent])
                        sent += 1
                    await ws.send_bytes(b"".join(batch))
                if self._finishing and not finalized:
                    await ws.send_str("finalize")
                    finalized = True
                self._wake.clear()
                waiter = asyncio.create_task(self._wake.wait())
                timeout = self._engine.final_timeout_s if finalized else None
                await asyncio.wait({reader, waiter}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
                waiter.cancel()
                if finalized and not reader.done() and not self._wake.is_set():
                    raise TimeoutError(f"no final within {self._engine.final_timeout_s:.1f} s")
            return reader.result()
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
            await ws.close()

    async def _read(self, ws: aiohttp.ClientWebSocketResponse) -> bool:
        """Interims into ``_heard``; True when the final came, False if the stream ended first."""
        async for msg in ws:
            if msg.type != aiohttp.WSMsgType.TEXT:
                continue
            try:
                event = json.loads(msg.data)
            except ValueError:
                log.warning("stt: a model server sent a message that is not JSON; ignored")
                continue
            kind = event.get("type")
            if kind == "transcript" and not event.get("is_final"):
                self._heard = event.get("text", "")
            elif kind == "transcript":
                if not self._final.done():
                    self._final.set_result(Recognition(event.get("text", ""), event.get("confidence"),
                                                      spotted=parse_spotted(event)))
                return True
            elif kind == "flush_done" and self._finishing:
                if not self._final.done():        # nothing was heard: an empty final
                    self._final.set_result(Recognition("", None))
                return True
            elif kind == "error":
                log.info("stt: %s", event.get("message"))
        return False
