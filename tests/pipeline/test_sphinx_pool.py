"""SphinxPool and SphinxEngine.reset() on real pocketsphinx decoders, and the service on a pool.

Each decoder build costs ~0.4 s, so the module builds four: three in ``source`` (lent to fresh
pools through ``release``) and one in the prewarm test.
"""

from __future__ import annotations

import logging
import threading

import numpy as np
import pytest
from pipecat.frames.frames import (
    CancelFrame,
    InputAudioRawFrame,
    TranscriptionFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.pipeline.worker import PipelineParams
from pipecat.tests.utils import SleepFrame, run_test

from pipeline.engines.sphinx import _CMNINIT_NARROWBAND, SPHINX_POOL, SphinxEngine, SphinxPool
from pipeline.errors import ConfigError, PipelineError
from pipeline.services import SphinxSTTService


@pytest.fixture(scope="module")
def source() -> tuple[SphinxPool, list[SphinxEngine]]:
    """The pool that built the module's engines: two at 8 kHz, one at 16 kHz, all out."""
    pool = SphinxPool()
    return pool, [pool.acquire(8000), pool.acquire(8000), pool.acquire(16000, partial_every_ms=200)]


def cmn(engine: SphinxEngine) -> np.ndarray:
    return np.array(engine._decoder.get_cmn().split(","), float)


def pool_of(*engines: SphinxEngine, max_idle: int = 16) -> SphinxPool:
    """A fresh pool holding these engines idle (release resets them)."""
    pool = SphinxPool(max_idle=max_idle)
    for engine in engines:
        pool.release(engine)
    return pool


def test_acquire_builds_a_new_engine_when_none_is_idle(source):
    pool, engines = source
    assert pool.built == 3 and len({id(e) for e in engines}) == 3
    assert [e.sample_rate_hz for e in engines] == [8000, 8000, 16000]
    assert [e.partial_every_ms for e in engines] == [100, 100, 200]
    assert SPHINX_POOL is not pool and isinstance(SPHINX_POOL, SphinxPool)


def test_released_engine_is_reused_without_a_build(source):
    a8 = source[1][0]
    pool = SphinxPool()
    assert pool.idle_count(8000) == 0
    pool.release(a8)
    assert pool.idle_count(8000) == 1
    assert pool.acquire(8000, partial_every_ms=300) is a8 and a8.partial_every_ms == 300
    assert pool.idle_count(8000) == 0
    pool.release(a8)
    assert pool.acquire(8000) is a8 and a8.partial_every_ms == 100
    assert pool.built == 0


def test_release_restores_the_cmn_and_discards_an_open_utterance(source, flite_speech):
    a8 = source[1][0]
    pool = pool_of(a8)
    speech = flite_speech("hello how are you", 8000)
    start = np.array(_CMNINIT_NARROWBAND.split(","), float)
    assert np.allclose(cmn(a8), start, atol=1e-3)

    engine = pool.acquire(8000)
    first = engine.transcribe(speech)
    assert "hello" in first
    assert not np.allclose(cmn(engine), start, atol=0.05)  # live CMN adapted to this "caller"
    engine.start_utt()
    engine.feed(speech[: len(speech) // 2])
    pool.release(engine)
    assert not engine.in_utterance
    assert np.allclose(cmn(engine), start, atol=1e-3)

    again = pool.acquire(8000)
    assert again is engine
    assert again.transcribe(speech) == first  # as if new: same start, same result


def test_engines_are_kept_per_sample_rate(source):
    a8, _, c16 = source[1]
    pool = pool_of(a8)
    assert (pool.idle_count(8000), pool.idle_count(16000)) == (1, 0)
    pool.release(c16)
    assert (pool.idle_count(8000), pool.idle_count(16000)) == (1, 1)
    assert pool.acquire(16000) is c16
    assert pool.acquire(8000) is a8
    assert (pool.idle_count(8000), pool.idle_count(16000), pool.built) == (0, 0, 0)


def test_max_idle_drops_engines_past_the_limit_per_rate(source):
    a8, b8, c16 = source[1]
    pool = pool_of(a8, b8, c16, max_idle=1)
    assert (pool.idle_count(8000), pool.idle_count(16000)) == (1, 1)
    assert pool.acquire(8000) is a8
    assert pool.idle_count(8000) == 0
    with pytest.raises(ConfigError):
        SphinxPool(max_idle=-1)


def test_an_engine_whose_reset_fails_is_dropped(source, caplog):
    """Guards against pooling a decoder in a broken state: here pocketsphinx's utterance was ended
    behind the engine's back, so reset's end_utt raises RuntimeError."""
    a8 = source[1][0]
    pool = SphinxPool()
    a8.start_utt()
    a8._decoder.end_utt()
    with caplog.at_level(logging.WARNING, logger="pipeline.engines.sphinx"):
        pool.release(a8)
    assert pool.idle_count(8000) == 0
    assert "reset failed" in caplog.text
    pool.release(a8)  # the engine itself is consistent again: a second reset succeeds
    assert pool.idle_count(8000) == 1


def test_releasing_an_idle_engine_twice_raises(source):
    a8 = source[1][0]
    pool = pool_of(a8)
    with pytest.raises(PipelineError, match="twice"):
        pool.release(a8)
    assert pool.idle_count(8000) == 1


def test_prewarm_builds_only_the_missing_engines(source):
    a8 = source[1][0]
    pool = pool_of(a8)
    assert pool.prewarm(8000, 2) == 1  # one build: a8 was already idle
    assert pool.prewarm(8000, 2) == 0 and pool.prewarm(8000, 1) == 0
    assert pool.idle_count(8000) == 2 and pool.built == 1
    assert pool.prewarm(16000, 0) == 0 and pool.idle_count(16000) == 0
    capped = pool_of(a8, max_idle=1)
    assert capped.prewarm(8000, 5) == 0 and capped.idle_count(8000) == 1  # never past max_idle


def test_concurrent_acquires_never_share_an_engine(source):
    a8, b8, _ = source[1]
    pool = pool_of(a8, b8)
    out: set[int] = set()
    lock = threading.Lock()
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def borrow(rounds: int) -> None:
        try:
            for _ in range(rounds):
                barrier.wait(timeout=10)
                engine = pool.acquire(8000)
                with lock:
                    assert id(engine) not in out, "one engine lent to two callers"
                    out.add(id(engine))
                engine.start_utt()
                engine.feed(np.zeros(160, np.int16))
                with lock:
                    out.discard(id(engine))
                pool.release(engine)
        except BaseException as exc:  # noqa: BLE001 - reported to the main thread below
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=borrow, args=(100,)) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    assert pool.built == 0 and pool.idle_count(8000) == 2  # two callers, two engines, no build


def audio_frames(pcm: np.ndarray, rate_hz: int) -> list[InputAudioRawFrame]:
    step = rate_hz // 50
    return [
        InputAudioRawFrame(audio=pcm[i : i + step].tobytes(), sample_rate=rate_hz, num_channels=1)
        for i in range(0, len(pcm), step)
    ]


async def test_sequential_calls_share_one_engine_through_the_pool(source, flite_speech):
    """A call ended normally (EndFrame) and one cancelled mid-utterance both return the engine."""
    b8 = source[1][1]
    pool = pool_of(b8)
    rate = 8000
    params = PipelineParams(audio_in_sample_rate=rate)
    speech = audio_frames(flite_speech("hello how are you", rate), rate)
    silence = audio_frames(np.zeros(rate // 2, np.int16), rate)
    said = [*silence, VADUserStartedSpeakingFrame(start_secs=0.2), *speech, SleepFrame(0.5)]

    down, _ = await run_test(
        SphinxSTTService(pool=pool),
        frames_to_send=[*said, VADUserStoppedSpeakingFrame(stop_secs=0.2), SleepFrame(0.3)],
        pipeline_params=params,
    )
    finals = [f for f in down if isinstance(f, TranscriptionFrame)]
    assert len(finals) == 1 and "hello" in finals[0].text
    assert pool.built == 0 and pool.idle_count(rate) == 1  # b8 went back
    assert not b8.in_utterance

    await run_test(
        SphinxSTTService(pool=pool),
        frames_to_send=[*said, CancelFrame()],
        pipeline_params=params,
        send_end_frame=False,
    )
    assert pool.built == 0 and pool.idle_count(rate) == 1
    assert pool.acquire(rate) is b8 and not b8.in_utterance  # cancelled mid-utterance, reset
