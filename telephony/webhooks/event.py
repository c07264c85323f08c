"""What a post-call webhook says: one JSON object per ended call (``call.ended``).

    body = event_body(record)          # bytes: the same for every attempt
    delivery_id(record.call_sid)       # one id per call and event, so queuing twice is a no-op

Fields: ``type``, ``delivery_id``, ``call_sid``, ``transport``, ``from``, ``to`` (the caller's and
the number called, where the transport knows them), ``started_at``/``ended_at`` (Unix seconds)
and ``duration_s``, ``end_reason`` (as in the call record) and ``outcome`` (one of
:data:`OUTCOMES`), ``slots`` (each slot's last value), ``summary`` (one line a turn), ``greeting``,
``transcript`` (a list of turns: what the caller said, what the agent said and what the caller heard
of it, whether it was cut off), ``latency_ms`` (turns, p50, p95 and max from the end of the
caller's speech to the first audio byte written), ``recording_url`` (the file's path, or its s3:// URL once
uploaded; null when not recorded), ``errors``.
The record it is built from is already redacted (``pipeline.redaction``) where redaction is on.
"""

from __future__ import annotations

import json
import uuid
from typing import Literal

from pipeline.records import CallRecord
from telephony.handoff import handoff_of

__all__ = ["OUTCOMES", "Outcome", "call_event", "delivery_id", "event_body", "outcome_of"]

Outcome = Literal["completed", "transferred", "caller_hung_up", "error", "server_stopped", "ended"]
OUTCOMES: tuple[str, ...] = ("completed", "transferred", "caller_hung_up", "error", "server_stopped", "ended")
_NAMESPACE = uuid.UUID("5d8e6a43-1f0b-4b8e-9a3c-7c2f2d6a9e11")
LATENCY_MARK = "transport_first_byte"


def delivery_id(call_sid: str, event: str = "call.ended") -> str:
    return str(uuid.uuid5(_NAMESPACE, f"{event}/{call_sid}"))


def outcome_of(record: CallRecord) -> Outcome:
    reason = record.end_reason or ""
    if reason.startswith("transferred") or any(e.get("kind") == "transfer" for t in record.turns for e in t.events):
        return "transferred"
    if reason.startswith("error"):
        return "error"
    if reason.startswith("caller"):
        return "caller_hung_up"
    if reason == "agent ended the call":
        return "completed"
    if reason in ("server shutting down", "server stopped"):
        return "server_stopped"
    return "ended"


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)


def call_event(record: CallRecord) -> dict:
    handoff = handoff_of(record)
    firsts = [v for t in record.turns if (v := t.latency_ms.get(LATENCY_MARK)) is not None]
    params = record.params
    return {
        "type": "call.ended",
        "delivery_id": delivery_id(record.call_sid),
        "call_sid": record.call_sid,
        "transport": record.transport,
        "from": params.get("From") or params.get("from"),
        "to": params.get("To") or params.get("to"),
        "started_at": record.started_at,
        "ended_at": record.ended_at,
        "duration_s": round(record.ended_at - record.started_at, 3) if record.ended_at is not None else None,
        "end_reason": record.end_reason,
        "outcome": outcome_of(record),
        "slots": handoff.slots,
        "summary": handoff.summary or None,
        "greeting": record.greeting_heard or record.greeting,
        "transcript": [{"turn": t.turn, "caller": t.user_text, "agent": t.agent_text,
                        "agent_heard": t.agent_text_heard, "interrupted": t.interrupted} for t in record.turns],
        "latency_ms": {"turns": len(firsts), "p50": _percentile(firsts, 0.5), "p95": _percentile(firsts, 0.95),
                       "max": max(firsts) if firsts else None},
        "recording_url": record.recording,
        "errors": list(record.errors),
    }


def event_body(record: CallRecord) -> bytes:
    return json.dumps(call_event(record), separators=(",", ":"), default=str).encode()
