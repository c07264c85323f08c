"""Callers' names for the ``name`` hint: common US first and last names, how often people have
them, and how they are said.

    table = NameTable.load()                  # the shipped table, names.tsv.gz beside this module
    table.first["sarah"], table.first["sara"] # 0.0144, 0.0056: the share of people so named
    lm = names_lm(table)                      # "my name is sarah jones", "it's anna", "brown" ...
    lexicon = table.pronouncer(base)          # the names' pronunciations and base's other words
    table.logp("my name is sarah jones")      # ln P(carrier) + ln P(sarah) + ln P(jones)

A name is a word the general recogniser rarely meets, and several are said alike ("sarah" and
"sara", "ann" and "anne", "jon" and "john"): when the agent has asked for a name, a phone search
over these names in the ways callers give them finds it, and of two names said alike the
commoner wins, as a person taking a message would write it. The search's trigram (``names_lm``)
learns from sampled sentences, so it also learns chance pairs ("sara jones" sampled, "sarah
jones" not); its finds are therefore scored by ``logp``, the grammar's exact prior: the
carrier's share, times each name's share of people, first and last names independent.

The table: Faker's en_US person provider (MIT; its weights are US Census frequencies) for the
names, pocketsphinx's CMUdict (BSD) for their pronunciations. ``parley data names`` rewrites it
(both are build-time dependencies only; the runtime reads the table). Its rows:
``first|last <TAB> name <TAB> weight <TAB> PH ON ES[ <TAB> another pronunciation ...]``.
"""

from __future__ import annotations

import functools
import gzip
import math
import random
import re
from dataclasses import dataclass
from pathlib import Path

from .errors import TranscriptError
from .lm import NGramLM, build_lm
from .phones import Pronouncer

__all__ = ["NameTable", "NAMES_PATH", "CARRIERS", "names_lm", "write_names"]

NAMES_PATH = Path(__file__).with_name("names.tsv.gz")

# How callers give their name when asked, and how often (relative). Every word outside {f} and
# {l} must be in the recogniser's lexicon; agent/slots.py strips these same openers.
CARRIERS: tuple[tuple[str, float], ...] = (
    ("{f} {l}", 6.0), ("my name is {f} {l}", 6.0), ("it's {f} {l}", 2.0), ("this is {f} {l}", 2.0),
    ("i'm {f} {l}", 1.0), ("my name's {f} {l}", 1.0), ("the name is {f} {l}", 0.5),
    ("yes my name is {f} {l}", 0.5), ("yes it's {f} {l}", 0.5), ("{f} {l} speaking", 0.3),
    ("my name is {f}", 1.0), ("it's {f}", 0.5), ("this is {f}", 0.5), ("i'm {f}", 0.3),
    ("{f}", 1.0), ("{l}", 0.5),
    ("my first name is {f}", 0.3), ("my last name is {l}", 0.3), ("call me {f}", 0.2),
)
_SPELLABLE = re.compile(r"[a-z]+(?:'[a-z]+)?")
_CARRIER_TOTAL = sum(w for _, w in CARRIERS)
_CARRIER_RE = tuple((re.compile("^" + re.escape(c).replace(r"\{f\}", "(?P<f>[a-z']+)")
                                .replace(r"\{l\}", "(?P<l>[a-z']+)") + "$"),
                     math.log(w / _CARRIER_TOTAL)) for c, w in CARRIERS)


@dataclass(frozen=True)
class NameTable:
    """First and last names -> the share of people who have them, and their pronunciations."""

    first: dict[str, float]
    last: dict[str, float]
    prons: dict[str, tuple[tuple[str, ...], ...]]

    @classmethod
    def load(cls, path: str | Path = NAMES_PATH) -> NameTable:
        """Read a table (see the module docstring). Raises TranscriptError for a file that is
        not one, naming the path and line."""
        first: dict[str, float] = {}
        last: dict[str, float] = {}
        prons: dict[str, list[tuple[str, ...]]] = {}
        try:
            with gzip.open(path, "rt", encoding="utf-8") as f:
                for n, line in enumerate(f, 1):
                    parts = line.rstrip("\n").split("\t")
                    try:
                        kind, name, weight = parts[0], parts[1], float(parts[2])
                    except (IndexError, ValueError):
                        raise TranscriptError(f"{path}:{n}: not a names row: {line[:60]!r}") from None
                    if kind not in ("first", "last") or not _SPELLABLE.fullmatch(name) \
                            or not weight > 0 or len(parts) < 4:
                        raise TranscriptError(f"{path}:{n}: not a names row: {line[:60]!r}")
                    (first if kind == "first" else last)[name] = weight
                    for pron in parts[3:]:
                        phones = tuple(pron.split())
                        if phones not in prons.setdefault(name, []):
                            prons[name].append(phones)
        except (OSError, EOFError, UnicodeDecodeError) as exc:
            raise TranscriptError(f"{path}: cannot read the names table: {exc}") from exc
        if not first or not last:
            raise TranscriptError(f"{path}: no first or no last names")
        Pronouncer({w: tuple(p) for w, p in prons.items()})        # the phones are known ones
        return cls(first, last, {w: tuple(p) for w, p in prons.items()})

    def logp(self, text: str) -> float | None:
        """ln P(text) under the grammar: the likeliest carrier that ``text`` fits, times its
        first and last names' shares of people; None when it fits none (normalised text)."""
        best: float | None = None
        for pattern, carrier in _CARRIER_RE:
            m = pattern.match(text)
            if m is None:
                continue
            score = carrier
            for group, kind, names in (("f", "first", self.first), ("l", "last", self.last)):
                name = m.groupdict().get(group)
                if name is not None:
                    score = score + self.share_logp(kind, name) if name in names else -math.inf
            if score > -math.inf and (best is None or score > best):
                best = score
        return best

    def share_logp(self, kind: str, name: str) -> float:
        """ln of the share of people with this ``kind`` ("first" or "last") name among the
        table's names of that kind (a KeyError for a name it lacks)."""
        names, total = ((self.first, self._first_total) if kind == "first"
                        else (self.last, self._last_total))
        return math.log(names[name] / total)

    @functools.cached_property
    def _first_total(self) -> float:
        return sum(self.first.values())

    @functools.cached_property
    def _last_total(self) -> float:
        return sum(self.last.values())

    def pronouncer(self, base: Pronouncer) -> Pronouncer:
        """The names' pronunciations, and ``base``'s for the carriers' words (and any name
        ``base`` knows another way too)."""
        merged = {w: base.prons(w) for w in base.words}
        for name, ps in self.prons.items():
            merged[name] = tuple(dict.fromkeys(ps + merged.get(name, ())))
        return Pronouncer(merged)


def names_lm(table: NameTable, base: Pronouncer | None = None, *, sentences: int = 8000,
             seed: int = 11) -> NGramLM:
    """A trigram over the ways callers give a name (``CARRIERS``), names drawn by how common
    they are; each name is given once more alone, so a rare one can still be heard. With
    ``base``, carriers with a word it cannot pronounce are left out."""
    rng = random.Random(seed)
    carriers = [(c, w) for c, w in CARRIERS
                if base is None or all(x in base for x in c.split() if x not in ("{f}", "{l}"))]
    if not carriers:
        raise TranscriptError("no carrier phrase for names is pronounceable")
    texts, weights = zip(*carriers)
    firsts, f_w = zip(*table.first.items())
    lasts, l_w = zip(*table.last.items())
    out = [t.format(f=f, l=lname) for t, f, lname in zip(
        rng.choices(texts, weights, k=sentences), rng.choices(firsts, f_w, k=sentences),
        rng.choices(lasts, l_w, k=sentences))]
    out += list(firsts) + list(lasts)
    return build_lm(out, general_weight=0.0, unk_weight=1e-6)


def write_names(out: str | Path, cmudict: str | Path) -> dict:
    """Write the table from Faker's en_US names and ``cmudict``'s pronunciations; names it
    cannot pronounce are left out. -> counts. Needs Faker (the [data] extra)."""
    from faker.providers.person.en_US import Provider

    lexicon = Pronouncer.load(cmudict)
    rows: list[str] = []
    kept = {"first": 0, "last": 0, "unpronounceable": 0}
    firsts: dict[str, float] = {}
    for table in (Provider.first_names_female, Provider.first_names_male):
        for name, w in table.items():
            firsts[name.lower()] = firsts.get(name.lower(), 0.0) + float(w) / 2
    lasts = {name.lower(): float(w) for name, w in Provider.last_names.items()}
    for kind, names in (("first", firsts), ("last", lasts)):
        for name, w in sorted(names.items()):
            ps = lexicon.prons(name)
            if not _SPELLABLE.fullmatch(name) or not ps:
                kept["unpronounceable"] += 1
                continue
            rows.append("\t".join([kind, name, f"{w:.9g}", *(" ".join(p) for p in ps)]))
            kept[kind] += 1
    with gzip.GzipFile(out, "wb", mtime=0) as f:          # the same bytes each time
        f.write("".join(r + "\n" for r in rows).encode())
    return kept
