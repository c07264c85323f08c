"""parley's model server: both speech models for many streams, on SageMaker's container contract
and Cartesia's WebSocket API.

    GET  /ping                                 200 once warm (and a probe of both engines passes),
                                               503 while warming, draining or failed
    GET  /metrics                              Prometheus (``metrics.py``)
    POST /invocations                          one TTS request (JSON) -> NDJSON events, as
                                               Cartesia's Marketplace container answers
    GET  /tts/websocket, /stt/websocket        Cartesia's streaming APIs (``pipeline.model_wire``)
    GET  /invocations-bidirectional-stream     SageMaker's bidirectional path: the stream goes to
                                               the path in ``X-Amzn-SageMaker-Model-Invocation-Path``
                                               (``tts/websocket`` or ``stt/websocket``, a query
                                               there or in ``X-Amzn-SageMaker-Model-Query-String``)

Life: the socket listens at once (SageMaker wants a connection within 250 ms) and ``/ping`` says
503 while the models load and one real inference runs through each (a sentence spoken, then
recognised); only then 200. ``drain()`` (SIGTERM) turns ``/ping`` to 503, refuses new streams,
tells every live stream to move (``goaway``) and serves them until they leave or ``grace_s`` ends
(SageMaker sends SIGKILL 30 s after SIGTERM).

Every stream of the process shares one voice engine and one recogniser engine, each a thread
that steps all of its live streams in one batched step.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import numpy as np
from aiohttp import web

from pipeline.errors import PipelineError, WireError
from pipeline.model_wire import (STT_PATH, TTS_PATH, SttParams, TTSGenerate, goaway, parse_tts_message, tts_chunk,
                                 tts_done, tts_error)
from ssm_engine import SSMEngineError
from ssm_engine.device import describe_device, resolve_device

from .metrics import EngineStats, ModelServerMetrics
from .stt import SttSession
from .tts import TtsSession, encode

log = logging.getLogger(__name__)

BIDI_PATH = "/invocations-bidirectional-stream"
PATH_HEADER = "X-Amzn-SageMaker-Model-Invocation-Path"
QUERY_HEADER = "X-Amzn-SageMaker-Model-Query-String"
SAGEMAKER_MODEL_DIR = Path("/opt/ml/model")
REPO_MODEL_DIR = Path(__file__).resolve().parents[2] / "models"
WARM_TEXT = "Hello, you are through to parley. How can I help you today?"
PROBE_TTL_S = 5.0
PROBE_TIMEOUT_S = 1.5        # SageMaker wants /ping answered within 2 s


class State(enum.Enum):
    WARMING = "warming"
    READY = "ready"
    DRAINING = "draining"
    FAILED = "failed"


def default_model_dir() -> Path:
    """``/opt/ml/model`` (where SageMaker puts model data) when it holds the models, else the
    repository's ``models/``."""
    return SAGEMAKER_MODEL_DIR if (SAGEMAKER_MODEL_DIR / "tts").is_dir() else REPO_MODEL_DIR


@dataclass(frozen=True)
class ModelServerConfig:
    host: str = "0.0.0.0"
    port: int = 8080
    model_dir: Path = REPO_MODEL_DIR     # holds stt/ and tts/, as models/ does
    grace_s: float = 25.0
    max_streams: int = 256
    stt_compile: bool = False
    tts_compile: bool = False            # each voice's lone-stream steps (TTSVoice.compile_steps)
    device: str = "cpu"                  # cpu, cuda[:N] or auto (resolve_device); the CLI says auto

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise PipelineError(f"port must be 0-65535, got {self.port}")
        if not 0 <= self.grace_s <= 3600:
            raise PipelineError(f"grace_s must be 0-3600 s, got {self.grace_s}")
        if self.max_streams < 1:
            raise PipelineError(f"max_streams must be >= 1, got {self.max_streams}")
        try:
            resolve_device(self.device)
        except SSMEngineError as exc:
            raise PipelineError(str(exc)) from None


async def _compiled_or_eager(make, *, compile: bool, what: str, flag: str, cold_s: int):
    """``make(True)`` (compiled) when ``compile``, off the event loop; if compiling is what failed
    (no C++ compiler, say) one warning and ``make(False)``: an engine that runs eagerly (about
    1.5-2x the CPU a stream) rather than none. Any other failure propagates."""
    from pipeline.errors import EngineUnavailableError

    if compile:
        log.info("compiling %s (about %d s at the first start; %s skips it)", what, cold_s, flag)
        try:
            return await asyncio.to_thread(make, True)
        except EngineUnavailableError as exc:
            if "compil" not in str(exc):
                raise
            log.warning("%s: the compiled form is unavailable (%s); running eagerly", what, exc)
    return await asyncio.to_thread(make, False)


class ModelServer:
    def __init__(self, config: ModelServerConfig, *, voice=None, recogniser=None,
                 voices: dict[str, Any] | None = None) -> None:
        """``voice``/``recogniser``: engines already loaded (tests), and ``voices`` more voices
        by name; else ``warm()`` loads them from ``config.model_dir`` (``tts-joe/`` is the default
        voice joe, ``tts/`` the voice slt: ``pipeline.voices.voices_in``)."""
        self.config = config
        self.device = resolve_device(config.device)   # checked by the config already
        self.metrics = ModelServerMetrics()
        self.state = State.WARMING
        self.voice = voice                        # the default voice: a request that names none
        self.default_voice = "default"            # its name (warm() reads it from the folder)
        self.voices: dict[str, Any] = dict(voices or {})   # the other voices, by name
        self.recogniser = recogniser
        self._owned: list[object] = []            # engines warm() loaded: stop() closes them
        self.warm_report: dict[str, object] = {}
        self._streams: set[web.WebSocketResponse] = set()
        self._left = asyncio.Event()
        self._probe_ok_at = 0.0
        self._probe_lock = asyncio.Lock()
        self._runner: web.AppRunner | None = None
        self.port = 0
        self.app = web.Application(client_max_size=256 * 1024)
        self.app.add_routes([
            web.get("/ping", self._ping),
            web.get("/metrics", self._metrics_page),
            web.post("/invocations", self._invocations),
            web.get(TTS_PATH, self._tts_ws),
            web.get(STT_PATH, self._stt_ws),
            web.get(BIDI_PATH, self._bidi),
        ])

    # -- life -------------------------------------------------------------------------------------
    async def start(self) -> None:
        """Listen now (``/ping`` says 503 until ``warm()`` has finished)."""
        self._runner = web.AppRunner(self.app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.config.host, self.config.port)
        await site.start()
        server = site._server
        assert server is not None and server.sockets  # type: ignore[attr-defined]
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
        log.info("parley model server listening on http://%s:%d (warming)", self.config.host, self.port)

    async def warm(self) -> None:
        """Load the engines (unless given), run one real inference through each, then ready."""
        t0 = time.perf_counter()
        try:
            await self._load_voices()
            if self.recogniser is None:
                self.recogniser = await self._load_recogniser()
                self._owned.append(self.recogniser)
            speech, first_ms = await self._speak_once(WARM_TEXT)
            for name, engine in self.voices.items():      # a real inference through each voice
                await self._speak_once(WARM_TEXT, voice=engine, first_only=True)
                log.info("voice %s ready", name)
            t1 = time.perf_counter()
            heard = await self._recognise_once(speech)
            self.warm_report = {"device": describe_device(self.device),
                                "voices": [self.default_voice, *self.voices],
                                "load_and_warm_s": round(time.perf_counter() - t0, 2),
                                "tts_first_audio_ms": round(first_ms, 1),
                                "stt_ms": round((time.perf_counter() - t1) * 1000, 1), "heard": heard}
        except (PipelineError, SSMEngineError, OSError) as exc:
            self.state = State.FAILED
            log.error("model server failed to warm up: %s", exc)
            raise
        self._register_engine_metrics()
        if self.state is State.WARMING:
            self.state = State.READY
            self.metrics.ready.set(1)
        self._probe_ok_at = time.monotonic()
        log.info("model server ready: %s", json.dumps(self.warm_report))

    async def _load_voices(self) -> None:
        """The default voice unless given (``pipeline.voices.DEFAULT_VOICE``'s folder, joe's
        ``tts-joe/``; where the folder lacks it, the first shipped voice it holds, else ``tts/``
        as "default"), then every other shipped voice the model folder holds that was not given."""
        from pipeline.voices import voices_in

        found = voices_in(self.config.model_dir)   # the default voice first
        default, folder = next(iter(found.items()), ("default", self.config.model_dir / "tts"))
        if self.voice is None:
            self.voice = await self._load_voice(folder)
            self._owned.append(self.voice)
            self.default_voice = default
        for name, folder in found.items():
            if name != default and name not in self.voices:
                self.voices[name] = await self._load_voice(folder)
                self._owned.append(self.voices[name])

    async def _load_voice(self, folder: Path):
        """A voice, its lone-stream steps compiled when asked, on a CPU, and possible."""
        from pipeline.engines.ssm_voice import SSMVoiceEngine

        return await _compiled_or_eager(
            lambda compiled: SSMVoiceEngine(folder, device=str(self.device), compile=compiled),
            compile=self.config.tts_compile and self.device.type == "cpu",
            what=f"the voice {folder.name}'s steps", flag="--no-tts-compile", cold_s=20)

    def voice_for(self, name: str):
        """The engine of voice ``name`` ("" or "default": the default voice); WireError, naming
        the voices served, for any other."""
        if name in ("", "default", self.default_voice):
            return self.voice
        if name not in self.voices:
            ids = [self.default_voice, *self.voices] + ([] if self.default_voice == "default" else ["default"])
            raise WireError(f"voice {name!r:.40} is not served here: voice ids are {', '.join(ids)}")
        return self.voices[name]

    async def _load_recogniser(self):
        """The recogniser, its step compiled when asked, on a CPU (on a GPU the eager step is
        fast enough), and possible."""
        from pipeline.engines.ssm_recognizer import SSMSTTEngine

        folder = self.config.model_dir / "stt"
        return await _compiled_or_eager(
            lambda compiled: SSMSTTEngine(folder, compile=compiled, device=str(self.device)),
            compile=self.config.stt_compile and self.device.type == "cpu",
            what="the recogniser's step", flag="--no-stt-compile", cold_s=30)

    async def drain(self) -> None:
        """Stop taking streams, tell the live ones to move, serve them up to ``grace_s``."""
        if self.state is State.DRAINING:
            return
        self.state = State.DRAINING
        self.metrics.ready.set(0)
        live = list(self._streams)
        log.info("draining: /ping 503, %d live stream(s) told to move, up to %.0f s", len(live), self.config.grace_s)
        message = goaway("draining", int(self.config.grace_s * 1000))
        for ws in live:
            with contextlib.suppress(ConnectionResetError):
                await ws.send_str(message)
        deadline = time.monotonic() + self.config.grace_s
        while self._streams and time.monotonic() < deadline:
            self._left.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._left.wait(), deadline - time.monotonic())
        if self._streams:
            log.info("drain grace over: closing %d stream(s)", len(self._streams))
            for ws in list(self._streams):
                await ws.close(code=1001, message=b"server going away")

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        for engine in self._owned:
            await asyncio.to_thread(engine.close)  # type: ignore[attr-defined]
        self._owned.clear()

    # -- warm-up and probes -------------------------------------------------------------------------
    async def _speak_once(self, text: str, rate: int = 8000, first_only: bool = False,
                          voice=None) -> tuple[np.ndarray, float]:
        engine = voice or self.voice
        assert engine is not None
        utt = engine.open(rate)
        t0 = time.perf_counter()
        first_ms = 0.0
        pieces: list[np.ndarray] = []
        async with contextlib.aclosing(utt.speak(text)) as chunks:
            async for chunk in chunks:
                if not pieces:
                    first_ms = (time.perf_counter() - t0) * 1000
                pieces.append(chunk.pcm)
                if first_only:
                    break
        return (np.concatenate(pieces) if pieces else np.zeros(0, np.int16)), first_ms

    async def _recognise_once(self, pcm: np.ndarray, rate: int = 8000) -> str:
        assert self.recogniser is not None
        utt = self.recogniser.open(rate)
        step = rate // 50
        for i in range(0, len(pcm), step):
            fut = utt.push(pcm[i:i + step])
            if fut is not None:
                await utt.take_async(fut)
        for fut in utt.finish():
            await utt.take_async(fut)
        return utt.text

    async def _probe(self) -> bool:
        """Both engines answer a small real request within ``PROBE_TIMEOUT_S`` (at most every
        ``PROBE_TTL_S``; concurrent pings share one probe)."""
        async with self._probe_lock:
            if time.monotonic() - self._probe_ok_at < PROBE_TTL_S:
                return True
            try:
                async with asyncio.timeout(PROBE_TIMEOUT_S):
                    speech, _ = await self._speak_once("OK.", first_only=True)
                    await self._recognise_once(speech[:1600])
            except (TimeoutError, PipelineError, SSMEngineError) as exc:
                log.warning("ping: the engine probe failed: %s", exc or "timed out")
                return False
            self._probe_ok_at = time.monotonic()
            return True

    def _register_engine_metrics(self) -> None:
        runner = getattr(self.recogniser, "runner", None)
        for name, voice in [("tts", self.voice), *((f"tts-{n}", v) for n, v in self.voices.items())]:
            if voice is not None and hasattr(voice, "steps"):
                self.metrics.register_engine(name, functools.partial(_voice_stats, voice))
        if runner is not None and hasattr(runner, "batches_run"):
            self.metrics.register_engine("stt", lambda: EngineStats(runner.batches_run, runner.step_s,
                                                                    runner.streams_stepped, runner.queue_depth))

    # -- HTTP ---------------------------------------------------------------------------------------
    async def _ping(self, _request: web.Request) -> web.Response:
        if self.state is State.READY and await self._probe():
            return web.json_response({"status": "ready"})
        status = self.state.value if self.state is not State.READY else "unhealthy"
        return web.json_response({"status": status}, status=503)

    async def _metrics_page(self, _request: web.Request) -> web.Response:
        return web.Response(body=self.metrics.render(), content_type="text/plain", charset="utf-8")

    def _refusal(self) -> web.Response | None:
        if self.state is not State.READY:
            self.metrics.refused.labels(self.state.value).inc()
            return web.json_response({"error": f"the model server is {self.state.value}: try another replica"},
                                     status=503, headers={"Retry-After": "1"})
        if len(self._streams) >= self.config.max_streams:
            self.metrics.refused.labels("full").inc()
            log.info("refused a stream: %d streams open (--max-streams)", len(self._streams))
            return web.json_response({"error": f"{self.config.max_streams} streams are open: try another replica"},
                                     status=503, headers={"Retry-After": "1"})
        return None

    async def _invocations(self, request: web.Request) -> web.StreamResponse:
        """One TTS request -> NDJSON chunk/timestamps/done events (Cartesia's Marketplace shape)."""
        refusal = self._refusal()
        if refusal is not None:
            return refusal
        if request.content_type != "application/json":
            return web.json_response({"error": f"Content-Type {request.content_type!r}: send application/json"},
                                     status=415)
        raw = await request.read()
        try:
            body = json.loads(raw)
            if isinstance(body, dict):
                body.setdefault("context_id", "invocation")
            msg = parse_tts_message(json.dumps(body))
            if not isinstance(msg, TTSGenerate):
                raise WireError("an invocation speaks a transcript; cancel belongs to the streaming API")
            voice = self.voice_for(msg.voice)
        except (ValueError, WireError) as exc:
            return web.json_response({"error": str(exc)}, status=400)
        response = web.StreamResponse(headers={"Content-Type": "application/jsonlines"})
        await response.prepare(request)
        t0 = time.perf_counter()
        utt = voice.open(msg.output_format.sample_rate_hz)
        first = True
        try:
            async with contextlib.aclosing(utt.speak(msg.transcript)) as chunks:
                async for chunk in chunks:
                    line = tts_chunk(msg.context_id, encode(chunk.pcm, msg.output_format.encoding),
                                     (time.perf_counter() - t0) * 1000)
                    await response.write(line.encode() + b"\n")
                    if first:
                        self.metrics.ttfb_ms.labels("tts").observe((time.perf_counter() - t0) * 1000)
                        first = False
            await response.write(tts_done(msg.context_id).encode() + b"\n")
        except (PipelineError, SSMEngineError) as exc:
            await response.write(tts_error(msg.context_id, f"the voice failed: {exc}", 500).encode() + b"\n")
        except ConnectionResetError:   # the client left mid-utterance: its choice, not our fault
            log.info("an invocation's client left after %.0f ms", (time.perf_counter() - t0) * 1000)
            return response
        finally:
            utt.cancel()
        with contextlib.suppress(ConnectionResetError):
            await response.write_eof()
        return response

    async def _tts_ws(self, request: web.Request) -> web.StreamResponse:
        return await self._serve_stream(request, "tts", request.query)

    async def _stt_ws(self, request: web.Request) -> web.StreamResponse:
        return await self._serve_stream(request, "stt", request.query)

    async def _bidi(self, request: web.Request) -> web.StreamResponse:
        target = request.headers.get(PATH_HEADER, "")
        path, _, query = target.partition("?")
        path = "/" + path.lstrip("/")
        params = dict(parse_qsl(query or request.headers.get(QUERY_HEADER, "") or request.query_string))
        if path == TTS_PATH:
            return await self._serve_stream(request, "tts", params)
        if path == STT_PATH:
            return await self._serve_stream(request, "stt", params)
        log.info("bidirectional stream for unknown path %r refused", target[:80])
        return web.json_response({"error": f"{PATH_HEADER} {target[:80]!r}: expected tts/websocket or "
                                           f"stt/websocket"}, status=404)

    async def _serve_stream(self, request: web.Request, kind: str, query) -> web.StreamResponse:
        refusal = self._refusal()
        if refusal is not None:
            return refusal
        params = None
        if kind == "stt":
            try:
                params = SttParams.from_query(query)
            except WireError as exc:
                self.metrics.refused.labels("bad_request").inc()
                return web.json_response({"error": str(exc)}, status=400)
        ws = web.WebSocketResponse(heartbeat=None, autoping=True, max_msg_size=1024 * 1024)
        await ws.prepare(request)
        self._streams.add(ws)
        try:
            if kind == "tts":
                assert self.voice is not None
                await TtsSession(ws, self.voice_for, self.metrics).run()
            else:
                assert self.recogniser is not None and params is not None
                await SttSession(ws, self.recogniser, params, self.metrics).run()
        finally:
            self._streams.discard(ws)
            self._left.set()
            if not ws.closed:
                await ws.close()
        return ws


def _voice_stats(voice: Any) -> EngineStats:
    return EngineStats(voice.steps, voice.step_s, voice.streams_stepped, voice.queue_depth)
