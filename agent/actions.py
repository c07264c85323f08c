"""What the embedded agent asks its pipeline to do: the actions ``Conversation`` returns.

Each is a frozen dataclass; ``EmbeddedAgentProcessor`` (agent/embedded.py) turns them into
pipecat frames, in order. ``State`` names where a conversation is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, TypeAlias

from agent.spec import HandoffSpec

__all__ = ["Action", "CallTool", "EndCall", "Say", "SlotFilled", "State", "Transfer"]


@dataclass(frozen=True)
class Say:
    text: str


@dataclass(frozen=True)
class Transfer:
    handoff: HandoffSpec
    reason: str = ""


@dataclass(frozen=True)
class EndCall:
    reason: str


@dataclass(frozen=True)
class CallTool:
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SlotFilled:
    name: str
    value: str


Action: TypeAlias = Say | Transfer | EndCall | CallTool | SlotFilled


class State(Enum):
    IDLE = "idle"
    COLLECTING = "collecting"
    CONFIRMING = "confirming"
    WAITING_TOOL = "waiting_tool"
    OFFERED_TRANSFER = "offered_transfer"
    ENDED = "ended"
