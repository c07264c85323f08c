"""One Twilio call, from the WebSocket handshake to the last word: the per-call supervisor.

The supervisor is the only catch-all in the call path: whatever breaks inside a call is logged
with its call id and traceback, the call ends cleanly (socket closed, record kept), and the
server goes on. With ``reraise`` (tests) the error propagates after the clean-up.
"""

from __future__ import annotations

import asyncio
import logging

from aiohttp import WSMsgType, web
from pipecat.frames.frames import EndFrame, TTSSpeakFrame
from pipecat.workers.runner import WorkerRunner

from pipeline.builder import PipelineConfig, build_pipeline
from pipeline.frames import TransferCallFrame
from pipeline.records import CallRecord, CallStore
from telephony.callbook import CallBook
from telephony.calls import AgentFactory, CallControl, CallInfo
from telephony.errors import ProtocolError, TelephonyError
from telephony.metrics import Metrics
from telephony.twilio.messages import Connected, Start, parse_twilio
from telephony.twilio.transport import TwilioTransport, drain_playout

log = logging.getLogger(__name__)

HANDSHAKE_TIMEOUT_S = 10.0
MAX_HANDSHAKE_MESSAGES = 20


class HandshakeError(ProtocolError):
    """The stream never sent a usable ``start``."""


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
                return message
            if not isinstance(message, Connected):
                log.warning("[%s] %s before 'start' skipped", peer, type(message).__name__)
    raise HandshakeError(f"no 'start' in the first {MAX_HANDSHAKE_MESSAGES} messages from {peer}")


class TwilioCall:
    """Runs one call's pipeline over its socket and keeps its record current."""

    def __init__(self, ws: web.WebSocketResponse, start: Start, *, agent_factory: AgentFactory,
                 pipeline_config: PipelineConfig, store: CallStore, reraise: bool = False,
                 metrics: Metrics | None = None, call_control: CallControl | None = None):
        self.start = start
        self.call_sid = start.call_sid
        self.ws = ws
        self.record = CallRecord(call_sid=start.call_sid, transport="twilio",
                                 params=dict(start.custom_parameters))
        self._agent_factory = agent_factory
        self._config = pipeline_config
        self._reraise = reraise
        self._call_control = call_control
        self._worker = None
        self.transport = TwilioTransport(ws, start, call_id=self.call_sid, on_closed=self._on_socket_closed)
        link = self.transport.link
        self.book = CallBook(self.record, store, metrics or Metrics(), tracker=link.tracker,
                             frames=link.stats.frames, stats=link.stats.as_dict)
        self.latency = self.book.observe(self.transport.output())
        link.on_change = self.sync

    async def _on_socket_closed(self, reason: str) -> None:
        if self._worker is not None:
            await self._worker.cancel(reason=reason)

    async def end_politely(self, farewell: str) -> None:
        """Say ``farewell`` after what is playing, then end the call (server shutting down)."""
        if self._worker is None:
            return
        log.info("[%s] ending the call: server shutting down", self.call_sid)
        await self._worker.queue_frames([TTSSpeakFrame(farewell), EndFrame()])

    async def _transfer(self, transfer: TransferCallFrame) -> str:
        """Hand the caller over (Twilio replaces the call's TwiML; the stream then closes)."""
        where = f"{transfer.kind}:{transfer.target}"
        if self._call_control is None:
            message = f"transfer to {where} requested, but no Twilio account is configured (TWILIO_ACCOUNT_SID)"
            log.error("[%s] %s", self.call_sid, message)
            self.record.errors.append(message)
            return "agent ended the call (transfer not configured)"
        try:
            await self._call_control.transfer(self.call_sid, transfer.kind, transfer.target)
        except TelephonyError as exc:
            log.error("[%s] transfer to %s failed: %s", self.call_sid, where, exc)
            self.record.errors.append(f"transfer to {where} failed: {exc}")
            return "agent ended the call (transfer failed)"
        log.info("[%s] transferred to %s", self.call_sid, where)
        return f"transferred to {where}"

    def sync(self) -> None:
        """Bring the record up to date (turns, words said and heard, counters)."""
        self.book.sync()

    async def run(self) -> None:
        log.info("[%s] call started (stream %s, params %s)", self.call_sid, self.start.stream_sid,
                 sorted(self.start.custom_parameters))
        reason = "ended"
        self.book.started()
        try:
            agent = self._agent_factory(CallInfo(self.call_sid, "twilio", dict(self.start.custom_parameters)))
            built = build_pipeline(self.transport, agent, self._config, observers=[self.latency])
            self._worker = built.worker
            runner = WorkerRunner(handle_sigint=False)
            await runner.add_workers(built.worker)
            await runner.run()
            if self.transport.link.closed_reason is None:  # the agent ended it: let the last words play
                await drain_playout(self.transport.link)
            reason = self.transport.link.closed_reason or "agent ended the call"
            transfer = self.transport.link.pending_transfer
            if transfer is not None and self.transport.link.closed_reason is None:
                reason = await self._transfer(transfer)
        except asyncio.CancelledError:
            reason = "server shutting down"
            raise
        except Exception as exc:  # the per-call supervisor: log, end cleanly, keep the record
            reason = f"error: {type(exc).__name__}: {exc}"
            self.record.errors.append(reason)
            log.exception("[%s] call failed; ending it cleanly", self.call_sid)
            if self._reraise:
                raise
        finally:
            self.book.ended(reason)
            if not self.ws.closed:
                await self.ws.close()
            log.info("[%s] call ended: %s (%d turns)", self.call_sid, reason, len(self.record.turns))
