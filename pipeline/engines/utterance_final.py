"""One utterance's final pass, as the recogniser (``ssm_recognizer.RecognizerUtterance``) runs it:
the pieces encoded while the caller speaks, and the early finals decoded while the VAD's stop
timer runs (``FinalPass``).

    final = FinalPass(engine, hints, heard)   # heard: the utterance's audio list, as it grows
    final.add(x)                              # each push's audio at the model's rate
    final.pause(True)                         # the VAD's stop timer started: an early final begins
    fut = final.finish()                      # -> Future of the final (Recognition | None)

The work runs in the engine's final-pass workers (``final_procs``) or its thread pool.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import threading
from collections import deque
from concurrent.futures import Future
from typing import Any

import numpy as np

from pipeline.engines.final_procs import FinalPassProcess
from pipeline.engines.whisper_final import decode_whole_final, make_final_decoder
from pipeline.errors import EngineUnavailableError
from ssm_engine.stt.hints import Hints, Recognition

__all__ = ["EARLY_MAX_S", "FINAL_CUT_SEARCH_S", "FINAL_PIECE_S", "PAUSE_LOUD_MAX_S", "QUIET_FLOOR",
           "QUIET_RATIO", "SPECULATE_MAX", "SPECULATE_QUIET_S", "FinalPass"]

logger = logging.getLogger(__name__)

FINAL_PIECE_S = 6.0          # audio the final pass encodes ahead while the caller still speaks
FINAL_CUT_SEARCH_S = 1.5     # a piece ends at the quietest 20 ms of its last this much
SPECULATE_QUIET_S = 0.1      # quiet after speech that starts the final pass before the turn ends
EARLY_MAX_S = 18.0           # an utterance longer than this gets no early final (each is decoded
#                              whole, from its start)
PAUSE_LOUD_MAX_S = 0.2       # an early final begun at the VAD's pause is stale once this much
#                              loud audio follows it (speech the VAD did not hear as speech)
SPECULATE_MAX = 8            # such early passes an utterance at most (each pause may start one);
#                              0 turns them off (benchmarks/bench_stt_human.py --engines ssm-late)
QUIET_RATIO = 0.05           # a 20 ms frame this far below the utterance's loudest is quiet: at
#                              0.15 an early final cut soft word ends ("cucumber" heard "you can
#                              be"); 0.05 loses nothing on the human clips (RESULTS.md)
QUIET_FLOOR = 1e-3           # and any frame under -60 dBFS RMS


def _quiet_cut(audio: np.ndarray, rate_hz: int) -> int:
    """Where a piece of ``audio`` ends: the middle of its quietest 20 ms frame within the last
    ``FINAL_CUT_SEARCH_S`` (a pause between words, if there is one)."""
    step = rate_hz // 50
    start = max(0, audio.size - int(FINAL_CUT_SEARCH_S * rate_hz))
    n = (audio.size - start) // step
    if n < 1:
        return audio.size
    frames = audio[start: start + n * step].reshape(n, step)
    k = int(np.argmin(np.einsum("ij,ij->i", frames, frames)))
    return max(1, start + k * step + step // 2)


@dataclasses.dataclass(slots=True)
class _Early:
    """An early final being decoded: its future, and its number in the utterance (the worker's
    name for it, with the utterance's uid)."""

    fut: Future
    n: int
    proc: FinalPassProcess | None = None     # the worker decoding it (None: the thread pool)


class FinalPass:
    """One utterance's final pass, piece by piece, in the engine's final-pass worker (a process,
    ``final_procs``, or a thread): each piece encoded whole, the SSM's state and the beam search
    carried on to the next (``ssm_engine.stt.final_pass``). ``add`` (the event loop, each push)
    queues audio and hands over a piece once ``FINAL_PIECE_S`` are queued; ``finish`` hands over
    the rest. -> a Future of the final (``Recognition``), or of None when the pass failed or
    heard nothing (the stream's final then stands). The pieces of one utterance run one after
    another, in order.

    Early finals: the utterance so far is decoded at once, on fresh state, while the VAD's stop
    timer runs, begun two ways. (1) The VAD's pause (``pause``: its stop timer started, about
    ``stop_secs`` before the stop); the VAD starting again discards it, as does more than
    ``PAUSE_LOUD_MAX_S`` of loud audio after it. (2) ``SPECULATE_QUIET_S``
    of quiet after speech, by loudness; speech again discards it. A quiet-rule decode is begun
    only when something loud came after the pause's (what the VAD heard as no speech may be a
    word's soft end). If the utterance then ends, the first of them to be ready is the final (the
    quiet rule's when both are: it heard more)."""

    _uids = itertools.count(1)

    def __init__(self, engine: Any, hints: Hints, heard: list[np.ndarray]) -> None:
        self._proc = engine.final_worker()            # the utterance's pieces go to this one
        self._procs = engine.final_procs
        self._pool = engine._final_pool
        self._model = engine.final_model
        assert self._proc is not None or (self._model is not None and self._pool is not None)
        self._rate = engine.model.config.sample_rate_hz
        self._beam, self._hints = engine.beam, hints
        self._uid = next(self._uids)
        self._whisper = engine.final_whisper
        self._decoder = (make_final_decoder(self._model, engine.beam, hints, self._whisper)
                         if self._model is not None else None)
        self._pending: list[np.ndarray] = []
        self._pending_n = 0
        self._heard = heard                 # the utterance so far (its own list, kept for replays)
        self._heard_n = 0
        self._queue: deque[tuple[np.ndarray, bool]] = deque()
        self._lock = threading.Lock()
        self._running = False
        self._failed = False
        self._done: Future | None = None
        self.pieces = 0                    # pieces handed over so far
        self._peak = 0.0                   # the loudest 20 ms so far (RMS)
        self._quiet = 0                    # samples of quiet since the last speech
        self._spec: _Early | None = None   # the early final of the utterance so far (quiet rule)
        self._vspec: _Early | None = None  # the one begun at the VAD's pause
        self._loud_after_pause = 0         # loud samples since ``_vspec`` began
        self.speculated = 0                # early finals started
        self.early_final = False           # the final is an early one

    @property
    def decoded(self) -> int:
        """Pieces decoded so far (in a process: handed over)."""
        return self._decoder.pieces if self._decoder is not None else self.pieces

    def add(self, x: np.ndarray) -> None:
        self._pending.append(x)
        self._pending_n += x.size
        if SPECULATE_MAX:                  # early finals on: listen for the quiet after speech
            self._heard_n += x.size
            if self._heard_n > EARLY_MAX_S * self._rate:   # too long to decode again at each pause
                self._stale(self._spec)
                self._stale(self._vspec)
                self._spec = self._vspec = None
            self._listen(x)
        if self._pending_n >= FINAL_PIECE_S * self._rate:
            audio = np.concatenate(self._pending)
            cut = _quiet_cut(audio, self._rate)
            self._pending, self._pending_n = [audio[cut:]], audio.size - cut
            self._submit(audio[:cut], last=False)

    def _listen(self, x: np.ndarray) -> None:
        step = self._rate // 50
        for i in range(0, x.size, step):
            frame = x[i: i + step]
            rms = float(np.sqrt(np.mean(frame * frame))) if frame.size else 0.0
            if rms > QUIET_FLOOR and rms > QUIET_RATIO * self._peak:
                self._peak = max(self._peak, rms)
                self._quiet = 0
                self._stale(self._spec)    # speech again: an early final is stale
                self._spec = None
                if self._vspec is not None:
                    self._loud_after_pause += frame.size
                    if self._loud_after_pause > PAUSE_LOUD_MAX_S * self._rate:   # speech the
                        self._stale(self._vspec)                              # VAD missed
                        self._vspec = None
            else:
                self._quiet += frame.size
        if (self._spec is None and self._quiet >= SPECULATE_QUIET_S * self._rate
                and (self._vspec is None or self._loud_after_pause)):
            self._spec = self._speculate()

    def pause(self, paused: bool) -> None:
        """The VAD's stop timer started (``paused``): decode the utterance so far, unless the
        quiet rule's decode already covers every loud frame; or speech came again: that decode
        is stale."""
        if not paused:
            self._stale(self._vspec)
            self._vspec = None
        elif SPECULATE_MAX and self._vspec is None and self._spec is None:
            self._vspec = self._speculate()
            self._loud_after_pause = 0

    def _speculate(self) -> _Early | None:
        """An early final of the utterance so far, begun now (None: none may be, or none could)."""
        if not (self._peak > 0 and self.speculated < SPECULATE_MAX
                and self._heard_n <= EARLY_MAX_S * self._rate):
            return None
        self.speculated += 1
        audio = np.concatenate(self._heard)
        if self._procs:
            proc = min(self._procs, key=lambda p: p.in_flight)     # the least busy worker
            try:
                fut = proc.whole(audio, self._hints, uid=self._uid, spec=self.speculated)
            except EngineUnavailableError as exc:
                logger.warning("STT: no early final (%s)", exc)
                return None
            return _Early(_or_none(fut, "an early final"), self.speculated, proc)
        assert self._pool is not None
        return _Early(self._pool.submit(self._early, audio), self.speculated)

    def _stale(self, early: _Early | None) -> None:
        """``early`` will not be the final: if it has not begun, it never does."""
        if early is not None and not early.fut.done():
            if early.proc is not None:
                early.proc.forget(self._uid, early.n)
            else:
                early.fut.cancel()

    def _want(self, early: _Early | None) -> Future | None:
        """The turn waits for ``early``: it runs before early finals not yet begun."""
        if early is None:
            return None
        if early.proc is not None and not early.fut.done():
            early.proc.want(self._uid, early.n)
        return early.fut

    def _early(self, audio: np.ndarray) -> Recognition | None:
        """The whole utterance so far on fresh state and a fresh search (the piecewise pass's
        own are untouched)."""
        assert self._model is not None
        try:
            return decode_whole_final(self._model, self._beam, self._hints, audio, self._whisper)
        except Exception:           # our bug: the stream's final stands
            logger.exception("STT: an early final failed; the stream's transcript stands")
            return None

    def finish(self) -> Future:
        spec, vspec = self._want(self._spec), self._want(self._vspec)
        early = _first_of(spec, vspec) if spec is not None and vspec is not None else spec or vspec
        if self._done is None and early is not None:
            self._done, self.early_final = early, True
            self._failed = True            # pieces still queued are not decoded
            if self._proc is not None and self.pieces:
                self._proc.drop(self._uid)
        if self._done is None:
            rest = np.concatenate(self._pending) if self._pending else np.zeros(0, np.float32)
            self._pending, self._pending_n = [], 0
            if self._proc is not None:
                try:
                    self._done = _or_none(self._proc.last(self._uid, rest, hints=(
                        self._hints if not self.pieces else None)), "the final pass")
                except EngineUnavailableError as exc:
                    logger.warning("STT: the stream's final stands (%s)", exc)
                    self._done = Future()
                    self._done.set_result(None)
            else:
                self._done = Future()
                self._submit(rest, last=True)
        return self._done

    def abort(self) -> None:
        self._failed = True                # pieces still queued are skipped
        self._stale(self._spec)
        self._stale(self._vspec)
        self._spec = self._vspec = None
        if self._proc is not None and self.pieces:
            self._proc.drop(self._uid)

    def _submit(self, audio: np.ndarray, last: bool) -> None:
        if self._proc is not None:         # a piece while the caller speaks (``finish``: the last)
            self._proc.piece(self._uid, audio, hints=self._hints if not self.pieces else None)
            self.pieces += 1
            return
        assert self._pool is not None
        if not last:
            self.pieces += 1
        with self._lock:
            self._queue.append((audio, last))
            if self._running:
                return
            self._running = True
        self._pool.submit(self._drain)

    def _drain(self) -> None:
        while True:
            with self._lock:
                if not self._queue:
                    self._running = False
                    return
                audio, last = self._queue.popleft()
            self._run(audio, last)

    def _run(self, audio: np.ndarray, last: bool) -> None:
        assert self._decoder is not None
        try:
            if not self._failed:
                self._decoder.piece(audio)
            if last:
                assert self._done is not None
                self._done.set_result(None if self._failed else self._decoder.result())
        except Exception:           # our bug: the stream's final is kept, the call goes on
            logger.exception("STT: the final pass failed; the stream's final stands")
            self._failed = True
            if last and self._done is not None and not self._done.done():
                self._done.set_result(None)


def _holds(fut: Future) -> bool:
    """True when the final pass's ``fut`` has already given a final (not None: it neither failed
    nor heard nothing)."""
    return (fut.done() and not fut.cancelled() and fut.exception() is None
            and fut.result() is not None)


def _first_of(later: Future, earlier: Future) -> Future:
    """The first of two early finals to hold a final (``_holds``; ``later``, which heard more,
    when both already do), or None once neither does."""
    out: Future = Future()
    lock = threading.Lock()

    def pick(_: Future) -> None:
        with lock:
            if out.done():
                return
            for fut in (later, earlier):
                if _holds(fut):
                    out.set_result(fut.result())
                    return
            if later.done() and earlier.done():
                out.set_result(None)

    later.add_done_callback(pick)
    earlier.add_done_callback(pick)
    return out


def _or_none(fut: Future, what: str) -> Future:
    """``fut``'s result, or None (the stream's final stands) when it failed: one log line."""
    out: Future = Future()

    def done(f: Future) -> None:
        if f.cancelled():
            out.cancel()
        elif f.exception() is not None:
            logger.warning("STT: %s failed, the stream's final stands (%s)", what, f.exception())
            out.set_result(None)
        else:
            out.set_result(f.result())

    fut.add_done_callback(done)
    return out
