"""parley's streaming SSM voice for asyncio: one model thread per process, many calls.

    engine = SSMVoiceEngine.shared("models/tts")   # one per voice folder, for every call
    utt = engine.open(8000)
    async for chunk in utt.speak("Your order ships on Tuesday."):   # SpeechChunk, 20 ms or more
        play(chunk.pcm)                            # int16 at 8 kHz; chunk.words: (word, start_s)
    utt.cancel()                                   # barge-in: nothing more is computed or yielded

One engine per model directory serves every call of the process: a loaded ``TTSVoice`` and the
one thread that owns it. Every model step runs on that thread, never on the event loop; the
asyncio side awaits futures. Each utterance is its own ``TTSStream`` (per-call state stays
apart); the thread makes 20 ms chunks, so utterances of different calls interleave chunk by
chunk, and keeps each live utterance up to ``lead_chunks`` (100 ms) ahead of its requests: a
request takes every chunk made so far, so chunks are usually ready when asked for, an event loop
slowed by many calls does not turn into gaps in their audio, and a call costs one thread
hand-off per ~100 ms of speech. Each tick the thread takes every request
queued (up to ``max_batch``, earliest deadline first: a chunk's deadline is when its audio would
start playing if the utterance had begun playing as soon as it was asked for, its start time
plus the audio already made) and serves them together with ``TTSVoice.pull_many``: one batched
encoder step for the phones due and one batched decoder step for the frames due, so sixteen
calls starting at once cost about one batched step, not sixteen steps in turn. Batched matmuls
round differently from batch-1 ones: a call's samples may differ from the same text spoken alone
by float rounding (~1e-8 with a trained voice). A model error fails every request of its tick.

Output rate: the voice speaks at 16 kHz; at 8 kHz (phone calls) a causal low-pass FIR halves the
rate sample-exactly (``HalfRateFilter``: soxr's streaming resampler holds ~100 ms of audio back,
which would delay the first chunk), so every 20 ms chunk leaves at once. Other rates go through
soxr. The pipecat service over this engine is ``pipeline.services.ssm_tts.SSMTTSService``.
``pipeline.engines.voice_procs.VoiceProcess`` runs this engine in a child process (its own GIL)
behind the same interface; ``parley serve`` does that.
"""

from __future__ import annotations

import asyncio
import collections
import heapq
import itertools
import logging
import re
import threading
import time
from collections.abc import AsyncGenerator
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Protocol, cast

import numpy as np
import soxr
import torch

from pipeline.audio.pcm import float_to_int16
from pipeline.engines.speaking import SpeechChunk
from pipeline.errors import AudioFormatError, ConfigError, EngineUnavailableError, PipelineError
from pipeline.voices import DEFAULT_VOICE, VOICES
from ssm_engine import SSMEngineError
from ssm_engine.device import resolve_device
from ssm_engine.tts.synth import TTSStream, TTSVoice

__all__ = ["DEFAULT_MODEL_DIR", "SSMVoiceEngine", "VoiceUtterance", "SpeechChunk",
           "check_voice_dir", "HalfRateFilter"]

logger = logging.getLogger(__name__)

DEFAULT_MODEL_DIR = VOICES[DEFAULT_VOICE].folder       # the default voice's folder (models/tts-joe)
VOICE_FILES = ("config.json", "model.safetensors")
FIRST_WORDS = 4        # words pushed before the first chunk (then one more a chunk)


def check_voice_dir(model_dir: str | Path) -> Path:
    """The voice folder, or ``EngineUnavailableError`` naming what is missing (cheap: no load)."""
    path = Path(model_dir)
    missing = [f for f in VOICE_FILES if not (path / f).is_file()]
    if missing:
        raise EngineUnavailableError(
            f"no SSM voice at {path}: {', '.join(missing)} missing (train one with "
            f"`parley train tts`, pass --tts-model DIR, or use --tts espeak)")
    return path


class HalfRateFilter:
    """16 kHz -> 8 kHz, streaming and sample-exact: n samples in, n // 2 out (any split).

    A causal 47-tap windowed-sinc low-pass (cut-off 3.7 kHz, Blackman window, ~1.4 ms delay)
    followed by keeping every second sample; the filter's history carries across chunks."""

    TAPS = 47

    def __init__(self) -> None:
        n = np.arange(self.TAPS) - (self.TAPS - 1) / 2
        h = 2 * 3700 / 16000 * np.sinc(2 * 3700 / 16000 * n) * np.blackman(self.TAPS)
        self._h = (h / h.sum()).astype(np.float32)
        self._history = np.zeros(self.TAPS - 1, np.float32)
        self._phase = 0                     # index, within the next chunk, of the next kept sample

    def process(self, x: np.ndarray) -> np.ndarray:
        if len(x) == 0:
            return np.zeros(0, np.float32)
        buf = np.concatenate([self._history, x.astype(np.float32, copy=False)])
        y = np.convolve(buf, self._h, mode="valid")      # y[i] is the output at x[i]
        out = y[self._phase::2]
        self._phase = (self._phase - len(x)) % 2
        self._history = buf[len(buf) - (self.TAPS - 1):]
        return out


class SSMVoiceEngine:
    """A loaded voice and the one thread that runs every model step, earliest deadline first.

    ``SSMVoiceEngine.shared(model_dir)`` returns one engine per directory for the whole process
    (thread-safe); build one directly from a ``TTSVoice`` (and ``close()`` it) in tests."""

    voice_name = "the SSM voice"     # the speaking contract (pipeline.engines.speaking.Voice)
    errors: tuple[type[Exception], ...] = (SSMEngineError, PipelineError)
    written_words = False            # its words are the ones it spoke
    _shared: dict[Path, SSMVoiceEngine] = {}
    _shared_lock = threading.Lock()

    def __init__(self, voice: TTSVoice | str | Path = DEFAULT_MODEL_DIR, *,
                 chunk_frames: int = 2, max_batch: int = 32, lead_chunks: int = 5,
                 device: str = "cpu", compile: bool = False) -> None:
        """``device`` (``cpu``, ``cuda[:N]``, ``auto``) places a voice loaded from a folder; a
        ``TTSVoice`` given as such stays where its model is. ``compile``: compile a lone
        utterance's model steps now (``TTSVoice.compile_steps``: a third less CPU per lone
        call, ~20 s at a cold start; a voice on a GPU stays eager); a failed compile raises
        ``EngineUnavailableError`` (no C++ compiler, say: ``compile=False`` runs eagerly)."""
        t0 = time.perf_counter()
        if not isinstance(voice, TTSVoice):
            check_voice_dir(voice)
            try:
                voice = TTSVoice.load(voice, resolve_device(device))
            except SSMEngineError as exc:
                raise EngineUnavailableError(f"SSM voice failed to load: {exc}") from exc
        if compile and voice.device.type == "cpu" and not voice.compiled:
            t1 = time.perf_counter()
            try:
                voice.compile_steps()
            except Exception as exc:  # inductor raises its own types (no compiler, ...)
                raise EngineUnavailableError(f"SSM voice: compiling its steps failed: {exc} "
                                             f"(compile=False runs them eagerly)") from exc
            logger.info("SSM voice: steps compiled in %.1f s", time.perf_counter() - t1)
        self.voice = voice
        self.sample_rate_hz = voice.sample_rate_hz
        self.chunk_frames = chunk_frames
        if max_batch < 1:
            raise ConfigError(f"max_batch must be >= 1, got {max_batch}")
        self.max_batch = max_batch
        if lead_chunks < 1:
            raise ConfigError(f"lead_chunks must be >= 1, got {lead_chunks}")
        self.lead_chunks = lead_chunks
        self.load_s = time.perf_counter() - t0
        self._jobs: list[tuple[float, int, VoiceUtterance, str | None, Future]] = []
        self._order = itertools.count()
        self._cond = threading.Condition()
        self._closed = False
        self._live: set[VoiceUtterance] = set()   # begun, not finished: only the thread's
        self.steps = 0                 # batched pulls run (for /metrics; written by the thread)
        self.streams_stepped = 0       # utterances summed over those pulls
        self.step_s = 0.0              # seconds spent in them
        self._thread = threading.Thread(target=self._work, name="ssm-tts-voice", daemon=True)
        self._thread.start()

    @classmethod
    def shared(cls, model_dir: str | Path = DEFAULT_MODEL_DIR, *, compile: bool = False
               ) -> SSMVoiceEngine:
        """The process's engine for this voice folder: the one registered with
        ``register_shared`` (``parley serve`` registers a ``VoiceProcess``), else one built now
        (``compile``: as the constructor's, for the one built now)."""
        key = Path(model_dir).resolve()
        with cls._shared_lock:
            engine = cls._shared.get(key)
            if engine is None:
                engine = cls._shared[key] = cls(key, compile=compile)
            return engine

    @classmethod
    def register_shared(cls, model_dir: str | Path, engine: Any) -> None:
        """Make ``engine`` (an ``SSMVoiceEngine`` or a ``voice_procs.VoiceProcess``) what
        ``shared(model_dir)`` returns from now on."""
        with cls._shared_lock:
            cls._shared[Path(model_dir).resolve()] = engine

    def open(self, sample_rate_hz: int, *, seed: int = 0) -> VoiceUtterance:
        """A new utterance whose audio comes out at ``sample_rate_hz``."""
        if sample_rate_hz <= 0:
            raise AudioFormatError(f"sample_rate_hz must be positive, got {sample_rate_hz}")
        return VoiceUtterance(self, sample_rate_hz, seed=seed)

    def request(self, utt: VoiceUtterance, deadline_s: float, text: str | None = None) -> Future:
        """Ask the voice's thread for ``utt``'s next chunks (``text``: the utterance's text, on
        its first request). The future gets a list of ``AudioChunk``s, every chunk made ahead so
        far (at least one), or None once the utterance is done or cancelled; requests with
        earlier deadlines are served first. Taking all that is ready at once means one thread
        hand-off per ~100 ms of speech instead of one per 20 ms chunk."""
        fut: Future = Future()
        with self._cond:
            if self._closed:
                raise EngineUnavailableError("the SSM voice engine is closed")
            utt._deadline_s = deadline_s
            heapq.heappush(self._jobs, (deadline_s, next(self._order), utt, text, fut))
            self._cond.notify()
        return fut

    @property
    def queue_depth(self) -> int:
        """Requests waiting for the voice's thread."""
        with self._cond:
            return len(self._jobs)

    def _on_cancel(self, utt: VoiceUtterance) -> None:
        """``utt.cancel()`` was called: nothing to do here, the thread checks ``cancelled``."""

    def close(self, timeout_s: float = 5.0) -> None:
        """Cancel queued jobs and stop the thread (the running job finishes)."""
        with self._cond:
            self._closed = True
            for *_, fut in self._jobs:
                fut.cancel()
            self._jobs.clear()
            self._cond.notify()
        self._thread.join(timeout_s)

    def _work(self) -> None:
        torch.set_flush_denormal(True)      # per-thread flag: decaying states stay fast
        while True:
            with self._cond:
                while not self._jobs and not self._closed and not self._behind():
                    self._cond.wait()
                if self._closed:
                    return
                n = min(self.max_batch, len(self._jobs))
                jobs = [heapq.heappop(self._jobs) for _ in range(n)]
            self._tick([(utt, text, fut) for _, _, utt, text, fut in jobs])

    def _behind(self) -> bool:
        """Whether a live utterance has fewer than ``lead_chunks`` chunks made ahead."""
        return any(len(u._ready) < self.lead_chunks and not (u.cancelled or u._finished)
                   for u in self._live)

    def _tick(self, jobs: list[tuple[VoiceUtterance, str | None, Future]]) -> None:
        """Serve one request of each utterance in ``jobs`` with one batched ``pull_many``, in
        which every other live utterance with fewer than ``lead_chunks`` chunks ready also makes
        its next chunk (kept for its next requests): utterances stay in step, so model steps are
        shared, and each runs up to ``lead_chunks`` ahead of its requests, so a late event loop
        (many calls) does not starve a call's audio. Called with no jobs, it only makes ahead."""
        asked: list[tuple[VoiceUtterance, Future]] = []
        for utt, text, fut in jobs:
            if not fut.set_running_or_notify_cancel():
                continue                    # its utterance was cancelled: never run
            try:
                if text is not None:
                    utt._begin(text)
                    self._live.add(utt)
            except BaseException as exc:  # noqa: BLE001 - handed to the awaiting side
                fut.set_exception(exc)
                continue
            if utt._stream is None or utt.cancelled:
                fut.set_result(None)
            elif utt._ready:
                fut.set_result(self._take_ready(utt))
            else:
                asked.append((utt, fut))
        self._live = {u for u in self._live
                      if not u.cancelled and not (u._finished and not u._ready)}
        busy = {u for u, _ in asked}
        ahead = sorted((u for u in self._live if len(u._ready) < self.lead_chunks
                        and not u._finished and u not in busy),
                       key=lambda u: u._deadline_s)[:max(0, self.max_batch - len(asked))]
        group = [u for u, _ in asked] + ahead
        if not group:
            return
        t0 = time.perf_counter()
        try:
            chunks = self._pull(group)
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting side
            for _, fut in asked:
                fut.set_exception(exc)
            return
        self.step_s += time.perf_counter() - t0
        self.streams_stepped += len(group)
        self.steps += 1
        for utt, got in zip(group, chunks, strict=True):
            if got is not None:
                utt._ready.append(got)
            else:
                utt._finished = True
        for utt, fut in asked:
            fut.set_result(self._take_ready(utt) or None)

    @staticmethod
    def _take_ready(utt: VoiceUtterance) -> list[Any]:
        chunks = list(utt._ready)
        utt._ready.clear()
        return chunks

    def _pull(self, group: list[VoiceUtterance]) -> list[Any]:
        """The next chunk (or None: the utterance is done) of each utterance in ``group``."""
        for utt in group:
            utt._feed(1)
        streams = [u._stream for u in group if u._stream is not None]   # opened by _begin
        chunks = [got[0] if got else None for got in self.voice.pull_many(streams, max_chunks=1)]
        short = [k for k, (u, c) in enumerate(zip(group, chunks, strict=True))
                 if c is None and u._pieces]
        if short:                           # the text fed so far is all spoken: feed the rest
            for k in short:
                group[k]._feed(len(group[k]._pieces))
            more = self.voice.pull_many([s for k in short if (s := group[k]._stream) is not None],
                                        max_chunks=1)
            for k, got in zip(short, more, strict=True):
                chunks[k] = got[0] if got else None
        return chunks


class UtteranceOwner(Protocol):
    """What an utterance asks of the engine that opened it: ``SSMVoiceEngine`` in this process,
    or ``voice_procs.VoiceProcess``, which serves it from a worker process."""

    sample_rate_hz: int

    def request(self, utt: VoiceUtterance, deadline_s: float, text: str | None = None) -> Future: ...

    def _on_cancel(self, utt: VoiceUtterance) -> None: ...


class VoiceUtterance:
    """One utterance of one call: text in, ``SpeechChunk``s out as the voice's thread makes them.

    Only the voice's thread touches the underlying ``TTSStream``; ``cancel`` (any thread) makes
    every job of this utterance not yet started a no-op."""

    def __init__(self, engine: UtteranceOwner, sample_rate_hz: int, *, seed: int = 0) -> None:
        self._engine = engine
        self.sample_rate_hz = sample_rate_hz
        self._seed = seed
        self._cancelled = False
        self._remote_id = 0            # its name in a VoiceProcess's child
        # touched only on the voice's thread: the stream, the text not yet pushed to it (pushed
        # a word a chunk, ahead of the speech: the same samples as pushing it all at once), the
        # chunks made ahead of its requests, whether the stream has given its last chunk
        self._stream: TTSStream | None = None
        self._pieces: list[str] = []
        self._ready: collections.deque[Any] = collections.deque()
        self._finished = False
        self._deadline_s = 0.0
        src = engine.sample_rate_hz
        self._halver = HalfRateFilter() if (src, sample_rate_hz) == (16000, 8000) else None
        self._soxr = (soxr.ResampleStream(src, sample_rate_hz, 1, dtype="float32", quality="HQ")
                      if sample_rate_hz != src and self._halver is None else None)

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def cancel(self) -> None:
        if not self._cancelled:
            self._cancelled = True
            self._engine._on_cancel(self)

    async def speak(self, text: str) -> AsyncGenerator[SpeechChunk, None]:
        """Speak ``text`` (one whole phrase; one call per utterance); yields the audio as soon
        as it exists: one ``SpeechChunk`` per answer of the voice's thread, every 20 ms chunk it
        made since the last (up to ``lead_chunks``). One frame for each answer rather than for
        each 20 ms is a fifth of the frames through a call's pipeline on the event loop: with
        many calls, each frame's hops from processor to processor took long enough that the
        transports ran out of audio the voice had already made (bench_transports, 16 SIP calls)."""
        t0 = time.perf_counter()
        made_s = 0.0
        fut = self._engine.request(self, t0, text)
        finished = False
        try:
            while (chunks := await asyncio.wrap_future(fut)) is not None:
                made_s += sum(len(c.pcm) for c in chunks) / self._engine.sample_rate_hz
                fut = self._engine.request(self, t0 + made_s)
                if not chunks:
                    continue
                pcm = chunks[0].pcm if len(chunks) == 1 else np.concatenate([c.pcm for c in chunks])
                yield SpeechChunk(self._convert(pcm, last=False), chunks[0].start_s,
                                  tuple(w for c in chunks for w in c.words))
            if self._soxr is not None and not self._cancelled:
                tail = self._convert(np.zeros(0, np.float32), last=True)
                if tail.size:
                    yield SpeechChunk(tail, made_s)
            finished = True
        finally:
            if not finished:                # interrupted, or the consumer stopped early
                self.cancel()
                fut.cancel()

    # -- on the voice's thread ------------------------------------------------------------------
    def _begin(self, text: str) -> None:
        if self._cancelled:
            return
        engine = cast(SSMVoiceEngine, self._engine)   # the voice's thread is the engine's own
        self._stream = engine.voice.open_stream(seed=self._seed, chunk_frames=engine.chunk_frames)
        self._pieces = re.findall(r"\s*\S+\s*", text)[::-1]     # words, last first
        self._feed(FIRST_WORDS)

    def _feed(self, n: int) -> None:
        """Push the next ``n`` words of the text (and end it after the last)."""
        if self._stream is None:
            return
        for _ in range(min(n, len(self._pieces))):
            self._stream.push_text(self._pieces.pop())
        if not self._pieces:
            self._stream.end_text()

    # -- output rate ----------------------------------------------------------------------------
    def _convert(self, pcm: np.ndarray, *, last: bool) -> np.ndarray:
        if self._halver is not None:
            pcm = self._halver.process(pcm)
        elif self._soxr is not None:
            pcm = self._soxr.resample_chunk(pcm, last=last)
        return float_to_int16(pcm)
