"""One Silero VAD inference per event-loop tick for every call of the process, not one per call.

    batcher = SileroBatcher.for_running_loop()              # one per event loop (and options)
    p_speech = await batcher.confidence(stream, window, 8000)   # each call's analyzer, each window

Silero v5's ONNX graph, as pipecat 1.14 feeds it (``pipecat/audio/vad/silero.py``)::

    input  (b, c + n) float32   the window of n samples (256 at 8 kHz, 512 at 16 kHz) after the
                                last c samples of the previous one (its context: 32 / 64)
    state  (2, b, 128) float32  the recurrent state (zeros after a reset)
    sr     () int64             8000 or 16000, one rate per run
    -> output (b, 1) P(speech), stateN (2, b, 128)

The graph is batch-agnostic, so the windows that calls submit within one loop iteration are stacked
row by row (inputs on axis 0, states on axis 1), run once, and split back: an ONNX run's fixed cost
(~60 us on these CPUs, more than one window's ~35 us of arithmetic) is paid once per tick instead of
once per call. Each call's state and context stay in its own ``SileroStream``; a batch only borrows
them, groups by sample rate (8 and 16 kHz never share a run), and writes back only to a stream that
was not reset while its window was in flight.

``runs_on``: ``"loop"`` runs the batch on the event loop in the callback that closes the tick
(``call_soon`` from the first submission, or ``call_later(gather_ms)``); ``"thread"`` hands the
batch's ``session.run`` to the process's one Silero thread, one hand-off per batch, and gathers the
next batch while it runs. ``benchmarks/bench_vad_batch.py`` measures both (2026-12-07): on the loop
by default, for the CPU; the thread takes more off the loop but costs more where batches are small.
"""

from __future__ import annotations

import asyncio
import functools
import weakref
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np
import onnxruntime

from pipeline.errors import AudioFormatError, ConfigError

__all__ = ["SILERO_CONTEXT", "SILERO_WINDOW", "BatchRunsOn", "SileroBatcher", "SileroStream", "check_batch_options"]

BatchRunsOn = Literal["loop", "thread"]
SILERO_WINDOW = {8000: 256, 16000: 512}
"""Samples per window the model scores, by sample rate."""
SILERO_CONTEXT = {8000: 32, 16000: 64}
"""Samples of the previous window put in front of each window, by sample rate."""

_executor: ThreadPoolExecutor | None = None  # the process's one Silero thread ("thread" batchers)


class SileroStream(Protocol):
    """One call's model state, borrowed by a batch.

    ``prepare`` returns the row to run, ``(c + n,)`` with the context in front, and the state
    ``(2, 1, 128)``, resetting both first where the rate changed; ``commit`` keeps the row's tail as
    the next context and the new state. ``generation`` changes at every reset, so a batch that was
    in flight across a reset leaves the fresh state alone."""

    generation: int

    def prepare(self, window: np.ndarray, sample_rate_hz: int) -> tuple[np.ndarray, np.ndarray]: ...

    def commit(self, row: np.ndarray, state: np.ndarray, sample_rate_hz: int) -> None: ...


@dataclass(slots=True)
class _Job:
    stream: SileroStream
    generation: int
    row: np.ndarray  # (c + n,)
    state: np.ndarray  # (2, 1, 128)
    sample_rate_hz: int
    result: asyncio.Future[float]


class SileroBatcher:
    """Gathers the windows submitted in one loop iteration and scores them in one ONNX run per
    sample rate. Bound to one event loop (its futures are); ``for_running_loop`` finds it."""

    _by_loop: weakref.WeakKeyDictionary[
        asyncio.AbstractEventLoop, dict[tuple[BatchRunsOn, float], SileroBatcher]
    ] = weakref.WeakKeyDictionary()

    def __init__(
        self,
        session: onnxruntime.InferenceSession,
        loop: asyncio.AbstractEventLoop,
        *,
        runs_on: BatchRunsOn = "loop",
        gather_ms: float = 0.0,
    ) -> None:
        check_batch_options(runs_on, gather_ms)
        self._session = session
        self._loop = loop
        self._runs_on = runs_on
        self._gather_s = gather_ms / 1000.0
        self._pending: list[_Job] = []
        self._scheduled = False
        self._in_flight = 0  # batches on the thread ("thread" only)
        self.batches = 0
        self.windows = 0

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    @classmethod
    def for_running_loop(
        cls, session: onnxruntime.InferenceSession, *, runs_on: BatchRunsOn = "loop", gather_ms: float = 0.0
    ) -> SileroBatcher:
        """The running loop's batcher with these options (made on first use)."""
        loop = asyncio.get_running_loop()
        mine = cls._by_loop.setdefault(loop, {})
        key = (runs_on, gather_ms)
        if key not in mine:
            mine[key] = cls(session, loop, runs_on=runs_on, gather_ms=gather_ms)
        return mine[key]

    async def confidence(self, stream: SileroStream, window: np.ndarray, sample_rate_hz: int) -> float:
        """P(speech) of ``window`` (float32 samples in [-1, 1), one Silero window at
        ``sample_rate_hz``), advancing ``stream``'s state, scored in this tick's batch."""
        if sample_rate_hz not in SILERO_WINDOW:
            raise AudioFormatError(f"Silero VAD needs 8000 or 16000 Hz, got {sample_rate_hz}")
        if window.shape != (SILERO_WINDOW[sample_rate_hz],):
            raise AudioFormatError(
                f"a Silero window at {sample_rate_hz} Hz is {SILERO_WINDOW[sample_rate_hz]} samples, "
                f"got shape {window.shape}"
            )
        row, state = stream.prepare(window, sample_rate_hz)
        result: asyncio.Future[float] = self._loop.create_future()
        self._pending.append(_Job(stream, stream.generation, row, state, sample_rate_hz, result))
        if not self._scheduled and not self._in_flight:
            self._scheduled = True
            if self._gather_s:
                self._loop.call_later(self._gather_s, self._flush)
            else:
                self._loop.call_soon(self._flush)
        return await result

    def _flush(self) -> None:
        self._scheduled = False
        jobs, self._pending = self._pending, []
        for rate_hz in {job.sample_rate_hz for job in jobs}:
            group = [job for job in jobs if job.sample_rate_hz == rate_hz and not job.result.cancelled()]
            if not group:
                continue
            feeds = _feeds(group, rate_hz)
            self.batches += 1
            self.windows += len(group)
            if self._runs_on == "loop":
                try:
                    outs = self._session.run(None, feeds)
                except Exception as exc:  # noqa: BLE001 - handed to every waiting call
                    _fail(group, exc)
                else:
                    _deliver(group, outs)
                continue
            self._in_flight += 1
            done = self._loop.run_in_executor(_silero_thread(), self._session.run, None, feeds)
            done.add_done_callback(functools.partial(self._landed, group))

    def _landed(self, group: list[_Job], done: asyncio.Future) -> None:
        self._in_flight -= 1
        if done.exception() is not None:
            _fail(group, done.exception())  # type: ignore[arg-type]
        else:
            _deliver(group, done.result())
        if self._pending and not self._in_flight and not self._scheduled:
            self._scheduled = True  # what gathered while the thread ran goes next
            self._loop.call_soon(self._flush)


def check_batch_options(runs_on: str, gather_ms: float) -> None:
    """Raise ``ConfigError`` unless ``runs_on`` is "loop" or "thread" and ``gather_ms`` in 0..50."""
    if runs_on not in ("loop", "thread"):
        raise ConfigError(f"runs_on must be 'loop' or 'thread', got {runs_on!r}")
    if not 0.0 <= gather_ms <= 50.0:
        raise ConfigError(f"gather_ms {gather_ms} is outside 0..50 ms")


def _feeds(group: list[_Job], rate_hz: int) -> dict[str, np.ndarray]:
    return {
        "input": np.stack([job.row for job in group]),
        "state": np.concatenate([job.state for job in group], axis=1),
        "sr": np.array(rate_hz, dtype=np.int64),
    }


def _deliver(group: list[_Job], outs: list) -> None:
    p_speech, state = outs[0], outs[1]
    for i, job in enumerate(group):
        if job.result.cancelled():
            continue  # its call ended mid-tick: its window was never consumed
        if job.stream.generation == job.generation:  # not reset while in flight
            job.stream.commit(job.row, state[:, i : i + 1, :].copy(), job.sample_rate_hz)
        job.result.set_result(float(p_speech[i, 0]))


def _fail(group: list[_Job], exc: BaseException) -> None:
    for job in group:
        if not job.result.done():
            job.result.set_exception(exc)


def _silero_thread() -> ThreadPoolExecutor:
    global _executor
    if _executor is None:
        _executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="silero-batch")
    return _executor
