"""The teacher voice: festival's HTS voice ``cmu_us_slt_arctic_hts``, driven in batch.

    with FestivalTeacher() as teacher:
        audio, segments = teacher.synthesize(["your", "order", "is", "ready", "."])
        # audio: float32 at 16 kHz; segments: [Segment(end_s, phone, stress, word_id, word), ...]

One ``festival --pipe`` process serves many sentences: commands go in on stdin, and festival
writes each sentence's wave (32 kHz, resampled to 16 kHz with soxr) and segment table to a work
folder, then an empty ``.done`` file that tells us both are complete. Phrasing is forced to follow
punctuation only (a pause at ",", ";", ":" and a sentence end at ".", "?", "!"), so festival's
pauses are exactly our ``pau``/``end`` tokens.

Needs the Debian packages ``festival`` and ``festvox-us-slt-hts`` (``scripts/install-system-deps``).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
import wave
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soxr

from .errors import TeacherError

__all__ = ["Segment", "FestivalTeacher", "SAMPLE_RATE_HZ", "festival_available"]

SAMPLE_RATE_HZ = 16_000
VOICE = "cmu_us_slt_arctic_hts"
_SETUP = """
(voice_{voice})
(set! teacher_phrase_tree
  '((lisp_token_end_punc in ("?" "." ":" "!"))
    ((BB))
    ((lisp_token_end_punc in ("," ";"))
     ((B))
     ((n.name is 0) ((BB)) ((NB))))))
(Parameter.set 'Phrase_Method 'cart_tree)
(set! phrase_cart_tree teacher_phrase_tree)
(define (teacher_say text wav segs done)
  (let ((utt (SynthText text)) (fd (fopen segs "w")))
    (utt.save.wave utt wav 'riff)
    (mapcar (lambda (seg)
              (format fd "%s %s %s %s %s\\n" (item.feat seg "end") (item.name seg)
                      (item.feat seg "R:SylStructure.parent.stress")
                      (item.feat seg "R:SylStructure.parent.parent.id")
                      (item.feat seg "R:SylStructure.parent.parent.name")))
            (utt.relation.items utt 'Segment))
    (fclose fd)
    (fclose (fopen done "w"))))
"""


@dataclass(frozen=True)
class Segment:
    end_s: float       # end time in the teacher's audio
    phone: str         # festival phone, "pau" for silence
    stress: int        # the syllable's stress (0 for pauses)
    word_id: str       # festival's item id of the word ("0" for pauses)
    word: str          # the word's name, lower case ("0" for pauses)


def festival_available(voice: str = VOICE) -> str | None:
    """None if festival and the voice are installed, else what is missing (for skip reasons)."""
    if shutil.which("festival") is None:
        return "festival is not installed (Debian package festival)"
    if not any(Path(root).joinpath(voice).is_dir() for root in (
            "/usr/share/festival/voices/us", "/usr/share/festival/voices/english")):
        return f"festival voice {voice} is not installed (Debian package festvox-us-slt-hts)"
    return None


def _parse_segments(path: Path) -> list[Segment]:
    out = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        parts = line.split()
        if len(parts) != 5:
            raise TeacherError(f"{path}:{n}: bad segment line {line!r}")
        out.append(Segment(float(parts[0]), parts[1], int(parts[2]), parts[3], parts[4].lower()))
    return out


def _read_wave(path: Path) -> np.ndarray:
    with wave.open(str(path), "rb") as w:
        if w.getsampwidth() != 2 or w.getnchannels() != 1:
            raise TeacherError(f"{path}: expected 16-bit mono audio from festival")
        rate = w.getframerate()
        pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
    audio = pcm.astype(np.float32) / 32768.0
    if rate != SAMPLE_RATE_HZ:
        audio = soxr.resample(audio, rate, SAMPLE_RATE_HZ).astype(np.float32)
    return audio


class FestivalTeacher:
    """A running festival process with the teacher voice loaded. Use as a context manager, or
    call ``close()``. Not thread-safe: one per worker process."""

    def __init__(self, voice: str = VOICE, timeout_s: float = 60.0,
                 work_dir: Path | None = None) -> None:
        missing = festival_available(voice)
        if missing is not None:
            raise TeacherError(missing)
        self._voice = voice
        self._timeout_s = timeout_s
        if work_dir is not None:
            work_dir.mkdir(parents=True, exist_ok=True)
        self._dir = Path(tempfile.mkdtemp(prefix="parley-festival-", dir=work_dir))
        self._count = 0
        self._proc: subprocess.Popen[str] | None = None
        self._start()

    def _start(self) -> None:
        self._proc = subprocess.Popen(["festival", "--pipe"], stdin=subprocess.PIPE,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                      text=True)
        self._send(_SETUP.format(voice=self._voice))

    def _send(self, command: str) -> None:
        assert self._proc is not None and self._proc.stdin is not None
        try:
            self._proc.stdin.write(command + "\n")
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise TeacherError(f"festival exited (code {self._proc.poll()})") from exc

    def synthesize(self, words: list[str]) -> tuple[np.ndarray, list[Segment]]:
        """Says ``words`` (lowercase words and the punctuation ",", ".", "?"), one sentence.
        Returns 16 kHz float32 audio and festival's segments (times in seconds)."""
        text = " ".join(words).replace(" ,", ",").replace(" .", ".").replace(" ?", "?")
        if not text.strip(" ,.?") or '"' in text or "\\" in text:
            raise TeacherError(f"cannot send {text[:60]!r} to festival")
        self._count += 1
        stem = self._dir / f"u{self._count}"
        wav, segs, done = (stem.with_suffix(s) for s in (".wav", ".segs", ".done"))
        self._send(f'(teacher_say "{text}" "{wav}" "{segs}" "{done}")')
        deadline = time.monotonic() + self._timeout_s
        while not done.exists():
            if self._proc is None or self._proc.poll() is not None:
                self._restart()
                raise TeacherError(f"festival died while saying {text[:60]!r}")
            if time.monotonic() > deadline:
                self._restart()
                raise TeacherError(f"festival took over {self._timeout_s} s on {text[:60]!r}")
            time.sleep(0.005)
        try:
            return _read_wave(wav), _parse_segments(segs)
        finally:
            for p in (wav, segs, done):
                p.unlink(missing_ok=True)

    def _restart(self) -> None:
        self._stop()
        self._start()

    def _stop(self) -> None:
        if self._proc is not None:
            if self._proc.stdin is not None:
                try:
                    self._proc.stdin.close()
                except OSError:
                    pass
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None

    def close(self) -> None:
        self._stop()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> "FestivalTeacher":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
