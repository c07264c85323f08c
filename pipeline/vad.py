"""Voice activity analyzers for pipecat: WebRTC's GMM VAD, and a factory choosing it or Silero.
None hands frames to a thread per call (pipecat's default).

    analyzer = make_vad_analyzer("silero", sample_rate_hz=8000, stop_secs=0.2)
    vad = VADProcessor(vad_analyzer=analyzer)      # or LLMUserAggregatorParams(vad_analyzer=...)

Silero, by default (``BatchedSileroVADAnalyzer``), scores the windows of every call of the process
that arrive in the same event-loop iteration in one ONNX run (``pipeline.vad_batch``), each call
keeping its own recurrent state; ``silero_dispatch="inline"`` (``InlineSileroVADAnalyzer``) runs
the model once per call per window on the event loop, as parley did before 2026-12-07.
webrtcvad (``WebRTCVADAnalyzer``) analyzes on the event loop (``InlineAnalysis``).
Every analyzer here raises ``AudioFormatError`` on a frame of an odd byte count (pipecat's buffer
would take it and shift every later sample by a byte).

``WebRTCVADAnalyzer`` plugs ``webrtcvad`` (the ``webrtcvad-wheels`` package) into pipecat's
``VADAnalyzer``: the base class buffers audio into frames of ``num_frames_required()`` samples,
asks ``voice_confidence`` for each, gates it with ``VADParams.confidence`` and the smoothed
loudness ``VADParams.min_volume``, and turns runs of speech/non-speech frames longer than
``start_secs``/``stop_secs`` into STARTING/SPEAKING/STOPPING/QUIET states. webrtcvad answers yes
or no, so its confidence is 1.0 or 0.0 and any ``confidence`` threshold in (0, 1] acts the same.

webrtcvad costs microseconds per frame but calls steady noise speech (FACTS.md: false positives
near 100 % in mode 3 on noisy phone audio); ``benchmarks/bench_vad.py`` measures false starts on
noise for both analyzers, and ``DEFAULT_VAD_KIND`` follows its result.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import onnxruntime
import webrtcvad
from pipecat.audio.vad import silero
from pipecat.audio.vad.silero import SileroVADAnalyzer
from pipecat.audio.vad.vad_analyzer import VADAnalyzer, VADParams, VADState
from pipecat.frames.frames import (
    Frame,
    InputAudioRawFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.processors.frame_processor import FrameDirection
from pipecat.processors.audio.vad_processor import VADProcessor

from pipeline.errors import AudioFormatError, ConfigError
from pipeline.frames import SpeechPauseFrame
from pipeline.vad_batch import SILERO_CONTEXT, BatchRunsOn, SileroBatcher, check_batch_options

logger = logging.getLogger(__name__)

WEBRTC_RATES_HZ = (8000, 16000, 32000, 48000)
WEBRTC_FRAME_MS = (10, 20, 30)
SILERO_RATES_HZ = (8000, 16000)
_SILERO_MODEL_SWAP = threading.Lock()
ONSET_CONFIDENCE = 0.5   # a window whose confidence is this share of the threshold is still speech, looking back
ONSET_MAX_S = 1.0        # how much audio SpeechEdges keeps
EDGE_SEARCH_S = 0.3      # how far the loudness moves an edge the model or pipecat placed
LEVEL_SPLIT = 0.25       # an edge is where the loudness crosses this share from noise to speech level,
LEVEL_FLOOR_DBFS = -50.0  # or this level, if louder (a tail fading under it on a silent line is not speech)

VADKind = Literal["webrtc", "silero"]
StopTimer = Literal["sound", "model"]
SileroDispatch = Literal["loop", "thread", "inline"]
DEFAULT_SILERO_DISPATCH: SileroDispatch = "loop"
"""Chosen by ``benchmarks/bench_vad_batch.py`` (2026-12-07, a480025): batching on the loop never
cost more CPU than one run per call, and 2.4-2.5x less at 16-32 calls whose frames arrive together;
on the Silero thread it took more off the loop but cost up to 1.6x the CPU where batches stayed
small (calls at random phases on an idle loop)."""
DEFAULT_VAD_KIND: VADKind = "silero"
"""Chosen by ``benchmarks/bench_vad.py`` (seed 0, 8 kHz mu-law): webrtcvad mode 3 made 4.2 false
starts a minute and spent 22 % of noise-only time "speaking" (it fires at every onset of noise
after quiet, and stays on babble), Silero 2.0 and 8 %, both detecting every utterance at 10-20 dB
SNR; the whole analyzer cost 2.5 vs 6.5 ms CPU per audio second."""


class SpeechEdges:
    """Where the caller's speech began and ended, to a few milliseconds, from the last second of
    windows an analyzer scored (each window's confidence, and its loudness in quarters).

    pipecat's state machine calls a window speech only when its confidence passes ``confidence``
    *and* the smoothed loudness passes ``min_volume``; the smoothing lags a soft onset ("hello"
    begins quietly) and trails the last word, so "``start_secs`` before the start was called" put
    a turn's start up to a third of a second late, and "``stop_secs`` before the stop" its end
    60-100 ms late. Here a start goes back over the windows the model itself heard as speech
    (confidence at least ``ONSET_CONFIDENCE`` of the threshold), then to the first quarter louder
    than ``LEVEL_SPLIT`` of the way from the second's noise floor to its speech level (and than
    ``LEVEL_FLOOR_DBFS``), at most ``EDGE_SEARCH_S`` either way; an end, from the stop's
    ``stop_secs`` back, or on, to the last quarter that loud."""

    QUARTERS = 4

    def __init__(self, window_samples: int, sample_rate_hz: int, confidence: float) -> None:
        self._quarter_s = window_samples / self.QUARTERS / sample_rate_hz
        self._floor = ONSET_CONFIDENCE * confidence
        windows = max(1, int(ONSET_MAX_S * sample_rate_hz / window_samples))
        self._confidences: deque[float] = deque(maxlen=windows)
        self._powers: deque[float] = deque(maxlen=windows * self.QUARTERS)  # mean square a quarter

    def add(self, window: bytes, confidence: float) -> None:
        """Each window scored (on the event loop, every call): its confidence and its quarters'
        power; levels in dB are worked out only when an edge is asked for."""
        self._confidences.append(confidence)
        x = np.frombuffer(window, np.int16).astype(np.float32)
        n = x.size // self.QUARTERS
        if n:
            self._powers.extend(np.mean(x[: n * self.QUARTERS].reshape(self.QUARTERS, n) ** 2, axis=1))

    def _levels(self) -> np.ndarray:
        """The quarters' loudness, dBFS (0: full scale)."""
        return 10.0 * np.log10(np.fromiter(self._powers, np.float64, len(self._powers)) + 1.0) - 90.3

    @staticmethod
    def _threshold(levels: np.ndarray) -> float:
        noise, speech = np.percentile(levels, 10), np.percentile(levels, 90)
        return max(float(noise + LEVEL_SPLIT * (speech - noise)), LEVEL_FLOOR_DBFS)

    def onset_s(self, waiting_s: float) -> float | None:
        """Seconds of audio since the speech heard now began (None before any window);
        ``waiting_s``: audio the analyzer holds that no window has scored yet."""
        if not self._confidences:
            return None
        windows = 0
        for confidence in reversed(self._confidences):
            if confidence < self._floor:
                break
            windows += 1
        levels = self._levels()
        at = len(levels) - windows * self.QUARTERS   # the first quarter of the model's run
        if len(levels):
            loud, reach = self._threshold(levels), round(EDGE_SEARCH_S / self._quarter_s)
            back = at
            while back > max(0, at - reach) and levels[back - 1] >= loud:
                back -= 1
            if back == at:   # the model's first window may begin in silence
                while at < min(len(levels) - 1, at + reach) and levels[at] < loud:
                    at += 1
            else:
                at = back
        return (len(levels) - at) * self._quarter_s + waiting_s

    def quiet_s(self) -> float | None:
        """Seconds of the scored audio since its last quarter as loud as an edge (the whole kept
        second when none is; None before any window)."""
        levels = self._levels()
        if not len(levels):
            return None
        loud = np.flatnonzero(levels >= self._threshold(levels))
        last = int(loud[-1]) + 1 if loud.size else 0
        return (len(levels) - last) * self._quarter_s

    def offset_s(self, stop_secs: float, waiting_s: float) -> float | None:
        """Seconds of audio since the speech ended, for a stop called ``stop_secs`` after the
        state machine's last speech window (None before any window)."""
        levels = self._levels()
        if not len(levels):
            return None
        end = max(0, len(levels) - round(stop_secs / self._quarter_s))   # the quarter after pipecat's end
        loud, reach = self._threshold(levels), round(EDGE_SEARCH_S / self._quarter_s)
        last = end
        if last > 0 and levels[last - 1] >= loud:   # the smoothed loudness fell before the sound did
            while last < min(len(levels), end + reach) and levels[last] >= loud:
                last += 1
        else:
            while last > max(0, end - reach) and levels[last - 1] < loud:
                last -= 1
            if last == max(0, end - reach):   # nothing loud near: keep pipecat's
                last = end
        return (len(levels) - last) * self._quarter_s + waiting_s


class InlineAnalysis:
    """Mixin for a ``VADAnalyzer``: analyze on the event loop instead of handing every frame to a
    thread of the analyzer's own (pipecat's default: one thread per call and two thread switches
    per 20 ms frame). webrtcvad takes microseconds a frame and Silero ~0.1-0.3 ms, less than the
    hand-off itself once many calls share the process's GIL.

    Each scored window also goes to :class:`SpeechEdges`, and the audio is timed on the caller's
    clock: its sample count from the first frame, anchored on the least late frame (as the call's
    recording is), so a frame read late by a busy loop does not move where speech began or ended.
    :class:`OnsetVADProcessor` asks both.

    The stop timer counts the windows the state machine hears as no speech (``stop_timer="model"``,
    pipecat's count, the default), which begins when the model's confidence and pipecat's smoothed
    volume fall, after the sound does: at ``stop_secs`` 0.2 the stop came 244 / 360 / 428 ms
    (p50 / p95 / p99) after recorded people's sound ended, 196 / 276 / 355 counted from the sound
    (``benchmarks/bench_vad_stop.py``, RESULTS). ``stop_timer="sound"`` counts from the sound's end
    instead: when the state machine first hears no speech after speech, the windows already quiet
    since the last loud quarter (:meth:`SpeechEdges.quiet_s`) count toward ``stop_secs``, all but
    the last window, so the stop still comes on a later frame than the pause. On recorded people
    it trades a shorter tail for more stops inside sentences (``benchmarks/bench_vad_stop.py``),
    so it is not the default."""

    stop_timer: StopTimer = "model"
    _edges: SpeechEdges | None = None
    _pauses: list[bool] | None = None   # SPEAKING -> STOPPING (True) and back (False) since asked
    _paused = False                 # a True told, and no SPEAKING since
    _received = 0                   # samples handed to analyze_audio
    _fed = 0                        # samples handed to pipecat's state machine
    _t0: float | None = None        # monotonic time of the caller's sample 0
    _vad_stopping_count: int        # pipecat's state machine's

    async def analyze_audio(self, buffer: bytes) -> VADState:
        self._arrived(buffer)
        return self._run_analyzer(buffer)

    def _arrived(self, buffer: bytes) -> None:
        _check_even(buffer)
        self._received += len(buffer) // 2
        t0 = time.monotonic() - self._received / self.sample_rate  # type: ignore[attr-defined]
        self._t0 = t0 if self._t0 is None else min(self._t0, t0)

    def _run_analyzer(self, buffer: bytes) -> VADState:
        self._fed += len(buffer) // 2
        before = self._vad_state  # type: ignore[attr-defined]   # pipecat's state machine's
        state: VADState = super()._run_analyzer(buffer)  # type: ignore[misc]
        if before == VADState.SPEAKING and state == VADState.STOPPING:
            self._pauses = [*(self._pauses or ()), True]
            self._paused = True
            if self.stop_timer == "sound":
                self._credit_quiet()
        elif self._paused and state == VADState.SPEAKING:
            self._pauses = [*(self._pauses or ()), False]
            self._paused = False
        return state

    def _credit_quiet(self) -> None:
        """Count the whole windows quiet since the sound's end toward the stop, leaving one to go."""
        quiet = self._edges.quiet_s() if self._edges is not None else None
        if quiet is None:
            return
        window_s = self._vad_frames / self.sample_rate  # type: ignore[attr-defined]
        windows = int(quiet / window_s + 1e-9)
        stop = self._vad_stop_frames  # type: ignore[attr-defined]
        self._vad_stopping_count = max(self._vad_stopping_count, min(stop - 1, windows))

    def take_pauses(self) -> list[bool]:
        """The stop timer's starts (True: a window heard no speech after speech) and their ends
        in speech (False: speech again, within the timer or after the stop it ran out to), since
        the last call, in order."""
        pauses, self._pauses = self._pauses or [], None
        return pauses

    def voice_confidence(self, buffer: bytes) -> float:
        """The window's confidence (``_window_confidence``), kept with its loudness."""
        confidence = self._window_confidence(buffer)
        if self._edges is None:
            self._edges = SpeechEdges(self.num_frames_required(), self.sample_rate,  # type: ignore[attr-defined]
                                      self._params.confidence)  # type: ignore[attr-defined]
        self._edges.add(buffer, confidence)
        return confidence

    def _window_confidence(self, buffer: bytes) -> float:
        return super().voice_confidence(buffer)  # type: ignore[misc]

    def speech_began_at_s(self) -> float | None:
        """When (monotonic, on the caller's clock) the speech heard now began."""
        onset = self._edges.onset_s(self._waiting_s()) if self._edges is not None else None
        return None if onset is None else self._clock_s() - onset

    def speech_ended_at_s(self) -> float | None:
        """When (monotonic, on the caller's clock) the speech ended, asked as the stop is called."""
        if self._edges is None:
            return None
        offset = self._edges.offset_s(self._params.stop_secs, self._waiting_s())  # type: ignore[attr-defined]
        return None if offset is None else self._clock_s() - offset

    def _clock_s(self) -> float:
        """The caller's clock at the end of the audio the state machine has been handed."""
        assert self._t0 is not None   # set by the first analyze_audio, before any window
        return self._t0 + self._fed / self.sample_rate  # type: ignore[attr-defined]

    def _waiting_s(self) -> float:
        return len(self._vad_buffer) / 2 / self.sample_rate  # type: ignore[attr-defined]


@dataclass
class SpeechStartedFrame(VADUserStartedSpeakingFrame):
    """pipecat's VAD start, and when the speech began (``began_at_s``, monotonic on the caller's
    clock; None: unknown, take the frame's arrival less ``start_secs``)."""

    began_at_s: float | None = None


@dataclass
class SpeechStoppedFrame(VADUserStoppedSpeakingFrame):
    """pipecat's VAD stop, when it was called (``called_at_s``, monotonic: observers may see the
    frame later) and when the speech ended (``ended_at_s``, on the caller's clock; None: unknown,
    take the stop less ``stop_secs``)."""

    ended_at_s: float | None = None
    called_at_s: float = field(default_factory=time.monotonic)


class OnsetVADProcessor(VADProcessor):
    """pipecat's ``VADProcessor`` whose start and stop frames also say where the speech began and
    ended (:class:`SpeechStartedFrame`, :class:`SpeechStoppedFrame`, from :class:`SpeechEdges`),
    and which pushes a :class:`SpeechPauseFrame` downstream, after the audio frame, when the stop
    timer starts or is cancelled. ``start_secs`` and ``stop_secs`` stay pipecat's: the turn
    strategies time their waits on them."""

    def __init__(self, *, vad_analyzer: VADAnalyzer, **kwargs) -> None:
        super().__init__(vad_analyzer=vad_analyzer, **kwargs)
        self._analyzer = vad_analyzer

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        analyzer = self._analyzer
        if isinstance(frame, InputAudioRawFrame) and isinstance(analyzer, InlineAnalysis):
            for paused in analyzer.take_pauses():
                await self.push_frame(SpeechPauseFrame(paused=paused))

    async def broadcast_frame(self, frame_cls, **kwargs):
        analyzer = self._analyzer
        if isinstance(analyzer, InlineAnalysis):
            if frame_cls is VADUserStartedSpeakingFrame:
                frame_cls, kwargs = SpeechStartedFrame, {**kwargs, "began_at_s": analyzer.speech_began_at_s()}
            elif frame_cls is VADUserStoppedSpeakingFrame:
                frame_cls, kwargs = SpeechStoppedFrame, {**kwargs, "ended_at_s": analyzer.speech_ended_at_s()}
        await super().broadcast_frame(frame_cls, **kwargs)


class _SharedSessionModel(silero.SileroOnnxModel):
    """pipecat's Silero model over the process's one ONNX session: the recurrent state and
    context stay per model (per call); ``InferenceSession.run`` keeps nothing between calls.

    It is also a ``vad_batch.SileroStream``: ``prepare``/``commit`` do the bookkeeping of pipecat's
    ``__call__`` (reset on a new rate, the context in front, the tail kept) around a batched run,
    which ``__call__`` itself (the batch-1 reference path) does around its own."""

    generation = 0

    _session: onnxruntime.InferenceSession | None = None
    _lock = threading.Lock()

    def __init__(self, path: str, force_onnx_cpu: bool = True) -> None:
        with _SharedSessionModel._lock:
            if _SharedSessionModel._session is None:
                super().__init__(path, force_onnx_cpu=force_onnx_cpu)  # builds one, once
                _SharedSessionModel._session = self.session
                return
        self.session = _SharedSessionModel._session
        self.reset_states()
        self.sample_rates = [8000, 16000]

    def reset_states(self, batch_size: int = 1) -> None:
        super().reset_states(batch_size)
        self.generation += 1

    def prepare(self, window: np.ndarray, sample_rate_hz: int) -> tuple[np.ndarray, np.ndarray]:
        if self._last_batch_size != 1 or self._last_sr != sample_rate_hz:
            self.reset_states(1)
        context = self._context[0] if self._context.shape[1] else np.zeros(SILERO_CONTEXT[sample_rate_hz], np.float32)
        return np.concatenate((context, window)), self._state

    def commit(self, row: np.ndarray, state: np.ndarray, sample_rate_hz: int) -> None:
        self._context = row[None, -SILERO_CONTEXT[sample_rate_hz] :]
        self._state = state
        self._last_sr = sample_rate_hz
        self._last_batch_size = 1


class InlineSileroVADAnalyzer(InlineAnalysis, SileroVADAnalyzer):
    """pipecat's Silero analyzer, analyzing on the event loop (see ``InlineAnalysis``), over one
    ONNX session shared by every call of the process: building a session per call took ~80 ms of
    the event loop at each call's start (every live call's audio waited)."""

    def __init__(self, **kwargs) -> None:
        with _SILERO_MODEL_SWAP:  # pipecat builds ``silero.SileroOnnxModel(path, ...)`` in here
            saved = silero.SileroOnnxModel
            silero.SileroOnnxModel = _SharedSessionModel  # type: ignore[misc]
            try:
                super().__init__(**kwargs)
            finally:
                silero.SileroOnnxModel = saved  # type: ignore[misc]


class BatchedSileroVADAnalyzer(InlineSileroVADAnalyzer):
    """``InlineSileroVADAnalyzer`` whose model runs in the loop's ``SileroBatcher``: every call
    that completes a window in the same loop iteration shares one ONNX run.

    runs_on: ``"loop"`` (the batch runs on the event loop) or ``"thread"`` (on the process's one
    Silero thread, one hand-off per batch).
    gather_ms: how long the first window of a batch waits for others; 0 closes the batch at the
    end of the current loop iteration (no added delay).

    pipecat's state machine (``VADAnalyzer._run_analyzer``) and Silero's model resets
    (``_maybe_reset_model``) run unchanged: ``analyze_audio`` scores each complete window through
    the batcher, then steps the state machine over that window. A frame holding two windows or more
    (longer than 32 ms) is stepped window by window, so pipecat's STARTING -> SPEAKING check runs
    after each window rather than once per frame; with 20 ms frames the states are the same.
    """

    def __init__(
        self,
        *,
        sample_rate: int | None = None,
        params: VADParams | None = None,
        runs_on: BatchRunsOn = "loop",
        gather_ms: float = 0.0,
    ) -> None:
        super().__init__(sample_rate=sample_rate, params=params)
        self._runs_on: BatchRunsOn = runs_on
        self._gather_ms = gather_ms
        self._batcher: SileroBatcher | None = None
        self._scored: float | None = None  # the batch's score of the window being stepped
        assert isinstance(self._model, _SharedSessionModel)
        self._stream: _SharedSessionModel = self._model
        check_batch_options(runs_on, gather_ms)

    async def analyze_audio(self, buffer: bytes) -> VADState:
        self._arrived(buffer)
        batcher = self._batcher
        if batcher is None or batcher.loop is not asyncio.get_running_loop():
            batcher = self._batcher = SileroBatcher.for_running_loop(
                self._model.session, runs_on=self._runs_on, gather_ms=self._gather_ms
            )
        need = self._vad_frames_num_bytes - len(self._vad_buffer)
        while len(buffer) >= need:
            window = np.frombuffer(self._vad_buffer + buffer[:need], np.int16).astype(np.float32) / 32768.0
            self._scored = await batcher.confidence(self._stream, window, self.sample_rate)
            state = self._run_analyzer(buffer[:need])  # exactly one window: voice_confidence takes _scored
            buffer = buffer[need:]
            need = self._vad_frames_num_bytes
            if not buffer:
                return state
        return self._run_analyzer(buffer)

    def _window_confidence(self, buffer: bytes) -> float:
        scored, self._scored = self._scored, None
        if scored is None:  # called directly, outside analyze_audio: pipecat's batch-1 path
            return super()._window_confidence(buffer)
        self._maybe_reset_model(scored)
        return scored


class WebRTCVADAnalyzer(InlineAnalysis, VADAnalyzer):
    """pipecat ``VADAnalyzer`` backed by ``webrtcvad.Vad``.

    mode: aggressiveness 0 (least) .. 3 (most eager to call audio non-speech).
    frame_ms: webrtcvad frame, 10, 20 or 30 ms.
    sample_rate: 8000, 16000, 32000 or 48000 Hz, or None to take the pipeline's input rate.
    """

    def __init__(
        self,
        *,
        sample_rate: int | None = None,
        mode: int = 3,
        frame_ms: int = 20,
        params: VADParams | None = None,
    ) -> None:
        if mode not in (0, 1, 2, 3):
            raise ConfigError(f"webrtcvad mode must be 0..3, got {mode}")
        if frame_ms not in WEBRTC_FRAME_MS:
            raise AudioFormatError(f"webrtcvad frame_ms must be one of {WEBRTC_FRAME_MS}")
        if sample_rate is not None:
            _check_rate(sample_rate, WEBRTC_RATES_HZ, "webrtcvad")
        super().__init__(sample_rate=sample_rate, params=params)
        self._mode = mode
        self._frame_ms = frame_ms
        self._vad = webrtcvad.Vad(mode)

    @property
    def mode(self) -> int:
        return self._mode

    @property
    def frame_ms(self) -> int:
        return self._frame_ms

    def set_sample_rate(self, sample_rate: int) -> None:
        """Take the stream's rate (unless one was fixed at construction); it must suit webrtcvad."""
        _check_rate(self._init_sample_rate or sample_rate, WEBRTC_RATES_HZ, "webrtcvad")
        super().set_sample_rate(sample_rate)

    def num_frames_required(self) -> int:
        """Samples per webrtcvad frame."""
        return self.sample_rate * self._frame_ms // 1000

    def _window_confidence(self, buffer: bytes) -> float:
        """1.0 if webrtcvad calls the frame speech, else 0.0."""
        try:
            return 1.0 if self._vad.is_speech(buffer, self.sample_rate) else 0.0
        except Exception as exc:  # webrtcvad raises a bare Exception on a bad frame
            raise AudioFormatError(
                f"webrtcvad rejected a {len(buffer)}-byte frame at {self.sample_rate} Hz"
            ) from exc


def _check_even(buffer: bytes) -> None:
    if len(buffer) % 2:
        raise AudioFormatError(f"16-bit PCM needs an even byte count, got a {len(buffer)}-byte frame")


def _check_rate(rate: int, allowed: tuple[int, ...], who: str) -> None:
    if rate not in allowed:
        raise AudioFormatError(f"{who} needs a sample rate in {allowed}, got {rate}")


def make_vad_analyzer(
    kind: VADKind = DEFAULT_VAD_KIND,
    sample_rate_hz: int | None = None,
    *,
    stop_secs: float = 0.2,
    start_secs: float = 0.2,
    confidence: float = 0.7,
    min_volume: float = 0.6,
    webrtc_mode: int = 3,
    webrtc_frame_ms: int = 20,
    silero_dispatch: SileroDispatch = DEFAULT_SILERO_DISPATCH,
    silero_gather_ms: float = 0.0,
    params: VADParams | None = None,
    stop_timer: StopTimer = "model",
) -> VADAnalyzer:
    """Build the analyzer for ``kind``.

    ``params``, when given, replaces ``stop_secs``/``start_secs``/``confidence``/``min_volume``.
    ``sample_rate_hz`` None lets the pipeline's input rate decide at start. Silero runs at
    8000 or 16000 Hz; webrtc at 8000/16000/32000/48000 Hz. ``silero_dispatch`` "loop" or "thread"
    batches every call's Silero windows (``BatchedSileroVADAnalyzer``, waiting ``silero_gather_ms``
    for a batch to fill); "inline" scores each call's alone (``InlineSileroVADAnalyzer``).
    ``stop_timer``: "model" counts the stop as pipecat does, "sound" from the sound's end
    (``InlineAnalysis``).
    """
    if stop_timer not in ("sound", "model"):
        raise ConfigError(f"unknown stop timer {stop_timer!r}; expected 'sound' or 'model'")
    analyzer = _make_analyzer(kind, sample_rate_hz, stop_secs=stop_secs, start_secs=start_secs,
                              confidence=confidence, min_volume=min_volume, webrtc_mode=webrtc_mode,
                              webrtc_frame_ms=webrtc_frame_ms, silero_dispatch=silero_dispatch,
                              silero_gather_ms=silero_gather_ms, params=params)
    analyzer.stop_timer = stop_timer
    return analyzer


def _make_analyzer(kind: VADKind, sample_rate_hz: int | None, *, stop_secs: float, start_secs: float,
                   confidence: float, min_volume: float, webrtc_mode: int, webrtc_frame_ms: int,
                   silero_dispatch: SileroDispatch, silero_gather_ms: float,
                   params: VADParams | None) -> WebRTCVADAnalyzer | InlineSileroVADAnalyzer:
    params = params or VADParams(
        confidence=confidence, start_secs=start_secs, stop_secs=stop_secs, min_volume=min_volume
    )
    if kind == "webrtc":
        return WebRTCVADAnalyzer(
            sample_rate=sample_rate_hz, mode=webrtc_mode, frame_ms=webrtc_frame_ms, params=params
        )
    if kind == "silero":
        if sample_rate_hz is not None:
            _check_rate(sample_rate_hz, SILERO_RATES_HZ, "Silero VAD")
        if silero_dispatch == "inline":
            return InlineSileroVADAnalyzer(sample_rate=sample_rate_hz, params=params)
        if silero_dispatch not in ("loop", "thread"):
            raise ConfigError(f"unknown Silero dispatch {silero_dispatch!r}; expected 'loop', 'thread' or 'inline'")
        return BatchedSileroVADAnalyzer(
            sample_rate=sample_rate_hz, params=params, runs_on=silero_dispatch, gather_ms=silero_gather_ms
        )
    raise ConfigError(f"unknown VAD kind {kind!r}; expected 'webrtc' or 'silero'")
