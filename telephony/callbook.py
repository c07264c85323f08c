"""One call's record and metrics, kept current: the part every transport's supervisor shares.

The Twilio, WebRTC and SIP calls each own a :class:`CallBook`. It opens the record in the store,
counts the call in the server's metrics (live calls, frame counters, per-turn latency) and
writes the record (and the call's trace, ``pipeline.tracing``) as the call goes, from three sources: the latency observer (turns, what the
caller said), the playout tracker (what the agent said and what the caller heard of it) and the
transport's counters::

    book = CallBook(record, store, metrics, tracker=transport.tracker, frames=counts,
                    stats=lambda: session.stats.as_dict())
    latency = book.observe(transport.output())   # a LatencyObserver for the pipeline
    book.started()          # when the call is answered
    ...
    book.ended("caller hung up")
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from pipeline.latency import LatencyObserver, TurnLatency
from pipeline.records import CallRecord, CallStore
from pipeline.tracing import CallTrace
from telephony.audio_meter import FrameCounts
from telephony.metrics import Metrics
from telephony.playout import PlayoutTracker, Utterance, UtteranceState

log = logging.getLogger(__name__)


class CallBook:
    def __init__(self, record: CallRecord, store: CallStore, metrics: Metrics, *, tracker: PlayoutTracker,
                 frames: FrameCounts, stats: Callable[[], dict[str, int]] | None = None,
                 on_turn: Callable[[TurnLatency], None] | None = None):
        self.record = record
        self.store = store
        self.metrics = metrics
        self.tracker = tracker
        self.frames = frames
        self._stats = stats or frames.as_dict
        self.more_stats: Callable[[], dict[str, int]] = dict   # counters from beyond the transport (the recording's)
        self._on_turn_extra = on_turn
        self.latency: LatencyObserver | None = None
        self._live = False
        # the monotonic clock's reading at the record's started_at: turns are placed on the call's
        # timeline (TurnRecord.at_s, CallRecord.marks_s) as seconds after it
        self._started_mono_s = time.monotonic() - (time.time() - record.started_at)
        # the call's trace (a no-op unless the server exports traces)
        self.trace: CallTrace = metrics.tracing.call(record.call_sid, record.transport)
        store.open(record)

    @property
    def transport(self) -> str:
        return self.record.transport

    def observe(self, output_transport: object) -> LatencyObserver:
        """The latency observer for the call's pipeline; each finished turn updates the record."""
        self.latency = LatencyObserver(output_transport=output_transport, on_turn=self._on_turn)
        return self.latency

    def _on_turn(self, turn: TurnLatency) -> None:
        self.metrics.observe_turn(self.transport, turn.latency_ms())
        if self._on_turn_extra is not None:
            self._on_turn_extra(turn)
        self.sync()
        self.trace.turn(turn, self.record)

    def started(self) -> None:
        """The call is live: count it (and its frames) in the metrics."""
        if not self._live:
            self._live = True
            self.metrics.call_started(self.transport, self.frames)

    def ended(self, reason: str) -> None:
        """Write the final record; the metrics fold the call's frame counts into their totals."""
        if self._live:
            self._live = False
            self.metrics.call_ended(self.transport, self.frames)
        self.record.ended_at = time.time()
        self.record.end_reason = reason
        self.sync()
        latency = self.latency
        self.trace.end(self.record, latency.turns if latency is not None else (),
                       latency.events_before_first_turn if latency is not None else ())

    def seconds(self, monotonic_s: float) -> float:
        """A monotonic reading as seconds after the call's ``started_at`` (ms resolution)."""
        return round(monotonic_s - self._started_mono_s, 3)

    def sync(self) -> None:
        """Bring the record up to date and store it."""
        record = self.record
        turns = self.latency.turns if self.latency is not None else []
        for t in turns:
            rec = record.turn(t.turn)
            rec.user_text = t.user_text
            rec.latency_ms = t.latency_ms()
            rec.interrupted = t.interrupted
            rec.tool_calls = [e["data"] for e in t.events if e["kind"] == "tool_call"]
            rec.events = [e for e in t.events if e["kind"] != "tool_call"]
            rec.at_s = {"speech_end": self.seconds(t.end_of_speech_s)}
            if t.speech_start_s is not None:
                rec.at_s["speech_start"] = self.seconds(t.speech_start_s)
            if t.interruption_s is not None:
                rec.at_s["barge_in"] = self.seconds(t.interruption_s)
        if self.latency is not None:   # keys pressed during the greeting: a hand-off, a hang-up
            record.greeting_events = list(self.latency.events_before_first_turn)
        # an utterance belongs to the last turn whose speech ended before it began (0: the greeting)
        starts = [t.at.get("vad_stop", t.end_of_speech_s) for t in turns]
        greeting: list[Utterance] = []
        by_turn: dict[int, list[Utterance]] = {}
        for utt in self.tracker.utterances:
            if utt.elsewhere:
                continue
            owner = sum(1 for s in starts if s <= utt.began_at_s)
            (greeting if owner == 0 else by_turn.setdefault(owner, [])).append(utt)
        record.greeting = " ".join(u.text for u in greeting if u.text)
        record.greeting_heard = " ".join(h for h in (u.heard_text() for u in greeting) if h)
        record.marks_s.update(self._spoken("greeting", greeting))
        for number, utts in by_turn.items():
            rec = record.turn(number)
            rec.agent_text = " ".join(u.text for u in utts if u.text)
            rec.agent_text_heard = " ".join(h for h in (u.heard_text() for u in utts) if h)
            rec.interrupted = rec.interrupted or any(u.state is UtteranceState.CLEARED for u in utts)
            rec.at_s.update(self._spoken("agent", utts))
        record.stats = {**self._stats(), **self.more_stats()}
        self.store.update(record)

    def _spoken(self, name: str, utts: list[Utterance]) -> dict[str, float]:
        """``{name}_start``: when the first of ``utts`` began playing; ``{name}_end``: where the
        caller's hearing of the last one ended (none while nothing was heard)."""
        if not utts:
            return {}
        marks = {f"{name}_start": self.seconds(min(u.began_at_s for u in utts))}
        heard = [u.heard_until_s for u in utts if u.heard_ms > 0 or u.stopped_at_s is not None]
        if heard:
            marks[f"{name}_end"] = self.seconds(max(heard))
        return marks
