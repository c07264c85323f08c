"""``BatchRunner`` in a child process: the model's steps get a GIL (and a core) of their own.

A ``BatchRunner`` thread steps every call's stream together, ~200 small torch ops a step, and
each op gives Python's GIL back and takes it again. Next to the event loop of 16 calls the takes
queue up: the server process sat at exactly one core and the SSM recognizer's finals came 1.7 s
late. ``RunnerProcess`` has ``BatchRunner``'s interface and runs a real ``BatchRunner`` in a
child process, which builds the model itself from ``loader`` ("module:function", called with
``args``):

    runner = RunnerProcess("ssm_engine.stt.recognizers:load_recognizer", ["models/stt"])
    runner.start()                          # the child loads the model; blocks until it has
    sid = runner.open_stream()
    y = runner.submit(sid, frames).result() # (n, d_in) float32 -> (n, d_out), as BatchRunner
    runner.close_stream(sid); runner.stop()

Per stream, commands reach the child in the order they were made, so ``BatchRunner``'s ordering
holds. Frames and outputs travel as float32. Errors come back as the same ``ssm_engine``
exceptions. If the child dies, every pending future fails with ``RunnerClosedError``, the
streams it held are forgotten (``UnknownStreamError`` from then on; a recognizer opens a new
stream per utterance, so the next one works) and a replacement starts in the background
(``child.ChildClient``, shared with the voice's process).

Wire format (framing.py frames): requests are a 4-byte JSON length, JSON ``{"op": "open" |
"submit" | "close" | "export", "sid": s, "id": r, "n": rows, "d": cols}`` and a payload (frames,
or state bytes for "open"); replies the same with ``{"id": r, "shape": [n, d]}`` (float32
payload), ``{"id": r, "bytes": true}``, ``{"id": r, "ok": null}`` or ``{"id": r, "error": cls,
"message": m}``. The child's first reply is ``{"id": 0, "ok": load_s}`` or an error.
"""

from __future__ import annotations

import importlib
import itertools
import logging
import re
import socket
import subprocess
import sys
from concurrent.futures import Future

import numpy as np
import torch

from pipeline.engines.child import ChildClient, ChildEnd
from pipeline.engines.framing import spawn_child
from ssm_engine import errors as engine_errors
from ssm_engine.errors import RunnerClosedError, SSMEngineError, StreamError, UnknownStreamError

logger = logging.getLogger(__name__)

_LOAD_TIMEOUT_S = 120.0


def _remote_error(name: str, message: str) -> SSMEngineError:
    """The child's error as the same ``ssm_engine.errors`` class (else ``SSMEngineError``)."""
    cls = getattr(engine_errors, name, None)
    if not (isinstance(cls, type) and issubclass(cls, SSMEngineError)):
        return SSMEngineError(f"{name}: {message}")
    if issubclass(cls, engine_errors.UnknownStreamError):   # built from the id, not a message
        found = re.fullmatch(r"stream (\d+) is not open", message)
        return cls(int(found.group(1))) if found else SSMEngineError(f"{name}: {message}")
    try:
        return cls(message)
    except TypeError:  # CheckpointError(path, message): raised here, it would end the reader
        return SSMEngineError(f"{name}: {message}")


class RunnerProcess(ChildClient):
    """``BatchRunner``'s API over a child process (see the module docstring)."""

    unavailable = RunnerClosedError
    closed_word = "stopped"

    def __init__(self, loader: str, args: list[str] | None = None, *,
                 name: str = "ssm-runner") -> None:
        super().__init__([loader, *(str(a) for a in args or [])])
        self.name = name
        self.label = f"{name} process"
        self._sids = itertools.count(1)
        self._open_ids: set[int] = set()

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the child and wait until it has built the model (``RunnerClosedError`` with
        the child's reason if it cannot)."""
        self._start()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the child (queued work is dropped: its futures are cancelled)."""
        self.close(timeout_s)

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
        fut = self._request({"op": "open", "sid": sid}, bytes(state_bytes), "ok",
                            sent=lambda: self._open_ids.add(sid))
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
        return self._request({"op": "submit", "sid": stream_id, "n": n, "d": d}, data, "tensor",
                             check=lambda: self._check_open(stream_id))

    def export_state(self, stream_id: int) -> Future:
        return self._request({"op": "export", "sid": stream_id}, b"", "bytes",
                             check=lambda: self._check_open(stream_id))

    def close_stream(self, stream_id: int) -> Future:
        return self._request({"op": "close", "sid": stream_id}, b"", "ok",
                             check=lambda: self._check_open(stream_id),
                             sent=lambda: self._open_ids.discard(stream_id))

    # -- ChildClient ----------------------------------------------------------------------------
    def _check_open(self, stream_id: int) -> None:
        if stream_id not in self._open_ids:
            raise UnknownStreamError(stream_id)

    def _spawn(self) -> tuple[socket.socket, subprocess.Popen]:
        return spawn_child("pipeline.engines.runner_procs", self._args)

    def _load_timeout_s(self) -> float:
        return _LOAD_TIMEOUT_S

    def _deliver(self, fut: Future, kind: str, head: dict, payload: memoryview) -> None:
        if kind == "tensor":
            n, d = head["shape"]
            fut.set_result(torch.from_numpy(np.frombuffer(payload, np.float32).reshape(n, d).copy()))
        elif kind == "bytes":
            fut.set_result(bytes(payload))
        else:
            fut.set_result(None)

    def _error(self, head: dict) -> Exception:
        return _remote_error(head["error"], head["message"])

    def _on_lost(self) -> str:
        lost, self._open_ids = len(self._open_ids), set()
        return f" and {lost} stream(s) lost"


# ---- the child ------------------------------------------------------------------------------


def _child_main(fd: int, loader: str, args: list[str]) -> int:
    import time

    from ssm_engine import BatchRunner

    end = ChildEnd(fd, engine="ssm-stt")
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    try:
        module, _, func = loader.partition(":")
        model = getattr(importlib.import_module(module), func)(*args).eval()
        # a model that steps whole hops (the recogniser on Whisper's encoder) says how few
        # frames its prefill takes
        runner = BatchRunner(model, **({"prefill_min": model.prefill_min}
                                       if hasattr(model, "prefill_min") else {}))
        runner.start()
    except Exception as exc:  # noqa: BLE001 - reported to the server, which raises it
        end.fail(0, exc)
        return 1
    end.ready(time.perf_counter() - t0)
    sids: dict[int, int] = {}  # the server's stream ids -> the runner's

    def encode(out: object) -> tuple[dict, bytes]:
        if isinstance(out, torch.Tensor):
            y = out.detach().to(torch.float32).contiguous()
            return {"shape": list(y.shape)}, y.numpy().tobytes()
        if isinstance(out, bytes):
            return {"bytes": True}, out
        return {"ok": None}, b""

    for head, payload in end.requests():
        op, rid = head.get("op"), head.get("id", 0)
        try:
            if op == "open":
                sids[head["sid"]] = runner.open_stream(bytes(payload) if rid else None)
                if rid:
                    end.send({"id": rid, "ok": None})
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
                end.fail(rid, exc)
            else:
                logger.warning("dropped a request the server expects no reply to: %s", exc)
            continue
        end.answer(rid, fut, encode)
    runner.stop()
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="ssm-runner %(levelname)s %(message)s")
    raise SystemExit(_child_main(int(sys.argv[1]), sys.argv[2], sys.argv[3:]))
