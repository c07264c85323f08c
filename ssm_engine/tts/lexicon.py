"""Pronunciation lexicon: word -> festival phones with vowel stress, shipped with the package.

    lex = default_lexicon()
    lex.lookup("order")       # -> ("ao1", "r", "d", "er0")
    lex.lookup("a", pos="n")  # -> ("ey1",)   the letter; lex.lookup("a") -> ("ax0",) the article
    lex.pronounce("zyzzyva")  # lexicon, then festival's letter-to-sound rules (see ``lts``)

``lexicon.tsv.gz`` is built from festival's CMU lexicon (Debian ``festlex-cmu``) and the addenda
festival loads with it (``cmulex.scm``), so the words the teacher voice says and the phones we
encode agree::

    python -m ssm_engine.tts.lexicon --build /usr/share/festival/dicts/cmu

One line per entry: ``word<TAB>pos<TAB>phones``; vowels carry their syllable's stress as a digit
(0 unstressed, 1 primary, 2 secondary), consonants none. Entries keep festival's order: an entry
added by ``cmulex.scm`` comes first, then the dictionary's in file order.
"""

from __future__ import annotations

import argparse
import gzip
import re
import sys
from functools import lru_cache
from pathlib import Path

from .errors import LexiconError

__all__ = ["VOWELS", "CONSONANTS", "PHONES", "Lexicon", "default_lexicon", "build", "split_stress"]

VOWELS = ("aa ae ah ao aw ax ay eh er ey ih iy ow oy uh uw").split()
CONSONANTS = ("b ch d dh el em en f g hh jh k l m n ng p r s sh t th v w y z zh").split()
PHONES = tuple(VOWELS + CONSONANTS)
LEXICON_PATH = Path(__file__).with_name("lexicon.tsv.gz")
_ENTRY = re.compile(r'^\("((?:[^"\\]|\\.)*)"\s+(\S+)\s+\((.*)\)\)\s*$')
_SYLLABLE = re.compile(r"\(\(([^()]*)\)\s*(\d)\)")
# Homographs whose first entry is the rarer reading in phone talk; the teacher says these
# (measured on 300 agent sentences: festival's POS tagger picked them).
_PREFERRED_POS = {"does": "v", "address": "v", "minute": "n"}
_SIBILANT = {"s", "z", "sh", "zh", "ch", "jh"}
_VOICELESS = {"p", "t", "k", "f", "th"}


def split_stress(phone: str) -> tuple[str, int]:
    """"ey1" -> ("ey", 1); "k" -> ("k", 3) (3: no stress, a consonant)."""
    if phone[-1].isdigit():
        return phone[:-1], int(phone[-1])
    return phone, 3


def _parse_entry(line: str) -> tuple[str, str, tuple[str, ...]] | None:
    m = _ENTRY.match(line.strip())
    if m is None:
        return None
    word, pos, body = m.groups()
    phones: list[str] = []
    for syl, stress in _SYLLABLE.findall(body):
        for p in syl.split():
            if p not in PHONES:
                raise LexiconError(f"unknown phone {p!r} in entry {line.strip()[:80]!r}")
            phones.append(p + stress if p in VOWELS else p)
    return word.lower(), pos, tuple(phones)


def build(source_dir: Path, out: Path = LEXICON_PATH) -> int:
    """Writes ``out`` from festival's ``cmudict-0.4.out`` and ``cmulex.scm`` in ``source_dir``.
    Returns the number of entries."""
    dict_path = source_dir / "cmudict-0.4.out"
    addenda_path = source_dir / "cmulex.scm"
    try:
        lines = dict_path.read_text(encoding="latin-1").splitlines()
        addenda = addenda_path.read_text(encoding="latin-1")
    except OSError as exc:
        raise LexiconError(f"cannot read festival's CMU lexicon in {source_dir} (Debian package "
                           f"festlex-cmu): {exc}") from exc
    entries: list[tuple[str, str, tuple[str, ...]]] = []
    for m in re.finditer(r"\(lex\.add\.entry\s+'(\(.*\))\)\s*$", addenda, re.MULTILINE):
        parsed = _parse_entry(m.group(1))
        if parsed is not None:
            entries.append(parsed)
    for line in lines:
        if line.startswith("("):
            parsed = _parse_entry(line)
            if parsed is None:
                raise LexiconError(f"{dict_path}: cannot parse {line[:80]!r}")
            entries.append(parsed)
    with gzip.open(out, "wt", encoding="utf-8", compresslevel=9) as f:
        for word, pos, phones in entries:
            f.write(f"{word}\t{pos}\t{' '.join(phones)}\n")
    return len(entries)


class Lexicon:
    """Word -> phones. Lookups are case-insensitive; ``pos`` picks an entry of that part of speech
    ("n" for a letter's name) when the word has one."""

    def __init__(self, entries: dict[str, list[tuple[str, tuple[str, ...]]]]) -> None:
        self._entries = entries

    @classmethod
    def load(cls, path: Path = LEXICON_PATH) -> "Lexicon":
        entries: dict[str, list[tuple[str, tuple[str, ...]]]] = {}
        try:
            with gzip.open(path, "rt", encoding="utf-8") as f:
                for n, line in enumerate(f, 1):
                    parts = line.rstrip("\n").split("\t")
                    if len(parts) != 3:
                        raise LexiconError(f"{path}:{n}: expected 3 tab-separated fields")
                    entries.setdefault(parts[0], []).append((parts[1], tuple(parts[2].split())))
        except (OSError, EOFError, UnicodeDecodeError) as exc:
            raise LexiconError(f"cannot read the lexicon {path}: {exc}") from exc
        if not entries:
            raise LexiconError(f"the lexicon {path} is empty")
        return cls(entries)

    def __len__(self) -> int:
        return len(self._entries)

    def contains(self, word: str) -> bool:
        return word.lower() in self._entries

    def lookup(self, word: str, pos: str | None = None) -> tuple[str, ...] | None:
        """The entry's phones, or None if the word is not in the lexicon."""
        found = self._entries.get(word.lower())
        if not found:
            return None
        pos = pos or _PREFERRED_POS.get(word.lower())
        if pos is not None:
            for entry_pos, phones in found:
                if entry_pos == pos:
                    return phones
        return found[0][1]

    def pronounce(self, word: str, pos: str | None = None) -> tuple[str, ...]:
        """Phones for any word: the lexicon; a possessive ("lee's") as its base plus s/z/ih z;
        else festival's letter-to-sound rules (``lts.predict``, what the teacher itself does);
        if those give no vowel ("qxzv"), the word's letters by name."""
        low = word.lower().strip("'")
        phones = self.lookup(low, pos)
        if phones is not None:
            return phones
        if low.endswith("'s") and len(low) > 2:
            base = self.lookup(low[:-2])
            if base is not None:
                tail = base[-1].rstrip("012")
                suffix = (("ih0", "z") if tail in _SIBILANT else ("s",) if tail in _VOICELESS
                          else ("z",))
                return base + suffix
        from .lts import predict

        phones = predict(low)
        if any(p[-1].isdigit() for p in phones):
            return phones
        # no vowel ("qxzv"): say its letters, the last resort
        return tuple(p for c in low if "a" <= c <= "z" for p in self.lookup(c, "n") or ())


@lru_cache(maxsize=1)
def default_lexicon() -> Lexicon:
    """The packaged lexicon (``lexicon.tsv.gz``), loaded once."""
    return Lexicon.load()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ssm_engine.tts.lexicon",
                                description="build the packaged lexicon from festival's CMU dict")
    p.add_argument("--build", type=Path, required=True, metavar="DIR",
                   help="festival's dicts/cmu folder (e.g. /usr/share/festival/dicts/cmu)")
    p.add_argument("--out", type=Path, default=LEXICON_PATH)
    args = p.parse_args(argv)
    n = build(args.build, args.out)
    print(f"{n} entries -> {args.out} ({args.out.stat().st_size / 1e6:.2f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
