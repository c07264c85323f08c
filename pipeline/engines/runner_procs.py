"""``BatchRunner`` in a child process: the model's steps get a GIL (and a core) of their own.

A ``BatchRunner`` thread steps every call's stream together, ~200 small torch ops a step, and
each op gives Python's GIL back and takes it again. Next to the event loop of 16 calls the takes
queue up: the server process sat at exactly one core and the SSM recognizer's finals came 1.7 s
late. ``RunnerProcess`` has ``BatchRunner``'s interface and runs a real ``BatchRunner`` in a
child process, which builds the model itself from ``loader`` ("module:function", called with
``args``):

    runner = RunnerProcess("ssm_engine.stt.model:load_stt", ["models/stt"])
    runner.start()                          # the child loads the model; blocks until it has
    sid = runner.open_stream()
    y = runner.submit(sid, frames).result() # (n, d_in) float32 -> (n, d_out), as BatchRunner
    runner.close_stream(sid); runner.stop()

Per stream, commands reach the child in the order they were made, so ``BatchRunner``'s ordering
holds. Frames and outputs travel as float32. Errors come back as the same ``ssm_engine``
exceptions. If the child dies, every pending future fails with ``RunnerClosedError``, the
streams it held are forgotten (``UnknownStreamError`` from then on; a recognizer opens a new
stream per utterance, so the next one works) and a replacement starts in the background.

Wire format (framing.py frames): requests are a 4-byte JSON length, JSON ``{"op": "open" |
"submit" | "close" | "export", "sid": s, "id": r, "n": rows, "d": cols}`` and a payload (frames,
or state bytes for "open"); replies the same with ``{"id": r, "shape": [n, d]}`` (float32
payload), ``{"id": r, "bytes": true}``, ``{"id": r, "ok": null}`` or ``{"id": r, "error": cls,
"message": m}``. The child's first reply is ``{"id": 0, "ok": load_s}`` or an error.
"""

from __future__ import annotations

import contextlib
import importlib
import itertools
import logging
import socket
import subprocess
import sys
import threading
from concurrent.futures import Future

import numpy as np
import torch

from pipeline.engines.framing import (
    ignore_stop_signals,
    pack,
    recv_frame,
    send_frame,
    spawn_child,
    unpack,
)
from ssm_engine import errors as engine_errors
from ssm_engine.errors import RunnerClosedError, SSMEngineError, StreamError, UnknownStreamError

logger = logging.getLogger(__name__)

_LOAD_TIMEOUT_S = 120.0


def _remote_error(name: str, message: str) -> SSMEngineError:
    """The child's error as the same ``ssm_engine.errors`` class (else ``SSMEngineError``)."""
    cls = getattr(engine_errors, name, None)
    if not (isinstance(cls, type) and issubclass(cls, SSMEngineError)):
        return SSMEngineError(f"{name}: {message}")
    try:
        return cls(message)
    except TypeError:  # CheckpointError(path, message): raised here, it would end the reader
        return SSMEngineError(f"{name}: {message}")


class RunnerProcess:
    """``BatchRunner``'s API over a child process (see the module docstring)."""

    def __init__(self, loader: str, args: list[str] | None = None, *,
                 name: str = "ssm-runner") -> None:
        self._loader, self._args, self.name = loader, [str(a) for a in args or []], name
        self._ids = itertools.count(1)
        self._sids = itertools.count(1)
        self._lock = threading.Lock()       # sock, open ids, pending; one writer at a time
        self._sock: socket.socket | None = None
        self._proc: subprocess.Popen | None = None
        self._open_ids: set[int] = set()
        self._pending: dict[int, tuple[Future, str]] = {}
        self._stopping = False
        self.restarts = 0
        self.load_s = 0.0

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the child and wait until it has built the model (``RunnerClosedError`` with
        the child's reason if it cannot)."""
        sock, proc = spawn_child("pipeline.engines.runner_procs", [self._loader, *self._args])
        try:
            sock.settimeout(_LOAD_TIMEOUT_S)
            head, _ = unpack(recv_frame(sock))
            sock.settimeout(None)
        except (OSError, ValueError) as exc:
            sock.close()
            if isinstance(exc, TimeoutError):
                proc.kill()                   # it hung
            try:
                proc.wait(timeout=5.0)        # reaped, with its exit code: no zombie
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            raise RunnerClosedError(f"{self.name} process did not start ({exc}; exit code "
                                    f"{proc.returncode})") from exc
        if "error" in head:
            sock.close()
            proc.wait()
            raise RunnerClosedError(f"{self.name} process failed: {head['message']}")
        self.load_s = float(head["ok"])
        with self._lock:
            stopping = self._stopping
            if not stopping:
                self._sock, self._proc = sock, proc
        if stopping:  # stop() came while this (replacement) child started: it goes too
            sock.close()
            proc.wait()
            raise RunnerClosedError(f"{self.name} process is stopped")
        threading.Thread(target=self._read, args=(sock, proc), name=f"{self.name}-reader",
                         daemon=True).start()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the child (queued work is dropped: its futures are cancelled)."""
        with self._lock:
            self._stopping = True
            sock, self._sock = self._sock, None
            proc = self._proc
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

    @property
    def workers_up(self) -> int:
        """1 while the child runs and answers, else 0 (dead, restarting or closed)."""
        with self._lock:
            return int(self._sock is not None and self._proc is not None and self._proc.poll() is None)

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def open_streams(self) -> frozenset[int]:
        with self._lock:
            return frozenset(self._open_ids)

    # -- BatchRunner's API ----------------------------------------------------------------------
    def open_stream(self, state_bytes: bytes | None = None) -> int:
        """Open a stream; with ``state_bytes`` the child checks them first (one round trip;
        ``StateError`` if bad)."""
        sid = next(self._sids)
        if state_bytes is None:
            with self._lock:
                self._send({"op": "open", "sid": sid})
                self._open_ids.add(sid)
            return sid
        fut = self._request({"op": "open", "sid": sid}, bytes(state_bytes), "ok", new_sid=sid)
        try:
            fut.result()
        except SSMEngineError:
            with self._lock:
                self._open_ids.discard(sid)
            raise
        return sid

    def submit(self, stream_id: int, frames: torch.Tensor) -> Future:
        if not isinstance(frames, torch.Tensor) or frames.dim() != 2:
            raise StreamError(f"frames must be a (n, d_in) tensor, got "
                              f"{tuple(frames.shape) if isinstance(frames, torch.Tensor) else type(frames)}")
        data = frames.detach().to(torch.float32).contiguous().numpy().tobytes()
        n, d = frames.shape
        return self._request({"op": "submit", "sid": stream_id, "n": n, "d": d}, data, "tensor")

    def export_state(self, stream_id: int) -> Future:
        return self._request({"op": "export", "sid": stream_id}, b"", "bytes")

    def close_stream(self, stream_id: int) -> Future:
        return self._request({"op": "close", "sid": stream_id}, b"", "ok", closing=True)

    # -- internals ------------------------------------------------------------------------------
    def _not_running(self) -> RunnerClosedError:
        return RunnerClosedError(f"{self.name} process is " + (
            "stopped" if self._stopping else "restarting after a crash" if self._proc is not None
            else "not started"))

    def _send(self, head: dict, payload: bytes = b"") -> None:
        """Send one request (the caller holds the lock)."""
        if self._stopping or self._sock is None:
            raise self._not_running()
        try:
            send_frame(self._sock, pack(head, payload))
        except OSError as exc:
            raise RunnerClosedError(f"{self.name} process is gone ({exc})") from exc

    def _request(self, head: dict, payload: bytes, kind: str, *, closing: bool = False,
                 new_sid: int | None = None) -> Future:
        fut: Future = Future()
        rid = next(self._ids)
        with self._lock:
            if new_sid is None and head["sid"] not in self._open_ids:
                if self._stopping or self._sock is None:
                    raise self._not_running()
                raise UnknownStreamError(head["sid"])
            self._pending[rid] = (fut, kind)
            try:
                self._send({**head, "id": rid}, payload)
            except RunnerClosedError:
                del self._pending[rid]
                raise
            if closing:
                self._open_ids.discard(head["sid"])
            if new_sid is not None:
                self._open_ids.add(new_sid)
        return fut

    def _read(self, sock: socket.socket, proc: subprocess.Popen) -> None:
        while True:
            try:
                head, payload = unpack(recv_frame(sock))
            except (OSError, ValueError) as exc:
                self._lost(sock, proc, exc)
                return
            with self._lock:
                fut, kind = self._pending.pop(head["id"], (None, ""))
            if fut is None or not fut.set_running_or_notify_cancel():
                continue
            if "error" in head:
                fut.set_exception(_remote_error(head["error"], head["message"]))
            elif kind == "tensor":
                n, d = head["shape"]
                fut.set_result(torch.from_numpy(np.frombuffer(payload, np.float32).reshape(n, d)
                                                .copy()))
            elif kind == "bytes":
                fut.set_result(bytes(payload))
            else:
                fut.set_result(None)

    def _lost(self, sock: socket.socket, proc: subprocess.Popen, exc: Exception) -> None:
        with self._lock:
            stopping = self._stopping
            if self._sock is sock:
                self._sock = None
            pending, self._pending = self._pending, {}
            lost_streams = len(self._open_ids)
            self._open_ids.clear()
        sock.close()
        if stopping:
            for fut, _ in pending.values():
                fut.cancel()
            return
        proc.wait()
        error = RunnerClosedError(f"{self.name} process (pid {proc.pid}) exited with code "
                                  f"{proc.returncode} ({exc})")
        logger.error("%s; %d request(s) and %d stream(s) lost; starting a new one", error,
                     len(pending), lost_streams)
        for fut, _ in pending.values():
            if fut.set_running_or_notify_cancel():
                fut.set_exception(error)
        try:
            self.start()
            self.restarts += 1
            logger.warning("%s process is back (pid %s, loaded in %.2f s)", self.name, self.pid,
                           self.load_s)
        except RunnerClosedError:
            if not self._stopping:
                logger.error("%s process could not be restarted", self.name, exc_info=True)


# ---- the child ------------------------------------------------------------------------------


def _child_main(fd: int, loader: str, args: list[str]) -> int:
    import time

    from ssm_engine import BatchRunner

    ignore_stop_signals()
    torch.set_num_threads(1)
    sock = socket.socket(fileno=fd)
    write = threading.Lock()

    def send(body: bytes) -> None:
        with write:
            try:
                send_frame(sock, body)
            except OSError:
                pass  # the server is gone: the read loop ends on EOF

    def fail(rid: int, exc: BaseException) -> None:
        send(pack({"id": rid, "error": type(exc).__name__, "message": str(exc)}))

    t0 = time.perf_counter()
    try:
        module, _, func = loader.partition(":")
        model = getattr(importlib.import_module(module), func)(*args).eval()
        runner = BatchRunner(model)
        runner.start()
    except Exception as exc:  # noqa: BLE001 - reported to the server, which raises it
        fail(0, exc)
        return 1
    send(pack({"id": 0, "ok": time.perf_counter() - t0}))
    sids: dict[int, int] = {}  # the server's stream ids -> the runner's

    def reply(rid: int, fut: Future) -> None:
        if fut.cancelled():
            return
        exc = fut.exception()
        if exc is not None:
            fail(rid, exc)
            return
        out = fut.result()
        if isinstance(out, torch.Tensor):
            y = out.detach().to(torch.float32).contiguous()
            send(pack({"id": rid, "shape": list(y.shape)}, y.numpy().tobytes()))
        elif isinstance(out, bytes):
            send(pack({"id": rid, "bytes": True}, out))
        else:
            send(pack({"id": rid, "ok": None}))

    while True:
        try:
            head, payload = unpack(recv_frame(sock))
        except (OSError, ValueError):
            runner.stop()
            return 0
        op, rid = head.get("op"), head.get("id", 0)
        try:
            if op == "open":
                sids[head["sid"]] = runner.open_stream(bytes(payload) if rid else None)
                if rid:
                    send(pack({"id": rid, "ok": None}))
                continue
            sid = sids.get(head["sid"])
            if sid is None:
                raise UnknownStreamError(head["sid"])
            if op == "submit":
                frames = torch.from_numpy(np.frombuffer(payload, np.float32)
                                          .reshape(head["n"], head["d"]).copy())
                fut = runner.submit(sid, frames)
            elif op == "export":
                fut = runner.export_state(sid)
            elif op == "close":
                del sids[head["sid"]]
                fut = runner.close_stream(sid)
            else:
                raise StreamError(f"unknown request {op!r}")
        except SSMEngineError as exc:
            if rid:
                fail(rid, exc)
            else:
                logger.warning("dropped a request the server expects no reply to: %s", exc)
            continue
        fut.add_done_callback(lambda f, rid=rid: reply(rid, f))


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="ssm-runner %(levelname)s %(message)s")
    raise SystemExit(_child_main(int(sys.argv[1]), sys.argv[2], sys.argv[3:]))
