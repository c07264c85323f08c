"""``screen``: the answering detector fed from a wire, bounded by the clock whatever the wire does."""

from __future__ import annotations

import asyncio
import time

import numpy as np

from pipeline.answering import AnsweringConfig, Decision
from pipeline.answering_words import GreetingWords, screening_recogniser
from pipeline.builder import PipelineConfig
from telephony.core.screening import screen


async def test_a_line_that_sends_nothing_is_silence_and_decides_unknown_on_time():
    """A callee whose endpoint sends no RTP at all: zeros stand in for the time that passed."""
    async def nothing(timeout_s: float) -> bytes | None:
        await asyncio.sleep(timeout_s)
        return None

    started = time.monotonic()
    seen: list[Decision] = []
    decision = await screen(nothing, AnsweringConfig(), ended=lambda: False, on_decision=seen.append)
    took = time.monotonic() - started
    assert decision is not None and decision.kind == "unknown" and seen == [decision]
    assert 3.0 <= took < 3.6


async def test_a_greeting_that_never_ends_gives_the_final_decision_at_max_wait():
    config = AnsweringConfig(max_wait_s=4.0)
    rng = np.random.default_rng(0)
    t = np.arange(160) / 8000

    async def talking(_timeout_s: float) -> bytes | None:   # voiced noise, paced as RTP would be
        await asyncio.sleep(0.02)
        buzz = 3000 * np.sign(np.sin(2 * np.pi * 140 * t)) + rng.standard_normal(160) * 800
        return buzz.astype(np.int16).tobytes()

    seen: list[Decision] = []
    decision = await screen(talking, config, ended=lambda: False, on_decision=seen.append)
    assert [(d.kind, d.final) for d in seen] == [("machine", False), ("machine", True)]
    assert decision is seen[-1] and decision.at_s <= config.max_wait_s + 0.3
    assert decision.reason == "no beep or end of greeting in 4 s"


async def test_the_call_ending_stops_screening_with_no_decision():
    ended = False

    async def then_hang_up(timeout_s: float) -> bytes | None:
        nonlocal ended
        await asyncio.sleep(0.02)
        ended = True
        return bytes(320)

    assert await screen(then_hang_up, AnsweringConfig(), ended=lambda: ended) is None


async def test_first_only_returns_at_the_first_machine_decision():
    config = AnsweringConfig()
    t = np.arange(160) / 8000

    async def beep(_timeout_s: float) -> bytes | None:
        await asyncio.sleep(0)
        return (6000 * np.sin(2 * np.pi * 1000 * t)).astype(np.int16).tobytes()

    decision = await screen(beep, config, ended=lambda: False, first_only=True)
    assert decision is not None and decision.kind == "machine" and not decision.final
    assert decision.beep_at_s == 0.0


async def test_the_calls_recogniser_hears_a_one_sentence_greeting_say_machine(flite_speech):
    """"Leave a message." and then silence: timing alone calls it a person (a short greeting, then
    a pause); the words of the recogniser a call with ``stt="ssm"`` runs (the shipped model: its
    partials, and its final pass at the first pause) call it a machine before the pause is over."""
    speech = flite_speech("Leave a message.", 8000)
    pcm = np.concatenate([np.zeros(2400, np.int16), speech, np.zeros(3 * 8000, np.int16)])
    pcm = pcm + np.random.default_rng(0).integers(-30, 30, pcm.size).astype(np.int16)   # line noise

    def line(paced: bool):
        frames = iter(pcm[i: i + 160].tobytes() for i in range(0, pcm.size - 159, 160))

        async def read(_timeout_s: float) -> bytes | None:
            await asyncio.sleep(0.02 if paced else 0)          # paced as RTP: the final pass runs meanwhile
            return next(frames, None)
        return read

    alone = await screen(line(paced=False), AnsweringConfig(), ended=lambda: False)
    assert alone is not None and alone.kind == "human"

    backend = screening_recogniser(PipelineConfig(stt="ssm"))
    assert backend is not None and screening_recogniser(PipelineConfig(stt="sphinx")) is None
    words = await GreetingWords.open(backend)
    assert words is not None
    seen: list[Decision] = []
    await screen(line(paced=True), AnsweringConfig(), ended=lambda: False, on_decision=seen.append,
                 words=words, first_only=True)
    assert seen[0].kind == "machine" and seen[0].reason.startswith("the greeting says"), (seen, words.text)
    assert seen[0].at_s < alone.at_s
