"""What a recogniser's words say about who answered: a voicemail greeting's phrases, a person's.

    cues = GreetingCues()                                 # tolerance: edits allowed per character
    heard = cues.match("hi you ve reach the voice mal of dana")
    heard.machine        # "you have reached" (the best machine phrase found, None if none)
    heard.person         # None ("hi" only counts as the first word of a short text)

The streaming recogniser's greedy partials are rough on real people (WER about 0.6), so phrases
are matched approximately: a phrase is found when some stretch of the text is within
``round(tolerance * len(phrase))`` character edits of it (insertions, deletions, substitutions:
a word cut short at the end of a partial, "voice mal" for "voicemail"). Text and phrases are
compared lower-cased, letters and single spaces only, apostrophes dropped ("you've" is "youve").

Machine phrases (``MACHINE_PHRASES``) are the stock wording of voicemail, carrier and
call-screening greetings. Person cues (``PERSON_CUES``) are what a person says on picking up
("hello", "yes?", "who is this"); machines open with "hello" and "hi" too, so a person cue counts
only at the start of a text that has no machine phrase (``GreetingMatch.person``), and the
answering detector uses it only to hold back a call of ``machine`` made on length alone.

``substring_distance`` is Myers' bit-parallel approximate matching
(Hyyro's formulation), one pass over the text per phrase with Python ints as bit vectors;
tests/pipeline/test_greeting_words.py checks it against the textbook dynamic programme.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

__all__ = ["MACHINE_PHRASES", "PERSON_CUES", "GreetingCues", "GreetingMatch", "normalise",
           "substring_distance"]

MACHINE_PHRASES: tuple[str, ...] = (
    "message", "leave a message", "leave your message", "leave me a message", "leave your name",
    "your name and number", "after the tone", "after the beep", "at the tone", "at the beep",
    "record your message", "please leave", "not available", "unavailable", "voicemail",
    "voice mail", "mailbox", "you have reached", "youve reached", "cant come to the phone",
    "cant take your call", "cant get to the phone", "missed your call", "call you back",
    "get back to you", "return your call", "away from my desk", "out of the office",
    "not home right now", "on the other line", "thank you for calling", "thanks for calling",
    "the person you are calling", "the number you have dialed", "is not answering",
    "cannot be reached", "has been forwarded", "screening", "state your name",
    "try your call again", "message system",
)
"""Stock phrases of voicemail, carrier and call-screener greetings (normalised, see module)."""

PERSON_CUES: tuple[str, ...] = (
    "hello", "hi", "hey", "yes", "yeah", "yep", "speaking", "who is this", "whos this",
    "whos calling", "who is calling", "good morning", "good afternoon", "good evening",
)
"""What a person says on picking up; counted only at the start of the text (see module)."""

PERSON_LEAD_CHARS = 6
"""A person cue counts when its match starts within this many characters of the text's start."""

_NOT_LETTERS = re.compile(r"[^a-z ]+")
_SPACES = re.compile(r" +")


def normalise(text: str) -> str:
    """Lower-case letters and single spaces; apostrophes dropped, other marks made spaces."""
    t = text.lower().replace("'", "").replace("\u2019", "")
    return _SPACES.sub(" ", _NOT_LETTERS.sub(" ", t)).strip()


@functools.lru_cache(maxsize=256)
def _peq(pattern: str) -> dict[str, int]:
    bits: dict[str, int] = {}
    for i, ch in enumerate(pattern):
        bits[ch] = bits.get(ch, 0) | (1 << i)
    return bits


def substring_distance(pattern: str, text: str, *, within: int = 0) -> tuple[int, int]:
    """The fewest edits that turn ``pattern`` into some stretch of ``text``, and where the first
    best stretch ends (an index into ``text``; -1 for an empty text). Stretches ending before
    ``within`` characters are not considered unless ``within`` is 0 (any). Myers/Hyyro: the
    columns of the edit-distance table as bit vectors (``pv``/``mv``: +1/-1 vertical deltas);
    the text's start is free (a search), so no carry enters the low bit."""
    m = len(pattern)
    if m == 0:
        return 0, 0
    peq = _peq(pattern)
    mask = (1 << m) - 1
    high = 1 << (m - 1)
    pv, mv, score = mask, 0, m
    best, end = m, -1
    for j, ch in enumerate(text):
        eq = peq.get(ch, 0)
        xv = eq | mv
        xh = (((eq & pv) + pv) ^ pv) | eq
        ph = mv | (~(xh | pv) & mask)
        mh = pv & xh
        if ph & high:
            score += 1
        elif mh & high:
            score -= 1
        ph = (ph << 1) & mask
        mh = (mh << 1) & mask
        pv = mh | (~(xv | ph) & mask)
        mv = ph & xv
        if score < best and (not within or j < within + m):
            best, end = score, j
    return best, end


@dataclass(frozen=True, slots=True)
class GreetingMatch:
    """The phrases found in one text: the best machine phrase and the person cue at its start
    (None when none, or when a machine phrase was found), each with its edits per character."""

    machine: str | None = None
    machine_ratio: float = 1.0
    person: str | None = None
    person_ratio: float = 1.0


class GreetingCues:
    """Approximate phrase matching against ``MACHINE_PHRASES`` and ``PERSON_CUES`` (module
    docstring). ``tolerance``: edits allowed per character of a machine phrase (rounded);
    ``person_tolerance`` the same for person cues, whose short words allow fewer. Matches are
    cached per text (a partial changes a few times a second and is asked ten times)."""

    def __init__(self, tolerance: float = 0.2, person_tolerance: float = 0.2, *,
                 machine_phrases: tuple[str, ...] = MACHINE_PHRASES,
                 person_cues: tuple[str, ...] = PERSON_CUES) -> None:
        if not 0 <= tolerance < 0.5 or not 0 <= person_tolerance < 0.5:
            raise ValueError(f"tolerances must be in [0, 0.5), got {tolerance}, {person_tolerance}")
        self.tolerance, self.person_tolerance = tolerance, person_tolerance
        self._machine = tuple(normalise(p) for p in machine_phrases)
        self._person = tuple(normalise(p) for p in person_cues)
        self.match = functools.lru_cache(maxsize=256)(self._match)

    @staticmethod
    @functools.lru_cache(maxsize=8)
    def shared(tolerance: float = 0.2) -> GreetingCues:
        """One matcher (and its cache) per tolerance for the process: calls hear the same
        partials ("hello", "leave a message") again and again."""
        return GreetingCues(tolerance)

    def _match(self, text: str) -> GreetingMatch:
        t = normalise(text)
        if not t:
            return GreetingMatch()
        best: tuple[float, str] | None = None
        for phrase in self._machine:
            d, _ = substring_distance(phrase, t)
            if d <= round(self.tolerance * len(phrase)) and (best is None or d / len(phrase) < best[0]):
                best = (d / len(phrase), phrase)
        if best is not None:
            return GreetingMatch(machine=best[1], machine_ratio=round(best[0], 3))
        padded = f" {t} "                                   # a cue is a whole word: spaces round it
        for cue in self._person:
            d, end = substring_distance(f" {cue} ", padded, within=PERSON_LEAD_CHARS + 2)
            if end >= 0 and d <= round(self.person_tolerance * len(cue)):
                return GreetingMatch(person=cue, person_ratio=round(d / len(cue), 3))
        return GreetingMatch()
