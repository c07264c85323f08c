"""The one recogniser stream contract (``TranscriptStream``), run through the same scenarios on
every real backend: the SSM recogniser, pocketsphinx and Whisper tiny.en."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

from pipeline.engines.sphinx import SphinxBackend, SphinxPool
from pipeline.engines.ssm_recognizer import DEFAULT_MODEL_DIR, SSMRecognizerBackend, SSMSTTEngine
from pipeline.engines.transcripts import Failed, Final, Partial, TranscriptStream
from pipeline.engines.whisper import WhisperBackend, shared_whisper
from pipeline.errors import AudioFormatError, PipelineError
from ssm_engine.stt.hints import Hints

RATE = 8000
BACKENDS = ["ssm", "sphinx", "whisper"]
STREAMING = {"ssm", "sphinx"}          # Whisper reads an utterance whole: no partials


pytestmark = pytest.mark.usefixtures("one_torch_thread")   # tests/conftest.py


@pytest.fixture(scope="module")
def ssm_engine():
    engine = SSMSTTEngine(DEFAULT_MODEL_DIR, decoder="beam")
    yield engine
    engine.close()


def make_backend(kind: str, ssm_engine, pool: SphinxPool):
    if kind == "ssm":
        return SSMRecognizerBackend(ssm_engine)
    if kind == "sphinx":
        return SphinxBackend(pool)
    return WhisperBackend(shared_whisper())


def pushed(stream: TranscriptStream, pcm: np.ndarray) -> None:
    for i in range(0, len(pcm), RATE // 50):
        stream.push(pcm[i:i + RATE // 50].tobytes())


def silence(seconds: float) -> np.ndarray:
    return np.zeros(int(seconds * RATE), np.int16)


async def events_of(stream) -> list:
    """Every event of a stream (or of its iteration begun elsewhere)."""
    return [event async for event in stream]


async def one_final(stream) -> tuple[Final, list]:
    """The VAD's stop, the input's end: the utterance's one Final (no failure), and every event."""
    stream.flush()
    stream.end_input()
    events = await asyncio.wait_for(events_of(stream), 60)
    await stream.aclose()
    finals = [e for e in events if isinstance(e, Final)]
    assert len(finals) == 1 and not any(isinstance(e, Failed) for e in events), events
    return finals[0], events


LATER_WORDS = {"what", "are", "your", "opening", "hours"}


@pytest.mark.parametrize("kind", BACKENDS)
async def test_an_utterance_is_heard_with_the_audio_before_the_vad_fired(kind, ssm_engine,
                                                                          flite_speech):
    speech = flite_speech("hello, what are your opening hours", RATE, voice="awb")
    early = int(0.4 * RATE)                # the VAD fires 0.4 s into the speech
    results = {}
    for preroll_s in (0.5, 0.0):
        stream = TranscriptStream(make_backend(kind, ssm_engine, SphinxPool()), RATE,
                                  preroll_s=preroll_s)
        await stream.start()
        pushed(stream, np.concatenate([silence(1.0), speech[:early]]))
        stream.start_utterance()
        pushed(stream, np.concatenate([speech[early:], silence(0.3)]))
        final, events = await one_final(stream)
        assert (any(isinstance(e, Partial) for e in events)) == (kind in STREAMING)
        results[preroll_s] = final.text.split()
    # heard whole: most of the words after the VAD fired (one recogniser's slip on a word, e.g.
    # the shipped SSM model's "opening hours" -> "goal in our" in this voice, is not this test's
    # business; bench_stt_* measure accuracy)
    assert len(LATER_WORDS & set(results[0.5])) >= 3, results
    # without the pre-roll the first 0.4 s (the start of "hello") is never heard
    assert len(results[0.0]) < len(results[0.5]) or results[0.0][0] != results[0.5][0], results


@pytest.mark.parametrize("kind", BACKENDS)
async def test_an_engine_error_fails_the_utterance_and_the_next_is_heard(kind, ssm_engine,
                                                                           flite_speech):
    speech = flite_speech("what are your opening hours", RATE, voice="awb")
    stream = TranscriptStream(make_backend(kind, ssm_engine, SphinxPool()), RATE)
    await stream.start()
    stream.start_utterance()
    pushed(stream, speech[: RATE // 2])
    stream.push(b"\x00\x01\x02")             # not 16-bit PCM
    stream.flush()
    stream.start_utterance()
    pushed(stream, np.concatenate([speech, silence(0.3)]))
    stream.end_input()
    events = await asyncio.wait_for(events_of(stream), 60)
    await stream.aclose()
    failed = [e for e in events if isinstance(e, Failed)]
    assert len(failed) == 1 and isinstance(failed[0].error, AudioFormatError), events
    finals = [e for e in events if isinstance(e, Final)]
    # the failed utterance was dropped at its error (whisper only reads it at its end, which
    # then fails); the next one is heard whole
    assert events.index(failed[0]) < events.index(finals[-1])
    assert len(LATER_WORDS & set(finals[-1].text.split())) >= 3, finals   # heard whole


async def test_closing_mid_utterance_lets_the_engines_go(ssm_engine, flite_speech):
    speech = flite_speech("what are your opening hours", RATE, voice="awb")
    pool = SphinxPool()
    open_before = len(ssm_engine.runner.open_streams)
    for kind in ("sphinx", "ssm"):
        stream = TranscriptStream(make_backend(kind, ssm_engine, pool), RATE)
        await stream.start()
        partial = asyncio.Event()

        async def read(stream=stream, partial=partial) -> None:
            async for event in stream:
                if isinstance(event, Partial):
                    partial.set()

        reader = asyncio.create_task(read())
        stream.start_utterance()
        pushed(stream, speech)
        await asyncio.wait_for(partial.wait(), 30)
        assert stream.in_utterance
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)
        await stream.aclose()
        await stream.aclose()                  # idempotent
        assert not stream.in_utterance
    assert pool.idle_count(RATE) == 1          # the pocketsphinx engine went back, reset
    assert len(ssm_engine.runner.open_streams) == open_before   # the SSM stream was closed


async def test_the_contract_is_checked():
    stream = TranscriptStream(WhisperBackend(shared_whisper()), RATE)
    stream.__aiter__()
    with pytest.raises(PipelineError, match="once"):
        stream.__aiter__()
    with pytest.raises(PipelineError, match="preroll_s"):
        TranscriptStream(WhisperBackend(shared_whisper()), RATE, preroll_s=-1)
    with pytest.raises(AudioFormatError, match="sample rate"):
        await TranscriptStream(SSMRecognizerBackend(), 44100).start()


async def test_a_worker_killed_mid_utterance_keeps_what_was_heard_and_the_call_goes_on(
        flite_speech):
    """pocketsphinx in a worker process: the worker dies while the caller speaks. The words
    heard so far still come out as the utterance's final, one Failed says why, and the next
    utterance is heard on a fresh worker."""
    import os
    import signal

    from pipeline.engines.sphinx_procs import SphinxProcessPool
    from pipeline.errors import EngineUnavailableError

    speech = flite_speech("what are your opening hours", RATE, voice="awb")
    pool = SphinxProcessPool(procs=1)
    try:
        stream = TranscriptStream(SphinxBackend(pool), RATE)
        await stream.start()
        events: list = []
        partial = asyncio.Event()

        async def read() -> None:
            async for event in stream:
                events.append(event)
                if isinstance(event, Partial):
                    partial.set()

        reader = asyncio.create_task(read())
        stream.start_utterance()
        half = len(speech) // 2
        pushed(stream, speech[:half])
        await asyncio.wait_for(partial.wait(), 30)
        await asyncio.sleep(0.2)                     # the first half decoded
        heard = [e.text for e in events if isinstance(e, Partial)][-1]
        for pid in pool.worker_pids():
            os.kill(pid, signal.SIGKILL)
        await asyncio.sleep(0.2)
        pushed(stream, np.concatenate([speech[half:], silence(0.2)]))
        stream.flush()
        stream.start_utterance()
        pushed(stream, np.concatenate([speech, silence(0.3)]))
        stream.end_input()
        await asyncio.wait_for(reader, 60)
        await stream.aclose()
    finally:
        pool.close()
    failed = [e for e in events if isinstance(e, Failed)]
    finals = [e for e in events if isinstance(e, Final)]
    assert len(failed) == 1 and isinstance(failed[0].error, EngineUnavailableError), events
    assert finals[0].text == heard and events.index(failed[0]) < events.index(finals[0])
    assert "opening" in finals[-1].text.split() and events.index(failed[0]) < events.index(finals[-1])


SPELLING = Hints(expect=frozenset({"spelling", "name"}))


async def _spelled_in_pieces(ssm_engine, flite_speech, hints: Hints, gap_s: float,
                             end: bool = True) -> TranscriptStream:
    """"dee eigh vee" and "eye dee" with the VAD's start and stop around each, ``gap_s`` of
    silence between them (the caller's pause)."""
    pieces = [flite_speech("dee eigh vee", RATE), flite_speech("eye dee", RATE)]
    stream = TranscriptStream(SSMRecognizerBackend(ssm_engine), RATE)
    await stream.start()
    for i, piece in enumerate(pieces):
        stream.start_utterance(hints)
        pushed(stream, np.concatenate([piece, silence(0.2)]))
        stream.flush()
        pushed(stream, silence(gap_s if i == 0 else 0.1))
    if end:
        stream.end_input()
    return stream


async def test_a_spelling_spans_the_callers_pauses_as_one_utterance(ssm_engine, flite_speech):
    """Decoded in pieces at each pause, a spelling's letters lose their neighbours, and the
    recogniser's names near them (RESULTS.md: 6 of 36 names right against 29 whole): an
    utterance that listens for a spelling stays open over a pause shorter than the span."""
    stream = await _spelled_in_pieces(ssm_engine, flite_speech, SPELLING, gap_s=0.3)
    events = await asyncio.wait_for(events_of(stream), 60)
    await stream.aclose()
    finals = [e for e in events if isinstance(e, Final)]
    assert len(finals) == 1, finals
    assert len(finals[0].text.split()) >= 4 and all(len(w) == 1 for w in finals[0].text.split())
    # the same pieces without a spelling asked for: an utterance each
    stream = await _spelled_in_pieces(ssm_engine, flite_speech, Hints(), gap_s=0.3)
    events = await asyncio.wait_for(events_of(stream), 60)
    await stream.aclose()
    assert len([e for e in events if isinstance(e, Final)]) == 2
    # a pause longer than the span ends the spelling there
    stream = await _spelled_in_pieces(ssm_engine, flite_speech, SPELLING, gap_s=0.9)
    events = await asyncio.wait_for(events_of(stream), 60)
    await stream.aclose()
    assert len([e for e in events if isinstance(e, Final)]) == 2


async def test_a_spellings_final_comes_after_its_pause_with_no_more_audio(ssm_engine,
                                                                          flite_speech):
    """A transport that sends nothing while the caller is silent: the span still ends, by the
    clock, and the Final comes without any later command; its latency counts the pause."""
    stream = await _spelled_in_pieces(ssm_engine, flite_speech, SPELLING, gap_s=0.3,
                                         end=False)
    it = aiter(stream)
    first = await asyncio.wait_for(anext(it), 30)
    while not isinstance(first, Final):
        first = await asyncio.wait_for(anext(it), 30)
    assert first.text and len(first.text.split()) >= 4
    assert time.perf_counter() - first.received_s >= stream.spell_span_s
    stream.end_input()
    rest = await asyncio.wait_for(events_of(it), 30)
    await stream.aclose()
    assert not [e for e in rest if isinstance(e, Final)]


async def test_a_spelling_open_when_the_input_ends_is_finished(ssm_engine, flite_speech):
    stream = TranscriptStream(SSMRecognizerBackend(ssm_engine), RATE)
    await stream.start()
    stream.start_utterance(SPELLING)
    pushed(stream, np.concatenate([flite_speech("dee eigh vee", RATE), silence(0.2)]))
    stream.end_input()                     # the call ends mid-spelling: what was heard is kept
    events = await asyncio.wait_for(events_of(stream), 60)
    await stream.aclose()
    assert len([e for e in events if isinstance(e, Final) and e.text]) == 1
    with pytest.raises(PipelineError, match="spell_span_s"):
        TranscriptStream(SSMRecognizerBackend(ssm_engine), RATE, spell_span_s=5.0)


async def test_letters_heard_in_a_spellings_pause_keep_it_open_without_the_vad(
        ssm_engine, flite_speech, monkeypatch):
    """A short soft letter ("ee") may never reach the VAD's start: letters the recogniser
    hears in the pause keep the spelling open, as the VAD's start would have."""
    import pipeline.engines.transcripts as transcripts

    first, more = flite_speech("dee eigh vee", RATE), flite_speech("eye dee are", RATE)

    async def final_of(vad_starts_again: bool) -> list[Final]:
        stream = TranscriptStream(SSMRecognizerBackend(ssm_engine), RATE)
        await stream.start()
        stream.start_utterance(SPELLING)
        pushed(stream, np.concatenate([first, silence(0.2)]))
        stream.flush()                              # the VAD's stop, 0.2 s into the pause
        pushed(stream, silence(0.05))               # and the next letter soon after it
        if vad_starts_again:
            stream.start_utterance(SPELLING)
        pushed(stream, np.concatenate([more, silence(0.6)]))
        stream.end_input()
        events = await asyncio.wait_for(events_of(stream), 60)
        await stream.aclose()
        return [e.text for e in events if isinstance(e, Final)]

    with_vad = await final_of(True)
    assert len(with_vad) == 1
    assert await final_of(False) == with_vad           # the same utterance, heard whole
    # without the letters heard (and without the allowance for the recogniser's partial lag,
    # which alone covers this short pause): cut 0.45 s into the pause
    monkeypatch.setattr(transcripts, "SPAN_HEARD_MAX_S", 0.0)
    monkeypatch.setattr(SSMRecognizerBackend, "partial_lag_s", property(lambda self: 0.0))
    assert await final_of(False) != with_vad


async def test_an_engine_error_in_a_spellings_pause_keeps_what_was_heard(ssm_engine,
                                                                          flite_speech):
    stream = TranscriptStream(SSMRecognizerBackend(ssm_engine), RATE)
    await stream.start()
    stream.start_utterance(SPELLING)
    pushed(stream, np.concatenate([flite_speech("dee eigh vee eye dee", RATE), silence(0.2)]))
    stream.flush()                               # the pause begins
    stream.push(b"\x00\x01\x02")                 # not 16-bit PCM
    stream.start_utterance()                     # the next utterance opens afresh
    pushed(stream, np.concatenate([flite_speech("what are your opening hours", RATE, voice="awb"),
                                   silence(0.3)]))
    stream.end_input()
    events = await asyncio.wait_for(events_of(stream), 60)
    await stream.aclose()
    failed = [e for e in events if isinstance(e, Failed)]
    finals = [e for e in events if isinstance(e, Final)]
    assert len(failed) == 1 and isinstance(failed[0].error, AudioFormatError), events
    assert len(finals) == 2 and finals[0].text, finals       # the letters heard are kept
    assert events.index(finals[0]) < events.index(failed[0]) < events.index(finals[1])
    assert len(LATER_WORDS & set(finals[1].text.split())) >= 3, finals


@pytest.mark.parametrize("kind", BACKENDS)
async def test_the_vads_pauses_reach_the_utterance_and_change_nothing_it_hears(
        kind, ssm_engine, flite_speech, monkeypatch):
    """A pause (the VAD's stop timer started), one cancelled by speech, and the last: the final
    is what the same audio gives with no pauses; the SSM recogniser's utterance is told each."""
    from pipeline.engines.ssm_recognizer import RecognizerUtterance

    told: list[bool] = []
    real = RecognizerUtterance.pause
    monkeypatch.setattr(RecognizerUtterance, "pause",
                        lambda self, paused: (told.append(paused), real(self, paused))[1])
    first = flite_speech("hello", RATE, voice="awb")
    then = flite_speech("what are your opening hours", RATE, voice="awb")
    texts = []
    for pauses in (False, True):
        stream = TranscriptStream(make_backend(kind, ssm_engine, SphinxPool()), RATE)
        await stream.start()
        stream.start_utterance()
        pushed(stream, np.concatenate([first, silence(0.1)]))
        if pauses:
            stream.pause(True)
            stream.pause(False)
        pushed(stream, np.concatenate([then, silence(0.15)]))   # the VAD pauses once quiet is heard:
        if pauses:                                               # past the recogniser's own 0.1 s, so
            stream.pause(True)                                   # both decode the same audio
        pushed(stream, silence(0.1))
        texts.append((await one_final(stream))[0].text)
    assert texts[0] == texts[1] != ""
    assert told == ([True, False, True] if kind == "ssm" else [])
