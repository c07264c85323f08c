"""What every transport's calls share: what an agent factory learns, and call control.

Transports (Twilio, WebRTC, SIP) build one agent per call through an ``AgentFactory``, and an
outbound call asks an ``AnsweringPlanFactory`` what to do when a machine answers; the composition
root (``deploy/serve_cli.py``, ``deploy/dial_cli.py``) supplies them, so ``telephony`` never
imports ``agent``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from pipecat.processors.frame_processor import FrameProcessor

from pipeline.frames import TransferKind
from pipeline.voicemail import AnsweringPlan


@dataclass(frozen=True)
class CallInfo:
    """What an agent factory learns about a new call."""

    call_sid: str
    transport: str
    params: dict[str, str] = field(default_factory=dict)


AgentFactory = Callable[[CallInfo], FrameProcessor]

AnsweringPlanFactory = Callable[[CallInfo], AnsweringPlan | None]
"""An outbound call's plan for a machine or nobody answering (``pipeline.voicemail``), from the
agent as the agent itself is (the composition root supplies it); None: no screening, the agent
greets at once."""


class CallControl(Protocol):
    """Acts on a live call outside its media stream (Twilio's REST API: ``TwilioCallControl``)."""

    async def transfer(self, call_sid: str, kind: TransferKind, target: str) -> dict: ...
