"""A campaign's settings: one frozen dataclass, checked when made, kept in the store as JSON."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from telephony.campaign.schedule import CallingWindow, RetryPolicy
from telephony.errors import CampaignError

__all__ = ["CampaignConfig"]


@dataclass(frozen=True)
class CampaignConfig:
    from_: str | None = None            # the Twilio number that calls (E.164); for sip: targets, From's URI
    agent: str | None = None            # the agent's name or spec (None: the server's)
    window: CallingWindow = field(default_factory=CallingWindow)
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    max_concurrent: int = 2             # calls at once, from the dial to the final status
    calls_per_minute: float = 10.0      # dials started in any 60 s
    ring_timeout_s: int = 30
    max_call_s: float = 3600.0          # a call's final status not come after ring + this: outcome unknown
    not_placed_wait_s: float = 30.0     # Twilio refused the create request (429/5xx): try again after this
    resolve_timeout_s: float = 120.0    # on resume: how long to ask after a call left in 'dialling'

    def __post_init__(self) -> None:
        if self.max_concurrent < 1:
            raise CampaignError(f"max concurrent calls {self.max_concurrent}: at least 1")
        if not 0 < self.calls_per_minute <= 6000:
            raise CampaignError(f"calls per minute {self.calls_per_minute:g}: above 0, at most 6000")
        if not 5 <= self.ring_timeout_s <= 600:
            raise CampaignError(f"ring timeout {self.ring_timeout_s} s: 5 to 600")
        if min(self.max_call_s, self.not_placed_wait_s, self.resolve_timeout_s) < 0:
            raise CampaignError("waits and timeouts cannot be negative")

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["window"] = str(self.window)
        out["retry"] = asdict(self.retry) | {"retry_on": sorted(self.retry.retry_on)}
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CampaignConfig:
        data = dict(data)
        window = CallingWindow.parse(data.pop("window", "09:00-20:00"))
        retry = dict(data.pop("retry", {}))
        if "retry_on" in retry:
            retry["retry_on"] = frozenset(retry["retry_on"])
        known = set(cls.__dataclass_fields__)
        return cls(window=window, retry=RetryPolicy(**retry), **{k: v for k, v in data.items() if k in known})
