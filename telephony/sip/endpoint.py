"""What a call and a registration need of the SIP user agent: the endpoint they talk through.

:class:`~telephony.sip.server.SipServer` implements it; :mod:`telephony.sip.call` and
:mod:`telephony.sip.register` depend on this protocol only, so the server imports them and none
of them imports the server (no circle).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from pipeline.builder import PipelineConfig
from pipeline.frames import TransferCallFrame
from pipeline.records import CallStore
from telephony.calls import AgentFactory, AnsweringPlanFactory
from telephony.metrics import Metrics
from telephony.sip.config import SipConfig
from telephony.sip.message import SipRequest, SipResponse

Address = tuple[str, int]


class SipEndpoint(Protocol):
    """The signalling socket, its transactions, and what every call shares."""

    config: SipConfig
    store: CallStore
    metrics: Metrics
    agent_factory: AgentFactory
    pipeline_config: PipelineConfig
    answering_plans: AnsweringPlanFactory | None  # outbound calls: a machine or nobody answering

    @property
    def contact_uri(self) -> str: ...

    def send(self, message: SipRequest | SipResponse, addr: Address) -> None: ...

    def respond(self, request: SipRequest, addr: Address, status: int, reason: str | None = None, *,
                to_tag: str | None = None, headers: tuple = (), body: bytes = b"",
                refusal: str = "") -> SipResponse: ...

    def new_request(self, method: str, uri: str, *, call_id: str, from_: str, to: str, cseq: int,
                    headers: tuple = (), body: bytes = b"") -> SipRequest: ...

    async def request(self, req: SipRequest, addr: Address, timeout_s: float | None = None) -> SipResponse: ...

    def listen(self, req: SipRequest, callback: Callable[[SipResponse], None] | None) -> None: ...

    async def warm_transfer(self, call: Any, frame: TransferCallFrame) -> None:
        """Carry out ``frame`` (a warm transfer) for ``call`` (a :class:`~telephony.sip.call.SipCall`:
        this module cannot name it without an import circle)."""
        ...
