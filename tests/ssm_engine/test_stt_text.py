"""Text normalisation, the CTC vocabulary and the error-rate helpers."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ssm_engine.stt.decode import cer, edit_distance, wer
from ssm_engine.stt.errors import TranscriptError
from ssm_engine.stt.text import VOCAB, decode, encode, normalize_text, number_to_words


@pytest.mark.parametrize("raw, norm", [
    ("Order #42, on May 3rd!", "order number forty two on may third"),
    ("It costs $19.99", "it costs nineteen dollars and ninety nine cents"),
    ("account 12345678", "account one two three four five six seven eight"),
    ("I'm 'fine'", "i'm fine"),
    ("2.5% off", "two point five percent off"),
    ("the 21st, 2nd and 100th", "the twenty first second and one hundredth"),
    ("ZIP 02134", "zip zero two one three four"),
    ("  Hello,   WORLD  ", "hello world"),
])
def test_normalize_text(raw, norm):
    assert normalize_text(raw) == norm


@pytest.mark.parametrize("n, words", [
    (0, "zero"), (13, "thirteen"), (40, "forty"), (342, "three hundred forty two"),
    (1999, "one thousand nine hundred ninety nine"), (2_000_005, "two million five"),
])
def test_number_to_words(n, words):
    assert number_to_words(n) == words


@given(st.text(max_size=80))
def test_normalized_text_is_idempotent_and_in_vocabulary(text):
    norm = normalize_text(text)
    assert normalize_text(norm) == norm
    assert set(norm) <= set(VOCAB[1:])
    assert norm == norm.strip() and "  " not in norm


def test_encode_decode_round_trip_and_empty_text():
    ids = encode("Hello, world 7")
    assert 0 not in ids and decode(ids) == "hello world seven"
    with pytest.raises(TranscriptError):
        encode("?!")


def test_error_rates():
    assert edit_distance("kitten", "sitting") == 3
    assert wer(["a b c d"], ["a x c"]) == pytest.approx(0.5)
    assert cer(["abcd"], ["abcd"]) == 0.0
    assert cer(["ab", "cd"], ["", "cd"]) == pytest.approx(0.5)
