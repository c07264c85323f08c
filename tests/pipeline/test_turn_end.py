"""The end of turn that waits out a comma, inside pipecat's real user aggregator."""

from __future__ import annotations

import pytest
from pipecat.frames.frames import (
    LLMContextFrame,
    TranscriptionFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import (
    LLMContextAggregatorPair,
    LLMUserAggregatorParams,
)
from pipecat.tests.utils import SleepFrame, run_test
from pipecat.turns.user_start import VADUserTurnStartStrategy
from pipecat.turns.user_turn_strategies import UserTurnStrategies

from pipeline.builder import PipelineConfig, _make_turn_stop
from pipeline.frames import Hints, RecognitionHintsFrame
from pipeline.errors import ConfigError, PipelineError
from pipeline.turn_end import HoldUnfinishedTurnStopStrategy, looks_unfinished, one_word_answers


@pytest.mark.parametrize("text, unfinished", [
    ("hello", True), ("Hello,", True), ("so", True), ("i would like to", True),
    ("my number is five five and", True), ("i would like to check my order", False),
    ("what are your opening hours", False), ("yes", False), ("", False),
    # the first half of a goodbye, and a phone number's first groups, are held
    ("no thanks", True), ("Thank you,", True), ("thank you goodbye", False),
    ("five five five", True), ("five five five three four zero", True),
    ("five five five three four zero one two three four", False), ("one", False),
    ("i have three cats", False),
    # a question's first two words (also "thank you" misheard as "can you")
    ("can you", True), ("Do you?", True), ("can you help", False), ("thank you", True),
    ("i do", False), ("are you open", False),
])
def test_what_cannot_be_a_whole_turn(text, unfinished):
    assert looks_unfinished(text) is unfinished


@pytest.mark.parametrize("text, min_digits, unfinished", [
    # a phone number asked (usually ten digits): "oh" lost from "three oh nine", five left
    ("five five five three nine", 10, True), ("five five five three nine", 0, False),
    ("my number is five five five", 10, True), ("double five", 10, True),
    # "zero" heard "two oh": seven digits after the second group, still not a number
    ("five five five three four two oh", 10, True),
    ("five five five three oh nine seven two one five", 10, False),
    ("double five five three triple nine two two", 7, False),   # 2 + 1 + 1 + 3 + 2 digits
    ("i do not know it", 10, False), ("no", 10, False),
])
def test_a_number_shorter_than_the_agent_asked_for_is_unfinished(text, min_digits, unfinished):
    assert looks_unfinished(text, min_digits=min_digits) is unfinished


def test_the_calls_first_turn_of_one_word_is_an_opener():
    # "hello," misheard "holt": as the call's first words it is held, later it is an answer
    assert looks_unfinished("holt", first_turn=True)
    assert not looks_unfinished("holt")
    assert not looks_unfinished("holt street please", first_turn=True)
    assert not looks_unfinished("", first_turn=True)


@pytest.mark.parametrize("expect, phrases, word, unfinished", [
    # "Anything else?" (a yes or a no): "holt" is no answer to it, "no" and "yeah" are
    ({"yes_no"}, (), "holt", True), ({"yes_no"}, (), "no", False),
    ({"yes_no"}, (), "yeah", False), ({"yes_no"}, (), "goodbye", False),
    # digits asked: a digit answers (a menu choice), a word does not
    ({"digits"}, (), "seven", False), ({"digits"}, (), "holt", True),
    # only a name asked: any word may be a surname; an open question that also listens for an
    # introduction ("my name is ...": the agent's phrases beside the name kind) is not that
    ({"name"}, (), "brown", False), ({"name", "yes_no"}, (), "holt", True),
    ({"name"}, ("leave a message",), "holt", True),
    # the agent's own one-word phrases and keywords answer an open question
    (set(), ("parking", "leave a message"), "parking", False),
    (set(), ("parking", "leave a message"), "leave", True),
    (set(), (), "bye", False),
])
def test_a_one_word_turn_that_answers_nothing_asked_is_held(expect, phrases, word, unfinished):
    answers = one_word_answers(Hints(expect=frozenset(expect), phrases=phrases))
    assert looks_unfinished(word, answers=answers) is unfinished
    # more than one word is judged by the other rules alone
    assert not looks_unfinished(f"{word} street please", answers=answers)


def _final(text: str) -> TranscriptionFrame:
    frame = TranscriptionFrame(text, "caller", "2026-12-01T00:00:00Z")
    frame.finalized = True
    return frame


def _speech(text: str, pause_s: float) -> list:
    return [VADUserStartedSpeakingFrame(start_secs=0.1), SleepFrame(0.05),
            VADUserStoppedSpeakingFrame(stop_secs=0.2), _final(text), SleepFrame(pause_s)]


async def _turns(strategy, frames) -> list[str]:
    pair = LLMContextAggregatorPair(LLMContext(), user_params=LLMUserAggregatorParams(
        user_turn_strategies=UserTurnStrategies(start=[VADUserTurnStartStrategy()],
                                                stop=[strategy]),
        user_turn_stop_timeout=5.0))
    down, _ = await run_test(pair.user(), frames_to_send=frames)
    contexts = [f for f in down if isinstance(f, LLMContextFrame)]
    texts = [m["content"] for f in contexts[-1:] for m in f.context.get_messages()
             if m["role"] == "user"]
    return texts


async def test_a_comma_pause_after_hello_does_not_end_the_turn():
    """Guards the README's demo: "hello, I would like to check my order" was cut at the comma
    (a 250-500 ms pause) and the conversation then ran one turn behind."""
    hold = HoldUnfinishedTurnStopStrategy(hold_s=0.45)
    frames = _speech("hello", 0.3) + _speech("i would like to check my order", 0.8)
    texts = await _turns(hold, frames)
    assert texts == ["hello i would like to check my order"]
    assert hold.holds == 1
    # the plain timer ends the turn at the comma: two turns
    timer_texts = await _turns(HoldUnfinishedTurnStopStrategy(hold_s=0.0),
                                  _speech("hello", 0.3) + _speech("i would like to", 0.8))
    assert len(timer_texts) == 2


async def test_a_finished_turn_ends_at_once_and_a_held_one_after_the_hold():
    hold = HoldUnfinishedTurnStopStrategy(hold_s=0.6)
    texts = await _turns(hold, _speech("what are your opening hours", 0.3))
    assert texts == ["what are your opening hours"] and hold.holds == 0   # within 0.3 s
    hold = HoldUnfinishedTurnStopStrategy(hold_s=0.6)
    texts = await _turns(hold, _speech("hello", 0.9))
    assert texts == ["hello"] and hold.holds == 1      # a lone hello is answered after the hold


async def test_a_misheard_hello_as_the_first_turn_waits_out_the_comma():
    hold = HoldUnfinishedTurnStopStrategy(hold_s=0.45)
    texts = await _turns(hold, _speech("holt", 0.3) + _speech("i would like to check my order", 0.8))
    assert texts == ["holt i would like to check my order"] and hold.holds == 1
    assert hold.turns == 1


async def test_the_agents_hints_hold_a_phone_number_given_in_groups():
    """The agent asks for a phone number (hints: digits, usually ten); the caller pauses at each
    comma of "five five five, three oh nine, seven two one five" and the recogniser lost the
    "oh": five digits are not a phone number yet, so the turn waits."""
    said = (_speech("five five five", 0.3) + _speech("three nine", 0.3)
            + _speech("seven two one five", 0.8))
    asked = [RecognitionHintsFrame(Hints(expect=frozenset({"digits"}), min_digits=10))]
    hold = HoldUnfinishedTurnStopStrategy(hold_s=0.45)
    texts = await _turns(hold, asked + said)
    # held at each comma, and once more at the end: nine digits (the lost "oh") are not ten
    assert texts == ["five five five three nine seven two one five"] and hold.holds == 3
    # without the hints the five digits end the turn: the number is split in two
    texts = await _turns(HoldUnfinishedTurnStopStrategy(hold_s=0.45), said)
    assert texts == ["five five five three nine", "seven two one five"]
    # hints for something else (yes/no) ask for no digits, whatever min_digits says
    other = [RecognitionHintsFrame(Hints(expect=frozenset({"yes_no"}), min_digits=10))]
    texts = await _turns(HoldUnfinishedTurnStopStrategy(hold_s=0.45), other + said)
    assert texts == ["five five five three nine", "seven two one five"]


async def test_a_misheard_hello_later_in_the_call_waits_for_the_rest():
    """The listening caller's second turn, "hello, I would like to leave a message", was heard
    "holt" and then the rest: the agent had asked "anything else?", so a one-word turn that is
    no yes, no no and no goodbye is held; a plain "no" still ends at once."""
    asked = [RecognitionHintsFrame(Hints(expect=frozenset({"yes_no"})))]
    hold = HoldUnfinishedTurnStopStrategy(hold_s=0.45)
    hold.turns = 1                                   # not the call's first turn
    texts = await _turns(hold, asked + _speech("holt", 0.3)
                         + _speech("i would like to leave a message", 0.8))
    assert texts == ["holt i would like to leave a message"] and hold.holds == 1
    hold = HoldUnfinishedTurnStopStrategy(hold_s=0.6)
    hold.turns = 1
    texts = await _turns(hold, asked + _speech("no", 0.3))
    assert texts == ["no"] and hold.holds == 0        # within 0.3 s, before the hold would end
    # with no hints from an agent (an LLM turn handler) a later one-word turn is not held
    hold = HoldUnfinishedTurnStopStrategy(hold_s=0.6)
    hold.turns = 1
    texts = await _turns(hold, _speech("holt", 0.3))
    assert texts == ["holt"] and hold.holds == 0


def test_the_builder_uses_it_by_default_and_checks_the_hold():
    stop = _make_turn_stop(PipelineConfig())
    assert isinstance(stop[0], HoldUnfinishedTurnStopStrategy)
    assert not isinstance(_make_turn_stop(PipelineConfig(turn="silence"))[0],
                          HoldUnfinishedTurnStopStrategy)
    with pytest.raises(PipelineError, match="turn_hold_s"):
        PipelineConfig(turn_hold_s=5.0)
    with pytest.raises(ConfigError, match="hold_s"):
        HoldUnfinishedTurnStopStrategy(hold_s=-1.0)
