"""Phone tokens: the front end's contract with the acoustic model."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ssm_engine.tts import SYMBOLS, IncrementalPhonemizer, PhoneToken, TextError, encode, phonemize

VOWELS = {"aa", "ae", "ah", "ao", "aw", "ax", "ay", "eh", "er", "ey", "ih", "iy", "ow", "oy", "uh",
          "uw"}


def test_symbols_are_frozen() -> None:
    """Checkpoints depend on these ids: only appending is allowed."""
    assert SYMBOLS[0] == "<pad>"
    assert SYMBOLS[1:6] == ("aa", "ae", "ah", "ao", "aw")
    assert SYMBOLS[-3:] == ("pau", "end", "qend")
    assert len(SYMBOLS) == 47 and len(set(SYMBOLS)) == 47


def test_a_sentence() -> None:
    tokens = phonemize("Hi, I'm Ava.")
    assert [t.symbol for t in tokens] == ["hh", "ay", "pau", "ay", "m", "ey", "v", "ax", "end"]
    assert tokens[0] == PhoneToken("hh", 3, 1, 0, "hi")
    assert tokens[1] == PhoneToken("ay", 1, 3, 0, "hi")
    assert tokens[2] == PhoneToken("pau", 3, 4, -1, None)
    assert [t.position for t in tokens[5:8]] == [1, 2, 3]
    assert {t.word_index for t in tokens[5:8]} == {2}
    assert tokens[-1] == PhoneToken("end", 3, 4, -1, None)


def test_conventions_hold_on_phone_talk() -> None:
    tokens = phonemize("Your order #A12-345 ships May 3rd at 3:45 pm. Is (555) 123-4567 right?")
    assert tokens[-1].symbol == "qend"
    assert any(t.symbol == "end" for t in tokens[:-1])
    for t in tokens:
        if t.symbol in ("pau", "end", "qend"):
            assert (t.stress, t.position, t.word_index, t.word) == (3, 4, -1, None)
        elif t.symbol in VOWELS:
            assert t.stress in (0, 1, 2)
        else:
            assert t.stress == 3
    word_ids = [t.word_index for t in tokens if t.word_index >= 0]
    assert word_ids == sorted(word_ids) and word_ids[0] == 0


def test_single_phone_word_and_spelled_letter() -> None:
    tokens = phonemize("A-B, a cat")
    assert tokens[0] == PhoneToken("ey", 1, 0, 0, "a")      # the letter A
    article = [t for t in tokens if t.word_index == 2]
    assert article == [PhoneToken("ax", 0, 0, 2, "a")]      # the article a


def test_encode() -> None:
    tokens = phonemize("Yes.")
    ids = encode(tokens)
    assert ids.dtype == np.int64 and ids.shape == (len(tokens), 3)
    assert [SYMBOLS[i] for i in ids[:, 0]] == [t.symbol for t in tokens]
    assert ids[:, 1].tolist() == [t.stress for t in tokens]
    assert ids[:, 2].tolist() == [t.position for t in tokens]
    assert encode([]).shape == (0, 3)


def test_encode_rejects_unknown_symbols() -> None:
    with pytest.raises(TextError, match="xx"):
        encode([PhoneToken("xx", 3, 1, 0, "w")])
    with pytest.raises(TextError):
        encode([PhoneToken("<pad>", 3, 1, 0, "w")])


@pytest.mark.parametrize("text", ["", "   ", "...", "?!", "\U0001F600\U0001F600", "\u2603 ,"])
def test_nothing_to_say_raises(text: str) -> None:
    with pytest.raises(TextError, match="nothing to say"):
        phonemize(text)


def test_nothing_to_say_streams_as_nothing() -> None:
    inc = IncrementalPhonemizer()
    assert inc.push("... \U0001F600 ") == []
    assert inc.flush() == []


def test_out_of_vocabulary_words_use_letter_to_sound() -> None:
    """Golden: festival 2.5's lts_predict with cmu_lts_rules says z ao1 r b y ax0 l ae1 k s."""
    tokens = phonemize("Zorbulax")
    assert [(t.symbol, t.stress) for t in tokens[:-1]] == [
        ("z", 3), ("ao", 1), ("r", 3), ("b", 3), ("y", 3), ("ax", 0), ("l", 3), ("ae", 1),
        ("k", 3), ("s", 3)]
    assert {t.word for t in tokens[:-1]} == {"zorbulax"}


def test_very_long_text() -> None:
    tokens = phonemize("Your order has shipped. " * 300)
    assert sum(t.symbol == "end" for t in tokens) == 300
    assert tokens[-1].symbol == "end"
    assert max(t.word_index for t in tokens) == 4 * 300 - 1


def test_word_indices_restart_after_flush() -> None:
    inc = IncrementalPhonemizer()
    first = inc.push("Hello there. ") + inc.flush()
    second = inc.push("Hello there. ") + inc.flush()
    assert first == second == phonemize("Hello there.")


_TEXTS = [
    "Thanks for calling Acme Shop! Your order #4417-2291 ships Tuesday, May 3rd.",
    "I have your number as (555) 123-4567. Is that right?",
    "Your balance is $1,234.56; Dr. Lee's office opens at 9:30 a.m. on 5/12.",
    "It's spelled S-M-I-T-H, ID A12-345... ok? \U0001F600",
]


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(_TEXTS), st.lists(st.integers(0, 90), max_size=15))
def test_incremental_equals_whole(text: str, cuts: list[int]) -> None:
    points = sorted({min(c, len(text)) for c in cuts})
    inc = IncrementalPhonemizer()
    out: list[PhoneToken] = []
    for a, b in zip([0] + points, points + [len(text)]):
        out += inc.push(text[a:b])
    assert out + inc.flush() == phonemize(text)


def test_token_by_token_release_is_early() -> None:
    """Words come out while the text is still arriving, not only at flush."""
    inc = IncrementalPhonemizer()
    released = []
    for piece in ["Your", " order", " has", " shipped", ",", " and", " it"]:
        released += inc.push(piece)
    assert {t.word for t in released if t.word} == {"your", "order", "has", "shipped", "and"}
