"""Streaming espeak-ng synthesis through its C library (ctypes), with word start times.

    engine = EspeakEngine(voice="en-us", rate_wpm=175, sample_rate_hz=8000)
    completed = engine.synthesize_stream("Hello there.", on_chunk)  # on_chunk(SynthChunk) -> abort
    whole = engine.synthesize("Hello there.")                         # one SynthChunk

The library runs in ``AUDIO_OUTPUT_SYNCHRONOUS`` mode: ``espeak_Synth`` returns only when the text
is spoken, calling our synth callback every ``NATIVE_BUFFER_MS`` (~50 ms) of audio (at its native
rate, 22050 Hz) with the samples and the events that fall in them. Returning 1 from the callback
aborts the utterance at once, which is how barge-in stops synthesis mid-sentence.

Thread safety: libespeak-ng keeps all its state in process globals (one voice, one set of
parameters, one callback) and is not re-entrant. Every engine in the process therefore shares one
``_Library`` whose lock is held for a whole utterance, voice and parameters are set again under
that lock before each utterance, and two utterances never run at the same time. Call
``synthesize_stream`` from a worker thread, never from an event loop: it blocks for the whole
utterance (about 1/500 of its duration on one core).

Word times come from ``espeakEVENT_WORD``: ``audio_position`` is the word's start in ms from the
start of the utterance, ``text_position``/``length`` locate it in the text (1-based, characters).
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
import os
import threading
from collections.abc import AsyncGenerator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import soxr

from pipeline.engines.speaking import SpeechChunk
from pipeline.errors import AudioFormatError, ConfigError, EngineUnavailableError, PipelineError

logger = logging.getLogger(__name__)

# speak_lib.h constants.
_AUDIO_OUTPUT_SYNCHRONOUS = 2
_INITIALIZE_PHONEME_EVENTS = 0x0001
_INITIALIZE_DONT_EXIT = 0x8000  # report a missing data dir instead of calling exit()
_CHARS_UTF8 = 1
_ENDPAUSE = 0x1000
_POS_CHARACTER = 1
_EE_OK = 0
_EVENT_LIST_TERMINATED = 0
_EVENT_WORD = 1
_PARAM_RATE = 1
_PARAM_VOLUME = 2
_PARAM_PITCH = 3

NATIVE_BUFFER_MS = 50
"""Audio per synth callback: the streaming granularity. libespeak-ng 1.51 floors this at about
49 ms (1081 samples at 22050 Hz, measured) whatever smaller value is asked; consumers re-chunk."""

SUPPORTED_OUTPUT_RATES_HZ = (8000, 16000, 22050, 24000, 44100, 48000)
RATE_WPM_RANGE = (80, 450)

_KNOWN_LIBRARY_PATHS = (
    "/usr/lib/x86_64-linux-gnu/libespeak-ng.so.1",
    "/usr/lib/aarch64-linux-gnu/libespeak-ng.so.1",
    "/usr/lib/libespeak-ng.so.1",
    "/usr/local/lib/libespeak-ng.so.1",
)
_INSTALL_HINT = "install it with `apt-get install espeak-ng` (Debian/Ubuntu)"


class _Event(ctypes.Structure):
    class _Id(ctypes.Union):
        _fields_ = [
            ("number", ctypes.c_int),
            ("name", ctypes.c_char_p),
            ("string", ctypes.c_char * 8),
        ]

    _fields_ = [
        ("type", ctypes.c_int),
        ("unique_identifier", ctypes.c_uint),
        ("text_position", ctypes.c_int),
        ("length", ctypes.c_int),
        ("audio_position", ctypes.c_int),
        ("sample", ctypes.c_int),
        ("user_data", ctypes.c_void_p),
        ("id", _Id),
    ]


_SynthCallback = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.POINTER(_Event)
)


@dataclass(frozen=True)
class SynthChunk:
    """A piece of synthesized speech as it is produced.

    pcm: int16 mono samples at ``sample_rate_hz``.
    words: ``(word, start_s)`` for the words that start in or before this chunk and were not
        reported yet; ``start_s`` counts from the start of the utterance.
    """

    pcm: np.ndarray
    sample_rate_hz: int
    words: tuple[tuple[str, float], ...] = ()

    @property
    def duration_s(self) -> float:
        return len(self.pcm) / self.sample_rate_hz


OnChunk = Callable[[SynthChunk], bool]
"""Receives each chunk; returning True aborts the utterance (no more chunks follow)."""


@dataclass
class _Utterance:
    """State of the utterance in progress, read by the C callback (under the library lock)."""

    text: str
    on_chunk: OnChunk
    cancel: threading.Event | None
    resampler: soxr.ResampleStream | None
    out_rate_hz: int
    pending_words: list[tuple[str, float]] = field(default_factory=list)
    words_end: int = 0            # where in the text the last reported word ends
    aborted: bool = False
    error: BaseException | None = None


class _Library:
    """The process-wide libespeak-ng: loaded and initialized once, used under ``lock``."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._lib = _load_library()
        self._declare_prototypes()
        data_path = _loader_data_path()
        rate = self._lib.espeak_Initialize(
            _AUDIO_OUTPUT_SYNCHRONOUS,
            NATIVE_BUFFER_MS,
            data_path.encode() if data_path else None,
            _INITIALIZE_PHONEME_EVENTS | _INITIALIZE_DONT_EXIT,
        )
        if rate <= 0:
            raise EngineUnavailableError(
                f"espeak_Initialize failed ({rate}): espeak-ng data not found; {_INSTALL_HINT}"
            )
        self.native_rate_hz: int = rate
        path_out = ctypes.c_char_p()
        version = self._lib.espeak_Info(ctypes.byref(path_out))
        self.version = (version or b"?").decode()
        self.data_path = Path((path_out.value or b"").decode())
        self._current: _Utterance | None = None
        # Kept referenced for the life of the process: the library holds the pointer.
        self._callback = _SynthCallback(self._on_synth)
        self._lib.espeak_SetSynthCallback(self._callback)
        logger.debug("espeak-ng %s initialized at %d Hz", self.version, rate)

    def _declare_prototypes(self) -> None:
        lib = self._lib
        lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        lib.espeak_Initialize.restype = ctypes.c_int
        lib.espeak_Info.argtypes = [ctypes.POINTER(ctypes.c_char_p)]
        lib.espeak_Info.restype = ctypes.c_char_p
        lib.espeak_SetSynthCallback.argtypes = [_SynthCallback]
        lib.espeak_SetSynthCallback.restype = None
        lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
        lib.espeak_SetVoiceByName.restype = ctypes.c_int
        lib.espeak_SetParameter.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
        lib.espeak_SetParameter.restype = ctypes.c_int
        lib.espeak_Synth.argtypes = [
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_uint,
            ctypes.c_int,
            ctypes.c_uint,
            ctypes.c_uint,
            ctypes.POINTER(ctypes.c_uint),
            ctypes.c_void_p,
        ]
        lib.espeak_Synth.restype = ctypes.c_int

    def voice_exists(self, voice: str) -> bool:
        """Whether ``voice`` (``lang[+variant]``) names a voice and a variant file that exist.

        espeak-ng silently falls back to its default for an unknown variant, so the variant's
        file (case-sensitive) is checked here.
        """
        name, _, variant = voice.partition("+")
        with self.lock:
            if self._lib.espeak_SetVoiceByName(name.encode()) != _EE_OK:
                return False
        return not variant or (self.data_path / "voices" / "!v" / variant).is_file()

    def speak(
        self, utt: _Utterance, voice: str, rate_wpm: int, pitch: int, end_pause: bool
    ) -> None:
        """Run one utterance to its end or abort, calling back from this thread."""
        data = utt.text.encode("utf-8") + b"\0"
        flags = _CHARS_UTF8 | (_ENDPAUSE if end_pause else 0)
        with self.lock:
            if self._lib.espeak_SetVoiceByName(voice.encode()) != _EE_OK:
                raise PipelineError(f"espeak-ng voice {voice!r} not found")
            self._lib.espeak_SetParameter(_PARAM_RATE, rate_wpm, 0)
            self._lib.espeak_SetParameter(_PARAM_PITCH, pitch, 0)
            self._lib.espeak_SetParameter(_PARAM_VOLUME, 100, 0)
            self._current = utt
            try:
                err = self._lib.espeak_Synth(
                    data, len(data), 0, _POS_CHARACTER, 0, flags, None, None
                )
            finally:
                self._current = None
        if utt.error is not None:
            raise utt.error
        if err != _EE_OK and not utt.aborted:
            raise PipelineError(f"espeak_Synth failed with code {err}")

    def _on_synth(self, wav, num_samples: int, events) -> int:
        """The C synth callback: collect words, hand audio on; 1 aborts the utterance."""
        utt = self._current
        if utt is None:
            return 1
        try:
            i = 0
            while events[i].type != _EVENT_LIST_TERMINATED:
                ev = events[i]
                if ev.type == _EVENT_WORD:
                    start = max(ev.text_position - 1, 0)
                    word = utt.text[start : start + ev.length].strip()
                    # espeak-ng now and then reports an empty word at a pause, and reads a
                    # number in pieces, a word event for each inside the one written word
                    if word and start >= utt.words_end:
                        utt.pending_words.append((word, ev.audio_position / 1000.0))
                        utt.words_end = start + ev.length
                i += 1
            if utt.cancel is not None and utt.cancel.is_set():
                utt.aborted = True
                return 1
            if num_samples > 0 and wav:
                # a copy through bytes: np.ctypeslib.as_array would make a ctypes array type per
                # chunk length, and ctypes caches every such type for the life of the process
                pcm = np.frombuffer(ctypes.string_at(wav, 2 * num_samples), dtype=np.int16).copy()
                if utt.resampler is not None:
                    pcm = utt.resampler.resample_chunk(pcm)
                if len(pcm) and _deliver(utt, pcm):
                    utt.aborted = True
                    return 1
            return 0
        except BaseException as exc:  # noqa: BLE001 - nothing may unwind through C; re-raised later
            utt.error = exc
            utt.aborted = True
            return 1


def _deliver(utt: _Utterance, pcm: np.ndarray) -> bool:
    words, utt.pending_words = tuple(utt.pending_words), []
    return bool(utt.on_chunk(SynthChunk(pcm.astype(np.int16, copy=False), utt.out_rate_hz, words)))


def _loader_data_path() -> str | None:
    """espeak-ng data shipped by the ``espeakng-loader`` wheel, if that is where the library is."""
    try:
        import espeakng_loader
    except ImportError:
        return None
    return str(espeakng_loader.get_data_path())


def _load_library() -> ctypes.CDLL:
    candidates: list[str] = []
    found = ctypes.util.find_library("espeak-ng")
    if found:
        candidates.append(found)
    candidates += [p for p in _KNOWN_LIBRARY_PATHS if os.path.exists(p)]
    try:
        import espeakng_loader

        candidates.append(str(espeakng_loader.get_library_path()))
    except ImportError:
        pass
    errors = []
    for path in candidates:
        try:
            return ctypes.CDLL(path)
        except OSError as exc:
            errors.append(f"{path}: {exc}")
    raise EngineUnavailableError(
        f"libespeak-ng.so.1 not found ({'; '.join(errors) or 'no candidates'}); {_INSTALL_HINT}"
    )


_library: _Library | None = None
_library_lock = threading.Lock()


def _get_library() -> _Library:
    global _library
    with _library_lock:
        if _library is None:
            _library = _Library()
        return _library


class EspeakEngine:
    """espeak-ng voice with fixed voice, rate and pitch, producing audio at ``sample_rate_hz``.

    Raises ``EngineUnavailableError`` if libespeak-ng is missing, ``PipelineError`` for an unknown
    voice, ``AudioFormatError`` for an unsupported output rate.
    """

    def __init__(
        self,
        voice: str = "en-us",
        rate_wpm: int = 175,
        sample_rate_hz: int = 22050,
        pitch: int = 50,
        end_pause: bool = False,
    ) -> None:
        if sample_rate_hz not in SUPPORTED_OUTPUT_RATES_HZ:
            raise AudioFormatError(
                f"sample_rate_hz={sample_rate_hz} not in {SUPPORTED_OUTPUT_RATES_HZ}"
            )
        if not RATE_WPM_RANGE[0] <= rate_wpm <= RATE_WPM_RANGE[1]:
            raise ConfigError(f"rate_wpm={rate_wpm} outside {RATE_WPM_RANGE}")
        if not 0 <= pitch <= 100:
            raise ConfigError(f"pitch={pitch} outside 0..100")
        self._lib = _get_library()
        if not self._lib.voice_exists(voice):
            raise PipelineError(
                f"espeak-ng voice {voice!r} not found under {self._lib.data_path} "
                "(variant names are case-sensitive file names in voices/!v)"
            )
        self.voice = voice
        self.rate_wpm = rate_wpm
        self.pitch = pitch
        self.end_pause = end_pause
        self.sample_rate_hz = sample_rate_hz

    @property
    def native_rate_hz(self) -> int:
        return self._lib.native_rate_hz

    def synthesize_stream(
        self, text: str, on_chunk: OnChunk, cancel: threading.Event | None = None
    ) -> bool:
        """Speak ``text``, calling ``on_chunk`` with each piece of audio as it is produced.

        Blocks until the utterance ends. It is aborted (no more chunks) when ``on_chunk`` returns
        True or when ``cancel`` is set (checked before each chunk, i.e. every ~20 ms of audio).
        Returns True if the whole text was spoken, False if aborted. Exceptions raised by
        ``on_chunk`` abort the utterance and are re-raised here.
        """
        if not text.strip():
            return True
        native = self._lib.native_rate_hz
        resampler = (
            soxr.ResampleStream(native, self.sample_rate_hz, 1, dtype="int16", quality="HQ")
            if self.sample_rate_hz != native
            else None
        )
        utt = _Utterance(text, on_chunk, cancel, resampler, self.sample_rate_hz)
        self._lib.speak(utt, self.voice, self.rate_wpm, self.pitch, self.end_pause)
        if utt.aborted:
            return False
        tail = (
            resampler.resample_chunk(np.zeros(0, np.int16), last=True)
            if resampler is not None
            else np.zeros(0, np.int16)
        )
        if len(tail) or utt.pending_words:
            if _deliver(utt, tail):
                return False
        return True

    def synthesize(self, text: str) -> SynthChunk:
        """Speak ``text`` whole: all its audio and word times in one chunk."""
        pieces: list[np.ndarray] = []
        words: list[tuple[str, float]] = []

        def collect(chunk: SynthChunk) -> bool:
            pieces.append(chunk.pcm)
            words.extend(chunk.words)
            return False

        self.synthesize_stream(text, collect)
        pcm = np.concatenate(pieces) if pieces else np.zeros(0, np.int16)
        return SynthChunk(pcm, self.sample_rate_hz, tuple(words))


# -- espeak-ng behind the speaking contract (pipeline.engines.speaking) ---------------------------
_SYNTH_THREAD: ThreadPoolExecutor | None = None
_SYNTH_THREAD_LOCK = threading.Lock()
_DONE = object()


def _synth_thread() -> ThreadPoolExecutor:
    """The process's one espeak-ng thread: the library speaks one utterance at a time anyway
    (its lock), so every call's utterances queue here (each ~1/500 of its duration)."""
    global _SYNTH_THREAD
    with _SYNTH_THREAD_LOCK:
        if _SYNTH_THREAD is None:
            _SYNTH_THREAD = ThreadPoolExecutor(max_workers=1, thread_name_prefix="espeak-tts")
        return _SYNTH_THREAD


class EspeakVoice:
    """espeak-ng as a ``speaking.Voice``: ``open(rate)`` -> an utterance whose ``speak`` yields
    ``chunk_ms`` of audio per chunk (the last shorter) as the library makes it (~50 ms at a
    time), each chunk carrying the words that start in it, as written in the text."""

    voice_name = "espeak-ng"
    errors: tuple[type[Exception], ...] = (PipelineError,)
    written_words = True

    def __init__(self, voice: str = "en-us", rate_wpm: int = 175, pitch: int = 50,
                 chunk_ms: int = 20) -> None:
        if chunk_ms <= 0:
            raise ConfigError(f"chunk_ms must be positive, got {chunk_ms}")
        self.voice, self.rate_wpm, self.pitch, self.chunk_ms = voice, rate_wpm, pitch, chunk_ms
        self._engines: dict[int, EspeakEngine] = {}

    def engine(self, sample_rate_hz: int) -> EspeakEngine:
        """The engine for this output rate (checks voice, rate and pitch on first use)."""
        if sample_rate_hz not in self._engines:
            self._engines[sample_rate_hz] = EspeakEngine(
                voice=self.voice, rate_wpm=self.rate_wpm, pitch=self.pitch,
                sample_rate_hz=sample_rate_hz)
        return self._engines[sample_rate_hz]

    def open(self, sample_rate_hz: int, *, seed: int = 0) -> EspeakUtterance:
        return EspeakUtterance(self.engine(sample_rate_hz), self.chunk_ms)


class EspeakUtterance:
    def __init__(self, engine: EspeakEngine, chunk_ms: int) -> None:
        self._engine = engine
        self._chunk_samples = engine.sample_rate_hz * chunk_ms // 1000
        self._cancel = threading.Event()

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def cancel(self) -> None:
        """The library stops at its next callback (within ~50 ms of audio, microseconds)."""
        self._cancel.set()

    async def speak(self, text: str) -> AsyncGenerator[SpeechChunk, None]:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[object] = asyncio.Queue()
        cancel, engine = self._cancel, self._engine

        def on_chunk(chunk: SynthChunk) -> bool:  # on the synthesis thread
            loop.call_soon_threadsafe(queue.put_nowait, chunk)
            return cancel.is_set()

        def synthesize() -> bool:
            try:
                return cancel.is_set() or engine.synthesize_stream(text, on_chunk, cancel)
            finally:
                loop.call_soon_threadsafe(queue.put_nowait, _DONE)

        rate, size = engine.sample_rate_hz, self._chunk_samples
        pending = np.zeros(0, np.int16)
        words: tuple[tuple[str, float], ...] = ()
        made = 0
        done = loop.run_in_executor(_synth_thread(), synthesize)
        try:
            while (item := await queue.get()) is not _DONE:
                assert isinstance(item, SynthChunk)
                words += item.words
                pending = np.concatenate([pending, item.pcm]) if pending.size else item.pcm
                while len(pending) >= size:
                    yield SpeechChunk(pending[:size].copy(), made / rate, words)
                    pending, words, made = pending[size:], (), made + size
            if len(pending) or words:
                yield SpeechChunk(pending.copy(), made / rate, words)
            await done                       # the library's error, if it failed
        finally:
            cancel.set()                     # interrupted or closed early: no more chunks
