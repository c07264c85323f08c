"""Per-turn recognition hints: what the agent expects the caller to say next.

    hints = Hints(expect=frozenset({"yes_no"}))                 # "Is that right?"
    hints = Hints(expect=frozenset({"digits"}))                 # "What is your number?"
    hints = Hints(expect=frozenset({"name"}))                   # "May I have your name?"
    hints = Hints(expect=frozenset({"spelling", "name"}))       # "Could you spell it for me?"
    hints = Hints(phrases=("opening hours", "leave a message"))  # the agent's own intents
    hints = Hints(keywords=("parking", "insurance"))            # spotted anywhere (spotting.py)
    dec = joint_search.stream(hints)                            # finals biased toward them
    result = dec.result()                                       # text, confidence, n-best

A recogniser that is unsure of open English can still tell "yes" from "no", or a string of
digits, when it knows that is what it listens for: the answer is then a choice among a few
sentences, not a search over all of them. At the end of the utterance the joint search
(``joint.py``) pools its free n-best with the hinted sentences and scores them all the same way
(full CTC over the phones, the word LM, the word bonus); a hinted sentence gets ``bonus`` on
top, so it wins where the sound fits it about as well as the best free reading, and loses to
what the caller really said when that is something else. Kinds:

- ``yes_no``: the ways callers say yes or no (``YES_SENTENCES``, ``NO_SENTENCES``);
- ``digits``: a second phone beam search whose lexicon is the digit words (zero, oh, one...,
  double, triple) advances beside the free one while the caller speaks; its best strings join
  the pool (a digit string the LM finds unlikely is still found);
- ``name``: the same with callers' names (``names.py``: common US first and last names, in
  the ways callers give them, "my name is sarah jones", "it's anna", "brown"): a name the word
  LM rarely saw is found, and of two said alike the commoner spelling wins;
- ``spelling``: a name said letter by letter ("d a v i d, m i l l e r"; ``spelling.py``): a
  phone search over the letter names, its strings scored by the names they spell; the final is
  the letters (``spelling.join_spelled`` makes them a name);
- ``phrases``: sentences the agent gives (its intents' key phrases, a menu's choices);
- ``keywords``: words or short phrases the agent acts on (its knowledge's keywords, its tasks'
  triggers), spotted on the phone head anywhere in the utterance whatever the transcript says
  (``spotting.py``); they change no transcript and come back in ``Recognition.spotted``.

``result()`` also gives each pooled sentence's posterior, ``exp(scale * score)`` normalised over
the pool (``JointConfig.posterior_scale``): the final's confidence is the top one's, and an agent
can add up the posteriors of the sentences that mean the same ("yes", "yeah", "yes please").
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Literal, get_args

from .lm import NGramLM, build_lm
from .text import normalize_text
from ..errors import ConfigError

__all__ = ["Hints", "HintKind", "Recognition", "YES_SENTENCES", "NO_SENTENCES", "DIGIT_WORDS",
           "digits_lm", "NO_HINTS"]

HintKind = Literal["yes_no", "digits", "name", "spelling"]
_KINDS: tuple[str, ...] = get_args(HintKind)

YES_SENTENCES = ("yes", "yeah", "yep", "yes please", "yes it is", "yes that's right",
                 "that's right", "correct", "that's correct", "yes correct", "sure", "okay",
                 "right", "absolutely", "yes thank you")
NO_SENTENCES = ("no", "nope", "no thanks", "no thank you", "no it isn't", "no that's wrong",
                "that's wrong", "that's not right", "not right", "incorrect", "no it's not")
DIGIT_WORDS = ("zero", "oh", "one", "two", "three", "four", "five", "six", "seven", "eight",
               "nine", "double", "triple")


@dataclass(frozen=True)
class Hints:
    """What to listen for this turn; ``Hints()`` (``NO_HINTS``) is free recognition."""

    expect: frozenset[str] = frozenset()
    phrases: tuple[str, ...] = ()
    keywords: tuple[str, ...] = ()
    bonus: float = 4.0               # nats a hinted sentence gains (see the module docstring)
    min_digits: int = 0
    """With ``digits``: fewer digits than this are most likely not the whole answer yet (a
    phone number is usually ten), so an end of turn that reads hints waits for more
    (``pipeline/turn_end.py``)."""

    def __post_init__(self) -> None:
        unknown = set(self.expect) - set(_KINDS)
        if unknown:
            raise ConfigError(f"unknown hint kinds {sorted(unknown)} (known: {', '.join(_KINDS)})")
        if not 0 <= self.bonus <= 20:
            raise ConfigError(f"bonus must be in [0, 20] nats, got {self.bonus}")
        if not 0 <= self.min_digits <= 20:
            raise ConfigError(f"min_digits must be in [0, 20], got {self.min_digits}")
        object.__setattr__(self, "expect", frozenset(self.expect))
        norm = tuple(dict.fromkeys(p for p in (normalize_text(x) for x in self.phrases) if p))
        object.__setattr__(self, "phrases", norm)
        keys = tuple(dict.fromkeys(k for k in (normalize_text(x) for x in self.keywords) if k))
        object.__setattr__(self, "keywords", keys)

    def __bool__(self) -> bool:
        return bool(self.expect or self.phrases or self.keywords)

    def sentences(self) -> tuple[str, ...]:
        """The fixed hinted sentences (digits and names come from their own searches)."""
        out: list[str] = list(self.phrases)
        if "yes_no" in self.expect:
            out += YES_SENTENCES + NO_SENTENCES
        return tuple(dict.fromkeys(out))


NO_HINTS = Hints()


@dataclass(frozen=True)
class Recognition:
    """A final transcript with its confidence and the pool's best readings (text, posterior),
    best first; ``hinted`` when the top reading is one of the hinted sentences or digit strings.
    ``confidence`` is None for decoders that score no alternatives (greedy, one head's beam).
    ``spotted``: the hinted keywords found in the utterance, (keyword, score in nats a phone, at
    most 0), best first (``spotting.py``); empty without keyword hints."""

    text: str
    confidence: float | None
    alternatives: tuple[tuple[str, float], ...] = field(default_factory=tuple)
    hinted: bool = False
    spotted: tuple[tuple[str, float], ...] = field(default_factory=tuple)


def digits_lm(seed: int = 7) -> NGramLM:
    """A small trigram over the digit words: strings of 1-12 digits as callers read them out
    (now and then "double five", an "oh" for zero), so any digit may follow any other."""
    rng = random.Random(seed)
    units = DIGIT_WORDS[:11]
    sentences = []
    for _ in range(4000):
        words: list[str] = []
        for _ in range(rng.randint(1, 12)):
            r = rng.random()
            if r < 0.06:
                words += [rng.choice(("double", "triple")), rng.choice(units[2:])]
            else:
                words.append(rng.choice(units[2:]) if r > 0.16 else rng.choice(("zero", "oh")))
        sentences.append(" ".join(words))
    return build_lm(sentences, general_weight=0.0, unk_weight=1e-6)
