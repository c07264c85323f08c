"""What the browser page is told over the data channel: transcripts of both sides and latency.

Each message is a typed dataclass turned into one JSON object (pipecat's connection JSON-encodes
app messages)::

    {"type": "transcript", "role": "user",  "text": "hello how", "final": false, "turn": 1}
    {"type": "transcript", "role": "agent", "text": "You said:", "final": false, "turn": 1}
    {"type": "latency", "turn": 1, "user_text": "...", "latency_ms": {"vad_stop": 200.1, ...}}
    {"type": "call", "state": "ended", "call_id": "...", "reason": "..."}

:class:`PageEventsObserver` watches the pipeline and sends them. The agent's words are taken as
the output transport lets them through, which pipecat does in step with the audio, so the page
shows a word when it is played, and an interruption ends the agent's line where playback stopped.
Agent messages carry the whole of the turn's reply played so far, so a reply that pauses (the
TTS falling behind, or a second sentence) stays one line; ``final`` marks each pause in playback.
pipecat lets a word through by the clock and marks the end of playback by the audio, so on a
busy machine a reply's last word can come after its ``BotStoppedSpeakingFrame``: such a late
word ends its line ``LATE_WORD_END_S`` later unless playback starts again, and the line playing
when the call ends (``end``) is final before the page hears that it ended.
The observer never blocks: it reads frames and calls a synchronous ``send``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from pipecat.frames.frames import (
    BotStartedSpeakingFrame,
    BotStoppedSpeakingFrame,
    InterimTranscriptionFrame,
    InterruptionFrame,
    TranscriptionFrame,
    TTSTextFrame,
)
from pipecat.observers.base_observer import BaseObserver, FramePushed
from pipecat.processors.frame_processor import FrameDirection

from pipeline.latency import TurnLatency

log = logging.getLogger(__name__)

Role = Literal["user", "agent"]
CallState = Literal["started", "ended"]

# a word played while playback is stopped ends its line this long after, unless playback starts
LATE_WORD_END_S = 0.5


@dataclass(frozen=True)
class TranscriptMessage:
    role: Role
    text: str
    final: bool
    turn: int
    interrupted: bool = False

    def to_dict(self) -> dict:
        return {"type": "transcript", "role": self.role, "text": self.text, "final": self.final,
                "turn": self.turn, "interrupted": self.interrupted}


@dataclass(frozen=True)
class LatencyMessage:
    turn: int
    user_text: str
    latency_ms: dict[str, float | None]

    @classmethod
    def of(cls, turn: TurnLatency) -> "LatencyMessage":
        return cls(turn=turn.turn, user_text=turn.user_text, latency_ms=turn.latency_ms())

    def to_dict(self) -> dict:
        return {"type": "latency", "turn": self.turn, "user_text": self.user_text,
                "latency_ms": dict(self.latency_ms)}


@dataclass(frozen=True)
class CallMessage:
    state: CallState
    call_id: str
    reason: str = ""

    def to_dict(self) -> dict:
        return {"type": "call", "state": self.state, "call_id": self.call_id, "reason": self.reason}


PageMessage = TranscriptMessage | LatencyMessage | CallMessage


@dataclass
class AgentLine:
    """What the agent said in one turn (0 = the greeting), as generated and as played."""

    said: list[str] = field(default_factory=list)
    played: list[str] = field(default_factory=list)
    interrupted: bool = False

    @staticmethod
    def _join(parts: list[str]) -> str:
        return " ".join(" ".join(p.strip() for p in parts if p.strip()).split())

    @property
    def said_text(self) -> str:
        return self._join(self.said)

    @property
    def played_text(self) -> str:
        return self._join(self.played)


class PageEventsObserver(BaseObserver):
    """Forwards transcripts to the page and keeps each turn's agent text for the call record.

    Args:
        send: delivers one message to the page (synchronous, must not block).
        output_transport: the processor that plays agent audio.
        tts: the TTS processor (its text frames are what the agent *said*).
        turn_number: the current caller turn (0 before the first), e.g. ``len(latency.turns)``.
    """

    def __init__(self, *, send: Callable[[PageMessage], None], output_transport: object,
                 tts: object | None, turn_number: Callable[[], int]):
        super().__init__()
        self._send = send
        self._output = output_transport
        self._tts = tts
        self._turn_number = turn_number
        self._playing = False  # agent words played since playback last stopped
        self._playing_turn = 0
        self._speaking = False  # the output transport is playing agent audio
        self._late_end: asyncio.TimerHandle | None = None
        self.lines: dict[int, AgentLine] = {}

    def set_tts(self, tts: object) -> None:
        self._tts = tts

    def line(self, turn: int) -> AgentLine:
        return self.lines.setdefault(turn, AgentLine())

    async def on_push_frame(self, data: FramePushed) -> None:
        frame = data.frame
        if data.direction != FrameDirection.DOWNSTREAM:
            return
        if isinstance(frame, TTSTextFrame):
            if data.source is self._tts and data.first_push:
                self.line(self._turn_number()).said.append(frame.text)
            elif data.source is self._output:
                self._played(frame.text)
        elif isinstance(frame, (InterimTranscriptionFrame, TranscriptionFrame)):
            if data.first_push and frame.text.strip():
                final = isinstance(frame, TranscriptionFrame)
                self._send(TranscriptMessage("user", frame.text.strip(), final, self._turn_number() + 1))
        elif isinstance(frame, BotStartedSpeakingFrame) and data.source is self._output:
            self._speaking = True
            self._cancel_late_end()
        elif isinstance(frame, BotStoppedSpeakingFrame) and data.source is self._output:
            self._speaking = False
            self._end_line(interrupted=False)
        elif isinstance(frame, InterruptionFrame) and data.first_push:
            self._end_line(interrupted=True)

    def _played(self, text: str) -> None:
        if not text.strip():
            return
        turn = self._turn_number()
        if self._playing_turn != turn:  # a new reply: the last one's line is done
            self._end_line(interrupted=False)
            self._playing_turn = turn
        self._playing = True
        line = self.line(turn)
        line.played.append(text)
        self._send(TranscriptMessage("agent", line.played_text, False, turn))
        if not self._speaking and self._late_end is None:      # no stop may follow this word
            self._late_end = asyncio.get_running_loop().call_later(LATE_WORD_END_S, self._end_late)

    def end(self) -> None:
        """The call is ending: the line playing is final now (before the page is told the call
        ended). A call that ends with an ``EndFrame`` (a drain's farewell, an agent's goodbye)
        may stop the pipeline before any ``BotStoppedSpeakingFrame`` follows its last word."""
        self._end_line(interrupted=False)

    def _end_late(self) -> None:
        self._late_end = None
        if not self._speaking:
            self._end_line(interrupted=False)

    def _cancel_late_end(self) -> None:
        if self._late_end is not None:
            self._late_end.cancel()
            self._late_end = None

    def _end_line(self, *, interrupted: bool) -> None:
        """Playback stopped (or was cut): the turn's line so far is final; more may follow."""
        self._cancel_late_end()
        if not self._playing:
            if interrupted:
                self._tag_cut_line()
            return
        line = self.line(self._playing_turn)
        line.interrupted = line.interrupted or interrupted
        self._send(TranscriptMessage("agent", line.played_text, True, self._playing_turn,
                                     interrupted=line.interrupted))
        self._playing = False

    def _tag_cut_line(self) -> None:
        """An interruption that comes after playback stopped (the output's stop can pass the
        observer before the interruption does: a reply cut after its first word) still tags the
        line it cut, if fewer of its words were played than said and it is not tagged yet."""
        line = self.lines.get(self._playing_turn)
        if line is None or line.interrupted or not line.played_text:
            return
        if len(line.played_text.split()) >= len(line.said_text.split()):
            return  # every word it said was played: nothing was cut
        line.interrupted = True
        self._send(TranscriptMessage("agent", line.played_text, True, self._playing_turn, interrupted=True))
