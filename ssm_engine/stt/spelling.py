"""Spelled names for the ``spelling`` hint: a name said letter by letter ("d a v i d, m i l l e r").

    lex = letters_pronouncer()                    # "a" EY, "b" B IY, ..., "w" D AH B AH L Y UW
    lm = spelling_lm(table)                       # letter strings of callers' names, by share
    spelled_logp(table, "d a v i d m i l l e r")  # ln P: a first and a last name, spelled
    join_spelled("d a v i d m i double l e r")    # "david miller" (the names table splits it)

A name the recogniser cannot tell from another said alike ("david" heard "emma", "dana") is what
a person taking a message asks to have spelled: each letter is a short word of its own, and
together they are a long string of sounds that few names share. When the agent asks for a
spelling, a phone search over the letter names (``letters_pronouncer``) with a letter model
learned from the names' spellings (``spelling_lm``) advances beside the free search
(``joint.py``), and each string it finds is scored by ``spelled_logp``: the share of people with
that first (and last) name, as the ``name`` hint scores a name said whole, or, for a spelling of
no name in the table, a small chance for each letter, so that a name the table lacks can still
be spelled when the sounds say so. The final is the letters; ``join_spelled`` makes them a name,
splitting a run of letters into a first and a last name where the table has both (callers pause
between the two, but the pause need not reach the transcript).
"""

from __future__ import annotations

import math
import random
import re

from ..words import edit_distance
from .lm import NGramLM, build_lm
from .names import NameTable
from .phones import Pronouncer

__all__ = ["SpelledNames", "LETTER_PRONS", "UNKNOWN_SPELLING_LOGP", "letters_pronouncer",
           "spelling_lm", "spelled_logp", "spelled_letters", "join_spelled"]

# The letters as said in American English (CMUdict's, without the article "a" = AH), and
# "double" as in "m i double l e r"; the alternatives callers also use ("zed", "double you").
LETTER_PRONS: dict[str, tuple[tuple[str, ...], ...]] = {
    "a": (("EY",),), "b": (("B", "IY"),), "c": (("S", "IY"),), "d": (("D", "IY"),),
    "e": (("IY",),), "f": (("EH", "F"),), "g": (("JH", "IY"),), "h": (("EY", "CH"),),
    "i": (("AY",),), "j": (("JH", "EY"),), "k": (("K", "EY"),), "l": (("EH", "L"),),
    "m": (("EH", "M"),), "n": (("EH", "N"),), "o": (("OW",),), "p": (("P", "IY"),),
    "q": (("K", "Y", "UW"),), "r": (("AA", "R"),), "s": (("EH", "S"),), "t": (("T", "IY"),),
    "u": (("Y", "UW"),), "v": (("V", "IY"),),
    "w": (("D", "AH", "B", "AH", "L", "Y", "UW"), ("D", "AH", "B", "AH", "Y", "UW")),
    "x": (("EH", "K", "S"),), "y": (("W", "AY"),), "z": (("Z", "IY"), ("Z", "EH", "D")),
    "double": (("D", "AH", "B", "AH", "L"),),
}
_LETTERS = "abcdefghijklmnopqrstuvwxyz"
UNKNOWN_SPELLING_LOGP = math.log(0.05)
"""ln P that a spelled string is no name of the table (each letter then ln 1/26 more)."""
# how often a spelling is of both names, the first alone or the last alone (chosen, not tuned)
_SHARES = {"both": math.log(0.6), "first": math.log(0.15), "last": math.log(0.2)}
_SPELLED = re.compile(r"^(?:(?:double )?[a-z] )*(?:double )?[a-z]$")


def letters_pronouncer() -> Pronouncer:
    """The letter names (and "double") as a pronouncing lexicon of their own."""
    return Pronouncer(dict(LETTER_PRONS))


def spelled_letters(text: str) -> str | None:
    """The letters a spelling says ("m i double l e r" -> "miller"); None when ``text`` is not
    a run of single letters (normalised text, words apart)."""
    text = text.strip()
    if not text or not _SPELLED.match(text):
        return None
    out: list[str] = []
    double = False
    for w in text.split():
        if w == "double":
            double = True
            continue
        out.append(w * 2 if double else w)
        double = False
    return "".join(out)


def _splits(table: NameTable, s: str) -> list[tuple[float, str]]:
    """(ln P, the name written out) for each reading of the letters ``s`` as names."""
    out: list[tuple[float, str]] = []
    if s in table.first:
        out.append((_SHARES["first"] + table.share_logp("first", s), s))
    if s in table.last:
        out.append((_SHARES["last"] + table.share_logp("last", s), s))
    for i in range(2, len(s) - 1):
        f, last = s[:i], s[i:]
        if f in table.first and last in table.last:
            out.append((_SHARES["both"] + table.share_logp("first", f)
                        + table.share_logp("last", last), f"{f} {last}"))
    return out


def spelled_logp(table: NameTable, text: str) -> float | None:
    """ln P(text) for a spelled string: its likeliest reading as a first name, a last name or
    both, or, when it spells no name of the table, ``UNKNOWN_SPELLING_LOGP`` and ln 1/26 for
    each letter. None when ``text`` is not a spelling (``spelled_letters``)."""
    s = spelled_letters(text)
    if s is None:
        return None
    readings = _splits(table, s)
    if readings:
        return max(p for p, _ in readings)
    return UNKNOWN_SPELLING_LOGP + len(s) * math.log(1 / 26)


def join_spelled(text: str, table: NameTable | None = None) -> str | None:
    """A spelling as the name it spells: "d a v i d m i l l e r" -> "david miller" (split where
    the names table reads it as a first and a last name, the likeliest reading), "x y z" ->
    "xyz"; None when ``text`` is not a spelling. Loads the shipped table when none is given."""
    s = spelled_letters(text)
    if s is None:
        return None
    readings = _splits(table or _table(), s)
    return max(readings)[1] if readings else s


def _deletes(word: str, n: int) -> set[str]:
    out = {word}
    frontier = {word}
    for _ in range(n):
        frontier = {w[:i] + w[i + 1:] for w in frontier for i in range(len(w))}
        out |= frontier
    return out


class SpelledNames:
    """The names of a table within a letter or two of what was heard spelled, the way a person
    who took down "s t e n b u t l e r" asks "Steven Butler?": a spelling search hears most
    letters right, but a letter lost or changed makes a string that spells no name, and an
    n-gram over letters cannot hold a search to the table's names. ``readings`` proposes them;
    the joint rescoring (full CTC over their sounds, their names' prior) decides.

        near = SpelledNames(table)
        near.readings("s t e n b u t l e r")   # ["s t e v e n b u t l e r", ...]
    """

    def __init__(self, table: NameTable, max_edits: int = 2) -> None:
        self.table = table
        self.max_edits = max_edits
        self._index: dict[str, dict[str, set[str]]] = {"first": {}, "last": {}}
        for kind, names in (("first", table.first), ("last", table.last)):
            index = self._index[kind]
            for name in names:
                if name.isalpha():
                    for d in _deletes(name, max_edits):
                        index.setdefault(d, set()).add(name)

    def near(self, s: str, kind: str) -> list[tuple[int, str]]:
        """(edits, name) for the ``kind`` ("first" or "last") names within ``max_edits`` of the
        letters ``s`` (one where both have three letters or fewer), fewest edits first."""
        index = self._index[kind]
        found: set[str] = set()
        for d in _deletes(s, self.max_edits):
            found |= index.get(d, set())
        out = []
        for name in found:
            e = edit_distance(s, name)
            if e <= (1 if max(len(s), len(name)) <= 3 else self.max_edits):
                out.append((e, name))
        return sorted(out)

    def readings(self, text: str, limit: int = 16) -> list[str]:
        """Spelled strings (letters apart, as the search gives them) of the names nearest the
        spelling ``text``: one first or last name, or a first and a last name split anywhere,
        fewest edits first, then the likeliest; at most ``limit``, not ``text`` itself."""
        s = spelled_letters(text)
        if s is None:
            return []
        share = self.table.share_logp
        scored: list[tuple[int, float, str]] = []
        for kind in ("first", "last"):
            for e, name in self.near(s, kind)[:limit]:
                scored.append((e, -share(kind, name), name))
        for i in range(2, len(s) - 1):
            firsts = self.near(s[:i], "first")[:limit]
            lasts = self.near(s[i:], "last")[:limit] if firsts else []
            for ef, f in firsts:
                for el, last in lasts:
                    scored.append((ef + el, -share("first", f) - share("last", last), f + last))
        out = []
        for _, _, name in sorted(scored):
            spelled = " ".join(name)
            if name != s and spelled not in out:
                out.append(spelled)
        return out[:limit]


_TABLE: list[NameTable] = []


def _table() -> NameTable:
    if not _TABLE:
        _TABLE.append(NameTable.load())
    return _TABLE[0]


def _spell(name: str, rng: random.Random) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(name):
        if i + 1 < len(name) and name[i] == name[i + 1] and rng.random() < 0.3:
            out += ["double", name[i]]
            i += 2
        else:
            out.append(name[i])
            i += 1
    return out


def spelling_lm(table: NameTable, *, sentences: int = 8000, seed: int = 13,
                random_share: float = 0.0) -> NGramLM:
    """A 4-gram over letters: the table's names spelled (a first and a last name, or one of
    them, drawn by how common they are; a double letter now and then said "double l"), and a
    ``random_share`` of strings of random letters. Its backing off still lets a name the table
    lacks be found; strings of random letters (0.1) made the search lose more letters of the
    names it has (a quick check on 30 spelled names in three held-out voices: 7 of 10 right in
    espeak-ng f3 against 9 with none)."""
    rng = random.Random(seed)
    firsts, f_w = zip(*table.first.items())
    lasts, l_w = zip(*table.last.items())
    out: list[str] = []
    for _ in range(sentences):
        r = rng.random()
        if r < random_share:
            words = [rng.choice(_LETTERS) for _ in range(rng.randint(2, 12))]
        else:
            f = rng.choices(firsts, f_w)[0]
            last = rng.choices(lasts, l_w)[0]
            names = [f, last] if r < 0.6 else [f] if r < 0.8 else [last]
            words = [w for n in names for w in _spell(n, rng)]
        out.append(" ".join(words))
    out += list(_LETTERS)
    return build_lm(out, order=4, general_weight=0.0, unk_weight=1e-6)
