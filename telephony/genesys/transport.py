"""A pipecat transport over one Genesys Audio Connector session (AudioHook "2", the bot variant).

In: binary PCMU frames (the caller's ``external`` channel, taken out of two interleaved channels
when Genesys sends both) become 20 ms ``InputAudioRawFrame``s; ``dtmf`` becomes ``InputDTMFFrame``;
``ping`` is answered at once with ``pong``; ``paused``/``resumed`` (a hold) drop audio between them;
``update`` gets ``updated``; ``close`` gets ``closed`` and ends the call. A message that breaks the
protocol (bad JSON, a wrong ``seq``/``serverseq``, another session's id) is answered with
``disconnect`` reason ``error`` saying why, once; the session then ends on Genesys's ``close``.

Out: agent audio leaves as binary PCMU, 100 ms a message, paced at real time a little ahead of
Genesys's playout (:class:`~telephony.pacer.OutputPacer`): sent is played, as on RTP. A barge-in
sends ``event`` ``barge_in`` (Genesys drops what it still has queued).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import numpy as np
from aiohttp import WSMsgType, web
from pipecat.frames.frames import EndWorkerFrame, Frame, InputAudioRawFrame, OutputAudioRawFrame
from pipecat.processors.frame_processor import FrameDirection
from pipecat.transports.base_input import BaseInputTransport
from pipecat.transports.base_output import BaseOutputTransport
from pipecat.transports.base_transport import BaseTransport, TransportParams

from pipeline.audio.g711 import ulaw_decode, ulaw_encode
from pipeline.frames import TransferCallFrame
from telephony.audio_meter import FrameCounts
from telephony.core.output import ReceivingInput, SentIsPlayedOutput, keypad_frame
from telephony.errors import ProtocolError
from telephony.genesys.messages import MediaOffer, OpenParams, Sequence, parse_client
from telephony.pacer import paced_transport_params
from telephony.playout import PlayoutTracker, Utterance

log = logging.getLogger(__name__)

SAMPLE_RATE_HZ = 8000
FRAME_SAMPLES = 160                 # 20 ms into the pipeline
OUT_MESSAGE_SAMPLES = 800           # 100 ms a binary message out (Genesys rate-limits floods of small ones)
SEND_TIMEOUT_S = 5.0
LOGGED_BAD = 5


@dataclass
class GenesysStats:
    messages_in: int = 0
    audio_in_bytes: int = 0
    audio_out_bytes: int = 0
    audio_dropped_paused: int = 0
    pings: int = 0
    dtmf: list[str] = field(default_factory=list)
    playbacks: int = 0
    barge_ins: int = 0
    bad_messages: int = 0
    frames: FrameCounts = field(default_factory=FrameCounts)

    def as_dict(self) -> dict[str, int]:
        return {"messages_in": self.messages_in, "audio_in_bytes": self.audio_in_bytes,
                "audio_out_bytes": self.audio_out_bytes, "audio_dropped_paused": self.audio_dropped_paused,
                "pings": self.pings, "dtmf": len(self.dtmf), "playbacks": self.playbacks,
                "barge_ins": self.barge_ins, "bad_messages": self.bad_messages, **self.frames.as_dict()}


class GenesysSession:
    """One AudioHook session's socket and protocol state, shared by both halves and the call."""

    def __init__(self, ws: web.WebSocketResponse, seqs: Sequence, opened: OpenParams, media: MediaOffer,
                 call_id: str, on_closed: Callable[[str], Awaitable[None]]) -> None:
        self.ws = ws
        self.seqs = seqs
        self.open = opened
        self.media = media
        self.call_id = call_id
        self.on_closed = on_closed
        self.tracker = PlayoutTracker()
        self.stats = GenesysStats()
        self.paused = False
        self.disconnected = False        # we sent disconnect (completed or error)
        self.closed = asyncio.Event()    # Genesys sent close and we answered closed
        self.closed_reason: str | None = None
        self.pending_transfer: TransferCallFrame | None = None
        self.error_info: str | None = None
        self._send_lock = asyncio.Lock()

    async def send(self, type_: str, parameters: dict | None = None) -> bool:
        """Send the next numbered message; False when the socket is gone."""
        if self.ws.closed:
            return False
        try:
            async with self._send_lock, asyncio.timeout(SEND_TIMEOUT_S):
                await self.ws.send_str(self.seqs.message(type_, parameters))
            return True
        except (ConnectionError, RuntimeError, TimeoutError) as exc:
            log.warning("[%s] send failed, Genesys's socket is gone: %s", self.call_id, exc)
            return False

    async def send_audio(self, pcmu: bytes) -> bool:
        if self.ws.closed:
            return False
        try:
            async with asyncio.timeout(SEND_TIMEOUT_S):
                await self.ws.send_bytes(pcmu)
            self.stats.audio_out_bytes += len(pcmu)
            return True
        except (ConnectionError, RuntimeError, TimeoutError) as exc:
            log.warning("[%s] audio send failed: %s", self.call_id, exc)
            return False

    async def disconnect(self, reason: str, info: str = "", output_variables: dict[str, str] | None = None) -> None:
        """Hand the call back to Genesys (``completed``) or give up on it (``error``), once."""
        if self.disconnected:
            return
        self.disconnected = True
        parameters: dict = {"reason": reason, "info": info[:1000]}
        if output_variables is not None:
            parameters["outputVariables"] = output_variables
        await self.send("disconnect", parameters)

    async def protocol_error(self, info: str) -> None:
        self.stats.bad_messages += 1
        if self.error_info is None:
            self.error_info = info
            log.warning("[%s] AudioHook protocol error: %s; disconnecting", self.call_id, info)
            await self.disconnect("error", f"Client Error: {info}")

    async def handle(self, raw: str) -> str | None:
        """One text message from Genesys (answered here when it asks for an answer).
        -> a key the caller pressed, "close" when the session closed, or None."""
        self.stats.messages_in += 1
        try:
            msg = parse_client(raw)
        except ProtocolError as exc:
            await self.protocol_error(str(exc))
            return None
        try:
            self.seqs.accept(msg)
        except ProtocolError as exc:
            await self.protocol_error(str(exc))
            self.seqs.clientseq = msg.seq      # what it says next is numbered from here: its close counts
            if msg.type not in ("close", "ping"):
                return None
        kind, params = msg.type, msg.parameters
        if kind == "ping":
            self.stats.pings += 1
            await self.send("pong")
        elif kind == "close":
            await self.send("closed")
            self.closed_reason = self.closed_reason or f"Genesys closed the session ({params.get('reason', '?')})"
            self.closed.set()
            return "close"
        elif kind == "dtmf":
            digit = params.get("digit")
            if isinstance(digit, str) and len(digit) == 1:
                self.stats.dtmf.append(digit)
                return digit
            await self.protocol_error(f"invalid message: dtmf digit {digit!r:.10}")
        elif kind == "paused":
            self.paused = True
            log.info("[%s] Genesys paused the audio (hold)", self.call_id)
        elif kind == "resumed":
            self.paused = False
            log.info("[%s] Genesys resumed the audio", self.call_id)
        elif kind == "update":
            await self.send("updated")
        elif kind == "playback_started":
            self.stats.playbacks += 1
        elif kind == "error":
            log.info("[%s] Genesys reports an error: %s %s", self.call_id, params.get("code"),
                     str(params.get("message"))[:200])
        elif kind not in ("playback_completed", "discarded", "open"):
            if self.stats.bad_messages < LOGGED_BAD:
                log.info("[%s] unknown AudioHook message %r ignored", self.call_id, kind[:40])
        return None


class GenesysInputTransport(ReceivingInput, BaseInputTransport):
    def __init__(self, session: GenesysSession, params: TransportParams, **kwargs):
        super().__init__(params, **kwargs)
        self._session = session

    async def process_frame(self, frame: Frame, direction: FrameDirection):
        if isinstance(frame, TransferCallFrame) and direction == FrameDirection.UPSTREAM:
            # the transfer is Genesys's to make: hand the call back once the last words play
            log.info("[%s] transfer to %s:%s: handing the call back to Genesys", self._session.call_id,
                     frame.kind, frame.target)
            self._session.pending_transfer = frame
            await self.push_frame(EndWorkerFrame(reason=f"transfer to {frame.kind}:{frame.target}"),
                                  FrameDirection.UPSTREAM)
            return
        await super().process_frame(frame, direction)

    async def _receive(self):
        session = self._session
        channels = len(session.media.channels)
        external = session.media.channels.index("external")
        rest = b""
        reason = "socket closed"
        async for msg in session.ws:
            if msg.type == WSMsgType.BINARY:
                if session.paused or session.closed.is_set():
                    session.stats.audio_dropped_paused += len(msg.data)
                    continue
                data = rest + msg.data
                whole = len(data) - len(data) % channels
                data, rest = data[:whole], data[whole:]
                session.stats.audio_in_bytes += len(data)
                pcm = ulaw_decode(data[external::channels] if channels > 1 else data)
                for i in range(0, len(pcm), FRAME_SAMPLES):
                    session.stats.frames.in_frames += 1
                    await self.push_audio_frame(InputAudioRawFrame(
                        audio=pcm[i:i + FRAME_SAMPLES].tobytes(), sample_rate=SAMPLE_RATE_HZ, num_channels=1))
            elif msg.type == WSMsgType.TEXT:
                got = await session.handle(msg.data)
                if got == "close":
                    break
                if got is not None:
                    if self.recorder is not None:
                        self.recorder.key_pressed()
                    key = keypad_frame(got, session.call_id)
                    if key is not None:
                        await self.push_frame(key)
            else:
                reason = f"socket {msg.type.name.lower()}"
                break
        session.closed_reason = session.closed_reason or reason
        log.info("[%s] AudioHook session ended: %s", session.call_id, session.closed_reason)
        await session.on_closed(session.closed_reason)


class GenesysOutputTransport(SentIsPlayedOutput, BaseOutputTransport):
    def __init__(self, session: GenesysSession, params: TransportParams, **kwargs):
        super().__init__(params, tracker=session.tracker, call_id=session.call_id, frames=session.stats.frames,
                         **kwargs)
        self._session = session

    async def _clear_wire(self, utterance: Utterance | None) -> None:
        self._pacer.idle()
        if utterance is not None and await self._session.send("event", {"entities": [{"type": "barge_in",
                                                                                          "data": {}}]}):
            self._session.stats.barge_ins += 1

    async def write_audio_frame(self, frame: OutputAudioRawFrame) -> bool:
        session = self._session
        if session.ws.closed or session.disconnected:
            return False
        if frame.sample_rate != SAMPLE_RATE_HZ:  # the base class resamples; this is a guard
            log.warning("[%s] dropping audio at %d Hz", session.call_id, frame.sample_rate)
            return False
        pcm = np.frombuffer(frame.audio, dtype=np.int16)
        for start in range(0, len(pcm), OUT_MESSAGE_SAMPLES):
            chunk = pcm[start:start + OUT_MESSAGE_SAMPLES]
            await self._pacer.wait(len(chunk) / SAMPLE_RATE_HZ)
            if self._muted:
                return True
            if not await session.send_audio(ulaw_encode(chunk)):
                return False
            self._tracker.audio_played(len(chunk) * 1000.0 / SAMPLE_RATE_HZ)
        return True


class GenesysTransport(BaseTransport):
    """Both halves of one Audio Connector session (after ``open`` and ``opened``)."""

    def __init__(self, session: GenesysSession, params: TransportParams | None = None):
        super().__init__()
        params = params or paced_transport_params(SAMPLE_RATE_HZ)
        self.session = session
        self._input = GenesysInputTransport(session, params, name=f"genesys-in-{session.call_id}")
        self._output = GenesysOutputTransport(session, params, name=f"genesys-out-{session.call_id}")

    def input(self) -> GenesysInputTransport:
        return self._input

    def output(self) -> GenesysOutputTransport:
        return self._output
