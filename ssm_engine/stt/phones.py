"""Phones: the second output of the recogniser, and the pronouncing dictionary that maps to them.

    lex = Pronouncer.load("cmudict-en-us.dict")     # CMUdict format: "word PH PH ..." per line
    lex.encode("call me back")    # -> phone ids with word boundaries, or None (a word it lacks)
    lex.prons("read")             # -> (("R", "IY", "D"), ("R", "EH", "D"))
    lex.write("models/stt/lexicon.dict", lm.vocab)   # the pronunciations a model ships with

A character CTC model must learn English spelling from its training sentences; a phone CTC model
only the sounds, which every word shares, so it generalises to words it heard rarely or never.
The phone inventory is CMUdict's 39 ARPAbet phones without stress, after the CTC blank (0) and a
word boundary ``|`` (1), which the model learns to emit between words as the character model
learns its space. The dictionary file is passed in (pocketsphinx ships CMUdict; ssm_engine
depends on no speech package).
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Iterable
from pathlib import Path

from .errors import TranscriptError

__all__ = ["PHONES", "PHONE_BLANK", "WORD_BOUNDARY", "Pronouncer", "phones_to_text"]

PHONE_BLANK = 0
WORD_BOUNDARY = 1
PHONES = ("_", "|") + tuple(
    "AA AE AH AO AW AY B CH D DH EH ER EY F G HH IH IY JH K L M N NG OW OY P R S SH T TH UH UW V "
    "W Y Z ZH".split())
_INDEX = {p: i for i, p in enumerate(PHONES)}
_ALT = re.compile(r"\(\d+\)$")


class Pronouncer:
    """Word -> pronunciations (tuples of phone names, first = the dictionary's main one)."""

    def __init__(self, prons: dict[str, tuple[tuple[str, ...], ...]]) -> None:
        self._prons = prons

    @classmethod
    def load(cls, path: str | Path, words: Iterable[str] | None = None) -> Pronouncer:
        """Read a CMUdict-format file, gzipped or not (``word PH PH ...``, ``word(2) ...`` for
        alternatives, stress digits allowed and dropped). ``words`` keeps only those words (all
        when None). Raises TranscriptError for a file that is not one."""
        keep = None if words is None else set(words)
        prons: dict[str, list[tuple[str, ...]]] = {}
        path = Path(path)
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8", errors="replace") as f:
            for n, line in enumerate(f, 1):
                parts = line.split()
                if not parts or line.startswith(";;;"):
                    continue
                word = _ALT.sub("", parts[0].lower())
                if keep is not None and word not in keep:
                    continue
                phones = tuple(re.sub(r"\d", "", p).upper() for p in parts[1:])
                if not phones or any(p not in _INDEX or p in ("_", "|") for p in phones):
                    raise TranscriptError(f"{path}:{n}: not a CMUdict line: {line.strip()[:80]!r}")
                prons.setdefault(word, [])
                if phones not in prons[word]:
                    prons[word].append(phones)
        if not prons:
            raise TranscriptError(f"{path}: no pronunciations read")
        return cls({w: tuple(p) for w, p in prons.items()})

    def __contains__(self, word: str) -> bool:
        return word in self._prons

    def __len__(self) -> int:
        return len(self._prons)

    @property
    def words(self) -> list[str]:
        return list(self._prons)

    def prons(self, word: str) -> tuple[tuple[str, ...], ...]:
        return self._prons.get(word, ())

    def compound_prons(self, word: str, min_part: int = 2) -> tuple[tuple[str, ...], ...]:
        """Pronunciations of a word the dictionary lacks read as two words it has ("brianchester"
        = brian + chester, a made-up town): every split into parts of at least ``min_part``
        letters, each part's first pronunciation; () when there is none."""
        out: list[tuple[str, ...]] = []
        for i in range(min_part, len(word) - min_part + 1):
            head, tail = self._prons.get(word[:i]), self._prons.get(word[i:])
            if head and tail and head[0] + tail[0] not in out:
                out.append(head[0] + tail[0])
        return tuple(out)

    def write(self, path: str | Path, words: Iterable[str]) -> int:
        """Write the pronunciations of ``words`` (compound ones for words it lacks) as a
        CMUdict-format file (gzipped for a ``.gz`` name), the lexicon shipped beside a model
        -> entries written."""
        n = 0
        opener = gzip.open if Path(path).suffix == ".gz" else open
        with opener(path, "wt", encoding="utf-8") as f:
            for word in sorted(set(words)):
                for i, pron in enumerate(self.prons(word) or self.compound_prons(word)):
                    f.write(f"{word if i == 0 else f'{word}({i + 1})'} {' '.join(pron)}\n")
                    n += 1
        return n

    def encode(self, text: str, compounds: bool = False) -> list[int] | None:
        """Normalised text -> phone ids (each word's first pronunciation), words joined by the
        boundary; None when a word has no pronunciation here (the caller leaves such a sentence
        out of the phone loss). ``compounds``: read a word it lacks as two it has."""
        ids: list[int] = []
        for word in text.split():
            prons = self._prons.get(word) or (self.compound_prons(word) if compounds else ())
            if not prons:
                return None
            if ids:
                ids.append(WORD_BOUNDARY)
            ids.extend(_INDEX[p] for p in prons[0])
        return ids


def phones_to_text(ids: Iterable[int]) -> str:
    """Phone ids (no blanks) -> "HH AH L OW | W ER L D", for logs and tests."""
    return " ".join(PHONES[i] for i in ids if i != PHONE_BLANK)
