"""The spelling hint: a name said letter by letter, found among the names it nearly spells."""

from __future__ import annotations

import math

import pytest

from ssm_engine.stt.beam import BeamConfig
from ssm_engine.stt.hints import Hints
from ssm_engine.stt.joint import JointConfig, JointSearch
from ssm_engine.stt.lm import build_lm
from ssm_engine.stt.names import NameTable
from ssm_engine.stt.phones import Pronouncer
from ssm_engine.stt.spelling import (
    LETTER_PRONS,
    UNKNOWN_SPELLING_LOGP,
    SpelledNames,
    join_spelled,
    letters_pronouncer,
    spelled_letters,
    spelled_logp,
    spelling_lm,
)

from .test_stt_hints import _decode

SPELLING = Hints(expect=frozenset({"spelling", "name"}))
WORDS = {"my": "M AY", "name": "N EY M", "is": "IH Z", "i": "AY", "want": "W AA N T",
         "to": "T UW", "pay": "P EY", "bill": "B IH L", "the": "DH AH", "b": "B IY"}


@pytest.fixture(scope="module")
def table() -> NameTable:
    return NameTable.load()


@pytest.fixture(scope="module")
def search() -> JointSearch:
    lm = build_lm(["i want to pay my bill"] * 10 + ["my name is"],
                  general_words={w: 1.0 for w in WORDS})
    lex = Pronouncer({w: (tuple(p.split()),) for w, p in WORDS.items()})
    return JointSearch(lm, lex, BeamConfig(), JointConfig(lm_weight=2.0))


def _letters(letters: str, doubt: dict[tuple[int, int], dict[str, float]] | None = None
             ) -> list[str | dict[str, float]]:
    """Frames of letters said one after another, a word boundary between each; ``doubt``:
    (letter index, phone index) -> that phone's frame as several phones (an acoustic doubt)."""
    doubt = doubt or {}
    out: list[str | dict[str, float]] = ["_"]
    for i, letter in enumerate(letters):
        if i:
            out += ["|", "_"]
        for j, p in enumerate(LETTER_PRONS[letter][0]):
            out += [doubt.get((i, j), p), "_"]
    return out + ["_"]


def _decode_frames(search: JointSearch, frames, hints: Hints = SPELLING):
    from .test_stt_phones import both

    dec = search.stream(hints)
    rows = both(["_"], frames)
    for i in range(0, len(rows), 3):
        dec.push(rows[i:i + 3])
    return dec.result()


def test_a_spelled_name_is_heard_as_its_letters_and_joined_into_the_name(search):
    res = _decode_frames(search, _letters("davidmiller"))
    assert res.text == "d a v i d m i l l e r" and res.hinted
    assert join_spelled(res.text) == "david miller"


def test_a_letter_in_doubt_is_taken_as_the_name_the_letters_nearly_spell(search, monkeypatch):
    """"m" and "n" differ in one phone, and the search's letter model cannot hold it to the
    names: the string it finds for "gwendolyn" with its "n" in doubt spells no name; the names
    within a letter or two are proposed, and the rescoring takes the one the sound allows."""
    said = _letters("gwendolyn", {(3, 0): {"M": 0.6, "N": 0.35}})     # "n" heard "m n"
    res = _decode_frames(search, said)
    assert res.text == "g w e n d o l y n", res.alternatives
    # without the names proposed, the letter search alone loses it
    monkeypatch.setattr(search, "grammar_strings", lambda kind, found: found)
    assert _decode_frames(search, said).text != "g w e n d o l y n"


def test_a_spelling_of_no_name_in_the_table_is_kept_as_said(search, table):
    said = _letters("zyqx")
    assert "zyqx" not in table.first and "zyqx" not in table.last
    res = _decode_frames(search, said)
    assert res.text == "z y q x"
    assert join_spelled(res.text, table) == "zyqx"


def test_a_name_said_whole_under_the_spelling_hint_is_still_heard(search, table):
    said = " | ".join([WORDS["my"], WORDS["name"], WORDS["is"]]
                      + [" ".join(table.prons[w][0]) for w in ("sarah", "jones")])
    assert _decode(search, said, SPELLING).text == "my name is sarah jones"


def test_other_words_under_the_spelling_hint_stay_as_said(search):
    res = _decode(search, "AY | W AA N T | T UW | P EY | M AY | B IH L", SPELLING)
    assert res.text == "i want to pay my bill" and not res.hinted


def test_spelled_letters_reads_double_and_refuses_words():
    assert spelled_letters("m i double l e r") == "miller"
    assert spelled_letters("d a v i d") == "david"
    assert spelled_letters("my name is d a v i d") is None
    assert spelled_letters("") is None
    assert spelled_letters("double") is None


def test_the_prior_prefers_names_and_the_commoner_reading(table):
    both_names = spelled_logp(table, "d a v i d m i l l e r")
    assert both_names is not None and both_names > spelled_logp(table, "d a v i t m i l l e r")
    assert spelled_logp(table, "m i l l e r") > spelled_logp(table, "z a m o r a")
    unknown = spelled_logp(table, "z y q x")
    assert unknown == pytest.approx(UNKNOWN_SPELLING_LOGP + 4 * math.log(1 / 26))
    assert spelled_logp(table, "hello there") is None


def test_join_spelled_splits_a_run_of_letters_where_the_table_reads_two_names(table):
    assert join_spelled("s a r a h j o n e s", table) == "sarah jones"
    assert join_spelled("j o n e s", table) == "jones"
    assert join_spelled("m i double l e r", table) == "miller"
    assert join_spelled("sarah jones", table) is None


def test_near_names_are_within_two_letters_fewest_first(table):
    near = SpelledNames(table)
    readings = near.readings("s t e n b u t l e r")
    assert "s t e v e n b u t l e r" in readings[:4]
    assert "s t e n b u t l e r" not in readings           # not what was heard itself
    assert all(e <= 2 for e, _ in near.near("stephen", "first"))
    assert near.near("ann", "first")[0] == (0, "ann")
    assert near.readings("hello there") == []


def test_the_letter_lexicon_and_model_cover_every_letter(table):
    lex = letters_pronouncer()
    assert set("abcdefghijklmnopqrstuvwxyz") | {"double"} == set(lex.words)
    lm = spelling_lm(table, sentences=300)
    assert set("abcdefghijklmnopqrstuvwxyz") | {"double"} <= set(lm.vocab)
    assert lm.order == 4
