"""One Twilio call, from the WebSocket handshake to the last word: the Twilio edge of the call core.

:func:`read_start` reads the stream's ``connected`` and ``start``; :class:`TwilioCall` is the
:class:`~telephony.core.supervisor.CallSupervisor` over the stream: the socket closing (or
``stop``) hangs up; when the agent ends the call its last words play out before the socket
closes (Twilio stops playing when the stream does), and a transfer the agent asked for goes
through Twilio's REST API after that.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from aiohttp import WSMsgType, web

from pipeline.builder import PipelineConfig
from pipeline.frames import TransferCallFrame
from pipeline.records import CallStore
from telephony.calls import AgentFactory, CallControl
from telephony.core.supervisor import CallSupervisor
from telephony.errors import HandshakeError, ProtocolError, TelephonyError
from telephony.metrics import Metrics
from telephony.twilio.messages import Connected, MediaFormat, Start, parse_twilio
from telephony.twilio.signature import ANSWER_PARAM
from telephony.twilio.transport import TwilioTransport, drain_playout

log = logging.getLogger(__name__)

HANDSHAKE_TIMEOUT_S = 10.0
MAX_HANDSHAKE_MESSAGES = 20


async def read_start(ws: web.WebSocketResponse, peer: str) -> Start:
    """Read ``connected`` then ``start``; skip (and log) garbage, give up after a timeout."""
    async with asyncio.timeout(HANDSHAKE_TIMEOUT_S):
        for _ in range(MAX_HANDSHAKE_MESSAGES):
            msg = await ws.receive()
            if msg.type not in (WSMsgType.TEXT, WSMsgType.BINARY):
                raise HandshakeError(f"stream from {peer} closed before 'start'")
            try:
                message = parse_twilio(msg.data)
            except ProtocolError as exc:
                log.warning("[%s] bad message before 'start' skipped: %s", peer, exc)
                continue
            if isinstance(message, Start):
                fmt = message.media_format
                if fmt != MediaFormat():  # anything else would be decoded as mu-law: noise
                    raise HandshakeError(f"stream {message.call_sid[:40]} from {peer} sends {fmt.encoding[:40]} at "
                                         f"{fmt.sample_rate_hz} Hz, {fmt.channels} channel(s); parley takes "
                                         "audio/x-mulaw at 8000 Hz, mono")
                return message
            if not isinstance(message, Connected):
                log.warning("[%s] %s before 'start' skipped", peer, type(message).__name__)
    raise HandshakeError(f"no 'start' in the first {MAX_HANDSHAKE_MESSAGES} messages from {peer}")


class TwilioCall(CallSupervisor):
    """Runs one call's pipeline over its socket and keeps its record current."""

    transport_name = "twilio"

    def __init__(self, ws: web.WebSocketResponse, start: Start, *, agent_factory: AgentFactory,
                 pipeline_config: PipelineConfig, store: CallStore, reraise: bool = False,
                 metrics: Metrics | None = None, call_control: CallControl | None = None,
                 handoff: Callable[[str, TransferCallFrame], None] | None = None):
        self.start = start
        self.ws = ws
        self._call_control = call_control
        self._handoff = handoff
        transport = TwilioTransport(ws, start, call_id=start.call_sid, on_closed=self.hang_up)
        link = transport.link
        super().__init__(call_id=start.call_sid, transport=transport, tracker=link.tracker,
                         frames=link.stats.frames, stats=link.stats.as_dict, agent_factory=agent_factory,
                         pipeline_config=pipeline_config, store=store, metrics=metrics,
                         params={k: v for k, v in start.custom_parameters.items() if k != ANSWER_PARAM},
                         reraise=reraise)

    @property
    def link(self):
        return self.transport.link

    async def _pipeline_ended(self) -> str | None:
        link = self.link
        await drain_playout(link)  # let the last words play before the socket closes
        if link.closed_reason is not None:  # the caller hung up while they played
            return link.closed_reason
        if link.pending_transfer is not None:
            return await self._transfer(link.pending_transfer)
        return None

    async def _close(self) -> None:
        if not self.ws.closed:
            await self.ws.close()

    async def _transfer(self, transfer: TransferCallFrame) -> str:
        """Hand the caller over (Twilio replaces the call's TwiML; the stream then closes).

        A warm transfer is not built over Twilio yet (it needs a conference and a second stream
        to brief the person): it is carried out blind, and the record says so."""
        where = f"{transfer.kind}:{transfer.target}"
        if transfer.mode == "warm":
            note = "warm transfer is not available over Twilio: transferred blind"
            log.warning("[%s] %s", self.call_id, note)
            self.record.errors.append(note)
            self.record.transfer = {"mode": "blind", "requested": "warm", "target": transfer.target}
        if self._call_control is None:
            if self._handoff is not None:   # the stream closes; Twilio then asks <Connect action> what next
                self._handoff(self.call_id, transfer)
                log.info("[%s] handing off to %s on the stream's action callback", self.call_id, where)
                return f"handed to Twilio: {where}"
            message = f"transfer to {where} requested, but no Twilio account is configured (TWILIO_ACCOUNT_SID)"
            log.error("[%s] %s", self.call_id, message)
            self.record.errors.append(message)
            return "agent ended the call (transfer not configured)"
        try:
            await self._call_control.transfer(self.call_id, transfer.kind, transfer.target)
        except TelephonyError as exc:
            log.error("[%s] transfer to %s failed: %s", self.call_id, where, exc)
            self.record.errors.append(f"transfer to {where} failed: {exc}")
            return "agent ended the call (transfer failed)"
        log.info("[%s] transferred to %s", self.call_id, where)
        return f"transferred to {where}"
