"""Which calls the list page shows: a query from the address's parameters, and one call's line.

    GET /ui/api/calls?from=2026-12-01&to=2026-12-07&number=5550100&outcome=transferred&limit=100

``from`` and ``to`` are ISO dates or date-times (UTC unless they say otherwise; a bare ``to`` date
takes the whole day); ``number`` matches any run of digits (or text) in the call's numbers: the
caller's and the called number, the dialled target, the call id; ``outcome`` is one of
:data:`OUTCOMES` (the post-call webhook's) or a dialled call's (``no-answer``, ``busy``, ...), or
``live``. The newest :data:`SCAN_LIMIT` calls of the store are searched.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from pipeline.records import CallRecord
from telephony.webhooks.event import outcome_of

__all__ = ["OUTCOMES", "SCAN_LIMIT", "CallQuery", "call_line"]

SCAN_LIMIT = 5000
MAX_LIMIT = 500
OUTCOMES = ("completed", "transferred", "caller_hung_up", "error", "server_stopped", "ended", "live")
NUMBER_KEYS = ("From", "To", "from", "to", "Caller", "Called")


def _instant(text: str, *, end_of_day: bool) -> float:
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{text[:40]!r} is not an ISO date (2026-12-07) or date-time") from None
    if end_of_day and len(text) == 10:  # a bare date: up to the end of that day
        when += timedelta(days=1)
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when.timestamp()


def outcome(record: CallRecord) -> str:
    """``live`` for a call not over, else the webhook's outcome (``completed``, ``transferred``, ...)."""
    return "live" if not record.ended else outcome_of(record)


def numbers(record: CallRecord) -> list[str]:
    """The numbers and addresses a call is known by (as the store has them, masked or not)."""
    found = [record.call_sid]
    found += [str(record.params[k]) for k in NUMBER_KEYS if record.params.get(k)]
    found += [str(record.dial[k]) for k in ("to", "from", "target") if record.dial.get(k)]
    return found


@dataclass(frozen=True)
class CallQuery:
    since: float | None = None
    until: float | None = None
    number: str = ""
    outcome: str = ""
    limit: int = 100

    @classmethod
    def parse(cls, query: dict[str, str] | Any) -> CallQuery:
        """From the address's parameters; ValueError (said to the client) for a bad one."""
        since = _instant(query["from"], end_of_day=False) if query.get("from") else None
        until = _instant(query["to"], end_of_day=True) if query.get("to") else None
        number = (query.get("number") or "").strip()[:64]
        wanted = (query.get("outcome") or "").strip()[:40]
        try:
            limit = int(query.get("limit") or 100)
        except ValueError:
            raise ValueError("'limit' is not a whole number") from None
        if not 1 <= limit <= MAX_LIMIT:
            raise ValueError(f"'limit' must be 1 to {MAX_LIMIT}")
        return cls(since, until, number, wanted, limit)

    def matches(self, record: CallRecord) -> bool:
        if self.since is not None and record.started_at < self.since:
            return False
        if self.until is not None and record.started_at >= self.until:
            return False
        if self.outcome and self.outcome not in (outcome(record), record.dial.get("outcome"), record.answered_by):
            return False
        if self.number:
            # a phone number's digits match however either side is written (+1 555-0100, 15550100)
            digits = re.sub(r"\D", "", self.number) if re.fullmatch(r"[\d\s+().-]+", self.number) else ""
            for known in numbers(record):
                if self.number.lower() in known.lower() or (digits and digits in re.sub(r"\D", "", known)):
                    return True
            return False
        return True

    def run(self, records: list[CallRecord]) -> list[CallRecord]:
        """The matching calls, newest first, at most ``limit``."""
        found = [r for r in records if self.matches(r)]
        found.sort(key=lambda r: r.started_at, reverse=True)
        return found[: self.limit]


def call_line(record: CallRecord) -> dict:
    """One call as the list shows it."""
    return {
        "call_sid": record.call_sid,
        "transport": record.transport,
        "started_at": record.started_at,
        "duration_s": None if record.ended_at is None else round(record.ended_at - record.started_at, 1),
        "turns": len(record.turns),
        "outcome": outcome(record),
        "dial_outcome": record.dial.get("outcome"),
        "end_reason": record.end_reason,
        "from": record.params.get("From") or record.params.get("from") or record.dial.get("from"),
        "to": record.params.get("To") or record.params.get("to") or record.dial.get("to") or record.dial.get("target"),
        "recorded": bool(record.recording),
        "first_words": next((t.user_text for t in record.turns if t.user_text), "")[:120],
    }
