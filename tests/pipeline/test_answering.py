"""AnsweringDetector on real (flite) speech through the mu-law phone channel, 20 ms at a time."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.answering import AnsweringConfig, AnsweringDetector, Decision
from pipeline.audio.g711 import ulaw_decode, ulaw_encode
from pipeline.errors import AudioFormatError, ConfigError

RATE = 8000
GREETING = ("Hi, you have reached Alex. I cannot come to the phone right now. "
            "Please leave a message after the tone.")


def silence(s: float, seed: int = 0) -> np.ndarray:
    """Line noise around -60 dBFS."""
    return (np.random.default_rng(seed).standard_normal(int(s * RATE)) * 30).astype(np.int16)


def tone(hz: float, s: float) -> np.ndarray:
    t = np.arange(int(s * RATE)) / RATE
    return (6000 * np.sin(2 * np.pi * hz * t)).astype(np.int16)


def line(*parts: np.ndarray) -> np.ndarray:
    x = np.concatenate(parts)
    return ulaw_decode(ulaw_encode(x))


def run(pcm: np.ndarray, config: AnsweringConfig | None = None, chunk: int = 160, **kw) -> list[Decision]:
    det = AnsweringDetector(config, **kw)
    for i in range(0, len(pcm), chunk):
        det.push(pcm[i: i + chunk].tobytes())
        if det.done:
            break
    det.finish()
    return det.decisions


def test_hello_then_silence_is_a_person(flite_speech):
    hello = flite_speech("hello?", RATE)
    decisions = run(line(silence(0.5), hello, silence(4.0)))
    assert [d.kind for d in decisions] == ["human"]
    d = decisions[0]
    assert d.final and d.beep_at_s is None
    speech_end = 0.5 + len(hello) / RATE
    assert speech_end < d.at_s <= speech_end + 0.9          # the pause confirms it
    assert "greeting" in d.reason


def test_long_greeting_is_a_machine_within_3_s(flite_speech):
    greeting = flite_speech(GREETING, RATE)
    decisions = run(line(silence(0.4), greeting, silence(3.0)))
    first, last = decisions[0], decisions[-1]
    assert first.kind == "machine" and not first.final
    assert first.at_s <= 3.0
    assert last.kind == "machine" and last.final and last.beep_at_s is None
    end = 0.4 + len(greeting) / RATE
    assert end + 1.0 <= last.at_s <= end + 2.0               # no beep: the greeting's end, then wait
    assert "no beep" in last.reason


def test_beep_is_found_and_timed_within_50_ms(flite_speech):
    greeting = flite_speech(GREETING, RATE)
    lead, gap = 0.37, 0.43
    pcm = line(silence(lead), greeting, silence(gap), tone(850.0, 0.5), silence(3.0))
    decisions = run(pcm)
    onset = lead + (len(greeting) + int(gap * RATE)) / RATE
    last = decisions[-1]
    assert decisions[0].kind == "machine"
    assert last.final and last.beep_at_s is not None
    assert abs(last.beep_at_s - onset) <= 0.05
    assert abs(last.at_s - (onset + 0.5)) <= 0.06            # "speak now" at the end of the beep


def test_short_greeting_with_beep_is_a_machine_by_its_beep(flite_speech):
    short = flite_speech("Leave a message.", RATE)
    pcm = line(silence(0.3), short, silence(0.3), tone(1000.0, 0.4), silence(2.0))
    first = run(pcm)[0]
    assert first.kind == "machine" and "beep" in first.reason and first.at_s <= 3.0


def test_silence_is_unknown():
    decisions = run(line(silence(6.0)))
    assert [(d.kind, d.at_s) for d in decisions] == [("unknown", 3.0)]
    assert "no speech" in decisions[0].reason


def test_recognised_words_mark_a_short_greeting_a_machine(flite_speech):
    short = flite_speech("Not available.", RATE)
    pcm = line(silence(0.3), short, silence(3.0))
    assert run(pcm)[0].kind == "human"                       # timing alone: a short greeting
    heard: list[str] = []

    def words() -> str:                                      # a recogniser's text, late by ~0.3 s
        heard.append("")
        return "not available" if len(heard) * 0.1 > 0.3 + len(short) / RATE else ""

    first = run(pcm, words=words)[0]
    assert first.kind == "machine" and "not available" in first.reason


def test_chunking_does_not_change_decisions(flite_speech):
    greeting = flite_speech(GREETING, RATE)
    pcm = line(silence(0.4), greeting, silence(0.3), tone(440.0, 0.6), silence(2.0))
    assert run(pcm, chunk=160) == run(pcm, chunk=1234) == run(pcm, chunk=len(pcm))


def test_bad_input_raises_audio_format_error():
    det = AnsweringDetector()
    with pytest.raises(AudioFormatError, match="even byte count"):
        det.push(b"\x00" * 161)
    with pytest.raises(AudioFormatError, match="int16"):
        det.push(np.zeros(160, np.float32))
    with pytest.raises(AudioFormatError, match="list"):
        det.push([0] * 160)  # type: ignore[arg-type]
    assert det.heard_s == 0.0


@pytest.mark.parametrize("bad", [{"sample_rate_hz": 44100}, {"vad_mode": 4}, {"human_pause_s": 0},
                                 {"no_speech_s": 4.0, "max_decide_s": 3.0}, {"tone_ratio": 1.5},
                                 {"beep_max_hz": 5000.0}])
def test_bad_config_raises_config_error(bad):
    with pytest.raises(ConfigError):
        AnsweringConfig(**bad)
