"""Streaming pocketsphinx 5 recognizer for phone (8 kHz) and wideband (16 kHz) audio.

    engine = SphinxEngine(sample_rate_hz=8000)    # loads the en-us model: ~0.4 s, do it once
    engine.start_utt()
    partial = engine.feed(pcm_int16)              # new partial hypothesis, or None if unchanged
    text = engine.end_utt()                       # final hypothesis ("" if nothing was heard)

The en-us acoustic model shipped in the wheel is 16 kHz only, so input at any other rate (8 kHz
phone audio above all) is resampled with a streaming soxr resampler, flushed at ``end_utt``.
The search runs with ``fwdflat=False, bestpath=False``: the final hypothesis is the first-pass
one, which cuts ``end_utt`` from ~155 ms to ~36 ms (FACTS.md; 31 ms p50 at 16 kHz and 46 ms at
8 kHz measured here) for a small loss in accuracy. Capping the search at 3000 active HMMs a
frame would halve the decoding cost (real-time factor 0.28 -> 0.14 at 8 kHz) but costs accuracy
(held-out WER 0.795 -> 0.822), so it is not done: the SSM recognizer is the answer to many calls
at once. For 8 kHz input the cepstral mean normalization starts from a value measured on
upsampled narrowband speech (see ``_CMNINIT_NARROWBAND``); it then adapts live, utterance by
utterance, as usual.

The decoder is synchronous and owned by one engine; one engine serves one stream, utterance
after utterance, and runs ``feed``/``end_utt`` off the event loop. Building one loads the model:
~0.4 s holding the GIL (the whole event loop stalls) and ~91 MB. So calls take engines from the
process-wide ``SPHINX_POOL`` and give them back; ``reset()`` (run by ``release``) discards an open
utterance and restores the decoder's starting cepstral mean, so no call inherits another's channel:

    SPHINX_POOL.prewarm(8000, 4)                  # at server start, before calls arrive
    engine = SPHINX_POOL.acquire(8000)            # an idle engine, or a new one if none is left
    try:
        text = engine.transcribe(pcm_int16)
    finally:
        SPHINX_POOL.release(engine)               # reset and idle, ready for the next call

``process_raw`` also holds the GIL while it decodes, so ``parley serve`` keeps its decoders in
worker processes instead (``pipeline.engines.sphinx_procs.SphinxProcessPool``, same interface),
made the default with ``set_default_pool``.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Protocol

import numpy as np
import soxr
from pocketsphinx import Decoder, get_model_path

from pipeline.audio.pcm import as_int16
from pipeline.errors import AudioFormatError, ConfigError, EngineUnavailableError, PipelineError
from ssm_engine.stt.hints import Hints, Recognition

logger = logging.getLogger(__name__)

MODEL_RATE_HZ = 16000
SUPPORTED_RATES_HZ = (8000, 16000, 22050, 24000, 32000, 44100, 48000)


# Cepstral mean of 8 kHz speech upsampled to 16 kHz (flite voices rms, awb and kal, measured with
# pocketsphinx's live CMN after 12 utterances). The missing 4-8 kHz band shifts the mean far from
# the model's default start ("40,3,-1"); live CMN gets there only after a few utterances, and
# until then the first turns of a call come out garbled ("ha ha you" for "hello how are you").
_CMNINIT_NARROWBAND = (
    "47.30,32.17,-27.46,46.79,-18.92,0.54,19.13,-26.30,10.62,-12.05,5.05,13.02,-14.40"
)


@functools.cache
def _decoder_config(narrowband: bool) -> dict[str, object]:
    """Decoder keyword arguments, resolved once per process (per band)."""
    model = Path(get_model_path())
    config: dict[str, object] = {
        "hmm": str(model / "en-us" / "en-us"),
        "lm": str(model / "en-us" / "en-us.lm.bin"),
        "dict": str(model / "en-us" / "cmudict-en-us.dict"),
        "samprate": MODEL_RATE_HZ,
        "fwdflat": False,
        "bestpath": False,
        "loglevel": "FATAL",
    }
    if narrowband:
        config["cmninit"] = _CMNINIT_NARROWBAND
    return config


class SphinxEngine:
    """One pocketsphinx decoder and its utterance state.

    ``partial_every_ms``: how much audio between two partial hypotheses (each costs a backtrace).
    """

    def __init__(self, sample_rate_hz: int = 16000, partial_every_ms: int = 100) -> None:
        if sample_rate_hz not in SUPPORTED_RATES_HZ:
            raise AudioFormatError(f"sample_rate_hz={sample_rate_hz} not in {SUPPORTED_RATES_HZ}")
        self.sample_rate_hz = sample_rate_hz
        self.partial_every_ms = partial_every_ms
        t0 = time.perf_counter()
        try:
            self._decoder = Decoder(**_decoder_config(sample_rate_hz <= 8000))
        except (RuntimeError, ValueError, OSError) as exc:
            raise EngineUnavailableError(
                f"pocketsphinx en-us model failed to load ({exc}); `pip install pocketsphinx>=5`"
            ) from exc
        self.load_s = time.perf_counter() - t0
        self._initial_cmn: str = self._decoder.get_cmn()
        self._resampler: soxr.ResampleStream | None = None
        self._in_utt = False
        self._since_partial = 0
        self._last_partial = ""
        self.last_end_utt_s = 0.0
        """Wall time of the last ``end_utt`` (flush + final search)."""

    @property
    def in_utterance(self) -> bool:
        return self._in_utt

    def reset(self) -> None:
        """Make the engine as good as new for another stream: discard an open utterance, drop the
        resampler, rebuild the feature front end and restore the cepstral mean the decoder
        started with (live CMN adapts to each caller's channel). Raises pocketsphinx's
        ``RuntimeError`` if the decoder is broken."""
        in_utt, self._in_utt = self._in_utt, False
        self._resampler = None
        self._since_partial = 0
        self._last_partial = ""
        if in_utt:
            self._decoder.end_utt()
        self._decoder.reinit_feat()  # a fresh front end (0.1 ms): no running sums carried over
        self._decoder.set_cmn(self._initial_cmn)

    def start_utt(self) -> None:
        """Begin an utterance (ending an unfinished one first, discarding its result)."""
        if self._in_utt:
            self._decoder.end_utt()
        self._resampler = (
            soxr.ResampleStream(self.sample_rate_hz, MODEL_RATE_HZ, 1, dtype="int16", quality="HQ")
            if self.sample_rate_hz != MODEL_RATE_HZ
            else None
        )
        self._decoder.start_utt()
        self._in_utt = True
        self._since_partial = 0
        self._last_partial = ""

    def feed(self, pcm: bytes | np.ndarray) -> str | None:
        """Decode more audio of the utterance; return the partial hypothesis if it changed."""
        if not self._in_utt:
            raise PipelineError("feed() called outside an utterance: call start_utt() first")
        samples = as_int16(pcm)
        if not len(samples):
            return None
        if self._resampler is not None:
            samples = self._resampler.resample_chunk(samples)
        self._process(samples)
        self._since_partial += len(samples)
        if self._since_partial < MODEL_RATE_HZ * self.partial_every_ms // 1000:
            return None
        self._since_partial = 0
        return self._new_partial()

    def end_utt(self) -> str:
        """Finish the utterance and return its final hypothesis ("" if none)."""
        if not self._in_utt:
            raise PipelineError("end_utt() called outside an utterance")
        t0 = time.perf_counter()
        if self._resampler is not None:
            self._process(self._resampler.resample_chunk(np.zeros(0, np.int16), last=True))
            self._resampler = None
        self._decoder.end_utt()
        self._in_utt = False
        hyp = self._decoder.hyp()
        self.last_end_utt_s = time.perf_counter() - t0
        return hyp.hypstr.strip() if hyp is not None else ""

    def transcribe(self, pcm: bytes | np.ndarray) -> str:
        """Recognize one whole utterance."""
        self.start_utt()
        self.feed(pcm)
        return self.end_utt()

    def _process(self, samples: np.ndarray) -> None:
        if len(samples):
            self._decoder.process_raw(samples.astype("<i2", copy=False).tobytes(), False, False)

    def _new_partial(self) -> str | None:
        hyp = self._decoder.hyp()
        text = hyp.hypstr.strip() if hyp is not None else ""
        if text == self._last_partial:
            return None
        self._last_partial = text
        return text or None


class SphinxPool:
    """Idle ``SphinxEngine``s per sample rate, shared by the calls of one process; thread-safe.

    An engine is out (owned by one caller) from ``acquire`` to ``release``, never idle meanwhile.
    ``max_idle``: most idle engines kept per rate; more are dropped on release.
    ``built``: how many engines this pool has constructed.
    """

    def __init__(self, max_idle: int = 16) -> None:
        if max_idle < 0:
            raise ConfigError(f"max_idle must be >= 0, got {max_idle}")
        self.max_idle = max_idle
        self.built = 0
        self._idle: dict[int, list[SphinxEngine]] = {}
        self._lock = threading.Lock()

    def acquire(self, sample_rate_hz: int, partial_every_ms: int = 100) -> SphinxEngine:
        """An idle engine for this rate, or a new one (~0.4 s, holding the GIL) if none is idle."""
        with self._lock:
            idle = self._idle.get(sample_rate_hz)
            engine = idle.pop() if idle else None
        if engine is None:
            engine = self._build(sample_rate_hz)
        engine.partial_every_ms = partial_every_ms
        return engine

    def release(self, engine: SphinxEngine) -> None:
        """Reset the engine and keep it idle; one whose reset fails, or past ``max_idle``, is
        dropped. The caller must not touch it afterwards."""
        with self._lock:
            if any(e is engine for e in self._idle.get(engine.sample_rate_hz, ())):
                raise PipelineError("SphinxPool.release() called twice for the same engine")
        try:
            engine.reset()
        except RuntimeError:
            logger.warning("dropping a pocketsphinx engine whose reset failed", exc_info=True)
            return
        with self._lock:
            idle = self._idle.setdefault(engine.sample_rate_hz, [])
            if len(idle) < self.max_idle:
                idle.append(engine)

    def prewarm(self, sample_rate_hz: int, n: int) -> int:
        """Build engines until ``min(n, max_idle)`` are idle at this rate; return how many were
        built. Blocks for ~0.4 s per engine: call it before calls arrive."""
        built = 0
        while self.idle_count(sample_rate_hz) < min(n, self.max_idle):
            engine = self._build(sample_rate_hz)
            built += 1
            with self._lock:
                self._idle.setdefault(sample_rate_hz, []).append(engine)
        return built

    def idle_count(self, sample_rate_hz: int) -> int:
        with self._lock:
            return len(self._idle.get(sample_rate_hz, ()))

    def _build(self, sample_rate_hz: int) -> SphinxEngine:
        engine = SphinxEngine(sample_rate_hz)
        with self._lock:
            self.built += 1
        logger.debug("pocketsphinx engine built in %.3f s at %d Hz", engine.load_s, sample_rate_hz)
        return engine


SPHINX_POOL = SphinxPool()
"""The process-wide in-process pool."""

_default_pool: object = SPHINX_POOL


def default_pool():  # -> SphinxPool | sphinx_procs.SphinxProcessPool
    """Where ``SphinxSTTService`` takes its engines unless given a pool: ``SPHINX_POOL`` until
    ``set_default_pool`` (``parley serve`` sets a ``SphinxProcessPool`` of worker processes)."""
    return _default_pool


def set_default_pool(pool: object) -> object:
    """Make ``pool`` the default (anything with acquire/release); return the previous one."""
    global _default_pool
    previous, _default_pool = _default_pool, pool
    return previous


class EnginePool(Protocol):
    """Where a call's engine comes from: ``SphinxPool``, or ``sphinx_procs.SphinxProcessPool``
    (worker processes; its engines answer the same calls as ``SphinxEngine``)."""

    def acquire(self, sample_rate_hz: int, partial_every_ms: int = 100) -> SphinxEngine: ...

    def release(self, engine: SphinxEngine) -> None: ...


def _ignore(exc: Exception) -> None:
    """The report callback before ``start`` hands one over."""


# -- pocketsphinx behind a TranscriptStream -------------------------------------------------------
class SphinxBackend:
    """The engine lives on one thread of its own (``executor``): it is taken there, fed there and
    handed back there, after the work already queued, so it is never in two calls at once."""

    errors: tuple[type[Exception], ...] = (PipelineError,)

    def __init__(self, pool: EnginePool, partial_every_ms: int = 100) -> None:
        self.pool = pool
        self.partial_every_ms = partial_every_ms
        self.engine: SphinxEngine | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._rate = 0
        self._report: Callable[[Exception], None] = _ignore

    async def _run(self, fn: Callable, *args: object):  # -> what fn returns
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    async def start(self, sample_rate_hz: int, report: Callable[[Exception], None]) -> None:
        self._rate, self._report = sample_rate_hz, report
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sphinx-stt")
        self.engine = await self._run(self.pool.acquire, sample_rate_hz, self.partial_every_ms)

    async def open(self, sample_rate_hz: int, hints: Hints) -> _SphinxUtterance | None:
        if self.engine is None:   # lost, and no replacement could be had
            return None
        try:
            await self._run(self.engine.start_utt)
        except EngineUnavailableError as exc:
            # the worker died between utterances, so nothing is lost yet: report it and start
            # this utterance on a fresh engine
            await self.replace_engine()
            self._report(exc)
            if self.engine is None:
                return None
            try:
                await self._run(self.engine.start_utt)
            except EngineUnavailableError:
                await self.replace_engine()
                raise
        return _SphinxUtterance(self, self.engine)

    async def replace_engine(self) -> None:
        """The engine's worker failed: drop it and take a fresh engine, so the call goes on
        (the utterance in progress is lost). If none can be had, the call goes on unheard."""
        broken, self.engine = self.engine, None
        if broken is not None:
            await self._run(self.pool.release, broken)
        try:
            self.engine = await self._run(self.pool.acquire, self._rate, self.partial_every_ms)
        except EngineUnavailableError:
            logger.error("STT: no pocketsphinx engine to replace the failed one; the rest of this "
                         "call is not transcribed", exc_info=True)
            return
        logger.warning("STT: the pocketsphinx engine failed; went on with a fresh one")

    async def close(self) -> None:
        """Hand the engine back after the work already queued on its thread, then shut that down.

        Shielded: if this await is cancelled, the release still runs (``shutdown(wait=False)``
        lets queued work finish), so the engine goes back to the pool all the same."""
        engine, self.engine = self.engine, None
        executor, self._executor = self._executor, None
        if executor is None:
            return
        released = executor.submit(self.pool.release, engine) if engine is not None else None
        executor.shutdown(wait=False)
        if released is not None:
            await asyncio.shield(asyncio.wrap_future(released))


class _SphinxUtterance:
    def __init__(self, backend: SphinxBackend, engine: SphinxEngine) -> None:
        self._backend, self._engine = backend, engine
        self._heard = ""

    @property
    def heard(self) -> str:
        return self._heard

    async def push(self, pcm: bytes) -> str | None:
        try:
            partial = await self._backend._run(self._engine.feed, pcm)
        except EngineUnavailableError:
            await self._backend.replace_engine()
            raise
        if partial:
            self._heard = partial
        return partial or None

    async def finish(self) -> tuple[str, Recognition | None]:
        try:
            text = await self._backend._run(self._engine.end_utt)
        except EngineUnavailableError:
            await self._backend.replace_engine()
            raise
        return text, None

    def pause(self, paused: bool) -> None:
        """pocketsphinx's final comes at ``end_utt``, after the stop: nothing to begin."""

    def abort(self) -> None:
        """The pool resets the engine when it goes back (``close``)."""
