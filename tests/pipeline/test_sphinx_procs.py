"""SphinxProcessPool and RemoteSphinxEngine on real worker processes and real decoders.

Each decoder build costs ~0.4 s and each worker start ~0.3 s, so the module shares one pool
(``pool``, one worker, replaced by the killed-worker test) and one in-process reference engine;
the tests that close a pool, spread over workers or run a call through a dying worker make their
own pool, and every pool is closed.

Exact partials are compared at 16 kHz: at 8 kHz ``SphinxEngine`` resamples through soxr's int16
stream, which dithers with a random seed, so two runs of the same clip may differ in a partial.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator

import numpy as np
import pytest
from pipecat.frames.frames import (
    ErrorFrame,
    Frame,
    InputAudioRawFrame,
    SystemFrame,
    TranscriptionFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.tests.utils import SleepFrame, run_test

from pipeline.engines.sphinx import SphinxEngine
from pipeline.engines.sphinx_procs import RemoteSphinxEngine, SphinxProcessPool
from pipeline.errors import AudioFormatError, ConfigError, EngineUnavailableError, PipelineError
from pipeline.services import SphinxSTTService

PHONE = 8000
WIDE = 16000


@pytest.fixture(scope="module")
def pool() -> Iterator[SphinxProcessPool]:
    """The module's pool: one worker, engines lent and given back by the tests."""
    pool = SphinxProcessPool(procs=1)
    yield pool
    pool.close()


@pytest.fixture
def lent(pool) -> Iterator[list[RemoteSphinxEngine]]:
    """Engines a test took from ``pool``: given back afterwards, even if the test failed."""
    engines: list[RemoteSphinxEngine] = []
    yield engines
    for engine in engines:
        pool.release(engine)


@pytest.fixture(scope="module")
def local() -> SphinxEngine:
    """An in-process 16 kHz engine: what a remote one must match."""
    return SphinxEngine(WIDE)


@pytest.fixture
def speech(flite_speech) -> np.ndarray:
    return flite_speech("hello how are you", PHONE)


@pytest.fixture
def wide(flite_speech) -> np.ndarray:
    return flite_speech("hello how are you", WIDE)


def decode(engine: SphinxEngine | RemoteSphinxEngine, pcm: np.ndarray) -> tuple[list[str], str]:
    """One utterance fed in 20 ms chunks: (the partials as they changed, the final text)."""
    step = engine.sample_rate_hz // 50
    engine.start_utt()
    partials = [p for i in range(0, len(pcm), step) if (p := engine.feed(pcm[i : i + step]))]
    return partials, engine.end_utt()


def fresh_decode(engine: SphinxEngine, pcm: np.ndarray, partial_every_ms: int = 100):
    """What a new in-process engine makes of ``pcm`` (reset makes ``engine`` as good as new)."""
    engine.reset()
    engine.partial_every_ms = partial_every_ms
    return decode(engine, pcm)


def test_remote_engine_decodes_exactly_as_the_in_process_engine(pool, lent, local, wide):
    engine = pool.acquire(WIDE)
    lent.append(engine)
    expected = fresh_decode(local, wide)
    assert "hello" in expected[1] and len(expected[0]) >= 3
    assert decode(engine, wide) == expected
    assert engine.worker_pid in pool.worker_pids() and engine.worker_pid != os.getpid()
    assert not engine.in_utterance and engine.last_end_utt_s > 0 and engine.load_s > 0


def test_at_8_khz_remote_and_in_process_engines_hear_the_same_words(pool, lent, speech):
    engine = pool.acquire(PHONE)
    lent.append(engine)
    here = SphinxEngine(PHONE)  # the narrowband setup (cepstral mean start) must match too
    expected = decode(here, speech)[1]
    assert "hello" in expected
    assert decode(engine, speech)[1] == expected


def test_bad_audio_and_misuse_raise_and_the_engine_goes_on(pool, lent, speech, monkeypatch):
    engine = pool.acquire(PHONE)
    lent.append(engine)
    with pytest.raises(PipelineError, match="outside an utterance") as raised:
        engine.feed(speech)
    assert type(raised.value) is PipelineError
    with pytest.raises(PipelineError, match="outside an utterance"):
        engine.end_utt()

    engine.start_utt()
    with monkeypatch.context() as patch:

        def no_round_trip(request: bytes) -> dict:
            raise AssertionError(f"bad audio reached the worker: {request[:8]!r}")

        patch.setattr(engine, "_call", no_round_trip)
        with pytest.raises(AudioFormatError, match="even byte count"):
            engine.feed(b"\x00\x01\x02")
        with pytest.raises(AudioFormatError, match="int16"):
            engine.feed(speech.astype(np.float32) / 32768)
        with pytest.raises(AudioFormatError, match="mono"):
            engine.feed(np.zeros((2, 160), np.int16))
        assert engine.feed(b"") is None  # nothing to decode: no round trip either
    assert engine.in_utterance and not engine.broken
    engine.feed(speech)
    assert "hello" in engine.end_utt()
    with pytest.raises(PipelineError, match="outside an utterance"):
        engine.end_utt()
    assert "hello" in engine.transcribe(speech.tobytes())
    assert not engine.broken


def test_release_and_acquire_reuse_the_engine_and_reset_it(pool, lent, local, wide):
    """A loud caller moves the decoder's live cepstral mean; the next caller must not inherit it
    (without the reset this clip comes out as "hello town are you")."""
    loud = np.clip(wide.astype(np.int32) * 4, -32768, 32767).astype(np.int16)
    engine = pool.acquire(WIDE)
    built = pool.built
    decode(engine, loud)
    engine.start_utt()
    engine.feed(loud)  # left open
    pool.release(engine)
    assert pool.idle_count(WIDE) >= 1

    again = pool.acquire(WIDE)
    lent.append(again)
    assert again is engine and pool.built == built
    assert not again.in_utterance
    assert decode(again, wide) == fresh_decode(local, wide)  # as if new
    lent.remove(again)
    pool.release(again)
    with pytest.raises(PipelineError, match="twice"):
        pool.release(again)


def test_partial_every_ms_of_a_reused_engine_is_honoured(pool, lent, local, wide):
    """Guards against a reused remote engine keeping the partial interval it was built with:
    ``acquire(..., partial_every_ms=...)`` must reach the decoder in the worker."""
    pool.release(pool.acquire(WIDE))  # an idle engine, built with the default 100 ms
    engine = pool.acquire(WIDE, partial_every_ms=400)
    lent.append(engine)
    assert engine.partial_every_ms == 400
    sparse = fresh_decode(local, wide, partial_every_ms=400)
    assert len(sparse[0]) < len(fresh_decode(local, wide)[0])
    assert decode(engine, wide) == sparse


def test_garbage_on_an_engine_socket_gets_an_error_and_the_worker_goes_on(pool, lent, speech):
    engine = pool.acquire(PHONE)
    lent.append(engine)
    pid = engine.worker_pid
    for request in (b"X", b"", b"\xff" * 3):
        with pytest.raises(PipelineError, match="unknown request") as raised:
            engine._call(request)
        assert not isinstance(raised.value, EngineUnavailableError)
    with pytest.raises(PipelineError, match="outside an utterance"):
        engine._call(b"F\x00\x00")  # the worker's engine checks too
    engine.start_utt()
    with pytest.raises(AudioFormatError, match="even byte count"):
        engine._call(b"F\x00\x01\x02")  # the worker's own check, its class kept over the wire
    assert not engine.broken and engine.worker_pid == pid and pool.worker_pids() == [pid]
    engine.feed(speech)
    assert "hello" in engine.end_utt()


def test_a_broken_frame_drops_only_that_engine(pool, lent, speech):
    """A length past the frame limit: the worker closes that engine's socket, not itself."""
    first, second = pool.acquire(PHONE), pool.acquire(PHONE)
    lent.extend([first, second])
    assert first.worker_pid == second.worker_pid
    first._sock.sendall((1 << 31).to_bytes(4, "big") + b"F")
    with pytest.raises(EngineUnavailableError, match=f"pid {first.worker_pid}"):
        first._reply(5.0)
    assert first.broken
    assert "hello" in second.transcribe(speech)
    assert pool.worker_pids() == [second.worker_pid]


def test_a_killed_worker_fails_its_engines_and_is_replaced(pool, lent, speech):
    """Also guards the replacement against racing the dead worker's exit: the kernel closes its
    sockets a few ms before it can be reaped, and an ``acquire`` in between went to it."""
    out, idle = pool.acquire(PHONE), pool.acquire(PHONE)
    lent.append(out)
    pool.release(idle)
    pid = out.worker_pid
    assert idle.worker_pid == pid and pool.worker_pids() == [pid]
    os.kill(pid, signal.SIGKILL)

    dead = rf"pocketsphinx worker \d+ \(pid {pid}, exited with code -9\)"
    with pytest.raises(EngineUnavailableError, match=dead):
        out.start_utt()
    assert out.broken
    with pytest.raises(EngineUnavailableError, match=f"pid {pid}.* failed earlier"):
        out.start_utt()
    lent.remove(out)
    pool.release(out)  # dropped, not kept idle
    built, restarts = pool.built, pool.restarts

    new = pool.acquire(PHONE)  # the idle engine died with its worker: a new build, a new worker
    lent.append(new)
    assert new is not idle and new is not out and pool.built == built + 1
    assert new.worker_pid != pid and pool.worker_pids() == [new.worker_pid]
    assert pool.restarts == restarts + 1  # what /metrics reports as parley_engine_restarts_total
    assert pool.idle_count(PHONE) == 0
    assert "hello" in new.transcribe(speech)

    for _ in range(2):  # the race with the exit is lost in some rounds only: two more
        pid = new.worker_pid
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(EngineUnavailableError, match=rf"\(pid {pid}, exited with code -9"):
            new.transcribe(speech)
        lent.remove(new)
        pool.release(new)
        new = pool.acquire(PHONE)
        lent.append(new)
        assert new.worker_pid != pid and pool.worker_pids() == [new.worker_pid]
    assert "hello" in new.transcribe(speech)


def test_prewarm_builds_in_the_workers_spread_over_them(monkeypatch, speech):
    def not_here(*args, **kwargs):
        raise AssertionError("a decoder was built in the test process")

    monkeypatch.setattr(SphinxEngine, "__init__", not_here)
    pair = SphinxProcessPool(procs=2)
    try:
        assert pair.prewarm(PHONE, 2) == 2
        assert pair.idle_count(PHONE) == 2 and pair.built == 2
        pids = pair.worker_pids()
        assert len(pids) == 2 and os.getpid() not in pids
        assert pair.prewarm(PHONE, 2) == 0
        a, b = pair.acquire(PHONE), pair.acquire(PHONE)
        assert {a.worker_pid, b.worker_pid} == set(pids) and pair.built == 2
        assert "hello" in a.transcribe(speech) and "hello" in b.transcribe(speech)
        pair.release(a)
        pair.release(b)
        assert pair.idle_count(PHONE) == 2
    finally:
        pair.close()


def test_bad_arguments_start_no_worker():
    with pytest.raises(ConfigError, match="procs"):
        SphinxProcessPool(procs=0)
    with pytest.raises(ConfigError, match="max_idle"):
        SphinxProcessPool(max_idle=-1)
    unused = SphinxProcessPool()
    try:
        with pytest.raises(AudioFormatError, match="11025"):
            unused.acquire(11025)
        assert unused.worker_pids() == [] and unused.built == 0
    finally:
        unused.close()


def test_close_ends_the_workers_and_later_acquires_fail(speech):
    solo = SphinxProcessPool()
    try:
        engine = solo.acquire(PHONE)
        (pid,) = solo.worker_pids()
        os.kill(pid, signal.SIGTERM)  # ignored: a draining server keeps its recognizers
        os.kill(pid, signal.SIGINT)
        assert "hello" in engine.transcribe(speech)
        assert solo.worker_pids() == [pid]
    finally:
        solo.close()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # exited and reaped
    assert solo.worker_pids() == []
    with pytest.raises(EngineUnavailableError, match=f"pid {pid}"):
        engine.start_utt()  # it was lent out when the pool closed
    solo.release(engine)  # dropped, no error
    with pytest.raises(EngineUnavailableError, match="closed"):
        solo.acquire(PHONE)
    solo.close()  # twice is harmless


def audio_frames(pcm: np.ndarray) -> list[InputAudioRawFrame]:
    step = PHONE // 50
    return [
        InputAudioRawFrame(audio=pcm[i : i + step].tobytes(), sample_rate=PHONE, num_channels=1)
        for i in range(0, len(pcm), step)
    ]


def utterance(pcm: np.ndarray) -> list[Frame]:
    """Silence, then speech between the VAD's start and stop, then time to decode it."""
    return [
        *audio_frames(np.zeros(PHONE // 2, np.int16)),
        VADUserStartedSpeakingFrame(start_secs=0.2),
        *audio_frames(pcm),
        SleepFrame(0.3),
        VADUserStoppedSpeakingFrame(stop_secs=0.2),
        SleepFrame(0.3),
    ]


async def test_service_transcribes_through_a_process_pool(pool, speech):
    idle = pool.idle_count(PHONE)
    down, up = await run_test(
        SphinxSTTService(pool=pool),
        frames_to_send=utterance(speech),
        pipeline_params=PipelineParams(audio_in_sample_rate=PHONE),
    )
    finals = [f for f in down if isinstance(f, TranscriptionFrame)]
    assert len(finals) == 1 and "hello" in finals[0].text and finals[0].finalized
    assert not [f for f in up if isinstance(f, ErrorFrame)]
    assert pool.idle_count(PHONE) == max(idle, 1)  # the engine went back


class HoldFrame(SystemFrame):
    """Marks where ``Hold`` stops the frames until the worker has been killed."""


class Hold(FrameProcessor):
    """Upstream of the STT: holds the frames after a ``HoldFrame`` until ``released`` is set."""

    def __init__(self, released: asyncio.Event) -> None:
        super().__init__()
        self._released = released

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, HoldFrame):
            await asyncio.wait_for(self._released.wait(), 30)
            return
        await self.push_frame(frame, direction)


class KillAfterFirstTranscript(FrameProcessor):
    """Downstream of the STT: SIGKILLs the pool's workers when the first transcript passes."""

    def __init__(self, pool: SphinxProcessPool, done: asyncio.Event) -> None:
        super().__init__()
        self._pool = pool
        self._done = done
        self.killed: list[int] = []

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, TranscriptionFrame) and not self._done.is_set():
            for pid in self._pool.worker_pids():
                os.kill(pid, signal.SIGKILL)
                self.killed.append(pid)
            self._done.set()
        await self.push_frame(frame, direction)


async def test_service_goes_on_with_a_new_worker_when_its_worker_dies(flite_speech):
    """The worker dies between two utterances: the call reports it and hears the second."""
    solo = SphinxProcessPool()
    killed = asyncio.Event()
    killer = KillAfterFirstTranscript(solo, killed)
    try:
        down, up = await run_test(
            Pipeline([Hold(killed), SphinxSTTService(pool=solo), killer]),
            frames_to_send=[
                *utterance(flite_speech("hello how are you", PHONE)),
                HoldFrame(),
                *utterance(flite_speech("what is the weather like today", PHONE)),
            ],
            pipeline_params=PipelineParams(audio_in_sample_rate=PHONE),
        )
        (pid,) = killer.killed
        errors = [f for f in up if isinstance(f, ErrorFrame)]
        assert len(errors) == 1 and f"pid {pid}" in errors[0].error
        assert isinstance(errors[0].exception, EngineUnavailableError)
        finals = [f.text for f in down if isinstance(f, TranscriptionFrame)]
        assert len(finals) == 2 and "hello" in finals[0] and "weather" in finals[1], finals
        assert solo.built == 2 and len(solo.worker_pids()) == 1 and pid not in solo.worker_pids()
        assert solo.idle_count(PHONE) == 1  # the replacement went back
    finally:
        solo.close()
