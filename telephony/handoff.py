"""What a call hands on when the agent passes it to a person or back to a contact centre's flow:
the slots the agent filled, the turns, a summary of them (one line a turn). Genesys gets them as
``outputVariables``, a Twilio Flex task as its attributes."""

from __future__ import annotations

from dataclasses import dataclass, field

from pipeline.records import CallRecord

__all__ = ["SUMMARY_CHARS", "Handoff", "handoff_of"]

SUMMARY_CHARS = 1000


@dataclass(frozen=True)
class Handoff:
    call_id: str
    turns: int
    summary: str
    slots: dict[str, str] = field(default_factory=dict)


def handoff_of(record: CallRecord) -> Handoff:
    """The record's slots (each name's last value, as text), turn count and summary (the latest
    turns when it runs past ``SUMMARY_CHARS``)."""
    slots: dict[str, str] = {}
    for turn in record.turns:
        for event in turn.events:
            data = event.get("data") or {}
            if event.get("kind") == "slot" and data.get("name"):
                slots[str(data["name"])] = str(data.get("value", ""))
    lines = [f"caller: {t.user_text} / agent: {t.agent_text_heard or t.agent_text}" for t in record.turns]
    summary = " | ".join(lines)
    if len(summary) > SUMMARY_CHARS:
        summary = "..." + summary[-SUMMARY_CHARS + 3:]
    return Handoff(record.call_sid, len(record.turns), summary, slots)
