"""Per-turn hints in the joint search: yes/no and digit grammars, confidence, no take-over."""

from __future__ import annotations

import pytest

from ssm_engine.stt.beam import BeamConfig
from ssm_engine.stt.hints import DIGIT_WORDS, NO_HINTS, Hints, digits_lm
from ssm_engine.stt.joint import JointConfig, JointSearch
from ssm_engine.stt.lm import build_lm
from ssm_engine.stt.phones import Pronouncer

from .test_stt_phones import both, say

WORDS = {
    "yes": "Y EH S", "yeah": "Y AE", "no": "N OW", "nope": "N OW P", "that's": "DH AE T S",
    "not": "N AA T", "right": "R AY T", "i": "AY", "want": "W AA N T", "to": "T UW",
    "pay": "P EY", "my": "M AY", "bill": "B IH L", "zero": "Z IH R OW", "oh": "OW",
    "one": "W AH N", "two": "T UW", "three": "TH R IY", "four": "F AO R", "five": "F AY V",
    "six": "S IH K S", "seven": "S EH V AH N", "eight": "EY T", "nine": "N AY N",
    "double": "D AH B AH L", "triple": "T R IH P AH L", "correct": "K ER EH K T",
    "please": "P L IY Z", "sure": "SH UH R", "okay": "OW K EY", "thanks": "TH AE NG K S",
}


@pytest.fixture(scope="module")
def search() -> JointSearch:
    # callers in this LM always say "that's right", never "that's not right"; digits are rare
    lm = build_lm(["that's right"] * 40 + ["i want to pay my bill"] * 10 + ["yes", "no"],
                  general_words={w: 1.0 for w in WORDS})
    lex = Pronouncer({w: (tuple(p.split()),) for w, p in WORDS.items()})
    return JointSearch(lm, lex, BeamConfig(), JointConfig(lm_weight=2.0))


def _decode(search: JointSearch, phones: str, hints: Hints = NO_HINTS):
    dec = search.stream(hints)
    rows = both(["_"], say(phones))
    for i in range(0, len(rows), 3):              # streamed in pieces, as a call does
        dec.push(rows[i:i + 3])
    return dec.result()


def test_yes_no_hint_keeps_a_no_that_the_word_lm_would_turn_into_a_yes(search):
    """Guards the inversion found on the held-out voices: the word LM knew "that's right" so
    much better than "that's not right" that a caller's no became a yes."""
    said = "DH AE T S | N AA T | R AY T"
    free = _decode(search, said)
    hinted = _decode(search, said, Hints(expect=frozenset({"yes_no"})))
    assert hinted.text == "that's not right" and hinted.hinted
    assert 0.0 < hinted.confidence <= 1.0
    assert hinted.alternatives[0] == (hinted.text, hinted.confidence)
    assert sum(p for _, p in hinted.alternatives) <= 1.0 + 1e-9
    assert free.text in ("that's right", "that's not right")   # the LM's pull, without hints
    assert not free.hinted


def test_digits_hint_runs_a_digit_search_and_finds_the_string(search):
    said = "F AY V | N AY N | OW | T UW | S IH K S | S IH K S | EY T"
    hinted = _decode(search, said, Hints(expect=frozenset({"digits"})))
    assert hinted.text == "five nine oh two six six eight" and hinted.hinted


def test_a_hint_does_not_take_over_what_was_clearly_said_otherwise(search):
    said = "AY | W AA N T | T UW | P EY | M AY | B IH L"
    for hints in (Hints(expect=frozenset({"yes_no"})), Hints(expect=frozenset({"digits"})),
                  Hints(phrases=("that's right",))):
        res = _decode(search, said, hints)
        assert res.text == "i want to pay my bill" and not res.hinted


def test_phrases_are_normalised_and_kinds_checked():
    h = Hints(phrases=("Opening hours?", "opening hours", "", "Leave a message."))
    assert h.phrases == ("opening hours", "leave a message") and h
    assert not NO_HINTS and NO_HINTS.sentences() == ()
    yn = Hints(expect={"yes_no"})                       # any iterable of kinds
    assert "no" in yn.sentences() and "yes" in yn.sentences()
    with pytest.raises(ValueError, match="unknown hint kinds"):
        Hints(expect=frozenset({"names"}))
    with pytest.raises(ValueError, match="bonus"):
        Hints(bonus=-1.0)
    with pytest.raises(ValueError, match="min_digits"):
        Hints(expect={"digits"}, min_digits=-1)
    with pytest.raises(ValueError, match="posterior_scale"):
        JointConfig(posterior_scale=0.0)


def test_digits_lm_lets_any_digit_follow_any_other():
    lm = digits_lm()
    assert set(DIGIT_WORDS) <= set(lm.vocab)
    for a in ("zero", "five", "nine"):
        for b in ("oh", "one", "eight"):
            assert lm.logp(b, ("<s>", a)) > -6.0


def test_silence_under_hints_is_nothing(search):
    """A hint must not put words into silence: with no free reading, no hinted one either."""
    dec = search.stream(Hints(expect=frozenset({"yes_no", "digits"})))
    dec.push(both(["_"] * 40, ["_"] * 40))
    res = dec.result()
    assert res.text == "" and res.alternatives == () and not res.hinted
    empty = search.stream(Hints(expect=frozenset({"yes_no"})))
    assert empty.result().text == ""
