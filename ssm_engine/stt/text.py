"""The character vocabulary of the CTC recogniser (and, from :mod:`ssm_engine.words`, the text
normalisation every engine is scored by).

    normalize_text("Order #42, on May 3rd!")  # -> "order number forty two on may third"
    ids = encode("hello world")               # -> [8, 5, ...] (0 is the CTC blank)
    decode(ids)                               # -> "hello world"

Every engine is scored on text passed through ``normalize_text``: lower case, digits spelled as
words, punctuation removed, whitespace collapsed. The vocabulary is the blank, a space, a-z and
the apostrophe.
"""

from __future__ import annotations

from ..words import normalize_text, number_to_words, ordinal_words
from .errors import TranscriptError

__all__ = ["BLANK", "VOCAB", "normalize_text", "number_to_words", "ordinal_words", "encode", "decode"]

BLANK = 0
VOCAB = ("_", " ") + tuple("abcdefghijklmnopqrstuvwxyz") + ("'",)
_INDEX = {c: i for i, c in enumerate(VOCAB)}

def encode(text: str) -> list[int]:
    """Normalise ``text`` and map it to vocabulary ids (1..len(VOCAB)-1; 0 is the blank)."""
    norm = normalize_text(text)
    if not norm:
        raise TranscriptError(f"text {text[:40]!r} normalises to nothing the vocabulary can spell")
    return [_INDEX[c] for c in norm]


def decode(ids: list[int]) -> str:
    """Ids (no blanks expected, but they are skipped) -> text."""
    return "".join(VOCAB[i] for i in ids if i != BLANK)
