"""pocketsphinx decoders in worker processes, so decoding never holds the server's GIL.

pocketsphinx's ``process_raw`` holds Python's GIL while it decodes. With 16 live calls the
decoders held it ~20 % of the time (py-spy ``--gil``), and the event loop, the voice thread and
aiortc's threads waited behind them. Here the decoders live in ``procs`` worker processes, each
with its own GIL, and the server only sends them audio:

    pool = SphinxProcessPool(procs=1)
    pool.prewarm(8000, 4)                 # built in the worker: the server's loop never stalls
    engine = pool.acquire(8000)           # a RemoteSphinxEngine: SphinxEngine's methods
    engine.start_utt()
    partial = engine.feed(pcm_int16)      # blocks this thread (not the GIL) for the reply
    text = engine.end_utt()
    pool.release(engine)                  # reset in the worker and kept idle
    pool.close()                          # the workers exit

Each engine has its own Unix stream socket to its worker (made here and handed over with
``SCM_RIGHTS`` on the worker's control socket), so calls never queue behind one another's
replies in this process. One worker decodes its engines' requests in arrival order; a new engine
takes the worker with the fewest. An engine is used by one thread at a time, as ``SphinxEngine``.

Failure: if a worker dies, every request to its engines raises ``EngineUnavailableError``
(naming the worker and its exit code), its engines are dropped, and the next ``acquire`` starts
a replacement. Workers ignore SIGINT and SIGTERM (a drain keeps its recognizers) and exit when
the server closes their control socket or dies.

Wire format (both sockets): frames of a 4-byte big-endian length and a body. Requests are one op
byte (``S`` start, ``F`` feed + int16 PCM, ``E`` end, ``R`` reset) and replies are JSON:
``{"ok": value}`` or ``{"error": class name, "message": text}``. The control socket
(``SOCK_SEQPACKET``) carries ``{"rate": hz, "partial_every_ms": ms}`` plus the engine's socket.
"""

from __future__ import annotations

import json
import logging
import selectors
import socket
import subprocess
import sys
import threading
import time
from typing import Any, cast

from pipeline.engines.framing import (
    HEADER,
    ignore_stop_signals,
    recv_frame,
    send_frame,
    spawn_child,
)
from pipeline.engines.sphinx import SUPPORTED_RATES_HZ, as_int16
from pipeline.engines.worker_metrics import RequestTimer
from pipeline.errors import AudioFormatError, ConfigError, EngineUnavailableError, PipelineError

logger = logging.getLogger(__name__)

# A reply this late means a hung worker (it is killed and replaced). Not sooner: a worker
# overloaded by many callers speaking at once falls seconds behind, and killing it would cost
# every call on it its utterance.
_REPLY_TIMEOUT_S = 120.0
_BUILD_TIMEOUT_S = 60.0  # building a decoder: ~0.4 s each, queued behind the worker's others
_ERRORS: dict[str, type[PipelineError]] = {
    "AudioFormatError": AudioFormatError,
    "EngineUnavailableError": EngineUnavailableError,
}


class _Worker:
    """One worker process and its control socket (main side)."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.control, self.proc = spawn_child("pipeline.engines.sphinx_procs", [],
                                              kind=socket.SOCK_SEQPACKET)
        self.engines = 0
        self.lock = threading.Lock()  # one control message at a time

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def describe(self) -> str:
        code = self.proc.poll()
        state = "running" if code is None else f"exited with code {code}"
        return f"pocketsphinx worker {self.index} (pid {self.proc.pid}, {state})"

    def open_engine(self, rate: int, partial_every_ms: int) -> socket.socket:
        """Ask the worker to build an engine; return its socket (the ready reply not yet read)."""
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        header = json.dumps({"rate": rate, "partial_every_ms": partial_every_ms}).encode()
        try:
            with self.lock:
                socket.send_fds(self.control, [header], [theirs.fileno()])
        except OSError as exc:
            mine.close()
            raise EngineUnavailableError(f"{self.describe()}: cannot start an engine ({exc})") from exc
        finally:
            theirs.close()
        self.engines += 1
        return mine

    def close(self, timeout_s: float = 5.0) -> None:
        self.control.close()  # the worker exits on EOF
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class RemoteSphinxEngine:
    """A ``SphinxEngine`` living in a worker process; same methods, same errors.

    Audio is checked here (``AudioFormatError`` without a round trip). Errors in the worker come
    back as the same ``PipelineError`` subclasses (pocketsphinx's own as ``PipelineError``); a
    dead or hung worker raises ``EngineUnavailableError`` and leaves the engine ``broken``.
    """

    def __init__(self, worker: _Worker, sock: socket.socket, sample_rate_hz: int,
                 partial_every_ms: int) -> None:
        self._worker = worker
        self._sock = sock
        self.sample_rate_hz = sample_rate_hz
        self.partial_every_ms = partial_every_ms
        self.broken = False
        self.load_s = 0.0
        self.last_end_utt_s = 0.0
        """Wall time of the last ``end_utt`` in the worker (flush + final search)."""
        self._in_utt = False

    @property
    def in_utterance(self) -> bool:
        return self._in_utt

    @property
    def worker_pid(self) -> int:
        return self._worker.proc.pid

    def wait_ready(self) -> None:
        """Wait for the worker to finish building this engine (``EngineUnavailableError`` if the
        model would not load or the worker died)."""
        self.load_s = float(self._reply(_BUILD_TIMEOUT_S)["ok"])

    def start_utt(self) -> None:
        self._call(b"S" + HEADER.pack(self.partial_every_ms))  # acquire() may have changed it
        self._in_utt = True

    def feed(self, pcm: bytes | object) -> str | None:
        if not self._in_utt:
            raise PipelineError("feed() called outside an utterance: call start_utt() first")
        samples = as_int16(pcm)  # type: ignore[arg-type]
        if not len(samples):
            return None
        return self._call(b"F" + samples.astype("<i2", copy=False).tobytes())["ok"]

    def end_utt(self) -> str:
        if not self._in_utt:
            raise PipelineError("end_utt() called outside an utterance")
        self._in_utt = False
        reply = self._call(b"E")
        self.last_end_utt_s = float(reply["end_utt_s"])
        return str(reply["ok"])

    def reset(self) -> None:
        self._in_utt = False
        self._call(b"R")

    def transcribe(self, pcm: bytes | object) -> str:
        self.start_utt()
        self.feed(pcm)
        return self.end_utt()

    def close(self) -> None:
        """Drop the engine (the worker frees its decoder when the socket closes)."""
        if self._sock.fileno() >= 0:
            self._sock.close()
            self._worker.engines -= 1
        self.broken = True

    def _call(self, request: bytes) -> dict:
        if self.broken:
            raise EngineUnavailableError(f"this engine's {self._worker.describe()} failed earlier")
        try:
            self._sock.settimeout(_REPLY_TIMEOUT_S)
            send_frame(self._sock, request)
        except OSError as exc:
            self._fail(exc)
        return self._reply(_REPLY_TIMEOUT_S)

    def _reply(self, timeout_s: float) -> dict:
        try:
            self._sock.settimeout(timeout_s)
            reply = json.loads(recv_frame(self._sock))
        except (OSError, ValueError) as exc:
            self._fail(exc)
        if "error" in reply:
            cls = _ERRORS.get(reply["error"], PipelineError)
            raise cls(reply["message"])
        return reply

    def _fail(self, exc: Exception) -> None:
        if isinstance(exc, TimeoutError):
            self._worker.proc.kill()  # hung: a stuck decoder would hang every engine it holds
            self._worker.proc.wait()
        else:  # a broken socket: the worker is most likely exiting, and the kernel closes its
            # sockets a few ms before it can be reaped; wait for that, so the message names the
            # exit code and the next acquire() starts a replacement instead of using it
            try:
                self._worker.proc.wait(1.0)
            except subprocess.TimeoutExpired:
                pass
        self.close()
        raise EngineUnavailableError(f"{self._worker.describe()}: {exc}") from exc


class SphinxProcessPool:
    """``SphinxPool``'s interface over ``procs`` worker processes (started on first use).

    ``max_idle``: most idle engines kept per rate; more are dropped on release.
    ``built``: how many engines this pool has asked its workers to build.
    """

    def __init__(self, procs: int = 1, max_idle: int = 16) -> None:
        if procs < 1:
            raise ConfigError(f"procs must be >= 1, got {procs}")
        if max_idle < 0:
            raise ConfigError(f"max_idle must be >= 0, got {max_idle}")
        self.procs = procs
        self.max_idle = max_idle
        self.built = 0
        self._workers: list[_Worker] = []
        self._started = 0
        self.restarts = 0
        """Workers replaced after they died."""
        self._idle: dict[int, list[RemoteSphinxEngine]] = {}
        self._lock = threading.Lock()
        self._closed = False

    def acquire(self, sample_rate_hz: int, partial_every_ms: int = 100) -> RemoteSphinxEngine:
        """An idle engine for this rate, or a new one (built in a worker, ~0.4 s)."""
        with self._lock:
            idle = self._idle.get(sample_rate_hz, [])
            while idle:
                engine = idle.pop()
                if not engine.broken and engine._worker.alive:
                    engine.partial_every_ms = partial_every_ms
                    return engine
                engine.close()
        (engine,) = self._build(sample_rate_hz, 1, partial_every_ms)
        return engine

    def release(self, engine: RemoteSphinxEngine) -> None:
        """Reset the engine in its worker and keep it idle; one that is broken, whose reset
        fails, or past ``max_idle``, is dropped. The caller must not touch it afterwards."""
        with self._lock:
            if any(e is engine for e in self._idle.get(engine.sample_rate_hz, ())):
                raise PipelineError("SphinxProcessPool.release() called twice for the same engine")
        if engine.broken or self._closed:
            engine.close()
            return
        try:
            engine.reset()
        except PipelineError:
            logger.warning("dropping a pocketsphinx engine whose reset failed", exc_info=True)
            engine.close()
            return
        with self._lock:
            idle = self._idle.setdefault(engine.sample_rate_hz, [])
            if len(idle) < self.max_idle:
                idle.append(engine)
                return
        engine.close()

    def prewarm(self, sample_rate_hz: int, n: int) -> int:
        """Build engines until ``min(n, max_idle)`` are idle at this rate, spread over the workers
        (which build in parallel); return how many were built."""
        missing = min(n, self.max_idle) - self.idle_count(sample_rate_hz)
        if missing <= 0:
            return 0
        engines = self._build(sample_rate_hz, missing, 100)
        with self._lock:
            self._idle.setdefault(sample_rate_hz, []).extend(engines)
        return len(engines)

    def idle_count(self, sample_rate_hz: int) -> int:
        with self._lock:
            return len(self._idle.get(sample_rate_hz, ()))

    def worker_pids(self) -> list[int]:
        with self._lock:
            return [w.proc.pid for w in self._workers if w.alive]

    def close(self) -> None:
        """Drop the idle engines and stop the workers (engines still out become broken)."""
        with self._lock:
            self._closed = True
            workers, self._workers = self._workers, []
            idle, self._idle = self._idle, {}
        for engines in idle.values():
            for engine in engines:
                engine.close()
        for worker in workers:
            worker.close()

    def _build(self, rate: int, n: int, partial_every_ms: int) -> list[RemoteSphinxEngine]:
        if rate not in SUPPORTED_RATES_HZ:
            raise AudioFormatError(f"sample_rate_hz={rate} not in {SUPPORTED_RATES_HZ}")
        pending: list[RemoteSphinxEngine] = []
        ready = []
        try:
            for _ in range(n):
                worker = self._worker_for_new()
                pending.append(RemoteSphinxEngine(
                    worker, worker.open_engine(rate, partial_every_ms), rate, partial_every_ms))
            for engine in pending:
                engine.wait_ready()
                ready.append(engine)
        except PipelineError:
            for engine in pending:
                engine.close()
            raise
        with self._lock:
            self.built += len(ready)
        return ready

    def _worker_for_new(self) -> _Worker:
        with self._lock:
            if self._closed:
                raise EngineUnavailableError("the pocketsphinx worker pool is closed")
            for worker in [w for w in self._workers if not w.alive]:
                logger.warning("%s: starting a replacement", worker.describe())
                self._workers.remove(worker)
                worker.close()
                self.restarts += 1
            if len(self._workers) < self.procs:
                self._workers.append(_Worker(self._started))
                self._started += 1
            return min(self._workers, key=lambda w: w.engines)


# ---- the worker process ---------------------------------------------------------------------


_OPS = {b"F": "feed", b"S": "start", b"E": "end", b"R": "reset"}


def _serve_engine(engine, request: bytes) -> dict:  # engine: SphinxEngine
    op, payload = request[:1], request[1:]
    if op == b"F":
        return {"ok": engine.feed(payload)}
    if op == b"S":
        if payload:
            (engine.partial_every_ms,) = HEADER.unpack(payload)
        engine.start_utt()
        return {"ok": None}
    if op == b"E":
        text = engine.end_utt()
        return {"ok": text, "end_utt_s": engine.last_end_utt_s}
    if op == b"R":
        engine.reset()
        return {"ok": None}
    raise PipelineError(f"unknown request {op!r}")


def _worker_main(control_fd: int) -> int:
    from pipeline.engines.sphinx import SphinxEngine

    ignore_stop_signals()
    timer = RequestTimer("pocketsphinx")   # the server's /metrics (worker_metrics), when shared
    control = socket.socket(fileno=control_fd)
    selector = selectors.DefaultSelector()
    selector.register(control, selectors.EVENT_READ, None)
    while True:
        for key, _ in selector.select():
            sock = cast(socket.socket, key.fileobj)
            if key.data is None:  # control: a new engine, or EOF (the server is gone)
                try:
                    msg, fds, _, _ = socket.recv_fds(control, 4096, 1)
                except OSError:
                    msg, fds = b"", []
                if not msg:
                    return 0
                if not fds:
                    continue
                engine_sock = socket.socket(fileno=fds[0])
                spec = json.loads(msg)
                t0 = time.perf_counter()
                reply: dict[str, Any]
                try:
                    engine = SphinxEngine(int(spec["rate"]), int(spec["partial_every_ms"]))
                    reply = {"ok": time.perf_counter() - t0}
                except PipelineError as exc:
                    engine, reply = None, {"error": type(exc).__name__, "message": str(exc)}
                try:
                    send_frame(engine_sock, json.dumps(reply).encode())
                except OSError:
                    engine = None
                if engine is None:
                    engine_sock.close()
                else:
                    selector.register(engine_sock, selectors.EVENT_READ, engine)
                continue
            try:
                request = recv_frame(sock)
            except OSError:  # the engine was dropped (or its owner died)
                selector.unregister(sock)
                sock.close()
                continue
            t0 = time.perf_counter()
            try:
                reply = _serve_engine(key.data, request)
                timer.observe(_OPS.get(request[:1], "unknown"), (time.perf_counter() - t0) * 1e3)
            except PipelineError as exc:
                reply = {"error": type(exc).__name__, "message": str(exc)}
            except RuntimeError as exc:  # pocketsphinx's own
                reply = {"error": "PipelineError", "message": f"pocketsphinx: {exc}"}
            try:
                send_frame(sock, json.dumps(reply).encode())
            except OSError:
                selector.unregister(sock)
                sock.close()


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="sphinx-worker %(levelname)s %(message)s")
    raise SystemExit(_worker_main(int(sys.argv[1])))
