"""One browser call, from the SDP answer to the last word: the WebRTC per-call supervisor.

The same pipeline as a phone call (``pipeline.builder.build_pipeline``) runs over pipecat's
SmallWebRTC transport at 16 kHz, with our metered tracks (:mod:`telephony.webrtc.media`). Opus
arrives at 48 kHz and is resampled once, to 16 kHz, where the transport reads it; agent audio
leaves at 16 kHz and aiortc's Opus encoder resamples it once, to 48 kHz. Transcripts and per-turn
latency go to the page over the data channel (:mod:`telephony.webrtc.events`); the
:class:`CallRecord` (``transport="webrtc"``) is kept current in the store, and the call counted
in the server's metrics, by the same :class:`~telephony.callbook.CallBook` as a phone call's:
the agent's words as the output track sent them, cut where a barge-in stopped them (the context
keeps only those too), and the frame counters.

The call ends when the agent ends it (its last words play, then the peer connection closes with
pipecat's ``peerLeft``), when the page sends ``{"type": "hangup"}``, when the peer connection
closes or fails, or when the page's keep-alive pings stop for ``KEEPALIVE_LOST_S``. Like the
Twilio supervisor, this is the only catch-all: it logs the traceback with the call id, ends the
call cleanly, keeps the record, and re-raises with ``reraise`` (tests).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import replace

from pipecat.transports.base_transport import TransportParams
from pipecat.transports.smallwebrtc.connection import SmallWebRTCConnection
from pipecat.workers.runner import WorkerRunner

from pipeline.builder import PipelineConfig, build_pipeline
from pipeline.latency import TurnLatency
from pipeline.records import CallRecord, CallStore
from telephony.callbook import CallBook
from telephony.calls import AgentFactory, CallInfo
from telephony.metrics import Metrics
from telephony.webrtc.events import CallMessage, LatencyMessage, PageEventsObserver, PageMessage
from telephony.webrtc.media import WebRTCCallTransport

log = logging.getLogger(__name__)

SAMPLE_RATE_HZ = 16000
KEEPALIVE_LOST_S = 6.0
# after the agent's last words, enough silence to carry them through the browser's jitter buffer
# (130-310 ms) before the connection closes; pipecat's default is 2 s (whole seconds only)
END_SILENCE_S = 1
WATCH_PERIOD_S = 0.5
DISCONNECT_TIMEOUT_S = 5.0


class WebRTCCall:
    """Runs one call's pipeline over its peer connection and keeps its record current."""

    def __init__(self, connection: SmallWebRTCConnection, *, agent_factory: AgentFactory,
                 pipeline_config: PipelineConfig, store: CallStore, params: dict[str, str] | None = None,
                 reraise: bool = False, metrics: Metrics | None = None):
        self.connection = connection
        self.pc_id = connection.pc_id  # pipecat's name for the peer connection (signaling uses it)
        self.call_sid = f"WR{uuid.uuid4().hex}"  # the record's id, URL-safe like Twilio's CA...
        self.params = dict(params or {})
        self.record = CallRecord(call_sid=self.call_sid, transport="webrtc", params=self.params)
        self._agent_factory = agent_factory
        self._config = replace(pipeline_config, sample_rate_hz=SAMPLE_RATE_HZ)
        self._reraise = reraise
        self._worker = None
        self._hangup = asyncio.Event()
        self._finished = False
        self._ended_sent = False
        self._cancelled = False  # the watcher cancelled the pipeline (a hang-up), vs. the agent ended it
        self.hangup_reason: str | None = None
        self.transport = WebRTCCallTransport(
            connection,
            TransportParams(audio_in_enabled=True, audio_out_enabled=True, audio_in_channels=1,
                            audio_out_end_silence_secs=END_SILENCE_S),
            name=f"webrtc-{self.call_sid}",
        )
        self.book = CallBook(self.record, store, metrics or Metrics(), tracker=self.transport.tracker,
                             frames=self.transport.frames, on_turn=self._on_turn)
        self.latency = self.book.observe(self.transport.output())
        self.events = PageEventsObserver(send=self.send, output_transport=self.transport.output(),
                                         tts=None, turn_number=lambda: len(self.latency.turns))
        self.transport.add_event_handler("on_app_message", self._on_app_message)
        self.transport.add_event_handler("on_client_disconnected", self._on_client_disconnected)
        connection.add_event_handler("failed", self._on_failed)

    # -- events from the peer ------------------------------------------------------------------

    def hang_up(self, reason: str) -> None:
        """End the call (from any task); the first reason given is the one recorded."""
        if self.hangup_reason is None:
            self.hangup_reason = reason
        self._hangup.set()

    async def _on_app_message(self, _transport, message, _sender) -> None:
        if isinstance(message, dict) and message.get("type") == "hangup":
            self.hang_up("caller hung up")

    async def _on_client_disconnected(self, _transport, _connection) -> None:
        self.hang_up("peer connection closed")

    async def _on_failed(self, _connection) -> None:
        self.hang_up("peer connection failed")

    async def _watch(self) -> None:
        """Cancel the pipeline on hang-up, or when the page's keep-alive pings stop."""
        lost_since: float | None = None
        was_connected = False
        while not self._hangup.is_set():
            try:
                async with asyncio.timeout(WATCH_PERIOD_S):
                    await self._hangup.wait()
            except TimeoutError:
                pass
            if self._hangup.is_set():
                break
            if self.connection.is_connected():
                was_connected, lost_since = True, None
            elif was_connected:
                lost_since = lost_since or time.monotonic()
                if time.monotonic() - lost_since >= KEEPALIVE_LOST_S:
                    self.hang_up("caller gone (keep-alive lost)")
        if self._worker is not None and not self._finished:
            self._cancelled = True
            self._send_ended(self.hangup_reason or "hung up")  # before the transport closes the channel
            await self._worker.cancel(reason=self.hangup_reason)

    # -- the page and the record ---------------------------------------------------------------

    def send(self, message: PageMessage) -> None:
        """Send one message to the page (queued by pipecat until the data channel opens)."""
        self.connection.send_app_message(message.to_dict())

    def _send_ended(self, reason: str) -> None:
        if not self._ended_sent:
            self._ended_sent = True
            self.send(CallMessage("ended", self.call_sid, reason))

    def _on_turn(self, turn: TurnLatency) -> None:
        self.send(LatencyMessage.of(turn))

    def sync(self) -> None:
        """Bring the record up to date (turns, words said and heard, frame counters)."""
        self.book.sync()

    # -- the call ------------------------------------------------------------------------------

    async def run(self) -> None:
        log.info("[%s] webrtc call started (params %s)", self.call_sid, sorted(self.params))
        self.send(CallMessage("started", self.call_sid))
        reason = "ended"
        self.book.started()
        watcher = asyncio.create_task(self._watch(), name=f"webrtc-watch-{self.call_sid}")
        try:
            agent = self._agent_factory(CallInfo(self.call_sid, "webrtc", dict(self.params)))
            built = build_pipeline(self.transport, agent, self._config,
                                   observers=[self.latency, self.events])
            self.events.set_tts(built.tts)
            self._worker = built.worker
            if self._hangup.is_set():  # the caller left before the pipeline started
                self._cancelled = True
            else:
                runner = WorkerRunner(handle_sigint=False)
                await runner.add_workers(built.worker)
                await runner.run()
            reason = (self.hangup_reason if self._cancelled else None) or "agent ended the call"
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
            self._finished = True
            self._hangup.set()
            await asyncio.gather(watcher, return_exceptions=True)
            self._send_ended(reason)
            try:
                async with asyncio.timeout(DISCONNECT_TIMEOUT_S):
                    await self.connection.disconnect()
            except TimeoutError:
                log.warning("[%s] peer connection did not close in %.0f s", self.call_sid, DISCONNECT_TIMEOUT_S)
            self.book.ended(reason)
            log.info("[%s] webrtc call ended: %s (%d turns)", self.call_sid, reason, len(self.record.turns))
