"""Phone tokens: the contract between the text front end and the acoustic model.

    tokens = phonemize("Hi, I'm Ava.")
    # symbols: hh ay pau ay m ey v ax end
    # tokens[0] == PhoneToken("hh", 3, 1, 0, "hi"); tokens[2] == PhoneToken("pau", 3, 4, -1, None)
    ids = encode(tokens)          # (n, 3) int64: symbol id, stress, position

    inc = IncrementalPhonemizer()
    inc.push("Hi, I")             # -> tokens of "hi" and the pause (the "I" may grow: "I'm")
    inc.push("'m Ava.")           # -> tokens of "i'm"
    inc.flush()                   # -> tokens of "ava" and "end"

A token is one festival phone (``SYMBOLS``), or ``pau`` (comma or clause pause), ``end``
(sentence end) or ``qend`` (question end). ``stress`` is 0/1/2 for vowels and 3 for consonants
and pauses; ``position`` is where the phone sits in its word: 0 a one-phone word, 1 first,
2 middle, 3 last, 4 a pause token. ``word_index`` counts words within what one phonemizer has
produced (-1 for pauses); ``word`` is the normalised word (for word timestamps).

``SYMBOLS`` is fixed: index 0 is ``<pad>``; new symbols may only be appended, never reordered
(checkpoints depend on the ids).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .errors import TextError
from .lexicon import Lexicon, default_lexicon, split_stress
from .text import IncrementalNormalizer, Word

__all__ = ["PhoneToken", "SYMBOLS", "SYMBOL_IDS", "PAUSES", "encode", "phonemize",
           "IncrementalPhonemizer", "word_phones"]

SYMBOLS: tuple[str, ...] = (
    "<pad>",
    "aa", "ae", "ah", "ao", "aw", "ax", "ay", "b", "ch", "d", "dh", "eh", "el", "em", "en", "er",
    "ey", "f", "g", "hh", "ih", "iy", "jh", "k", "l", "m", "n", "ng", "ow", "oy", "p", "r", "s",
    "sh", "t", "th", "uh", "uw", "v", "w", "y", "z", "zh",
    "pau", "end", "qend",
)
SYMBOL_IDS = {s: i for i, s in enumerate(SYMBOLS)}
PAUSES = ("pau", "end", "qend")


@dataclass(frozen=True)
class PhoneToken:
    symbol: str          # festival phone, or "pau" (comma/clause pause), "end", "qend"
    stress: int          # 0,1,2 for vowels; 3 for consonants/pauses
    position: int        # in the word: 0 single-phone word, 1 first, 2 middle, 3 last; 4 pause
    word_index: int      # index of the word it belongs to in the utterance (-1 for pauses)
    word: str | None     # the word's text as written after normalisation (for word timestamps)


def encode(tokens: Sequence[PhoneToken]) -> np.ndarray:
    """(n, 3) int64 array: symbol id, stress, position. Raises TextError on an unknown symbol."""
    out = np.empty((len(tokens), 3), dtype=np.int64)
    for i, t in enumerate(tokens):
        sid = SYMBOL_IDS.get(t.symbol)
        if sid is None or sid == 0:
            raise TextError(f"unknown phone symbol {t.symbol!r} at token {i}")
        out[i] = (sid, t.stress, t.position)
    return out


def word_phones(word: Word, lexicon: Lexicon | None = None) -> tuple[str, ...]:
    """Phones (vowels with a stress digit) of one normalised word; a letter by its name."""
    lex = lexicon or default_lexicon()
    return lex.pronounce(word.text, pos="n" if word.kind == "letter" else None)


def _word_tokens(word: Word, index: int, lexicon: Lexicon | None) -> list[PhoneToken]:
    phones = word_phones(word, lexicon)
    n = len(phones)
    out = []
    for i, p in enumerate(phones):
        symbol, stress = split_stress(p)
        position = 0 if n == 1 else 1 if i == 0 else 3 if i == n - 1 else 2
        out.append(PhoneToken(symbol, stress, position, index, word.text))
    return out


class IncrementalPhonemizer:
    """Text in fragments (an LLM stream) -> phone tokens that can no longer change.

    ``push`` returns the tokens of every word the normaliser has released; ``flush`` ends the
    input and returns the rest, ending with an ``end``/``qend`` token (``[]`` if nothing was
    said). For any split of a text, the concatenated outputs equal ``phonemize(text)``. After
    ``flush`` the phonemizer is ready for a new utterance (word indices restart at 0).
    """

    def __init__(self, lexicon: Lexicon | None = None) -> None:
        self._lexicon = lexicon
        self._normalizer = IncrementalNormalizer()
        self._next_word = 0

    def push(self, fragment: str) -> list[PhoneToken]:
        return self._tokens(self._normalizer.push(fragment))

    def flush(self) -> list[PhoneToken]:
        out = self._tokens(self._normalizer.flush())
        self._next_word = 0
        return out

    def _tokens(self, words: list[Word]) -> list[PhoneToken]:
        out: list[PhoneToken] = []
        for w in words:
            if w.kind in PAUSES:
                out.append(PhoneToken(w.kind, 3, 4, -1, None))
            else:
                out += _word_tokens(w, self._next_word, self._lexicon)
                self._next_word += 1
        return out


def phonemize(text: str, lexicon: Lexicon | None = None) -> list[PhoneToken]:
    """The whole utterance at once; ends with an ``end`` or ``qend`` token.
    Raises TextError if the text has nothing to say (empty, only punctuation or symbols)."""
    inc = IncrementalPhonemizer(lexicon)
    tokens = inc.push(text) + inc.flush()
    if not tokens:
        raise TextError(f"nothing to say in {text[:60]!r}: no words after normalisation")
    return tokens
