"""A scripted caller spells a name as a person says the letters."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from harness.callers.script import spelled_out


def test_a_name_is_spelled_letter_by_letter_with_a_longer_pause_between_names():
    assert spelled_out("David Miller") == "dee, eigh, vee, eye, dee. em, eye, el, el, ee, are"
    assert spelled_out("o'neil") == "oh, en, ee, eye, el"          # the apostrophe is not said
    every = spelled_out("abcdefghijklmnopqrstuvwxyz").split(", ")
    assert len(every) == 26 and len(set(every)) == 26


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed")
def test_the_voices_say_each_letters_name_not_the_article():
    """espeak-ng (and mbrola, which speaks its phonemes) reads a lone "a" as the article, a
    schwa; the caller's "eigh" is the letter's name, as "ee" is e's."""
    def phonemes(text: str) -> str:
        return subprocess.run(["espeak-ng", "-v", "en-us", "-q", "-x", text], check=True,
                              capture_output=True, text=True).stdout.strip()

    assert "eI" not in phonemes("d a d") and "eI" in phonemes(spelled_out("dad"))
    assert "i:" in phonemes(spelled_out("e"))
    assert "aI" in phonemes(spelled_out("i")) and "Ef" in phonemes(spelled_out("f"))
