"""Reading slot values out of what a weak recognizer heard, and saying them back.

    digits_in("my number is five five five oh one two three")   # -> "5550123"
    spoken_digits("5550123")                                     # -> "5 5 5, 0 1 2 3"
    extract("phone", "it's five five five ...")                  # -> "5550123" or None
    yes_or_no("yeah that's right")                               # -> True  (None: neither)
    extract("name", "it's d a v i d m i double l e r")           # -> "David Miller" (spelled)

Numbers are read from digits and from words ("double five", "twenty three", "oh"); words that
sound like digits ("to", "for", "ate", "won") count only next to other digits, where a caller
reading a number out would say them.
"""

from __future__ import annotations

import re

from agent.retrieval import STOPWORDS, similar, words
from ssm_engine.stt.spelling import join_spelled

__all__ = ["digits_in", "extract", "spoken_digits", "yes_or_no", "PHONE_DIGITS",
           "PHONE_DIGITS_USUAL"]

PHONE_DIGITS = (7, 15)
"""A phone number's fewest and most digits (a local number to an international one)."""
PHONE_DIGITS_USUAL = 10
"""A whole phone number as callers give it (area code and number: ten in the US, ten or eleven
in most countries): fewer digits in a turn are more often a comma pause inside one than a
seven-digit local number, so the end of turn waits (in bench_conversations "five five five,
three four zero, ..." heard with one digit too many ended the turn at the second comma when
seven were enough)."""

_UNITS = {"zero": 0, "oh": 0, "o": 0, "nought": 0, "one": 1, "two": 2, "three": 3, "four": 4,
          "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9}
_SOUNDALIKE = {"to": 2, "too": 2, "for": 4, "fore": 4, "won": 1, "ate": 8, "tree": 3, "free": 3,
               "sex": 6, "nein": 9, "fife": 5, "niner": 9, "high": 5, "hive": 5}
_TEENS = {"ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15,
          "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19}
_TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70,
         "eighty": 80, "ninety": 90}
_REPEAT = {"double": 2, "triple": 3}


def _below_hundred(ws: list[str], i: int) -> tuple[int | None, int]:
    """A number under a hundred said at ``ws[i]`` ("seven", "fifteen", "forty five") -> (its
    value, the index after it), or (None, i)."""
    w = ws[i] if i < len(ws) else ""
    if w in _TEENS:
        return _TEENS[w], i + 1
    if w in _TENS:
        if i + 1 < len(ws) and ws[i + 1] in _UNITS and _UNITS[ws[i + 1]] > 0:
            return _TENS[w] + _UNITS[ws[i + 1]], i + 2
        return _TENS[w], i + 1
    if w in _UNITS and w not in ("o", "oh", "nought"):
        return _UNITS[w], i + 1
    return None, i


def _cardinal(ws: list[str], i: int) -> tuple[str, int] | None:
    """A number said with "hundred" or "thousand" from ``ws[i]`` ("four hundred fifteen" -> 415,
    "twelve thousand three hundred forty five" -> 12345) -> (its digits, the index after it);
    None when what starts there is not one (digits said one by one stay digits)."""
    def group(j: int) -> tuple[int | None, int, bool]:
        value, k = _below_hundred(ws, j)
        if value is None or k >= len(ws) or ws[k] != "hundred" or not 0 < value < 10:
            return value, k, False
        value, k = value * 100, k + 1
        after_and = k + 1 if k < len(ws) and ws[k] == "and" else k
        rest, m = _below_hundred(ws, after_and)
        return (value + rest, m, True) if rest is not None else (value, k, True)

    value, j, big = group(i)
    if value is None:
        return None
    if j < len(ws) and ws[j] == "thousand" and value > 0:
        value, j = value * 1000, j + 1
        after_and = j + 1 if j < len(ws) and ws[j] == "and" else j
        rest, k, _ = group(after_and)
        if rest is not None:
            value, j = value + rest, k
        return str(value), j
    return (str(value), j) if big else None


def digits_in(text: str) -> str:
    """Every digit the caller said, in order ("double five" -> "55", "twenty three" -> "23",
    "four hundred fifteen" -> "415", "twelve thousand three hundred forty five" -> "12345")."""
    ws = words(text.replace("-", " "))
    out: list[str] = []
    i = 0

    def is_numeric(j: int) -> bool:
        if not 0 <= j < len(ws):
            return False
        w = ws[j]
        return (w.isdigit() or w in _UNITS or w in _TEENS or w in _TENS or w in _REPEAT
                or w == "hundred")

    while i < len(ws):
        w = ws[i]
        said = _cardinal(ws, i)
        if said is not None:
            out.append(said[0])
            i = said[1]
            continue
        if w.isdigit():
            out.append(w)
        elif w in _REPEAT and i + 1 < len(ws) and (ws[i + 1] in _UNITS or ws[i + 1].isdigit()):
            digit = str(_UNITS[ws[i + 1]]) if ws[i + 1] in _UNITS else ws[i + 1]
            out.append(digit * _REPEAT[w])
            i += 1
        elif w in _TEENS:
            out.append(str(_TEENS[w]))
        elif w in _TENS:
            if i + 1 < len(ws) and ws[i + 1] in _UNITS and _UNITS[ws[i + 1]] > 0:
                out.append(str(_TENS[w] + _UNITS[ws[i + 1]]))
                i += 1
            else:
                out.append(str(_TENS[w]))
        elif w == "hundred" and out:
            out.append("00")
        elif w in ("o", "oh"):
            if is_numeric(i - 1) or is_numeric(i + 1):
                out.append("0")
        elif w in _UNITS:
            out.append(str(_UNITS[w]))
        elif w in _SOUNDALIKE and (is_numeric(i - 1) or is_numeric(i + 1)):
            out.append(str(_SOUNDALIKE[w]))
        i += 1
    return "".join(out)


def spoken_digits(digits: str) -> str:
    """Digits read one by one, grouped like a phone number: "5 5 5, 0 1 2 3"."""
    d = re.sub(r"\D", "", digits)
    if len(d) == 7:
        groups = [d[:3], d[3:]]
    elif len(d) == 10:
        groups = [d[:3], d[3:6], d[6:]]
    elif len(d) == 11:
        groups = [d[:1], d[1:4], d[4:7], d[7:]]
    elif len(d) <= 6:
        groups = [d]
    else:
        groups = [d[i:i + 3] for i in range(0, len(d), 3)]
    return ", ".join(" ".join(g) for g in groups)


_NAME_PREFIX = re.compile(
    r"^(?:(?:yes|yeah|sure|okay|ok|hi|hello|um|uh|well)[\s,]+)*"
    r"(?:my name is|my name's|name is|the name is|this is|it is|it's|i am|i'm|call me|"
    r"you can call me|its)\s+", re.IGNORECASE)
_NAME_SUFFIX = re.compile(r"\s+(?:here|speaking|please|thanks|thank you)\.?$", re.IGNORECASE)


# Words that are not names, however a caller strings them: "I Want To" is no name. Names that
# are also words (Will, May, Bill, Mark, Rose...) are left out of this list on purpose.
_NEVER_NAMES = (STOPWORDS - {"will", "may", "bill", "mark", "rose", "grace", "hope", "joy"}) | {
    "um", "uh", "er", "erm", "ah", "hmm", "mm", "sorry", "name", "wait", "speak", "talk",
    "call", "calling", "leave", "message", "order", "check", "book", "booking", "appointment",
    "help", "think", "say", "said", "see", "go", "going", "come", "make", "take", "look",
    "phone", "number", "address", "hours", "open", "question", "problem", "again", "not",
    "don't", "doesn't", "isn't", "can't", "won't", "wrong", "correct", "repeat", "person",
    "someone", "somebody", "goodbye", "bye", "okay", "alright", "good", "morning", "afternoon",
    "evening", "there", "here", "some", "something", "anything", "nothing", "one", "two",
    "three", "four", "five", "six", "seven", "eight", "nine", "zero", "ten",
    # what "this is ..." says when it is no introduction ("this is urgent", "this is really
    # important"): a name cut from the rest of a request must not be one of these
    "urgent", "important", "really", "very", "quick", "serious", "emergency", "regarding",
    "concerning", "about", "for", "because", "kind", "weird", "strange", "ridiculous"}


def _name(text: str) -> str | None:
    """A person's name in what the caller said, or None: after "my name is"-like openers and
    "speaking"-like endings, one to four words, none of them a word a name never is."""
    t = text.strip().strip(".!?,")
    t = _NAME_PREFIX.sub("", t)
    t = _NAME_SUFFIX.sub("", t).strip().strip(".!?,")
    ws = _join_spelled([w for w in re.findall(r"[A-Za-z][A-Za-z'\-]*", t)])
    if not ws or len(ws) > 4 or any(w.lower() in _NEVER_NAMES for w in ws):
        return None
    return " ".join(w[:1].upper() + w[1:].lower() for w in ws)


MIN_SPELLED_LETTERS = 3
"""A name spelled out has at least this many letters; fewer single letters ("i a") are more
likely words the recogniser heard short."""
_HYPHENATED = re.compile(r"[A-Za-z](?:-[A-Za-z])+")


def _join_spelled(ws: list[str]) -> list[str]:
    """The words with each run of spelled letters made the name it spells ("d a v i d m i
    double l e r" -> "david miller", split into a first and a last name where the recogniser's
    names table reads them so: ``ssm_engine.stt.spelling.join_spelled``; "d a v i d miller"
    -> "david miller")."""
    out: list[str] = []
    run: list[str] = []
    # a transcriber that writes a spelling as one hyphenated word ("D-A-V-I-D", Whisper) gives
    # the same letters
    ws = [x for w in ws for x in (w.split("-") if _HYPHENATED.fullmatch(w) else [w])]
    for w in [*ws, ""]:
        if w and (len(w) == 1 or w.lower() == "double"):
            run.append(w.lower())
            continue
        joined = (join_spelled(" ".join(run))
                  if sum(len(x) == 1 for x in run) >= MIN_SPELLED_LETTERS else None)
        out += joined.split() if joined else run
        run = []
        if w:
            out.append(w)
    return out


_MESSAGE_PREFIX = re.compile(
    r"^(?:(?:yes|yeah|sure|okay|ok|um|uh|well)[\s,]+)*"
    r"(?:my message is|the message is|please tell (?:him|her|them|the doctor) (?:that )?|"
    r"tell (?:him|her|them|the doctor) (?:that )?|can you tell (?:him|her|them) (?:that )?)\s*",
    re.IGNORECASE)


def extract(kind: str, text: str) -> str | None:
    """The slot value in ``text`` for a slot of ``kind``, or None when there is none."""
    text = text.strip()
    if not text:
        return None
    if kind == "phone":
        d = digits_in(text)
        return d if PHONE_DIGITS[0] <= len(d) <= PHONE_DIGITS[1] else None
    if kind == "number":
        d = digits_in(text)
        return d if len(d) >= 1 else None
    if kind == "name":
        return _name(text)
    if kind == "yes_no":
        answer = yes_or_no(text)
        return None if answer is None else ("yes" if answer else "no")
    if kind == "text":
        body = _MESSAGE_PREFIX.sub("", text).strip()
        return body or None
    return text   # date: kept as said


_YES = ("yes", "yeah", "yep", "yup", "yea", "ya", "correct", "right", "sure", "affirmative",
        "absolutely", "exactly", "perfect", "definitely", "certainly")
_YES_PHRASES = ("that's it", "it is", "that is", "uh huh", "of course", "go ahead", "sounds good")
_NO = ("no", "nope", "nah", "wrong", "incorrect", "negative")
_NO_PHRASES = ("not right", "not correct", "that's not", "that is not", "it's not", "it is not", "it isn't",
               "no thanks", "not quite")


def yes_or_no(text: str) -> bool | None:
    """True for a yes, False for a no, None when the caller said neither (or both)."""
    t = " ".join(words(text))
    ws = t.split()
    no = any(p in t for p in _NO_PHRASES) or any(w in _NO for w in ws)
    yes = (any(w in _YES or (len(w) >= 4 and any(similar(w, y) for y in _YES if len(y) >= 5))
               for w in ws)
           or any(p in t for p in _YES_PHRASES) or ws in (["ok"], ["okay"]))
    if no:
        return False   # "no that's not right", "yes no" -> a no is the safer reading
    if yes:
        return True
    return None
