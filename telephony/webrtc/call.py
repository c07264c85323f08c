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
pipecat's ``peerLeft``), when the page sends ``{"type": "hangup"}`` (its keypad sends
``{"type": "dtmf", "digit": "1"}``, which reaches the agent as a phone's key would, see
:mod:`telephony.webrtc.commands`), when the peer connection
closes or fails, or when the page's keep-alive pings stop for ``KEEPALIVE_LOST_S``. The call's
life (the one catch-all, the record, the drain's polite end) is the call core's
(:class:`~telephony.core.supervisor.CallSupervisor`); this edge tells the page and closes the
peer connection.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import replace

from pipecat.transports.base_transport import TransportParams
from pipecat.transports.smallwebrtc.connection import SmallWebRTCConnection

from pipeline.builder import CallPipeline, PipelineConfig
from pipeline.latency import TurnLatency
from pipeline.records import CallStore
from telephony.calls import AgentFactory
from telephony.core.output import keypad_frame
from telephony.core.supervisor import CallSupervisor
from telephony.metrics import Metrics
from telephony.webrtc import ice
from telephony.webrtc.commands import HangUp, KeyPress, parse_page_command
from telephony.webrtc.errors import PageMessageError
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


class WebRTCCall(CallSupervisor):
    """Runs one call's pipeline over its peer connection and keeps its record current."""

    transport_name = "webrtc"

    def __init__(self, connection: SmallWebRTCConnection, *, agent_factory: AgentFactory,
                 pipeline_config: PipelineConfig, store: CallStore, params: dict[str, str] | None = None,
                 reraise: bool = False, metrics: Metrics | None = None):
        self.connection = connection
        self.pc_id = connection.pc_id  # pipecat's name for the peer connection (signaling uses it)
        call_id = f"WR{uuid.uuid4().hex}"  # the record's id, URL-safe like Twilio's CA...
        self._ended_sent = False
        self._latency_rows_sent = 0  # the page's latency table has a row for turns 1..this
        self._closed = asyncio.Event()
        self._watcher: asyncio.Task | None = None
        transport = WebRTCCallTransport(
            connection,
            TransportParams(audio_in_enabled=True, audio_out_enabled=True, audio_in_channels=1,
                            audio_out_end_silence_secs=END_SILENCE_S),
            name=f"webrtc-{call_id}", call_id=call_id,
        )
        super().__init__(call_id=call_id, transport=transport, tracker=transport.tracker,
                         frames=transport.frames, agent_factory=agent_factory,
                         pipeline_config=replace(pipeline_config, sample_rate_hz=SAMPLE_RATE_HZ),
                         store=store, metrics=metrics, params=params, on_turn=self._on_turn, reraise=reraise)
        self.events = PageEventsObserver(send=self.send, output_transport=transport.output(),
                                         tts=None, turn_number=lambda: len(self.latency.turns))
        transport.add_event_handler("on_app_message", self._on_app_message)
        transport.add_event_handler("on_client_disconnected", self._on_client_disconnected)
        connection.add_event_handler("failed", self._on_failed)

    # -- events from the peer ------------------------------------------------------------------

    async def _on_app_message(self, _transport, message, _sender) -> None:
        try:
            command = parse_page_command(message)
        except PageMessageError as exc:
            log.info("[%s] page message ignored: %s", self.call_id, exc)
            return
        if isinstance(command, HangUp):
            await self.hang_up("caller hung up")
        elif isinstance(command, KeyPress):
            await self._press(command.digit)

    async def _press(self, digit: str) -> None:
        """The page's keypad: the key goes to the agent as a phone's DTMF would."""
        key = keypad_frame(digit, self.call_id)
        if key is None or self.end_reason is not None or not self.pipeline_running:
            return
        await self.transport.input().push_frame(key)

    async def _on_client_disconnected(self, _transport, _connection) -> None:
        await self.hang_up("peer connection closed")

    async def _on_failed(self, _connection) -> None:
        await self.hang_up("peer connection failed")

    async def _watch(self) -> None:
        """Hang up when the page's keep-alive pings stop for ``KEEPALIVE_LOST_S``."""
        lost_since: float | None = None
        was_connected = False
        while not self._closed.is_set():
            try:
                async with asyncio.timeout(WATCH_PERIOD_S):
                    await self._closed.wait()
            except TimeoutError:
                pass
            if self._closed.is_set():
                break
            if self.connection.is_connected():
                was_connected, lost_since = True, None
            elif was_connected:
                lost_since = lost_since or time.monotonic()
                if time.monotonic() - lost_since >= KEEPALIVE_LOST_S:
                    await self.hang_up("caller gone (keep-alive lost)")
                    return

    # -- the page --------------------------------------------------------------------------------

    def send(self, message: PageMessage) -> None:
        """Send one message to the page (queued by pipecat until the data channel opens)."""
        self.connection.send_app_message(message.to_dict())

    def _send_ended(self, reason: str) -> None:
        if not self._ended_sent:
            self._ended_sent = True
            self._send_latency_rows()  # a last turn that got no reply audio still gets its row
            self.events.end()      # the agent's last line is final before the call ends
            self.send(CallMessage("ended", self.call_id, reason))

    def _on_turn(self, turn: TurnLatency) -> None:
        self._send_latency_rows(upto=turn.turn)

    def _send_latency_rows(self, upto: int | None = None) -> None:
        """A latency row for each turn (up to ``upto``) the page has none for, in order. A turn
        reports when its first reply audio leaves; one that never had its own (the agent took it
        back and answered it with the next, or the caller talked over it first) is sent with the
        marks it reached when a later turn reports or the call ends, so the table skips none."""
        for turn in self.latency.turns:
            if upto is not None and turn.turn > upto:
                break
            if turn.turn > self._latency_rows_sent:
                self._latency_rows_sent = turn.turn
                self.send(LatencyMessage.of(turn))

    # -- the call's life (CallSupervisor's hooks) ------------------------------------------------

    async def _answer(self) -> bool:
        self.send(CallMessage("started", self.call_id))
        self._watcher = asyncio.create_task(self._watch(), name=f"webrtc-watch-{self.call_id}")
        return True

    def _observers(self) -> list:
        return [self.latency, self.events]

    def _built(self, built: CallPipeline) -> None:
        self.events.set_tts(built.tts)

    async def _on_hang_up(self, reason: str) -> None:
        self._send_ended(reason)  # before the transport closes the data channel

    async def _close(self) -> None:
        self._closed.set()
        if self._watcher is not None and self._watcher is not asyncio.current_task():
            await asyncio.gather(self._watcher, return_exceptions=True)
        self._send_ended(self.end_reason or "ended")
        try:
            async with asyncio.timeout(DISCONNECT_TIMEOUT_S):
                await self.connection.disconnect()
        except TimeoutError:
            log.warning("[%s] peer connection did not close in %.0f s; closing its sockets", self.call_id,
                        DISCONNECT_TIMEOUT_S)
        finally:
            closed = ice.close_sockets(self.connection.pc)
            if closed:
                log.info("[%s] %d ICE socket(s) left open by the peer connection closed", self.call_id, closed)
