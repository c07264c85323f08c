"""English text in the scoring normal form, and numbers as words: shared by every engine.

    normalize_text("Order #42, on May 3rd!")  # -> "order number forty two on may third"
    number_to_words(342)                      # -> "three hundred forty two"
    ordinal_words(21)                         # -> "twenty first"

Every engine is scored on text passed through ``normalize_text``: lower case, digits spelled as
words, punctuation removed, whitespace collapsed. The recogniser's vocabulary
(:mod:`ssm_engine.stt.text`), the training sentences (:mod:`ssm_engine.data.texts`) and the
voice's number reading (:mod:`ssm_engine.tts.numbers`) all build on it, so it sits below them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = ["normalize_text", "number_to_words", "ordinal_words", "edit_distance"]

_ONES = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
         "fifteen sixteen seventeen eighteen nineteen").split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
_ORDINAL = {"one": "first", "two": "second", "three": "third", "five": "fifth", "eight": "eighth",
            "nine": "ninth", "twelve": "twelfth"}
_SCALES = ((10**9, "billion"), (10**6, "million"), (1000, "thousand"), (100, "hundred"))


def number_to_words(n: int) -> str:
    """Cardinal words for 0 <= n < 10**12: 342 -> "three hundred forty two"."""
    if n < 0:
        return "minus " + number_to_words(-n)
    if n < 20:
        return _ONES[n]
    if n < 100:
        tens, ones = divmod(n, 10)
        return _TENS[tens] + ("" if ones == 0 else " " + _ONES[ones])
    for value, name in _SCALES:
        if n >= value:
            head, rest = divmod(n, value)
            words = number_to_words(head) + " " + name
            return words if rest == 0 else words + " " + number_to_words(rest)
    raise AssertionError("unreachable")


def ordinal_words(n: int) -> str:
    """3 -> "third", 21 -> "twenty first"."""
    words = number_to_words(n).split()
    last = words[-1]
    if last in _ORDINAL:
        words[-1] = _ORDINAL[last]
    elif last.endswith("y"):
        words[-1] = last[:-1] + "ieth"
    else:
        words[-1] = last + "th"
    return " ".join(words)


def _digits_to_words(token: str) -> str:
    """A run of digits: long runs (phone/account numbers) digit by digit, else the cardinal."""
    if len(token) > 4 or (len(token) > 1 and token.startswith("0")):
        return " ".join(_ONES[int(d)] for d in token)
    return number_to_words(int(token))


_ORD_RE = re.compile(r"\b(\d+)(st|nd|rd|th)\b")
_MONEY_RE = re.compile(r"\$(\d+)(?:\.(\d\d))?")
_DECIMAL_RE = re.compile(r"(\d+)\.(\d+)")
_DIGITS_RE = re.compile(r"\d+")
_DROP_RE = re.compile(r"[^a-z' ]+")


def _money(m: re.Match[str]) -> str:
    dollars = number_to_words(int(m.group(1))) + (" dollar" if m.group(1) == "1" else " dollars")
    if m.group(2) and int(m.group(2)):
        dollars += " and " + number_to_words(int(m.group(2))) + " cents"
    return " " + dollars + " "


def normalize_text(text: str) -> str:
    """Lower case, numbers as words, no punctuation, single spaces. The scoring normal form."""
    t = text.lower().replace("\u2019", "'")
    t = _MONEY_RE.sub(_money, t)
    t = _ORD_RE.sub(lambda m: " " + ordinal_words(int(m.group(1))) + " ", t)
    t = _DECIMAL_RE.sub(lambda m: " " + _digits_to_words(m.group(1)) + " point "
                        + " ".join(_ONES[int(d)] for d in m.group(2)) + " ", t)
    t = t.replace("%", " percent ").replace("#", " number ").replace("&", " and ")
    t = t.replace("@", " at ")
    t = _DIGITS_RE.sub(lambda m: " " + _digits_to_words(m.group(0)) + " ", t)
    t = t.replace("-", " ")
    t = _DROP_RE.sub("", t)
    t = re.sub(r"(?<![a-z])'|'(?![a-z])", "", t)     # quotes, not apostrophes inside words
    return " ".join(t.split())


def edit_distance(ref: Sequence[object], hyp: Sequence[object]) -> int:
    """Levenshtein distance (substitutions, insertions, deletions all cost 1)."""
    prev = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        cur = [i] + [0] * len(hyp)
        for j, h in enumerate(hyp, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (r != h))
        prev = cur
    return prev[-1]
