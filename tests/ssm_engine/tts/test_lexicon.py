"""The packaged lexicon and the letter-to-sound fallback (festival's CMU LTS rules)."""

from __future__ import annotations

import gzip
import shutil
import subprocess
from pathlib import Path

import pytest

from ssm_engine.tts.errors import LexiconError
from ssm_engine.tts.lexicon import LEXICON_PATH, Lexicon, build, default_lexicon
from ssm_engine.tts.lts import RULES_PATH, predict
from ssm_engine.tts.lts import build as build_lts

CMU_DIR = Path("/usr/share/festival/dicts/cmu")
needs_festlex = pytest.mark.skipif(not (CMU_DIR / "cmudict-0.4.out").exists(),
                                   reason="festival's CMU lexicon is not installed (festlex-cmu)")

# festival 2.5 (festlex-cmu 2.4): (lts_predict WORD cmu_lts_rules), captured once.
LTS_GOLDEN = {
    "zorbulax": "z ao1 r b y ax0 l ae1 k s",
    "parleyvoo": "p aa1 r l iy0 v uw1",
    "brightling": "b r ay1 t ax0 l ih0 ng",
    "acmeco": "ae1 k m eh1 k ow0",
    "xyloquent": "z ay1 l ow1 k w ax0 n t",
    "qaplantor": "k ae1 p l ae1 n t er0",
    "thistlewood": "th ih1 s ax0 l w uh1 d",
}


def test_lookups() -> None:
    lex = default_lexicon()
    assert len(lex) > 100_000
    assert lex.lookup("order") == ("ao1", "r", "d", "er0")
    assert lex.lookup("ORDER") == lex.lookup("order")
    assert lex.lookup("a") == ("ax0",)
    assert lex.lookup("a", pos="n") == ("ey1",)
    assert lex.lookup("that's") == ("dh", "ae1", "t", "s")      # from festival's addenda
    assert lex.lookup("does") == ("d", "ah1", "z")              # the verb, as the teacher says
    assert lex.lookup("zorbulax") is None
    assert not lex.contains("zorbulax")


def test_possessive_of_a_known_word() -> None:
    lex = default_lexicon()
    assert lex.pronounce("lee's") == ("l", "iy1", "z")
    assert lex.pronounce("smith's")[-2:] == ("th", "s")
    assert lex.pronounce("james's")[-2:] == ("ih0", "z")


@pytest.mark.parametrize("word, phones", sorted(LTS_GOLDEN.items()))
def test_letter_to_sound_matches_festival(word: str, phones: str) -> None:
    assert " ".join(predict(word)) == phones
    assert default_lexicon().pronounce(word) == tuple(phones.split())


def test_no_vowel_words_are_spelled() -> None:
    lex = default_lexicon()
    assert lex.pronounce("qxzv") == lex.pronounce("q") + ("eh1", "k", "s") + lex.pronounce(
        "z", "n") + lex.pronounce("v", "n")
    assert predict("") == () and predict("123") == ()


def test_corrupt_lexicon_file(tmp_path: Path) -> None:
    bad = tmp_path / "lex.tsv.gz"
    bad.write_bytes(b"not gzip")
    with pytest.raises(LexiconError, match=str(bad)):
        Lexicon.load(bad)
    with gzip.open(bad, "wt") as f:
        f.write("only two\tfields\n")
    with pytest.raises(LexiconError, match="3 tab-separated"):
        Lexicon.load(bad)
    with pytest.raises(LexiconError, match="festlex-cmu"):
        build(tmp_path / "missing", tmp_path / "out.tsv.gz")


@pytest.mark.slow
@needs_festlex
def test_packaged_files_rebuild_identically(tmp_path: Path) -> None:
    """The committed lexicon and LTS rules are exactly what the build commands make."""
    build(CMU_DIR, tmp_path / "lexicon.tsv.gz")
    build_lts(CMU_DIR / "cmu_lts_rules.scm", tmp_path / "lts.json.gz")
    with gzip.open(tmp_path / "lexicon.tsv.gz") as a, gzip.open(LEXICON_PATH) as b:
        assert a.read() == b.read()
    with gzip.open(tmp_path / "lts.json.gz") as a, gzip.open(RULES_PATH) as b:
        assert a.read() == b.read()


@needs_festlex
@pytest.mark.skipif(shutil.which("festival") is None, reason="festival is not installed")
def test_letter_to_sound_agrees_with_festival_live(tmp_path: Path) -> None:
    words = ["blorfing", "quenzle", "acmeco", "rivensyde", "metroenergy", "vandemeer"]
    script = tmp_path / "lts.scm"
    script.write_text(
        "(require 'lts)\n"
        f"(load \"{CMU_DIR / 'cmu_lts_rules.scm'}\")\n"
        "(mapcar (lambda (w) (format t \"%s %l\\n\" w (lts_predict w cmu_lts_rules))) '("
        + " ".join(f'"{w}"' for w in words) + "))\n")
    out = subprocess.run(["festival", "-b", str(script)], capture_output=True, text=True,
                         timeout=60).stdout
    theirs = {}
    for line in out.splitlines():
        word, _, phones = line.partition(" ")
        theirs[word] = phones.strip("()").split()
    assert {w: list(predict(w)) for w in words} == theirs
