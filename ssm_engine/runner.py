"""BatchRunner: a dedicated thread that owns a model and a StreamBatcher; callers get Futures.

    runner = BatchRunner(model); runner.start()
    sid = runner.open_stream()                   # or open_stream(state_bytes) to resume a stream
    fut = runner.submit(sid, frames)             # frames: (n, d_in) -> Future[(n, d_out)]
    y = await asyncio.wrap_future(fut)           # in the pipeline layer; nothing here is async
    data = runner.export_state(sid).result()     # bytes, e.g. for failover to another replica
    runner.close_stream(sid); runner.stop()

Every call only validates and enqueues; the worker thread drains the queue, merges all chunks that
arrived since its last pass into one ``StreamBatcher.run`` (continuous batching: the busier the
runner, the bigger its batches), and resolves the futures. Per stream, commands take effect in
the order they were made: an export or close sees every chunk submitted before it.

A chunk whose Future was cancelled before the worker picked it up is dropped: the stream's state
does not advance over it (concurrent.futures semantics: a cancelled call did not run). If the model
raises, the futures of that batch get the exception and the states of its streams are undefined
(close them). The worker sets flush-to-zero for denormals on its own thread: a decaying state
would otherwise crawl through denormal floats on x86, 10x slower. Call torch.set_num_threads()
in the process that owns the runner (one thread per process is fastest on small CPUs).
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from .batcher import DEFAULT_PREFILL_MIN, StreamBatcher, StreamingModel
from .errors import RunnerClosedError, StateError, StreamError, UnknownStreamError

__all__ = ["BatchRunner", "StreamRunner"]

log = logging.getLogger(__name__)


@dataclass
class _Open:
    stream_id: int
    state: Any


@dataclass
class _Submit:
    stream_id: int
    frames: torch.Tensor
    future: Future


@dataclass
class _Close:
    stream_id: int
    future: Future


@dataclass
class _Export:
    stream_id: int
    future: Future



class StreamRunner(Protocol):
    """What a stream asks of the thing that steps its model: ``BatchRunner`` (a thread of this
    process) or ``pipeline.engines.runner_procs.RunnerProcess`` (a child process), call for call.
    Every call is thread-safe; results come back as ``Future``s, in the order they were asked."""

    def start(self) -> None: ...

    def stop(self, timeout_s: float = 10.0) -> None: ...

    @property
    def open_streams(self) -> frozenset[int]: ...

    def open_stream(self, state_bytes: bytes | None = None) -> int: ...

    def submit(self, stream_id: int, frames: torch.Tensor) -> Future: ...

    def export_state(self, stream_id: int) -> Future: ...

    def close_stream(self, stream_id: int) -> Future: ...


class BatchRunner:
    """Owns ``model`` on one worker thread; thread-safe methods return ``concurrent.futures.Future``."""

    def __init__(self, model: StreamingModel, *, name: str = "ssm-batch-runner",
                 prefill_min: int | None = DEFAULT_PREFILL_MIN) -> None:
        self._model = model
        self._batcher = StreamBatcher(model, prefill_min=prefill_min)
        self._name = name
        self._lock = threading.Lock()
        self._wakeup = threading.Condition(self._lock)
        self._queue: deque[Any] = deque()
        self._open_ids: set[int] = set()
        self._ids = itertools.count()
        self._thread: threading.Thread | None = None
        self._accepting = False
        self._stopping = False
        self.batches_run = 0          # number of StreamBatcher.run calls (for tests and metrics)
        self.streams_stepped = 0      # streams summed over those runs (mean batch size = / batches_run)
        self.step_s = 0.0             # seconds spent in those runs

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        with self._lock:
            if self._thread is not None:
                raise RunnerClosedError("BatchRunner.start() called twice")
            self._thread = threading.Thread(target=self._worker, name=self._name, daemon=True)
            self._accepting = True
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Refuse new work, finish what is queued, join the worker thread."""
        with self._lock:
            self._accepting = False
            self._stopping = True
            self._wakeup.notify()
            thread = self._thread
        if thread is not None:
            thread.join(timeout_s)
            if thread.is_alive():
                raise RunnerClosedError(f"worker thread did not stop within {timeout_s} s")

    def __enter__(self) -> BatchRunner:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def queue_depth(self) -> int:
        """Commands waiting for the worker thread (a backlog means it runs behind)."""
        with self._lock:
            return len(self._queue)

    @property
    def open_streams(self) -> frozenset[int]:
        with self._lock:
            return frozenset(self._open_ids)

    # -- the API pipelines use -----------------------------------------------------------------
    def open_stream(self, state_bytes: bytes | None = None) -> int:
        """Open a stream (fresh, or resumed from ``export_state`` bytes) and return its id.
        The bytes are parsed and validated here, in the caller's thread: StateError if bad."""
        state = None if state_bytes is None else self._model.state_from_bytes(state_bytes)
        if state is not None and state.batch != 1:
            raise StateError(f"state bytes hold {state.batch} streams; open_stream takes one")
        with self._lock:
            self._check_accepting()
            sid = next(self._ids)
            self._open_ids.add(sid)
            self._enqueue(_Open(sid, state))
        return sid

    def submit(self, stream_id: int, frames: torch.Tensor) -> Future:
        """Queue frames (n, d_in) for a stream. -> Future of its outputs (n, d_out)."""
        if not isinstance(frames, torch.Tensor) or frames.dim() != 2:
            raise StreamError(f"frames must be a (n, d_in) tensor, got "
                              f"{tuple(frames.shape) if isinstance(frames, torch.Tensor) else type(frames)}")
        fut: Future = Future()
        with self._lock:
            self._check_open(stream_id)
            self._enqueue(_Submit(stream_id, frames.detach().clone(), fut))
        return fut

    def export_state(self, stream_id: int) -> Future:
        """-> Future[bytes] of the stream's state after every chunk submitted so far."""
        fut: Future = Future()
        with self._lock:
            self._check_open(stream_id)
            self._enqueue(_Export(stream_id, fut))
        return fut

    def close_stream(self, stream_id: int) -> Future:
        """Close a stream after its queued chunks have run. -> Future[None]. The id is refused
        by submit/export from now on."""
        fut: Future = Future()
        with self._lock:
            self._check_open(stream_id)
            self._open_ids.discard(stream_id)
            self._enqueue(_Close(stream_id, fut))
        return fut

    # -- internals (callers hold the lock) -----------------------------------------------------
    def _check_accepting(self) -> None:
        if not self._accepting:
            raise RunnerClosedError("BatchRunner is not running (start() it; or it was stopped)")

    def _check_open(self, stream_id: int) -> None:
        self._check_accepting()
        if stream_id not in self._open_ids:
            raise UnknownStreamError(stream_id)

    def _enqueue(self, cmd: Any) -> None:
        self._queue.append(cmd)
        self._wakeup.notify()

    # -- worker thread -------------------------------------------------------------------------
    def _worker(self) -> None:
        torch.set_flush_denormal(True)   # per-thread CPU flag
        cmds: list[Any] = []
        try:
            with torch.no_grad():
                while True:
                    with self._lock:
                        while not self._queue and not self._stopping:
                            self._wakeup.wait()
                        cmds = list(self._queue)
                        self._queue.clear()
                        stop = self._stopping and not cmds
                    if stop:
                        return
                    self._process(cmds)
                    cmds = []
        except BaseException:
            # a bug in the runner itself: refuse new work and fail every waiting future
            log.exception("BatchRunner worker thread %s died", self._name)
            with self._lock:
                self._accepting = False
                cmds += list(self._queue)
                self._queue.clear()
            err = RunnerClosedError("BatchRunner worker thread died; see the log")
            for cmd in cmds:
                fut = getattr(cmd, "future", None)
                if fut is not None and not fut.done():
                    fut.set_exception(err)
            raise

    def _process(self, cmds: list[Any]) -> None:
        pending: dict[int, list[_Submit]] = {}
        for cmd in cmds:
            if isinstance(cmd, _Open):
                self._batcher.open(cmd.state, stream_id=cmd.stream_id)
            elif isinstance(cmd, _Submit):
                if cmd.future.set_running_or_notify_cancel():
                    pending.setdefault(cmd.stream_id, []).append(cmd)
            else:
                if cmd.stream_id in pending:   # keep per-stream order: run its frames first
                    self._flush(pending)
                if not cmd.future.set_running_or_notify_cancel():
                    if isinstance(cmd, _Close):   # the id is already refused: close it anyway
                        self._batcher.close(cmd.stream_id)
                    continue
                try:
                    if isinstance(cmd, _Close):
                        self._batcher.close(cmd.stream_id)
                        cmd.future.set_result(None)
                    else:
                        cmd.future.set_result(self._batcher.export_bytes(cmd.stream_id))
                except Exception as exc:  # noqa: BLE001 (handed to the caller through its future)
                    cmd.future.set_exception(exc)
        self._flush(pending)

    def _flush(self, pending: dict[int, list[_Submit]]) -> None:
        if not pending:
            return
        chunks = {sid: (subs[0].frames if len(subs) == 1 else torch.cat([s.frames for s in subs]))
                  for sid, subs in pending.items()}
        t0 = time.perf_counter()
        try:
            out = self._batcher.run(chunks)
        except Exception as exc:   # handed to every caller of this batch through its future
            log.exception("batched step failed for %d streams", len(pending))
            for subs in pending.values():
                for sub in subs:
                    sub.future.set_exception(exc)
        else:
            self.step_s += time.perf_counter() - t0
            self.streams_stepped += len(chunks)
            self.batches_run += 1
            for sid, subs in pending.items():
                y, start = out[sid], 0
                for sub in subs:
                    n = sub.frames.shape[0]
                    sub.future.set_result(y[start:start + n])
                    start += n
        pending.clear()
