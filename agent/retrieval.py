"""Forgiving text matching for a weak recognizer: tokens, fuzzy keywords, BM25 retrieval.

Transcripts come from pocketsphinx on 8 kHz phone audio (about 69 % WER on real callers): "order"
comes back as "harder", "parking" as "barking". So every comparison here is loose:

- :func:`tokens` lower-cases, drops punctuation and applies a light stemmer (``parking`` ->
  ``park``, ``hours`` -> ``hour``);
- :func:`similar` says two words match when they are equal, one edit apart (five letters or
  more), or share a crude phonetic key (``order`` and ``harder`` both give ``Ardr``);
- :func:`find_phrase` finds a keyword phrase in an utterance with that similarity;
- :class:`BM25Index` ranks knowledge passages (Okapi BM25, k1 = 1.5, b = 0.75) with query words
  that miss the vocabulary mapped to their most similar vocabulary word at a discount. A match
  must cover enough of the query's weight (``min_coverage``), so off-topic questions get nothing.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache

__all__ = ["BM25Index", "Match", "STOPWORDS", "find_phrase", "one_edit", "phrase_end", "phonetic_key",
           "similar", "stem", "tokens", "words"]

STOPWORDS = frozenset("""
a about am an and any are as at be been but by can could did do does for from get got had has
have hello hi how i i'd i'm if in is it it's its just know like me my of oh on or our please
so tell that that's the their them then there these they this to uh um us was we well what
when which who why will with would yeah you your you're okay ok hey want wanted need
yes no nope yep yup sure thanks thank right great actually maybe take
""".split())

_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")


def words(text: str) -> list[str]:
    """Lower-case words, apostrophes kept inside words ("what's")."""
    return _WORD.findall(text.lower())


@lru_cache(maxsize=4096)
def stem(word: str) -> str:
    """A light suffix stripper: enough to make plurals and -ing forms meet."""
    w = word.removesuffix("'s")
    for suffix, min_len in (("ings", 6), ("ing", 5), ("ies", 5), ("ed", 5), ("es", 5), ("s", 4)):
        if w.endswith(suffix) and len(w) >= min_len:
            base = w[: -len(suffix)]
            if suffix == "ies":
                return base + "y"
            if suffix == "es" and not base.endswith(("s", "x", "z", "ch", "sh")):
                return base + "e" if not base.endswith("e") else base
            if suffix in ("ing", "ings", "ed") and len(base) > 2 and base[-1] == base[-2]:
                return base[:-1]   # "shipped" -> "ship", "stopping" -> "stop"
            return base
    return w


def tokens(text: str, *, keep_stopwords: bool = False) -> list[str]:
    """Stemmed content words of ``text``."""
    return [stem(w) for w in words(text) if keep_stopwords or w not in STOPWORDS]


@lru_cache(maxsize=4096)
def phonetic_key(word: str) -> str:
    """A crude sound-alike key: silent leading h dropped, vowels folded, voicing ignored."""
    w = word.lower()
    for a, b in (("ph", "f"), ("ck", "k"), ("qu", "kw"), ("wh", "w"), ("x", "ks"), ("z", "s"),
                 ("q", "k"), ("dg", "j"), ("gh", "g"), ("c", "k"),
                 # voiced and voiceless pairs blur on a phone line: "barking" ~ "parking"
                 ("b", "p"), ("d", "t"), ("g", "k"), ("v", "f")):
        w = w.replace(a, b)
    if w[:1] == "h" and w[1:2] in "aeiouy":
        w = w[1:]
    if not w:
        return ""
    head = "A" if w[0] in "aeiouy" else w[0]
    body = re.sub(r"[aeiouyhw]", "", w[1:])
    key = head + body
    return re.sub(r"(.)\1+", r"\1", key)


def one_edit(a: str, b: str) -> bool:
    """Whether two words of five letters or more are at most one edit apart."""
    return min(len(a), len(b)) >= 5 and _edit_distance_le1(a, b)


def _edit_distance_le1(a: str, b: str) -> bool:
    if abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        return sum(x != y for x, y in zip(a, b)) <= 1
    if len(a) > len(b):
        a, b = b, a
    i = 0
    while i < len(a) and a[i] == b[i]:
        i += 1
    return a[i:] == b[i + 1:]


@lru_cache(maxsize=16384)
def similar(heard: str, word: str) -> bool:
    """Whether the recognizer's ``heard`` word may be ``word``."""
    if heard == word:
        return True
    if min(len(heard), len(word)) >= 5 and _edit_distance_le1(heard, word):
        return True
    if min(len(heard), len(word)) >= 4:
        kh, kw = phonetic_key(heard), phonetic_key(word)
        return len(kw) >= 3 and kh == kw
    return False


def find_phrase(utterance_words: list[str], phrase: str) -> bool:
    """Whether ``phrase`` (one or more words) occurs in order, word by similar word."""
    return phrase_end(utterance_words, phrase) is not None


def phrase_end(utterance_words: list[str], phrase: str) -> int | None:
    """The index just after the first place ``phrase`` occurs (as ``find_phrase`` finds it), or
    None."""
    target = [stem(w) for w in words(phrase)]
    heard = [stem(w) for w in utterance_words]
    if not target:
        return None
    for start in range(len(heard) - len(target) + 1):
        if all(similar(heard[start + i], t) for i, t in enumerate(target)):
            return start + len(target)
    return None


@dataclass(frozen=True)
class Match:
    index: int
    score: float
    coverage: float   # the share of the query's IDF weight that the document explains


class BM25Index:
    """Okapi BM25 over short passages, with fuzzy query-term mapping.

    ``documents`` are the texts to search (a knowledge item's question, keywords and answer);
    ``boosts`` repeat some text (the question and keywords) so it weighs more.
    """

    def __init__(self, documents: list[str], *, k1: float = 1.5, b: float = 0.75):
        self._docs = [Counter(tokens(d)) for d in documents]
        self._lengths = [sum(c.values()) for c in self._docs]
        self._avg_len = (sum(self._lengths) / len(self._docs)) if self._docs else 1.0
        df: Counter[str] = Counter()
        for doc in self._docs:
            df.update(doc.keys())
        n = len(self._docs)
        self._idf = {t: math.log(1 + (n - f + 0.5) / (f + 0.5)) for t, f in df.items()}
        self._max_idf = math.log(1 + (n + 0.5) / 0.5) if n else 1.0
        self._k1, self._b = k1, b

    def __len__(self) -> int:
        return len(self._docs)

    def _resolve(self, term: str) -> tuple[str | None, float]:
        """The vocabulary word a heard term stands for, and how much to trust the mapping."""
        if term in self._idf:
            return term, 1.0
        best = None
        for vocab in self._idf:
            if similar(term, vocab) and (best is None or self._idf[vocab] > self._idf[best]):
                best = vocab
        return (best, 0.7) if best is not None else (None, 0.0)

    def search(self, query: str, *, min_coverage: float = 0.3,
               min_score: float = 0.5) -> Match | None:
        """The best passage for ``query``, or None when nothing explains enough of it."""
        terms = tokens(query)
        if not terms or not self._docs:
            return None
        resolved = [(t, *self._resolve(t)) for t in dict.fromkeys(terms)]
        # words the index has never seen weigh half the rarest word: a question may carry
        # a few words of its own ("a really bad toothache") and still be about one passage
        total_weight = sum(self._idf[v] if v else 0.5 * self._max_idf for _, v, _ in resolved)
        best: Match | None = None
        for i, doc in enumerate(self._docs):
            score = 0.0
            explained = 0.0
            norm = self._k1 * (1 - self._b + self._b * self._lengths[i] / self._avg_len)
            for _, vocab, trust in resolved:
                if vocab is None or vocab not in doc:
                    continue
                tf = doc[vocab]
                idf = self._idf[vocab]
                score += trust * idf * tf * (self._k1 + 1) / (tf + norm)
                explained += trust * idf
            coverage = explained / total_weight if total_weight else 0.0
            if best is None or score > best.score:
                best = Match(i, score, coverage)
        if best is None or best.score < min_score or best.coverage < min_coverage:
            return None
        return best
