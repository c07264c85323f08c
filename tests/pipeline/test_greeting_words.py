"""``pipeline.greeting_words``: voicemail phrases and a person's cues found in rough recogniser text."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.greeting_words import GreetingCues, normalise, substring_distance

TEXT = st.text(alphabet="abe ", max_size=30)


def substring_distance_reference(pattern: str, text: str) -> int:
    """The same distance by the textbook table (slow): the fast path's reference."""
    prev = [0] * (len(text) + 1)                 # row 0: the text's start is free
    for i, p in enumerate(pattern, 1):
        cur = [i] + [0] * len(text)
        for j, t in enumerate(text, 1):
            cur[j] = min(prev[j - 1] + (p != t), prev[j] + 1, cur[j - 1] + 1)
        prev = cur
    return min(prev)


@given(pattern=st.text(alphabet="abe ", min_size=1, max_size=12), text=TEXT)
def test_the_bit_parallel_distance_equals_the_table(pattern, text):
    assert substring_distance(pattern, text)[0] == substring_distance_reference(pattern, text)


def test_normalise_keeps_letters_and_single_spaces():
    assert normalise("  You've   REACHED, Dana's phone! ") == "youve reached danas phone"


@pytest.mark.parametrize("heard", [
    "leave a message",
    "leave the messige",                                   # the recogniser's spelling of it
    "please leve the messig after the beap",
    "the bersan your callig is not amalable pl",
    "the number you have dild es not avalabl",
    "welcome to the voice mai",                             # a partial cut mid-word
    "hi youve reached dana",
])
def test_machine_phrases_are_found_in_rough_text(heard):
    assert GreetingCues(0.15).match(heard).machine is not None


def test_the_closest_phrase_is_named():
    heard = GreetingCues(0.15).match("the number you have dild")
    assert heard.machine == "the number you have dialed" and heard.machine_ratio == pytest.approx(0.077, abs=1e-3)


@pytest.mark.parametrize("heard", [
    "", "hello", "hello who is this", "yes", "two nine three four zero", "he began a confue",
    "what they help to stricken",           # "at the beep" at 3 edits: a person, at tolerance 0.15
    "i this is kakle", "speaking",
])
def test_what_people_say_is_not_a_machine(heard):
    assert GreetingCues(0.15).match(heard).machine is None


def test_a_person_cue_counts_only_at_the_start_and_never_beside_a_machine_phrase():
    cues = GreetingCues(0.15)
    assert cues.match("hello who is this").person == "hello"
    assert cues.match("helo").person == "hello"            # one edit in five letters
    assert cues.match("well i said hello").person is None    # not how the answer opened
    assert cues.match("hello you have reached dana") == cues.match("you have reached dana")
    assert cues.match("hello you have reached dana").machine == "you have reached"


def test_a_tolerance_out_of_range_is_refused():
    with pytest.raises(ValueError):
        GreetingCues(0.5)
