"""The festival teacher and the alignment of its segments to our phone tokens."""

from __future__ import annotations

import numpy as np
import pytest

from ssm_engine.tts import TeacherError, phonemize
from ssm_engine.tts.align import HOP, align, festival_words, split_sentences
from ssm_engine.tts.teacher import SAMPLE_RATE_HZ, FestivalTeacher, Segment, festival_available

missing = festival_available()
needs_festival = pytest.mark.skipif(missing is not None, reason=str(missing))


def segs(*rows: tuple[float, str, str]) -> list[Segment]:
    """(end_s, phone, word) rows; consecutive phones of one word share an id."""
    out, word_id, last = [], 0, None
    for end, phone, word in rows:
        if phone == "pau":
            out.append(Segment(end, "pau", 0, "0", "0"))
            last = None
            continue
        if word != last:
            word_id += 1
            last = word
        out.append(Segment(end, phone, 1, f"_{word_id}", word))
    return out


def silence(seconds: float) -> np.ndarray:
    return np.zeros(int(round(seconds * SAMPLE_RATE_HZ)), dtype=np.float32)


def test_festival_words() -> None:
    tokens = phonemize("Hi, A-B and a cat? Yes.")
    assert [festival_words(s) for s in split_sentences(tokens)] == [
        ["hi", ",", "A", "B", "and", "a", "cat", "?"], ["yes", "."]]


def test_align_takes_festival_times_and_cuts_leading_silence() -> None:
    tokens = phonemize("hi, yes.")     # hh ay pau y eh s end
    spoken = [(silence(1.0), segs((0.20, "pau", ""), (0.25, "hh", "hi"), (0.40, "ay", "hi"),
                                  (0.55, "pau", ""), (0.60, "y", "yes"), (0.70, "eh", "yes"),
                                  (0.80, "s", "yes"), (1.0, "pau", "")))]
    audio, durations = align(tokens, spoken)
    assert durations == [5, 15, 15, 5, 10, 10, 20]
    assert len(audio) == sum(durations) * HOP == 80 * HOP


def test_align_spreads_a_word_whose_phones_differ() -> None:
    tokens = phonemize("yes.")          # y eh s end
    spoken = [(silence(0.6), segs((0.1, "pau", ""), (0.2, "y", "yes"), (0.3, "ih", "yes"),
                                  (0.35, "s", "yes"), (0.4, "s", "yes"), (0.6, "pau", "")))]
    _, durations = align(tokens, spoken)
    assert durations == [8, 15, 7, 20]      # 0.3 s over weights 1, 2, 1; end gets the rest


def test_pauses_festival_did_not_make_or_we_did_not_ask_for() -> None:
    tokens = phonemize("hi, yes no.")   # hh ay pau y eh s n ow end
    spoken = [(silence(1.0), segs((0.1, "pau", ""), (0.2, "hh", "hi"), (0.3, "ay", "hi"),
                                  (0.4, "y", "yes"), (0.5, "eh", "yes"), (0.6, "s", "yes"),
                                  (0.7, "pau", ""), (0.8, "n", "no"), (0.9, "ow", "no"),
                                  (1.0, "pau", "")))]
    _, durations = align(tokens, spoken)
    assert durations[2] == 0                # our pause, festival made none: 0 frames
    assert durations[5] == 20               # festival's pause after "yes" joins its last phone
    assert sum(durations) == 90


def test_second_sentence_leading_silence_belongs_to_the_first_end() -> None:
    tokens = phonemize("hi. yes?")      # hh ay end y eh s qend
    one = (silence(0.5), segs((0.1, "pau", ""), (0.2, "hh", "hi"), (0.3, "ay", "hi"),
                              (0.5, "pau", "")))
    two = (silence(0.6), segs((0.15, "pau", ""), (0.2, "y", "yes"), (0.3, "eh", "yes"),
                              (0.4, "s", "yes"), (0.6, "pau", "")))
    audio, durations = align(tokens, [one, two])
    assert durations == [10, 10, 20 + 15, 5, 10, 10, 20]
    assert len(audio) == 100 * HOP


def test_align_rejects_word_count_mismatch() -> None:
    tokens = phonemize("hi yes.")
    spoken = [(silence(0.5), segs((0.1, "pau", ""), (0.2, "hh", "hi"), (0.3, "ay", "hi"),
                                  (0.5, "pau", "")))]
    with pytest.raises(TeacherError, match="festival said 1 words, we have 2"):
        align(tokens, spoken)
    with pytest.raises(TeacherError, match="sentences"):
        align(tokens, [])


@needs_festival
def test_festival_says_two_sentences_and_they_align() -> None:
    texts = ["Your order #4417 has shipped.", "Is 3:45 pm OK, Dr. Lee?"]
    with FestivalTeacher() as teacher:
        for text in texts:
            tokens = phonemize(text)
            spoken = [teacher.synthesize(festival_words(s)) for s in split_sentences(tokens)]
            for audio, segments in spoken:
                assert audio.dtype == np.float32 and np.abs(audio).max() > 0.05
                assert segments[0].phone == "pau" and segments[-1].phone == "pau"
                assert abs(segments[-1].end_s - len(audio) / SAMPLE_RATE_HZ) < 0.05
                phones = [s.phone for s in segments if s.phone != "pau"]
                ours = [t.symbol for t in tokens if t.word_index >= 0]
                assert phones == ours       # festival said exactly our phones
            audio, durations = align(tokens, spoken)
            assert len(durations) == len(tokens)
            assert min(durations) >= 0 and len(audio) == sum(durations) * HOP
            assert all(d > 0 for d, t in zip(durations, tokens) if t.word_index >= 0)
            assert durations[-1] >= 5       # trailing silence sits in the end token
            # the audio starts with speech, not festival's leading silence
            assert np.abs(audio[:HOP * 3]).max() < np.abs(audio).max()


@needs_festival
def test_teacher_rejects_text_it_cannot_send() -> None:
    with FestivalTeacher() as teacher:
        with pytest.raises(TeacherError):
            teacher.synthesize(['say "this"'])
        with pytest.raises(TeacherError):
            teacher.synthesize([",", "."])
        audio, _ = teacher.synthesize(["still", "working", "."])   # the process survives
        assert len(audio) > SAMPLE_RATE_HZ // 4
