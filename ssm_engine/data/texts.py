"""Sentences that callers say to a phone agent: names, numbers, dates, addresses, yes/no,
account and order talk, spelled letters and digit strings.

    gen = SentenceGenerator(seed=1)
    gen.sentence()          # -> "my account number is four four one seven two nine"

A share of sentences (``filler``) are Faker's strings of common English words, and optionally
another share (``wide``) strings of words drawn evenly from a long list (``wide_words``, e.g.
the 20,000 commonest words of pocketsphinx's en-us model), and another (``natural``) sentences
of conversational English from ``natural_sampler`` (e.g. ``data.natural.NGramSampler`` over
pocketsphinx's trigram model), so that a recogniser learns to spell English, not only the
callers' templates.

Every sentence comes back already in ``normalize_text`` form, so the words a voice speaks are
exactly the transcript the model learns, with one exception, ``said``: a spelled letter "a"
("it's spelled d a v i d") is given to the voice as "eigh", because every voice reads a lone
"a" as the article ("uh"); the transcript keeps "a". ``faker`` (optional) supplies names,
streets and cities; without it a small built-in list is used.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Protocol

from ..words import normalize_text, number_to_words, ordinal_words
from ..errors import ConfigError

__all__ = ["SentenceGenerator", "FILLER", "NaturalSampler", "said"]

# Share of Faker's filler sentences (strings of the ~1,000 commonest English words) among the
# sentences, as every shipped data set and the held-out set were made.
FILLER = 0.12


def said(text: str) -> str:
    """What a voice is told to say for the transcript ``text``: the same words, but "a" as the
    letter's name ("eigh") wherever it is one of a run of two or more single letters, a
    spelling ("d a v i d", "a b c"); an article ("a car") or a lone "a" is left alone."""
    words = text.split()
    single = [len(w) == 1 and w.isalpha() for w in words]
    for i, w in enumerate(words):
        in_run = single[i] and ((i > 0 and single[i - 1]) or (i + 1 < len(words) and single[i + 1]))
        if w == "a" and in_run:
            words[i] = "eigh"
    return " ".join(words)


class NaturalSampler(Protocol):
    """What ``natural`` sentences come from (``data.natural.NGramSampler``)."""

    def sentence(self, rng: random.Random) -> str: ...

_MONTHS = ("january february march april may june july august september october november "
           "december").split()
_DAYS = "monday tuesday wednesday thursday friday saturday sunday".split()
_FIRST = ("james mary robert patricia john jennifer michael linda david elizabeth william susan "
          "maria carlos aisha wei priya omar sofia liam emma noah olivia ethan ava lucas mia").split()
_LAST = ("smith johnson williams brown jones garcia miller davis rodriguez martinez hernandez lopez "
         "gonzalez wilson anderson thomas taylor moore jackson martin lee perez thompson white").split()
_STREETS = "main oak pine maple cedar elm washington lake hill park river sunset".split()
_STREET_KINDS = "street avenue road drive lane boulevard court way".split()
_CITIES = ("springfield portland austin denver boston chicago seattle phoenix dallas atlanta miami "
           "houston").split()
_YES_NO = ("yes", "no", "yeah", "nope", "yes please", "no thanks", "that's right", "that's correct",
           "correct", "not really", "sure", "okay", "uh huh", "absolutely", "no that's wrong",
           "yes that's me", "i don't think so", "maybe", "right", "exactly")
_ITEMS = ("order", "package", "refund", "invoice", "payment", "subscription", "appointment",
          "reservation", "ticket", "delivery", "bill", "account", "card", "claim", "prescription")
_VERBS = ("cancel", "change", "check", "track", "update", "confirm", "reschedule", "pay", "return",
          "dispute", "renew", "activate", "close", "open", "transfer")
_TEMPLATES = (
    "i'd like to {verb} my {item}",
    "can you help me {verb} my {item}",
    "i want to {verb} the {item} i made on {date}",
    "my {item} number is {digits}",
    "the {item} number is {digits}",
    "my account number is {digits}",
    "my phone number is {phone}",
    "you can reach me at {phone}",
    "my name is {first} {last}",
    "this is {first} {last} calling about my {item}",
    "it's spelled {spelled}",
    "my last name is {last} that's {spelled_last}",
    "i live at {house} {street} {street_kind} in {city}",
    "the address is {house} {street} {street_kind}",
    "my zip code is {zip}",
    "my date of birth is {month} {day_ord} {year}",
    "i was born on {month} {day_ord} {year}",
    "can we do {weekday} at {time}",
    "is {weekday} the {day_ord} available",
    "the total was {money}",
    "i was charged {money} twice",
    "i paid {money} on {date}",
    "the last four digits are {four}",
    "the code is {code}",
    "{yesno}",
    "{yesno} {yesno2}",
    "{yesno} my {item} number is {digits}",
    "i need to speak to someone about my {item}",
    "i've been waiting {small} days for my {item}",
    "there are {small} items missing from my {item}",
    "please send it to {first} at {city}",
    "what time do you close on {weekday}",
    "i'm calling because my {item} hasn't arrived",
    "can you repeat that please",
    "could you say that again",
    "i didn't catch that",
    "thank you very much goodbye",
    "hold on a second let me find it",
    "hi i'm calling about {item} {digits}",
    "the reference is {letters} {digits}",
    "my email is {first} dot {last} at example dot com",
    "i'd like {small} tickets for {weekday} {month} {day_ord}",
    "the meeting is at {time} on {date}",
    "it's {big} dollars per month",
    "we have {big} customers in {city}",
)


class SentenceGenerator:
    """Seeded generator of caller-style sentences, already normalised (see module docstring)."""

    def __init__(self, seed: int = 0, *, use_faker: bool = True, filler: float = FILLER,
                 wide: float = 0.0, wide_words: Sequence[str] = (), natural: float = 0.0,
                 natural_sampler: NaturalSampler | None = None) -> None:
        if not 0.0 <= filler <= 1.0:
            raise ConfigError(f"filler is a share of sentences in [0, 1], got {filler}")
        if not 0.0 <= wide <= 1.0:
            raise ConfigError(f"wide is a share of sentences in [0, 1], got {wide}")
        if wide > 0.0 and not wide_words:
            raise ConfigError("wide > 0 needs wide_words, the words to draw from")
        if not 0.0 <= natural <= 1.0:
            raise ConfigError(f"natural is a share of sentences in [0, 1], got {natural}")
        if natural > 0.0 and natural_sampler is None:
            raise ConfigError("natural > 0 needs natural_sampler, the model to sample from")
        self.natural = natural    # share of sentences sampled from natural_sampler
        self._natural_sampler = natural_sampler
        self.filler = filler  # share of Faker's filler sentences (common English words)
        self.wide = wide      # share of strings of words drawn evenly from wide_words
        self._wide_words = tuple(wide_words)
        self._rng = random.Random(seed)
        # What the last sentence() was: "caller", "filler" (Faker's), "wide" (wide_words) or
        # "natural" (natural_sampler).
        self.last_kind = ""
        self._faker = None
        if use_faker:
            try:
                from faker import Faker   # optional dependency: richer names and places
            except ImportError:
                self._faker = None
            else:
                self._faker = Faker("en_US")
                self._faker.seed_instance(seed)

    def _first(self) -> str:
        if self._faker is not None and self._rng.random() < 0.7:
            return self._faker.first_name()
        return self._rng.choice(_FIRST)

    def _last(self) -> str:
        if self._faker is not None and self._rng.random() < 0.7:
            return self._faker.last_name()
        return self._rng.choice(_LAST)

    def _city(self) -> str:
        if self._faker is not None and self._rng.random() < 0.7:
            return self._faker.city()
        return self._rng.choice(_CITIES)

    def _street(self) -> str:
        if self._faker is not None and self._rng.random() < 0.5:
            return self._faker.street_name()
        return self._rng.choice(_STREETS)

    def _digit_string(self, lo: int, hi: int) -> str:
        n = self._rng.randint(lo, hi)
        words = [number_to_words(self._rng.randint(0, 9)) for _ in range(n)]
        if self._rng.random() < 0.2:
            words = ["oh" if w == "zero" else w for w in words]
        return " ".join(words)

    def _time(self) -> str:
        h = self._rng.randint(1, 12)
        m = self._rng.choice((0, 0, 15, 30, 45, 10, 20))
        ampm = self._rng.choice(("am", "pm", "in the morning", "in the afternoon", ""))
        mins = "" if m == 0 else " " + number_to_words(m)
        tail = " o'clock" if m == 0 and self._rng.random() < 0.3 else mins
        return f"{number_to_words(h)}{tail} {ampm}".strip()

    def _money(self) -> str:
        d = self._rng.choice((self._rng.randint(1, 99), self._rng.randint(100, 2000)))
        c = self._rng.randint(1, 99)
        if self._rng.random() < 0.5:
            return f"{number_to_words(d)} dollars"
        return f"{number_to_words(d)} dollars and {number_to_words(c)} cents"

    def _spell(self, word: str) -> str:
        return " ".join(c for c in word.lower() if c.isalpha())

    def sentence(self) -> str:
        """One normalised sentence."""
        r = self._rng
        # wide == 0 draws nothing here, so older data sets' sentences stay as they were.
        if self.wide > 0.0 and r.random() < self.wide:
            self.last_kind = "wide"
            return " ".join(r.choice(self._wide_words) for _ in range(r.randint(4, 12)))
        # natural == 0 draws nothing either
        if self.natural > 0.0 and r.random() < self.natural:
            assert self._natural_sampler is not None
            text = normalize_text(self._natural_sampler.sentence(r))
            if text:
                self.last_kind = "natural"
                return text
        if self._faker is not None and r.random() < self.filler:
            raw = self._faker.sentence(nb_words=r.randint(4, 12))
            self.last_kind = "filler"
            return normalize_text(raw)
        self.last_kind = "caller"
        last = self._last()
        fields = {
            "verb": r.choice(_VERBS), "item": r.choice(_ITEMS),
            "digits": self._digit_string(4, 10), "phone": self._digit_string(10, 10),
            "four": self._digit_string(4, 4), "code": self._digit_string(3, 6),
            "zip": self._digit_string(5, 5),
            "first": self._first(), "last": last, "spelled": self._spell(self._first()),
            "spelled_last": self._spell(last),
            "house": number_to_words(r.choice((r.randint(1, 99), r.randint(100, 9999)))),
            "street": self._street(), "street_kind": r.choice(_STREET_KINDS), "city": self._city(),
            "month": r.choice(_MONTHS), "day_ord": ordinal_words(r.randint(1, 31)),
            "year": r.choice(("nineteen " + number_to_words(r.randint(40, 99)),
                              "two thousand " + number_to_words(r.randint(1, 24)))),
            "weekday": r.choice(_DAYS), "time": self._time(), "money": self._money(),
            "yesno": r.choice(_YES_NO), "yesno2": r.choice(_YES_NO),
            "small": number_to_words(r.randint(2, 12)), "big": number_to_words(r.randint(13, 5000)),
            "letters": " ".join(r.choice("abcdefghjkmnprstuvwxyz") for _ in range(r.randint(2, 3))),
        }
        fields["date"] = f"{fields['month']} {ordinal_words(r.randint(1, 31))}"
        text = r.choice(_TEMPLATES).format(**fields)
        return normalize_text(text)
