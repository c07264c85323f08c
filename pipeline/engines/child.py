"""The server's side of an engine that runs in a child process: start, requests, replies, death.

``VoiceProcess`` (the SSM voice) and ``RunnerProcess`` (the SSM recognizer's model) are both a
child speaking ``framing``'s JSON-head frames, with one reader thread here that completes the
futures of the requests in flight. What they share lives here:

    class MyEngine(ChildClient):
        label = "the my-engine process"
        unavailable = EngineUnavailableError        # raised when the child is not there
        def _spawn(self): return spawn_child("my.module", self._args)
        def _deliver(self, fut, kind, head, payload): fut.set_result(...)
        def _error(self, head): return EngineUnavailableError(head["message"])

    engine = MyEngine(args); engine._start()        # blocks until the child's first reply
    fut = engine._request({"op": "x"}, b"payload")  # the reply completes it, in order
    engine.close()                                  # the child gets EOF and exits

The child's first frame is ``{"id": 0, "ok": load_s, ...}`` (``_on_ready`` sees it) or an error.
If the child dies, every pending future fails with ``unavailable`` naming its exit code, and a
replacement starts on the reader thread (``restarts`` counts them; requests meanwhile raise
``unavailable``): at once, unless the child died young (``restart_delay_s``: a child that keeps
dying right after it starts is restarted 1, 2, 4 ... 30 s apart, not in a tight loop). A child that never answers its first frame within ``_load_timeout_s()``
is killed; every child is reaped, so none is left a zombie.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import select
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future

from pipeline.gc_pauses import freeze_startup_heap
from pipeline.engines.framing import ignore_stop_signals, pack, recv_frame, send_frame, unpack
from pipeline.engines.worker_metrics import RequestTimer

logger = logging.getLogger(__name__)


YOUNG_S = 10.0      # a child that dies sooner than this after its start died young
MAX_DELAY_S = 30.0


def restart_delay_s(lived_s: float, previous_s: float) -> float:
    """How long to wait before restarting a child that lived ``lived_s`` (the last wait was
    ``previous_s``): none after a full life, else 1 s, then twice the last wait, at most 30 s."""
    if lived_s >= YOUNG_S:
        return 0.0
    return min(MAX_DELAY_S, max(1.0, 2 * previous_s))


class ChildClient:
    label = "the engine process"
    unavailable: type[Exception] = RuntimeError
    closed_word = "closed"  # what ``close()`` made it, in error messages

    def __init__(self, args: list[str]) -> None:
        self._args = args
        self._ids = itertools.count(1)
        self._lock = threading.Lock()       # sock, proc, pending; one writer at a time
        self._sock: socket.socket | None = None
        self._proc: subprocess.Popen | None = None
        self._reader: threading.Thread | None = None
        self._pending: dict[int, tuple[Future, str]] = {}
        self._closed = False
        self.restarts = 0
        """Children replaced after they died."""
        self.load_s = 0.0
        self._started_at = 0.0
        self._delay_s = 0.0               # the wait before the next restart, if it dies young
        self._closing = threading.Event()  # wakes a restart that is waiting out its delay

    # -- for subclasses -------------------------------------------------------------------------
    def _spawn(self) -> tuple[socket.socket, subprocess.Popen]:
        raise NotImplementedError

    def _load_timeout_s(self) -> float:
        return 120.0

    def _on_ready(self, head: dict) -> None:
        """The child's first reply (``{"id": 0, "ok": load_s, ...}``)."""

    def _deliver(self, fut: Future, kind: str, head: dict, payload: memoryview) -> None:
        raise NotImplementedError

    def _error(self, head: dict) -> Exception:
        return self.unavailable(head["message"])

    def _on_lost(self) -> str:
        """Called (under the lock) when the child died: forget its state; -> words for the log."""
        return ""

    # -- lifecycle ------------------------------------------------------------------------------
    @property
    def workers_up(self) -> int:
        """1 while the child runs and answers, else 0 (dead, restarting or closed)."""
        with self._lock:
            return int(self._sock is not None and self._proc is not None and self._proc.poll() is None)

    @property
    def in_flight(self) -> int:
        """Requests sent and not yet answered."""
        return len(self._pending)

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop the child: it gets EOF and exits (killed after ``timeout_s``); pending futures
        are cancelled."""
        with self._lock:
            self._closed = True
            sock, self._sock = self._sock, None
            proc = self._proc
        self._closing.set()
        if sock is not None:
            # shutdown, not only close: the reader thread's recv() holds the socket open, so
            # close() alone sends the child no EOF
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        if proc is not None:
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._reader is not None and self._reader is not threading.current_thread():
            self._reader.join(timeout_s)

    def _start(self) -> None:
        """Start a child and wait for its first reply (``unavailable`` with its reason if it
        cannot start); then its reader thread runs."""
        sock, proc = self._spawn()
        try:
            sock.settimeout(self._load_timeout_s())
            head, _ = unpack(recv_frame(sock))
            sock.settimeout(None)
        except (OSError, ValueError) as exc:
            sock.close()
            if isinstance(exc, TimeoutError):
                proc.kill()               # it hung
            try:
                proc.wait(timeout=5.0)    # reaped, with its exit code: no zombie
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            raise self.unavailable(f"{self.label} did not start ({exc}; exit code "
                                   f"{proc.returncode})") from exc
        if "error" in head:
            sock.close()
            proc.wait()
            raise self.unavailable(f"{self.label} failed: {head['message']}")
        self.load_s = float(head["ok"])
        self._on_ready(head)
        with self._lock:
            closed = self._closed
            if not closed:
                self._sock, self._proc = sock, proc
        if closed:  # close() came while this (replacement) child started: it goes too
            sock.close()
            proc.wait()
            raise self.unavailable(f"{self.label} is {self.closed_word}")
        self._started_at = time.monotonic()
        self._reader = threading.Thread(target=self._read, args=(sock, proc),
                                        name=f"{self.label} reader", daemon=True)
        self._reader.start()

    # -- requests -------------------------------------------------------------------------------
    def _not_running(self) -> Exception:
        if self._closed:
            state = self.closed_word
        else:
            state = "not started" if self._proc is None else "has died and is restarting"
        return self.unavailable(f"{self.label} is {state}")

    def _send(self, head: dict, payload: bytes = b"") -> None:
        """Send one frame (the caller holds the lock)."""
        if self._closed or self._sock is None:
            raise self._not_running()
        try:
            send_frame(self._sock, pack(head, payload))
        except OSError as exc:
            raise self.unavailable(f"{self.label} is gone ({exc})") from exc

    def _request(self, head: dict, payload: bytes = b"", kind: str = "", *,
                 check: Callable[[], None] | None = None,
                 sent: Callable[[], None] | None = None) -> Future:
        """Send a request whose reply completes the returned future. ``check`` and ``sent`` run
        under the lock, before sending (it may raise) and after."""
        fut: Future = Future()
        rid = next(self._ids)
        with self._lock:
            if self._closed or self._sock is None:
                raise self._not_running()
            if check is not None:
                check()
            self._pending[rid] = (fut, kind)
            try:
                self._send({**head, "id": rid}, payload)
            except Exception:
                del self._pending[rid]
                raise
            if sent is not None:
                sent()
        return fut

    def _notify(self, head: dict) -> None:
        """Send a message that gets no reply; dropped if the child is not there (the reader
        thread reports its death)."""
        with self._lock:
            if self._sock is None:
                return
            with contextlib.suppress(Exception):
                self._send(head)

    # -- the reader -----------------------------------------------------------------------------
    def _read(self, sock: socket.socket, proc: subprocess.Popen) -> None:
        while True:
            try:
                head, payload = unpack(recv_frame(sock))
            except (OSError, ValueError) as exc:
                self._lost(sock, proc, exc)
                return
            with self._lock:
                fut, kind = self._pending.pop(head.get("id", 0), (None, ""))
            if fut is None or not fut.set_running_or_notify_cancel():
                continue  # the asker gave up (barge-in, cancelled call): nothing to deliver
            if "error" in head:
                fut.set_exception(self._error(head))
            else:
                self._deliver(fut, kind, head, payload)

    def _lost(self, sock: socket.socket, proc: subprocess.Popen, exc: Exception) -> None:
        with self._lock:
            closing = self._closed
            if self._sock is sock:
                self._sock = None
            pending, self._pending = self._pending, {}
            lost = self._on_lost()
        sock.close()
        if closing:
            for fut, _ in pending.values():
                fut.cancel()
            return
        proc.wait()
        error = self.unavailable(f"{self.label} (pid {proc.pid}) exited with code "
                                 f"{proc.returncode} ({exc})")
        logger.error("%s; %d request(s) failed%s; starting a new one", error, len(pending), lost)
        for fut, _ in pending.values():
            if fut.set_running_or_notify_cancel():
                fut.set_exception(error)
        self._delay_s = restart_delay_s(time.monotonic() - self._started_at, self._delay_s)
        if self._delay_s:
            logger.warning("%s died %.1f s after it started: the next one starts in %.0f s",
                           self.label, time.monotonic() - self._started_at, self._delay_s)
            if self._closing.wait(self._delay_s):
                return  # closed meanwhile
        try:
            self._start()
        except Exception:  # noqa: BLE001 - logged: the server goes on without this engine
            if not self._closed:
                logger.error("%s could not be restarted: calls go on without it", self.label,
                             exc_info=True)
            return
        self.restarts += 1
        logger.warning("%s is back (pid %s, loaded in %.2f s)", self.label, self.pid, self.load_s)


class ChildEnd:
    """The child's side of the socket: requests in order, replies from any thread.

        end = ChildEnd(fd)                       # also leaves SIGINT/SIGTERM to the server
        end.ready(load_s, rate=16000)            # the first frame: {"id": 0, "ok": load_s, ...}
        for head, payload in end.requests():     # until the server closes the socket
            end.send({"id": head["id"], ...}, b"payload")    # or end.fail(head["id"], exc),
            end.answer(head["id"], future, encode)           # or once a future is done
    """

    def __init__(self, fd: int, engine: str | None = None) -> None:
        ignore_stop_signals()
        self.sock = socket.socket(fileno=fd)
        self._write = threading.Lock()
        # with ``engine``: each answered request's time in this process, for the server's
        # /metrics (``worker_metrics``; a no-op unless the server shared a folder)
        self._timer = RequestTimer(engine) if engine is not None else None

    def send(self, head: dict, payload: bytes = b"") -> None:
        with self._write:
            try:
                send_frame(self.sock, pack(head, payload))
            except OSError:
                pass  # the server is gone: requests() ends on EOF

    def fail(self, rid: int, exc: BaseException) -> None:
        self.send({"id": rid, "error": type(exc).__name__, "message": str(exc)})

    def answer(self, rid: int, fut: Future, encode: Callable[[object], tuple[dict, bytes]]) -> None:
        """When ``fut`` is done, reply to request ``rid``: ``encode(result)`` as (head, payload),
        or its exception; nothing if it was cancelled."""
        timer, arrived, op = self._timer, self._arrived, self._op

        def done(f: Future) -> None:
            if f.cancelled():
                return
            exc = f.exception()
            if exc is not None:
                self.fail(rid, exc)
                return
            head, payload = encode(f.result())
            self.send({"id": rid, **head}, payload)
            if timer is not None:
                timer.observe(op, (time.perf_counter() - arrived) * 1e3)

        fut.add_done_callback(done)

    def ready(self, load_s: float, **extra: object) -> None:
        """Tell the server the engine is loaded; its start-up heap is frozen out of garbage
        collection first (``pipeline.gc_pauses``: a full collection stalled every call's
        engine work for 60-200 ms)."""
        freeze_startup_heap()
        self.send({"id": 0, "ok": load_s, **extra})

    _arrived = 0.0
    _op = "request"

    def requests(self) -> Iterator[tuple[dict, memoryview]]:
        """Requests in arrival order (``answer`` times the last one yielded), until EOF."""
        while True:
            try:
                head, payload = unpack(recv_frame(self.sock))
            except (OSError, ValueError):
                return
            self._arrived, self._op = time.perf_counter(), str(head.get("op", "request"))
            yield head, payload

    def arrived(self, *, wait: bool) -> list[tuple[dict, memoryview]] | None:
        """Every request already here, in order (with ``wait``, at least one: it waits for it),
        for a child that chooses what to run next. None at EOF."""
        got: list[tuple[dict, memoryview]] = []
        while wait or select.select([self.sock], [], [], 0)[0]:
            try:
                got.append(unpack(recv_frame(self.sock)))
            except (OSError, ValueError):
                return got or None
            wait = False
        return got
