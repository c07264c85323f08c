"""Call records: what was said on each call, turn by turn, with latencies.

Every transport writes one :class:`CallRecord` per call, as the call goes (never only at the
end): ``open`` when it starts, ``update`` after every turn and when it ends, so a call that
breaks keeps its transcript so far. Stores implement :class:`CallStore`; the server answers
``GET /calls/{sid}`` from one. It lives in ``pipeline`` because both the transports and the agent
(``parley calls``) read it.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from pipeline.campaigns import CampaignStore
from pipeline.outbox import Outbox


@dataclass
class TurnRecord:
    turn: int
    user_text: str = ""
    agent_text: str = ""
    agent_text_heard: str = ""
    latency_ms: dict[str, float | None] = field(default_factory=dict)
    interrupted: bool = False
    tool_calls: list[dict] = field(default_factory=list)   # AgentEventFrame("tool_call").data
    events: list[dict] = field(default_factory=list)       # other agent events: slot, transfer, ...
    # when things happened, in seconds after the call's ``started_at`` (what is known):
    # speech_start and speech_end (the caller's speech, by the VAD), agent_start and agent_end (the agent's audio, to
    # where the caller heard it), barge_in (the caller cut in while this was the last turn)
    at_s: dict[str, float] = field(default_factory=dict)


@dataclass
class CallRecord:
    call_sid: str
    transport: str
    started_at: float = field(default_factory=time.time)
    ended_at: float | None = None
    end_reason: str | None = None
    params: dict[str, str] = field(default_factory=dict)
    turns: list[TurnRecord] = field(default_factory=list)
    greeting: str = ""
    greeting_heard: str = ""  # what the caller heard of it (less when they cut in)
    errors: list[str] = field(default_factory=list)
    # transport counters (bad messages, marks, ...) and audio frames lost, late or underrun
    # (frames_in, frames_in_lost, frames_in_late, frames_out, frames_out_underrun, frames_out_late)
    stats: dict[str, int] = field(default_factory=dict)
    recording: str | None = None  # where the call's recording is (a file path or URL), if any
    # a call parley placed: the target, the carrier's statuses as they came, the outcome
    # (telephony.twilio.outbound writes it); empty for a call that came in
    dial: dict[str, Any] = field(default_factory=dict)
    # an outbound call screened for a machine (pipeline.voicemail): human, machine or unknown (parley's
    # detector), or Twilio's AnsweredBy when that decided (machine_end_beep, fax, ...); and, when a
    # machine answered, whether the whole voicemail message was spoken (None: not screened)
    answered_by: str | None = None
    voicemail_left: bool | None = None
    # call-wide moments, in seconds after ``started_at``: greeting_start, greeting_end (to where
    # the caller heard it) and recording_start (where the recording's second 0 is)
    marks_s: dict[str, float] = field(default_factory=dict)
    # a warm transfer: mode, target, outcome (joined, no-answer, failed), detail, held_s (how
    # long the caller heard hold audio); empty when the call had none
    transfer: dict[str, Any] = field(default_factory=dict)
    # agent events before the caller's first turn (keys pressed during the greeting: a hand-off, a
    # hang-up, a tool call), as turns hold theirs
    greeting_events: list[dict] = field(default_factory=list)

    @property
    def ended(self) -> bool:
        return self.ended_at is not None

    def turn(self, number: int) -> TurnRecord:
        while len(self.turns) < number:
            self.turns.append(TurnRecord(turn=len(self.turns) + 1))
        return self.turns[number - 1]

    def to_dict(self) -> dict:
        return {
            "call_sid": self.call_sid,
            "transport": self.transport,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "ended": self.ended,
            "end_reason": self.end_reason,
            "greeting": self.greeting,
            "greeting_heard": self.greeting_heard,
            "turns": [vars(t).copy() for t in self.turns],
            "errors": list(self.errors),
            "stats": dict(self.stats),
            "recording": self.recording,
            "dial": dict(self.dial),
            "answered_by": self.answered_by,
            "voicemail_left": self.voicemail_left,
            "marks_s": dict(self.marks_s),
            "transfer": dict(self.transfer),
            "greeting_events": [dict(e) for e in self.greeting_events],
        }


class CallStore(Protocol):
    def open(self, record: CallRecord) -> None: ...
    def update(self, record: CallRecord) -> None: ...
    def get(self, call_sid: str) -> CallRecord | None: ...
    def list(self, limit: int | None = None) -> list[CallRecord]: ...


class MemoryCallStore:
    """Thread-safe, bounded: keeps the most recent ``max_calls`` calls."""

    def __init__(self, max_calls: int = 1000):
        self._lock = threading.Lock()
        self._calls: dict[str, CallRecord] = {}
        self._max_calls = max_calls

    def open(self, record: CallRecord) -> None:
        with self._lock:
            self._calls[record.call_sid] = record
            while len(self._calls) > self._max_calls:
                self._calls.pop(next(iter(self._calls)))

    def update(self, record: CallRecord) -> None:
        with self._lock:
            self._calls[record.call_sid] = record

    def get(self, call_sid: str) -> CallRecord | None:
        with self._lock:
            return self._calls.get(call_sid)

    def list(self, limit: int | None = None) -> list[CallRecord]:
        """Calls in the order they were opened; with ``limit``, only the most recent ones."""
        with self._lock:
            calls = list(self._calls.values())
        return calls if limit is None else calls[max(0, len(calls) - limit):]


class DurableCallStore(CallStore, Outbox, CampaignStore, Protocol):
    """A store that outlives the process (SQLite, PostgreSQL), with the webhooks' outbox
    (``pipeline.outbox``) and the outbound campaigns (``pipeline.campaigns``) beside the records."""

    def list(self, limit: int | None = None) -> list[CallRecord]: ...
    def close(self) -> None: ...
    def close_orphans(self) -> int: ...
