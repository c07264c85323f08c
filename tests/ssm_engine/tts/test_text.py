"""The TTS normaliser: phone-talk readings, incremental release, and bad input."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ssm_engine.tts.text import IncrementalNormalizer, Word, normalize


def said(text: str) -> str:
    """Words as text; letters upper case, markers as <pau>/<end>/<qend>."""
    out = []
    for w in normalize(text):
        out.append(w.text if w.kind == "word" else w.text.upper() if w.kind == "letter"
                   else f"<{w.kind}>")
    return " ".join(out)


PHONE = "five five five <pau> one two three <pau> four five six seven <end>"


@pytest.mark.parametrize("text, expected", [
    ("I have 3 items.", "i have three items <end>"),
    ("It costs 4,500 now", "it costs four thousand five hundred now <end>"),
    ("the 3rd and 21st", "the third and twenty first <end>"),
    ("pi is 3.14", "pi is three point one four <end>"),
    ("That is $12.50.", "that is twelve dollars and fifty cents <end>"),
    ("only $1", "only one dollar <end>"),
    ("just $0.99", "just ninety nine cents <end>"),
    ("a $4 million deal", "a four million dollars deal <end>"),
    ("about €5 or £20", "about five euros or twenty pounds <end>"),
    ("at 3:45 pm", "at three forty five P M <end>"),
    ("at 3:05", "at three oh five <end>"),
    ("at 9:00 a.m.", "at nine o'clock A M <end>"),
    ("at 10am", "at ten A M <end>"),
    ("on 5/12/2024", "on may twelfth twenty twenty four <end>"),
    ("since 2024-05-12", "since may twelfth twenty twenty four <end>"),
    ("May 3rd, 2024", "may third <pau> twenty twenty four <end>"),
    ("on May 3", "on may third <end>"),
    ("in 1984", "in nineteen eighty four <end>"),
    ("call 555-123-4567", "call " + PHONE),
    ("call (555) 123-4567", "call " + PHONE),
    ("call 555 123 4567", "call " + PHONE),
    ("order 44172291", "order four four one seven <pau> two two nine one <end>"),
    ("zip 90210", "zip nine zero two one zero <end>"),
    ("Order #42", "order number forty two <end>"),
    ("press #", "press pound <end>"),
    ("ref A12-345", "ref A one two <pau> three four five <end>"),
    ("Dr. Lee is here", "doctor lee is here <end>"),
    ("12 Oak Dr.", "twelve oak drive <end>"),
    ("St. Louis", "saint louis <end>"),
    ("221 Main St.", "two hundred twenty one main street <end>"),
    ("Mr. Smith and Mrs. Jones", "mister smith and missus jones <end>"),
    ("spelled A-B-C", "spelled A B C <end>"),
    ("your ID", "your I D <end>"),
    ("OK, thanks", "okay <pau> thanks <end>"),
    ("rock & roll @ home", "rock and roll at home <end>"),
    ("up 15%", "up fifteen percent <end>"),
    ("e.g. this", "for example this <end>"),
    ("mail bo.lee@example.com", "mail bo dot lee at example dot com <end>"),
    ("Really? Yes!", "really <qend> yes <end>"),
    ("wait... what", "wait <pau> what <end>"),
    ("Caf\u00e9 \u201cnice\u201d", "cafe nice <end>"),
    ("and/or", "and or <end>"),
    ("yes no.", "yes no <end>"),
    ("No. 5 please", "number five please <end>"),
    ("she sat. Then", "she sat <end> then <end>"),
    ("open Sat. and Sun.", "open saturday and sunday <end>"),
])
def test_readings(text: str, expected: str) -> None:
    assert said(text) == expected


@pytest.mark.parametrize("text, expected", [
    ("It is spelled D A V I D.", "it is spelled d A v i d <end>"),
    ("Spelled K, O, W, A.", "spelled k <pau> o <pau> w <pau> A <end>"),
    ("the letters a, b and c", "the letters A <pau> b and c <end>"),
    ("Plan A is fine.", "plan A is fine <end>"),
    ("Is it gate A?", "is it gate A <qend>"),
    # the article stays the article: lower case, a sentence's first word, beside "I" or a
    # letter of the other case, after a shouted word
    ("I have a car.", "i have a car <end>"),
    ("A technician will call. A refund is due.",
     "a technician will call <end> a refund is due <end>"),
    ("Am I a member?", "am i a member <qend>"),
    ("You got a B.", "you got a b <end>"),
    ("PLEASE HOLD A MOMENT", "please hold a moment <end>"),
])
def test_a_spelled_a_is_the_letter_and_the_article_stays_one(text: str, expected: str) -> None:
    """A lone "a" read as the article is a schwa: in a spelled name ("D A V I D") or "Plan A"
    it must be the letter's name, as "D-A-V-I-D" always was."""
    assert said(text) == expected


def test_a_waits_for_the_chunk_after_it() -> None:
    inc = IncrementalNormalizer()
    assert [w.text for w in inc.push("spelled D A ")] == ["spelled", "d"]
    assert [(w.text, w.kind) for w in inc.push("V ")] == [("a", "letter"), ("v", "word")]


@pytest.mark.parametrize("text", ["", "   ", "?!...", ",,, ;", "\U0001F600 \u2603", "\u00a0\t\n"])
def test_nothing_to_say(text: str) -> None:
    assert normalize(text) == []


def test_unknown_symbols_are_dropped() -> None:
    assert said("hello \U0001F600 there \u2603!") == "hello there <end>"


def test_no_pause_before_first_word_and_no_repeats() -> None:
    assert said(", , hello , , world .. .") == "hello <pau> world <end>"


def test_very_long_text() -> None:
    words = normalize("one more thing, " * 2000)
    assert len(words) == 8000 + 1
    assert words[-1] == Word("", "end")


def test_long_digit_run_is_read_digit_by_digit() -> None:
    words = [w.text for w in normalize("1" * 40) if w.kind == "word"]
    assert words == ["one"] * 40


def test_release_waits_for_right_context() -> None:
    inc = IncrementalNormalizer()
    assert inc.push("Call Dr.") == [Word("call")]
    assert inc.push(" Lee at $4") == [Word("doctor"), Word("lee"), Word("at")]
    assert inc.push(" million") == []
    assert inc.push(" today") == [Word("four"), Word("million"), Word("dollars")]
    assert inc.flush() == [Word("today"), Word("", "end")]


def test_flush_resets_for_the_next_utterance() -> None:
    inc = IncrementalNormalizer()
    first = inc.push("Hi there.") + inc.flush()
    second = inc.push("Hi there.") + inc.flush()
    assert first == second == normalize("Hi there.")


_TEXTS = [
    "Your order #A12-345 ships May 3rd, 2024 at 3:45 pm, Dr. Lee.",
    "Call me at (555) 123-4567 or 555 123 4567. Thanks!",
    "That is $12.50, or $4 million! Isn't it?",
    "My ID is A-B-C, ok? Main St. Apt 4; e.g. 15% off... and/or more",
    "I'm sorry, I didn't catch that. Could you repeat it? \U0001F600",
]
_PIECES = st.sampled_from(["a", "b", "A", "B", "I", "1", "2", "0", " ", " ", "  ", "\n", ".", ",", "$", ":",
                           "-", "?", "#", "%", "'", "/", "(", ")", "\U0001F600", "Dr.", "St",
                           "pm", "million", "May", "@"])
_RANDOM_TEXT = st.lists(_PIECES, max_size=25).map("".join)


def _split(text: str, cuts: list[int]) -> list[str]:
    points = sorted({min(c, len(text)) for c in cuts})
    return [text[a:b] for a, b in zip([0] + points, points + [len(text)])]


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(_TEXTS), st.lists(st.integers(0, 80), max_size=12))
def test_any_split_gives_the_whole_text_result(text: str, cuts: list[int]) -> None:
    inc = IncrementalNormalizer()
    out: list[Word] = []
    for piece in _split(text, cuts):
        out += inc.push(piece)
    assert out + inc.flush() == normalize(text)


@settings(max_examples=150, deadline=None)
@given(_RANDOM_TEXT, st.lists(st.integers(0, 60), max_size=8))
def test_any_split_of_random_text(text: str, cuts: list[int]) -> None:
    inc = IncrementalNormalizer()
    out: list[Word] = []
    for piece in _split(text, cuts):
        out += inc.push(piece)
    assert out + inc.flush() == normalize(text)
