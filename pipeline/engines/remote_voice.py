"""The SSM voice on model servers (``parley model-server``), behind the in-process voice's interface.

    engine = RemoteVoiceEngine(Replicas.parse("ws://a:8080,ws://b:8080"))
    utt = engine.open(8000)
    async for chunk in utt.speak("Your order ships on Tuesday."):   # SpeechChunk, as in-process
        play(chunk.pcm)
    utt.cancel()                                                    # barge-in

``SSMTTSService(engine=RemoteVoiceEngine(...))`` speaks through it unchanged: the same chunks, word
timestamps (the server's, mapped back to the written words by the service) and barge-in.

One WebSocket per replica carries every utterance of the process, each its own Cartesia context
(``pipeline.model_wire``); a reader task routes the server's messages to their utterance, a writer
task sends, so ``cancel()`` may be called from anywhere on the loop.

**Failover with no lost word.** When the socket breaks (the replica died), the server reports a
failure of its own, or nothing comes for ``stall_timeout_s``, the utterance asks another replica
for the rest of its text, from the written chunk of the last word whose audio had started (that
word is said again from its start: a fragment of it is heard twice, no word is lost). The
timestamps of words already reported are not reported again. A replica that says ``goaway``
finishes the utterances it has; new ones go elsewhere.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import uuid
from collections.abc import AsyncGenerator
from typing import Any

import aiohttp
import numpy as np

from pipeline.engines.replicas import Replicas
from pipeline.engines.speaking import SpeechChunk
from pipeline.engines.written import WrittenWords
from pipeline.errors import AudioFormatError, EngineUnavailableError, PipelineError
from pipeline.model_wire import TTS_PATH
from ssm_engine import SSMEngineError

__all__ = ["RemoteVoiceEngine", "RemoteVoiceUtterance"]

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 2.0
STALL_TIMEOUT_S = 2.0


class _Connection:
    """One socket to one replica, shared by the utterances on it."""

    def __init__(self, url: str, session: aiohttp.ClientSession, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.url = url
        self._session = session
        self._ws = ws
        self.contexts: dict[str, asyncio.Queue[dict[str, Any] | None]] = {}
        self.draining = False
        self.lost = False
        self._outbox: asyncio.Queue[str | None] = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._read(), name=f"tts-read {self.url}"),
                       asyncio.create_task(self._write(), name=f"tts-write {self.url}")]

    @property
    def usable(self) -> bool:
        return not (self.lost or self.draining)

    def open_context(self, context_id: str) -> asyncio.Queue[dict[str, Any] | None]:
        q: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self.contexts[context_id] = q
        if self.lost:
            q.put_nowait(None)
        return q

    def drop_context(self, context_id: str) -> None:
        self.contexts.pop(context_id, None)
        if self.draining and not self.contexts:
            self.post(None)

    def post(self, text: str | None) -> None:
        """Queue a message (None: close the socket once what is queued is sent)."""
        if not self.lost:
            self._outbox.put_nowait(text)

    async def _write(self) -> None:
        try:
            while (text := await self._outbox.get()) is not None:
                await self._ws.send_str(text)
        except (aiohttp.ClientError, ConnectionError, RuntimeError) as exc:
            log.info("tts: sending to %s failed: %s", self.url, exc)
        finally:
            self.lost = True
            await self._ws.close()
            await self._session.close()   # each socket has its own session: it goes with it

    async def _read(self) -> None:
        try:
            async for msg in self._ws:
                if msg.type != aiohttp.WSMsgType.TEXT:
                    continue
                try:
                    event = json.loads(msg.data)
                except ValueError:
                    log.warning("tts: %s sent a message that is not JSON; ignored", self.url)
                    continue
                if event.get("type") == "goaway":
                    log.info("tts: %s is draining (%s); new utterances go to another replica", self.url,
                             event.get("reason"))
                    self.draining = True
                    if not self.contexts:
                        self.post(None)
                    continue
                q = self.contexts.get(event.get("context_id", ""))
                if q is not None:
                    q.put_nowait(event)
        except (aiohttp.ClientError, ConnectionError) as exc:
            log.info("tts: %s: %s", self.url, exc)
        finally:
            self.lost = True
            self._outbox.put_nowait(None)
            for q in self.contexts.values():
                q.put_nowait(None)

    async def close(self) -> None:
        self.post(None)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._ws.close()
        await self._session.close()


class RemoteVoiceEngine:
    """The voice of a set of model servers, for every call of the process (one event loop)."""

    voice_name = "the SSM voice"     # the speaking contract (pipeline.engines.speaking.Voice)
    errors: tuple[type[Exception], ...] = (SSMEngineError, PipelineError)
    written_words = False            # its words are the ones it spoke

    def __init__(self, replicas: Replicas, *, voice: str = "", connect_timeout_s: float = CONNECT_TIMEOUT_S,
                 stall_timeout_s: float = STALL_TIMEOUT_S) -> None:
        """``voice``: the model servers' voice id that speaks (a shipped voice's name, e.g. joe;
        "": each server's default voice)."""
        self.replicas = replicas
        self.voice = voice
        self.connect_timeout_s = connect_timeout_s
        self.stall_timeout_s = stall_timeout_s
        self._connections: dict[str, _Connection] = {}
        self._connecting = asyncio.Lock()
        self.failovers = 0

    _shared: dict[tuple[tuple[str, ...], str, int], RemoteVoiceEngine] = {}

    @classmethod
    def shared(cls, urls: tuple[str, ...], voice: str = "") -> RemoteVoiceEngine:
        """The engine for these model servers and voice on the running event loop (every call of
        the process shares it: one set of cool-downs, one socket per replica)."""
        key = (tuple(urls), voice, id(asyncio.get_running_loop()))
        engine = cls._shared.get(key)
        if engine is None:
            engine = cls._shared[key] = cls(Replicas(tuple(urls)), voice=voice)
        return engine

    def open(self, sample_rate_hz: int, *, seed: int = 0) -> RemoteVoiceUtterance:
        if sample_rate_hz <= 0:
            raise AudioFormatError(f"sample_rate_hz must be positive, got {sample_rate_hz}")
        return RemoteVoiceUtterance(self, sample_rate_hz)

    async def connection(self, avoid: str | None = None) -> _Connection:
        """An open socket to a replica (not ``avoid`` when another will do)."""
        async with self._connecting:
            tried: set[str] = set()
            while len(tried) < len(self.replicas.urls):
                url = self.replicas.pick(avoid)
                if url in tried:
                    url = next(u for u in self.replicas.urls if u not in tried)
                tried.add(url)
                conn = self._connections.get(url)
                if conn is not None and conn.usable:
                    return conn
                session = aiohttp.ClientSession()
                try:
                    async with asyncio.timeout(self.connect_timeout_s):
                        ws = await session.ws_connect(url + TTS_PATH, heartbeat=None, autoping=True)
                except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                    await session.close()
                    self.replicas.failed(url, f"cannot open a TTS stream: {exc or 'timed out'}")
                    continue
                conn = self._connections[url] = _Connection(url, session, ws)
                conn.start()
                return conn
        raise EngineUnavailableError(f"no model server answers for the voice ({', '.join(self.replicas.urls)})")

    async def close(self) -> None:
        for conn in list(self._connections.values()):
            await conn.close()
        self._connections.clear()


class RemoteVoiceUtterance:
    """One utterance of one call on the model tier (``VoiceUtterance``'s interface)."""

    def __init__(self, engine: RemoteVoiceEngine, sample_rate_hz: int) -> None:
        self._engine = engine
        self.sample_rate_hz = sample_rate_hz
        self._cancelled = False
        self._active: tuple[_Connection, str] | None = None

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def cancel(self) -> None:
        if self._cancelled:
            return
        self._cancelled = True
        if self._active is not None:
            conn, cid = self._active
            conn.post(json.dumps({"context_id": cid, "cancel": True}))
            conn.drop_context(cid)
            self._active = None

    def _request(self, cid: str, text: str) -> str:
        request = {"context_id": cid, "transcript": text, "continue": False, "add_timestamps": True,
                   "output_format": {"container": "raw", "encoding": "pcm_s16le", "sample_rate": self.sample_rate_hz}}
        if self._engine.voice:
            request["voice"] = {"mode": "id", "id": self._engine.voice}
        return json.dumps(request)

    async def speak(self, text: str) -> AsyncGenerator[SpeechChunk, None]:
        """Speak ``text``, yielding audio as it arrives; moves to another replica on failure."""
        rate = self.sample_rate_hz
        written = WrittenWords(text)
        rest, base_index = text, 0
        reported = 0                 # words whose start has been reported (queued for a chunk)
        yielded = 0                  # of those, the ones a yielded chunk carried
        made = 0                     # samples yielded
        avoid: str | None = None
        tries = 0
        finished = False
        try:
            while rest.strip() and not self._cancelled:
                conn = await self._engine.connection(avoid)
                cid = uuid.uuid4().hex
                events = conn.open_context(cid)
                self._active = (conn, cid)
                conn.post(self._request(cid, rest))
                base_s, index, words = made / rate, base_index, []
                why = ""
                while True:
                    try:
                        event = await asyncio.wait_for(events.get(), self._engine.stall_timeout_s)
                    except TimeoutError:
                        event, why = None, f"no audio for {self._engine.stall_timeout_s:.1f} s"
                    if event is None:
                        why = why or "the stream broke"
                        break
                    kind = event.get("type")
                    if kind == "timestamps":
                        stamps = event.get("word_timestamps") or {}
                        for word, start_s in zip(stamps.get("words", []), stamps.get("start", [])):
                            if index >= reported:
                                words.append((word, base_s + float(start_s)))
                                reported = index + 1
                            index += 1
                    elif kind == "chunk":
                        pcm = np.frombuffer(base64.b64decode(event["data"]), "<i2")
                        if pcm.size:
                            yield SpeechChunk(pcm, made / rate, tuple(words))
                            words = []
                            yielded = reported
                            made += pcm.size
                    elif kind == "done":
                        rest = ""
                        break
                    elif kind == "error":
                        status = int(event.get("status_code", 500))
                        if status < 500 and status != 429:     # ours: a request another replica refuses too
                            raise PipelineError(f"the model server refused a TTS request: {event.get('error')}")
                        why = f"the voice failed there: {event.get('error')}"
                        break
                conn.drop_context(cid)
                self._active = None
                if not rest or self._cancelled:
                    break
                tries += 1
                self._engine.failovers += 1
                self._engine.replicas.failed(conn.url, why)
                if tries >= 2 * len(self._engine.replicas.urls):
                    raise EngineUnavailableError(f"the voice failed on every model server: {why}")
                # the server stamps words just before the chunk they start in: words stamped
                # on a stream that broke before their chunk came were never heard or reported
                reported = yielded
                rest, base_index = written.rest_from(max(reported - 1, 0))
                avoid = conn.url
                log.info("tts: resuming an utterance on another replica from spoken word %d (%s)", base_index, why)
            finished = True
        finally:
            if not finished:
                self.cancel()

