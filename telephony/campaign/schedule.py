"""When a campaign may call a contact: the calling window in the contact's time zone, and the
retries (which outcomes, how many attempts, how long between them).

::

    window = CallingWindow.parse("09:00-20:00")
    window.opens_at(now, "America/New_York")  # now when inside it, else the epoch second it next opens
    retry = RetryPolicy(retry_on=frozenset({"busy", "no-answer"}), max_attempts=3, backoff_s=600)
    retry.next_try_s(outcome="busy", attempts=1)   # 600.0; then 1200.0; None: no further attempt

A window is local wall-clock time, every day: 09:00-20:00 in New York is 14:00-01:00 UTC in winter
and 13:00-00:00 in summer (``zoneinfo`` knows). ``00:00-24:00`` is always open. A retry waits
``backoff_s * backoff_factor ** (attempts - 1)``, at most ``max_backoff_s``, and then the window.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final
from zoneinfo import ZoneInfo

from telephony.errors import CampaignError

__all__ = ["OUTCOMES", "RETRYABLE", "CallingWindow", "RetryPolicy"]

# an attempt's outcome: the carrier's answer, the answering machine, or what parley knows of it
OUTCOMES: Final = ("answered", "machine", "busy", "no-answer", "declined", "failed", "timeout", "canceled",
                   "unknown", "dnc")
RETRYABLE: Final = ("busy", "no-answer", "machine", "timeout", "failed")
_HHMM: Final = re.compile(r"([01][0-9]|2[0-4]):([0-5][0-9])")


def _minutes(text: str) -> int:
    match = _HHMM.fullmatch(text.strip())
    if match is None or (match[1] == "24" and match[2] != "00"):
        raise CampaignError(f"calling window: {text.strip()!r} is not a time of day HH:MM (00:00-24:00)")
    return int(match[1]) * 60 + int(match[2])


@dataclass(frozen=True)
class CallingWindow:
    """Daily hours, local to each contact, in minutes after midnight: ``start <= t < end``."""

    start_min: int = 9 * 60
    end_min: int = 20 * 60

    def __post_init__(self) -> None:
        if not 0 <= self.start_min < self.end_min <= 24 * 60:
            raise CampaignError(f"calling window {self}: it must start before it ends, within one day")

    @classmethod
    def parse(cls, text: str) -> CallingWindow:
        start, sep, end = text.partition("-")
        if not sep:
            raise CampaignError(f"calling window {text!r}: give it as HH:MM-HH:MM, e.g. 09:00-20:00")
        return cls(_minutes(start), _minutes(end))

    def __str__(self) -> str:
        return "-".join(f"{m // 60:02d}:{m % 60:02d}" for m in (self.start_min, self.end_min))

    def opens_at(self, now: float, timezone: str) -> float:
        """``now`` when the window is open in ``timezone``, else when it next opens (epoch seconds)."""
        zone = ZoneInfo(timezone)
        local = datetime.fromtimestamp(now, zone)
        minute = local.hour * 60 + local.minute + local.second / 60
        if self.start_min <= minute < self.end_min:
            return now
        day = local.date() if minute < self.start_min else local.date() + timedelta(days=1)
        # an aware datetime plus a timedelta is wall-clock arithmetic: 09:00 local, DST or not
        opening = datetime(day.year, day.month, day.day, tzinfo=zone) + timedelta(minutes=self.start_min)
        return max(now, opening.timestamp())


@dataclass(frozen=True)
class RetryPolicy:
    retry_on: frozenset[str] = frozenset({"busy", "no-answer", "machine"})
    max_attempts: int = 3
    backoff_s: float = 600.0
    backoff_factor: float = 2.0
    max_backoff_s: float = 4 * 3600.0

    def __post_init__(self) -> None:
        unknown = sorted(set(self.retry_on) - set(RETRYABLE))
        if unknown:
            raise CampaignError(f"retry on {unknown[0]!r}: retries are for {', '.join(RETRYABLE)}")
        if not 1 <= self.max_attempts <= 20:
            raise CampaignError(f"max attempts {self.max_attempts}: 1 to 20")
        if self.backoff_s < 0 or self.backoff_factor < 1 or self.max_backoff_s < self.backoff_s:
            raise CampaignError("backoff: the wait must be >= 0, the factor >= 1, and the cap >= the first wait")

    def next_try_s(self, outcome: str, attempts: int) -> float | None:
        """How long after an attempt ending ``outcome`` (``attempts`` made so far) to try again;
        None when that was the last one."""
        if outcome not in self.retry_on or attempts >= self.max_attempts:
            return None
        return min(self.max_backoff_s, self.backoff_s * self.backoff_factor ** (attempts - 1))
