"""The Ur-Quan Masters' voice pack as spoken lines: which words, which actor, where in the clip.

    lines = uqm_lines(voice_zip, content_zip)   # -> [UqmLine(member, race, text, start_s, end_s)]

Debian's non-free ``uqm-voice`` ships 2,218 Ogg clips (``3dovoice/<race>/<race>-NNN.ogg``, 11 h
of alien captains voiced by 13 credited actors) in one zip archive (``uqm-0.8.0-voice.uqm``);
``uqm-content`` holds the dialogue they speak in ``base/comm/<race>/<race>.txt`` (the voice pack
overrides a few races with its own ``.txt``)::

    #(KEY)<TAB>race-NNN.ogg        a voiced entry (lowercase keys, with no clip, are the
    line one                        player's unvoiced choices)
    line two

and ``3dovoice/<race>/<race>.ts`` gives each entry's subtitle pages as durations in ms, one per
line but the last (``#(KEY) 1863,4746,3465``). A line becomes a span of its clip; the span's
ends are moved to the quietest moment near the subtitle timing when the audio is read.

Lines are left out when their words are not known as spoken: digits (``241.6`` is read aloud
in more than one way), the Orz's ``*untranslatable*`` words, ``<...>`` and ``a/b`` choices,
all-capitals lines (the ship computer's synthetic voice and the Slylandro probe's), and the
out-takes, and lines with written sounds ("Grunt", "Kyaiee", "heeelllooo"). Fillers ("er",
"uh") are dropped from the words, as in the other sources.
"""

from __future__ import annotations

import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["UqmLine", "UQM_CAST", "uqm_lines", "parse_dialogue", "parse_timings"]

# race folder -> the actor the credits (base/cutscene/credits/credits.txt) name for it. The
# Zoq-Fot-Pik are three voices shared by two actors, clip by clip unknown: one mixed label.
# Left out: "probe" (credited to "840-AV", a speech synthesiser) and "safeones" (no credit).
UQM_CAST = {
    "thraddash": "antaki", "starbase": "bennett", "commander": "bennett",
    "arilou": "betz", "druuge": "betz", "zoqfotpik": "blumenfeld+wild",
    "kohrah": "bryce", "ilwrath": "bryce", "shofixti": "bryce", "spathi": "bryce",
    "supox": "forcella", "orz": "johnson", "pkunk": "johnson", "utwig": "johnson",
    "yehat": "leyland", "yehatrebels": "leyland", "chmmr": "otus",
    "mycon": "reiche", "talkingpet": "reiche", "slylandro": "vantighem",
    "syreen": "wild", "vux": "wild", "umgah": "zee", "melnorme": "zee", "urquan": "zee",
}
_FILLERS = {"er", "uh", "um", "ah", "erm", "hmm", "mm"}
# written sounds, not words: a line holding one is left out (so is a drawn-out "heeeello")
_NOT_WORDS = {"grunt", "grunts", "whimper", "awk", "aiee", "kyaiee", "sigh", "gasp", "ha",
              "hah", "heh", "hee", "hahaha", "ooh"}
_RESPELL = {"fourty": "forty"}
_KEY = re.compile(r"^#\(([^)]*)\)\s*(\S+\.ogg)?\s*$")


@dataclass(frozen=True)
class UqmLine:
    member: str          # the clip inside the voice archive
    race: str
    text: str            # the words as written (normalise before scoring)
    start_s: float       # subtitle timing; the last line runs to the clip's end (None)
    end_s: float | None


def parse_dialogue(text: str) -> list[tuple[str, str, list[str]]]:
    """A race's dialogue file -> [(key, clip file name, [lines])] for the voiced entries."""
    out: list[tuple[str, str, list[str]]] = []
    for line in text.splitlines():
        m = _KEY.match(line.strip()) if line.startswith("#(") else None
        if m:
            out.append((m.group(1), m.group(2) or "", []))
        elif out and line.strip():
            out[-1][2].append(line.strip())
    return [(k, f, lines) for k, f, lines in out if f and lines]


def parse_timings(text: str) -> dict[str, list[int]]:
    """A race's ``.ts`` file -> {key: [page duration ms, ...]} (empty for one-page entries)."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"^#\(([^)]*)\)\s*([\d,\s]*)$", line.strip())
        if m:
            out[m.group(1)] = [int(v) for v in m.group(2).replace(" ", "").split(",") if v]
    return out


def spoken_words(line: str) -> str | None:
    """A dialogue line's words, or None where what was said is not known from the text."""
    if re.search(r"[\d*<>/\[\]]", line):
        return None
    letters = [c for c in line if c.isalpha()]
    if len(line.split()) >= 2 and letters and all(c.isupper() for c in letters):
        return None
    bare = [re.sub(r"[^a-z]", "", w.lower()) for w in line.split()]
    if any(b in _NOT_WORDS or re.search(r"([a-z])\1\1", b) for b in bare):
        return None
    words = [_RESPELL.get(b, w) for w, b in zip(line.split(), bare) if b not in _FILLERS]
    return " ".join(words) or None


def uqm_lines(voice: Path, content: Path) -> list[UqmLine]:
    """Every line of a credited actor whose words are known, with its subtitle span."""
    out: list[UqmLine] = []
    with zipfile.ZipFile(voice) as vz, zipfile.ZipFile(content) as cz:
        vnames, cnames = set(vz.namelist()), set(cz.namelist())
        seen: set[str] = set()
        for race in sorted(UQM_CAST):
            own = f"3dovoice/{race}/{race}.txt"
            src = (vz, own) if own in vnames else (cz, f"base/comm/{race}/{race}.txt")
            if src[1] not in (vnames if src[0] is vz else cnames):
                continue
            entries = parse_dialogue(src[0].read(src[1]).decode("utf-8", "replace"))
            ts_name = f"3dovoice/{race}/{race}.ts"
            timings = (parse_timings(vz.read(ts_name).decode("utf-8", "replace"))
                       if ts_name in vnames else {})
            for key, name, lines in entries:
                member = f"3dovoice/{race}/{name}"
                if member not in vnames or member in seen or "OUT_TAKES" in key:
                    continue
                seen.add(member)
                pages = timings.get(key, [])
                if len(pages) != len(lines) - 1:       # timings unknown: the clip as one span
                    each = [spoken_words(x) for x in lines]
                    if all(each):
                        out.append(UqmLine(member, race, " ".join(w or "" for w in each),
                                           0.0, None))
                    continue
                t = 0.0
                for i, line in enumerate(lines):
                    end = t + pages[i] / 1000 if i < len(pages) else None
                    words = spoken_words(line)
                    if words:
                        out.append(UqmLine(member, race, words, t, end))
                    t = end or t
    return out
