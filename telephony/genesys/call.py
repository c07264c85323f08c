"""One Genesys Audio Connector call: the AudioHook edge of the call core.

:class:`GenesysCall` is the :class:`~telephony.core.supervisor.CallSupervisor` over one session:
Genesys closing it hangs up; when the agent ends the call (a goodbye, a transfer, the drain), the
last words play out, then ``disconnect`` reason ``completed`` hands the call back to the Architect
flow with ``outputVariables`` (what the agent collected, a transfer target, a summary: strings, as
Architect takes them), and the session ends on Genesys's ``close``.
"""

from __future__ import annotations

import asyncio
import logging

from aiohttp import WSMsgType

from pipeline.builder import PipelineConfig
from pipeline.records import CallRecord, CallStore
from telephony.calls import AgentFactory
from telephony.core.supervisor import CallSupervisor
from telephony.genesys.transport import GenesysSession, GenesysTransport
from telephony.handoff import handoff_of
from telephony.metrics import Metrics

log = logging.getLogger(__name__)

CLOSE_WAIT_S = 5.0


def output_variables(record: CallRecord, *, transfer: tuple[str, str] | None, reason: str) -> dict[str, str]:
    """What the call hands back to Architect (strings only): every slot the agent filled
    (``slot_<name>``), the transfer it asked for, why it ended, its turns and their summary."""
    handoff = handoff_of(record)
    out = {"parley_call_id": handoff.call_id, "end_reason": reason, "turns": str(handoff.turns),
           **{f"slot_{name}": value for name, value in handoff.slots.items()}}
    if transfer is not None:
        out["transfer_kind"], out["transfer_target"] = transfer
    out["summary"] = handoff.summary
    return out


class GenesysCall(CallSupervisor):
    """Runs one Audio Connector session's pipeline and keeps its record current."""

    transport_name = "genesys"

    def __init__(self, session: GenesysSession, *, agent_factory: AgentFactory, pipeline_config: PipelineConfig,
                 store: CallStore, reraise: bool = False, metrics: Metrics | None = None, connector_id: str = ""):
        self.session = session
        session.on_closed = self.hang_up
        opened = session.open
        params = {"conversation_id": opened.conversation_id, "organization_id": opened.organization_id,
                  "from": opened.ani, "to": opened.dnis, "caller_name": opened.ani_name,
                  "language": opened.language, "connector_id": connector_id,
                  **{f"var_{k}": v for k, v in opened.input_variables.items()}}
        super().__init__(call_id=session.call_id, transport=GenesysTransport(session), tracker=session.tracker,
                         frames=session.stats.frames, stats=session.stats.as_dict, agent_factory=agent_factory,
                         pipeline_config=pipeline_config, store=store, metrics=metrics,
                         params={k: v for k, v in params.items() if v}, reraise=reraise)

    async def _pipeline_ended(self) -> str | None:
        session = self.session
        if session.closed.is_set():                 # Genesys closed while the last words played
            return session.closed_reason
        transfer = session.pending_transfer
        reason = (f"handed back to Genesys: transfer to {transfer.kind}:{transfer.target}" if transfer
                  else "handed back to Genesys")
        self.sync()
        variables = output_variables(self.record, transfer=(transfer.kind, transfer.target) if transfer else None,
                                     reason=self._polite_reason or "completed")
        await session.disconnect("completed", "the bot finished the call", variables)
        try:   # the pipeline (and its reader) is done: read on until Genesys's close
            async with asyncio.timeout(CLOSE_WAIT_S):
                async for msg in session.ws:
                    if msg.type == WSMsgType.TEXT and await session.handle(msg.data) == "close":
                        break
                    if msg.type not in (WSMsgType.TEXT, WSMsgType.BINARY):
                        break
        except TimeoutError:
            log.warning("[%s] Genesys did not close the session within %.0f s of the disconnect",
                        self.call_id, CLOSE_WAIT_S)
        return reason

    async def _close(self) -> None:
        if not self.session.ws.closed:
            await self.session.ws.close()
