"""Slot values from weak-recognizer text, and the fuzzy matching under them."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.retrieval import BM25Index, find_phrase, phonetic_key, similar, stem, words
from agent.slots import digits_in, extract, spoken_digits, yes_or_no

NAMES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]


@given(st.text(alphabet="0123456789", min_size=1, max_size=15))
def test_digits_spoken_as_words_come_back(digits):
    assert digits_in(" ".join(NAMES[int(d)] for d in digits)) == digits


@given(st.text(alphabet="0123456789", min_size=1, max_size=15))
def test_spoken_digits_keep_every_digit_in_order(digits):
    assert spoken_digits(digits).replace(",", "").replace(" ", "") == digits


@pytest.mark.parametrize("text, digits", [
    ("my number is five five five oh one two three", "5550123"),
    ("double five five, oh one two three", "5550123"),
    ("triple seven", "777"),
    ("twenty three forty five", "2345"),
    ("ninety", "90"),
    ("five hundred", "500"),
    ("four hundred fifteen five five five zero one nine nine", "4155550199"),   # espeak reads 415 so
    ("order twelve thousand three hundred forty five", "12345"),
    ("one hundred and five", "105"),
    ("two thousand and seven", "2007"),
    ("twelve thousand", "12000"),
    ("five fifty five", "555"),
    ("it's 555-0123", "5550123"),
    ("five five five to oh one two", "555201 2".replace(" ", "")),  # "to" between digits
    ("i want to go for a walk", ""),  # "to"/"for" away from digits are words
    ("oh hello", ""),
    ("one two three four high and", "12345"),  # pocketsphinx: "five" heard as "high"
])
def test_digits_in(text, digits):
    assert digits_in(text) == digits


@pytest.mark.parametrize("digits, spoken", [
    ("5550123", "5 5 5, 0 1 2 3"),
    ("4155550123", "4 1 5, 5 5 5, 0 1 2 3"),
    ("14155550123", "1, 4 1 5, 5 5 5, 0 1 2 3"),
    ("12345", "1 2 3 4 5"),
])
def test_spoken_digits_groups_like_a_phone_number(digits, spoken):
    assert spoken_digits(digits) == spoken


@pytest.mark.parametrize("text, answer", [
    ("yes", True), ("yeah that's right", True), ("correct", True), ("yep", True),
    ("okay", True), ("uh huh", True), ("no", False), ("nope", False),
    ("no that's not right", False), ("that's wrong", False), ("it is not", False),
    ("hmm", None), ("the blue one", None), ("", None),
])
def test_yes_or_no(text, answer):
    assert yes_or_no(text) is answer


@pytest.mark.parametrize("kind, text, value", [
    ("name", "my name is john smith", "John Smith"),
    ("name", "yeah it's MARY o'neil", "Mary O'neil"),
    ("name", "this is bob speaking", "Bob"),
    ("name", "um", None),
    ("phone", "five five five oh one two three", "5550123"),
    ("phone", "five five five", None),
    ("number", "order one two three", "123"),
    ("number", "no idea", None),
    ("text", "please tell the doctor that i'll be late", "i'll be late"),
    ("yes_no", "yeah", "yes"),
    ("date", "next tuesday", "next tuesday"),
    ("name", "   ", None),
])
def test_extract(kind, text, value):
    assert extract(kind, text) == value


def test_stem_makes_forms_meet():
    assert stem("parking") == stem("park") == "park"
    assert stem("hours") == stem("hour")
    assert stem("shipped") == "ship"
    assert stem("deliveries") == "delivery"


def test_similar_is_forgiving_but_not_blind():
    assert phonetic_key("order") == phonetic_key("harder")
    assert similar("harder", "order")
    assert similar("barking", "parking")
    assert similar("appointmen", "appointment")
    assert not similar("cat", "bat")            # short words must match exactly
    assert not similar("weather", "order")
    assert not similar("parking", "insurance")


def test_find_phrase_in_order():
    ws = words("I'd like to leave a message please")
    assert find_phrase(ws, "leave a message")
    assert find_phrase(ws, "message")
    assert not find_phrase(ws, "message leave")
    assert find_phrase(words("check my harder"), "order")


def test_bm25_ranks_and_rejects_off_topic():
    index = BM25Index(["opening hours monday to friday", "parking behind the building",
                       "insurance plans delta cigna"])
    assert index.search("what are your hours").index == 0
    assert index.search("where can i park").index == 1
    assert index.search("is there barking").index == 1   # fuzzy: voicing ignored
    assert index.search("what's the weather like") is None
    assert index.search("") is None
    assert BM25Index([]).search("hours") is None


@pytest.mark.parametrize("heard, name", [
    ("i want to", None), ("I Don't Brown", None), ("can i leave a message", None),
    ("my name is michael brown", "Michael Brown"), ("will smith speaking", "Will Smith"),
    ("it's rose mary o'neil", "Rose Mary O'neil"), ("um", None),
    ("one two three four five", None),
])
def test_a_name_slot_refuses_what_no_name_is(heard, name):
    """Guards the call where the name slot kept "I Want To" (a misheard request) as a name."""
    assert extract("name", heard) == name


@pytest.mark.parametrize("heard, name", [
    ("d a v i d m i double l e r", "David Miller"),     # split where the names table reads two
    ("my name is s a r a h", "Sarah"), ("it's j o n e s", "Jones"),
    ("x q z w", "Xqzw"),                                # spells no name in the table: kept
    ("i a", None),                                      # two letters: words heard short
    ("d a v i d miller", "David Miller"),               # the first name spelled, the last said
    ("D-A-V-I-D M-I-L-L-E-R.", "David Miller"),         # as Whisper writes a spelling
])
def test_a_spelled_name_is_joined_into_the_name(heard, name):
    assert extract("name", heard) == name
