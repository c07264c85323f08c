"""Per-turn latency, measured where the frames really pass.

A turn opens when the user aggregator decides the caller has finished (``UserStoppedSpeakingFrame``)
and closes at the first agent audio written to the transport after it. Every mark is stored as
monotonic seconds and reported as milliseconds after the *end of the caller's speech*: where parley's
VAD heard the speech end, on the caller's clock (``SpeechStoppedFrame.ended_at_s``, ``pipeline.vad``),
else the last VAD stop minus the silence it waited for (``VADUserStoppedSpeakingFrame.stop_secs``).
Since 2026-12-07 the former: the stop's own smoothing put the end 0-100 ms late, so the ``vad_stop``
stage reads up to that much longer than before, and every later stage with it.

    end of speech --(vad_stop)--> VAD stop --(stt_final)--> final transcript
        --(first_text)--> first agent text --(tts_first_audio)--> first TTS audio
        --(transport_first_byte)--> first audio written to the transport

The observer never blocks: it only reads frame types and the clock.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from pipecat.frames.frames import (
    InterruptionFrame,
    LLMTextFrame,
    OutputAudioRawFrame,
    TranscriptionFrame,
    TTSAudioRawFrame,
    UserStoppedSpeakingFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.observers.base_observer import BaseObserver, FramePushed
from pipecat.processors.frame_processor import FrameDirection

from pipeline.frames import AgentEventFrame

log = logging.getLogger(__name__)

MARKS = ("vad_stop", "stt_final", "first_text", "tts_first_audio", "transport_first_byte")


@dataclass
class TurnLatency:
    """One caller turn. ``at`` holds monotonic seconds; ``latency_ms()`` is relative to speech end."""

    turn: int
    end_of_speech_s: float
    user_text: str = ""
    at: dict[str, float] = field(default_factory=dict)
    interrupted: bool = False
    events: list[dict] = field(default_factory=list)  # AgentEventFrames during the turn
    event_at_s: list[float] = field(default_factory=list)  # when each of ``events`` came (monotonic)
    interruption_s: float | None = None  # the caller's first barge-in while this turn was the last
    speech_start_s: float | None = None  # the caller's speech began (the turn's first VAD start, less start_secs)

    def latency_ms(self) -> dict[str, float | None]:
        return {
            name: (round((self.at[name] - self.end_of_speech_s) * 1000.0, 2) if name in self.at else None)
            for name in MARKS
        }

    @property
    def complete(self) -> bool:
        return "transport_first_byte" in self.at

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("at")
        d.pop("event_at_s")
        d.pop("interruption_s")
        d.pop("speech_start_s")
        d["latency_ms"] = self.latency_ms()
        return d


class LatencyObserver(BaseObserver):
    """Records a :class:`TurnLatency` per caller turn.

    Args:
        output_transport: the processor that writes audio to the caller; its downstream pushes of
            audio frames are the "first byte written" mark.
        on_turn: called (synchronously, cheap) when a turn gets its first transport byte.
        clock: monotonic seconds; injectable for tests.
    """

    def __init__(
        self,
        *,
        output_transport: object | None = None,
        on_turn: Callable[[TurnLatency], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        super().__init__()
        self._output = output_transport
        self._on_turn = on_turn
        self._clock = clock
        self._seen: set[int] = set()
        self._last_vad_stop_s: float | None = None
        self._last_vad_stop_secs = 0.0
        self._speech_start_s: float | None = None  # the first VAD start since the last turn opened
        self._pending_text: list[str] = []
        self._pending_final_s: float | None = None
        self.turns: list[TurnLatency] = []
        self.events_before_first_turn: list[dict] = []

    @property
    def current(self) -> TurnLatency | None:
        return self.turns[-1] if self.turns else None

    def set_output_transport(self, output_transport: object) -> None:
        self._output = output_transport

    async def on_push_frame(self, data: FramePushed) -> None:
        frame = data.frame
        # Audio frames leaving the output transport are counted wherever they are seen.
        if isinstance(frame, OutputAudioRawFrame) and data.source is self._output:
            self._mark_once("transport_first_byte")
            return
        # pipecat broadcasts turn frames both ways as two sibling frames: count each event once,
        # on its downstream copy.
        if data.direction == FrameDirection.UPSTREAM or frame.id in self._seen:
            return
        if isinstance(frame, AgentEventFrame):
            self._seen.add(frame.id)
            event = {"kind": frame.kind, "data": dict(frame.data)}
            if self.current is None:
                self.events_before_first_turn.append(event)
            else:
                self.current.events.append(event)
                self.current.event_at_s.append(self._clock())
            return
        if isinstance(
            frame,
            (VADUserStartedSpeakingFrame, VADUserStoppedSpeakingFrame, TranscriptionFrame, UserStoppedSpeakingFrame,
             LLMTextFrame, TTSAudioRawFrame, InterruptionFrame),
        ):
            self._seen.add(frame.id)
            if len(self._seen) > 4096:
                self._seen.clear()
        else:
            return
        now = self._clock()
        # parley's VAD (pipeline.vad) says where on the caller's clock the speech began and ended,
        # and when it called the stop; pipecat's says neither (its frames' arrival here, less
        # start_secs or stop_secs). A test's own clock takes pipecat's reading.
        ours = self._clock is time.monotonic
        if isinstance(frame, VADUserStartedSpeakingFrame):
            if self._speech_start_s is None:
                began = getattr(frame, "began_at_s", None) if ours else None
                self._speech_start_s = began if began is not None else now - frame.start_secs
        elif isinstance(frame, VADUserStoppedSpeakingFrame):
            ended = getattr(frame, "ended_at_s", None) if ours else None
            self._last_vad_stop_s = getattr(frame, "called_at_s", now) if ours else now
            self._last_vad_stop_secs = frame.stop_secs if ended is None else self._last_vad_stop_s - ended
        elif isinstance(frame, TranscriptionFrame):
            self._pending_text.append(frame.text)
            self._pending_final_s = now
            cur = self.current
            if cur is not None and not cur.complete and "first_text" not in cur.at:
                # a late final for a turn already opened
                cur.user_text = " ".join(t for t in (cur.user_text, frame.text) if t)
                cur.at["stt_final"] = now
        elif isinstance(frame, UserStoppedSpeakingFrame):
            self._open_turn(now)
        elif isinstance(frame, LLMTextFrame):
            self._mark_once("first_text")
        elif isinstance(frame, TTSAudioRawFrame):
            self._mark_once("tts_first_audio")
        elif isinstance(frame, InterruptionFrame):
            cur = self.current
            if cur is not None and not cur.complete:
                cur.interrupted = True
            if cur is not None and cur.interruption_s is None:
                cur.interruption_s = now

    def _open_turn(self, now: float) -> None:
        vad_stop = self._last_vad_stop_s if self._last_vad_stop_s is not None else now
        turn = TurnLatency(turn=len(self.turns) + 1, end_of_speech_s=vad_stop - self._last_vad_stop_secs)
        turn.at["vad_stop"] = vad_stop
        turn.speech_start_s = self._speech_start_s
        self._speech_start_s = None
        turn.user_text = " ".join(t for t in self._pending_text if t).strip()
        if self._pending_final_s is not None:
            turn.at["stt_final"] = self._pending_final_s
        self._pending_text = []
        self._pending_final_s = None
        self._last_vad_stop_s = None
        self.turns.append(turn)

    def _mark_once(self, name: str) -> None:
        cur = self.current
        if cur is None or name in cur.at:
            return
        cur.at[name] = self._clock()
        if name == "transport_first_byte":
            log.debug("turn %d latency %s", cur.turn, cur.latency_ms())
            if self._on_turn is not None:
                self._on_turn(cur)
