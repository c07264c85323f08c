"""A pipecat transport over one Twilio Media Streams WebSocket (aiohttp).

In: ``media`` becomes ``InputAudioRawFrame`` (8 kHz PCM), ``dtmf`` becomes ``InputDTMFFrame``,
``mark`` echoes feed the :class:`PlayoutTracker`, ``stop`` or a closed socket ends the call.
A malformed or oversized message is logged with the call id and skipped: the call goes on.
Gaps in the ``chunk`` numbers count as lost frames, media arriving 60 ms or more behind its
``timestamp`` as late ones (:mod:`telephony.audio_meter`).

Out: agent audio leaves as mu-law ``media`` (100 ms a message) paced at real time against an
absolute clock, 120 ms (``LEAD_S``) ahead of Twilio's playout
(:class:`~telephony.pacer.OutputPacer`, which counts underruns and late frames), with a progress
``mark`` every 200 ms of audio and an end mark after each utterance; an interruption sends
``clear`` at once, and the tracker's verdict goes upstream as ``AgentSpeechHeardFrame``.

A warm transfer (:mod:`telephony.twilio.warm`) steers both halves: the input's ``on_transfer``
takes the agent's ``TransferCallFrame`` (otherwise the pipeline ends and the call hands over
after it); ``StreamLink.held`` keeps the caller's audio from the agent while they are on hold; the
output's ``route`` sends the agent's voice, with its marks, to another stream (the summary, to
the person), and ``speaking_to_caller`` tells the hold audio when to stay out of the way; a
stream whose ``StreamLink.leaving`` is set was closed because its call's TwiML was replaced (the
call joined a conference): its ``stop`` ends the stream for that reason, not as a hang-up.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

import numpy as np
from aiohttp import WSMsgType, web
from pipecat.frames.frames import (
    EndWorkerFrame,
    Frame,
    InputAudioRawFrame,
    OutputAudioRawFrame,
)
from pipecat.processors.frame_processor import FrameDirection
from pipecat.transports.base_input import BaseInputTransport
from pipecat.transports.base_output import BaseOutputTransport
from pipecat.transports.base_transport import BaseTransport, TransportParams

from pipeline.audio.g711 import ulaw_decode, ulaw_encode
from pipeline.frames import AgentSpeechHeardFrame, TransferCallFrame
from telephony.audio_meter import FrameCounts, InboundMeter
from telephony.core.output import PacedOutput, ReceivingInput, keypad_frame
from telephony.errors import ProtocolError
from telephony.pacer import paced_transport_params
from telephony.twilio.messages import Clear, Dtmf, Mark, Media, OutMark, OutMedia, Start, Stop, parse_twilio
from telephony.playout import PlayoutTracker, Utterance, UtteranceState

log = logging.getLogger(__name__)
LOGGED_BAD_MESSAGES = 5  # per call; after that one line per thousand (the count is in the record)

SAMPLE_RATE_HZ = 8000


class TwilioCallStats:
    """Counters a test or the call record can read."""

    def __init__(self) -> None:
        self.media_in = 0
        self.media_out_bytes = 0
        self.bad_messages = 0
        self.marks_sent = 0
        self.marks_echoed = 0
        self.clears_sent = 0
        self.dtmf: list[str] = []
        self.frames = FrameCounts()

    def as_dict(self) -> dict[str, int]:
        return {"media_in": self.media_in, "media_out_bytes": self.media_out_bytes,
                "bad_messages": self.bad_messages, "marks_sent": self.marks_sent,
                "marks_echoed": self.marks_echoed, "clears_sent": self.clears_sent,
                "dtmf": len(self.dtmf), **self.frames.as_dict()}


class StreamLink:
    """One stream's socket and call facts: what both halves of the transport use (and, for a
    warm transfer's briefing, the person's stream the agent's voice is routed to)."""

    def __init__(self, ws: web.WebSocketResponse, start: Start, call_id: str,
                 on_closed: Callable[[str], Awaitable[None]]):
        self.ws = ws
        self.start = start
        self.call_id = call_id
        self.on_closed = on_closed
        self.tracker = PlayoutTracker()
        self.stats = TwilioCallStats()
        self.closed_reason: str | None = None
        self.pending_transfer: TransferCallFrame | None = None
        self.held = False                  # on hold: the caller's audio reaches nobody
        self.leaving: str | None = None    # the TwiML is being replaced: why the stream will stop

    async def send(self, message) -> bool:
        if self.ws.closed:
            return False
        try:
            async with asyncio.timeout(5.0):
                await self.ws.send_str(message.to_json())
            return True
        except (ConnectionError, RuntimeError, TimeoutError) as exc:
            log.warning("[%s] send failed, the caller's socket is gone: %s", self.call_id, exc)
            return False


async def drain_playout(link: StreamLink, timeout_s: float = 5.0) -> bool:
    """After the pipeline ended: let the caller hear the last words before the socket closes.

    Twilio stops playing when the stream closes, so a farewell would be cut off. Reads the socket
    until every end mark sent has come back (or ``timeout_s``). Returns whether playout finished.
    """
    def waiting() -> bool:
        return any(u.end_mark_sent and u.state is UtteranceState.PLAYING for u in link.tracker.utterances)

    try:
        async with asyncio.timeout(timeout_s):
            while waiting() and not link.ws.closed:
                msg = await link.ws.receive()
                if msg.type not in (WSMsgType.TEXT, WSMsgType.BINARY):
                    break
                try:
                    message = parse_twilio(msg.data)
                except ProtocolError:
                    continue
                if isinstance(message, Mark):
                    link.stats.marks_echoed += 1
                    link.tracker.mark_echoed(message.name)
                elif isinstance(message, Stop):
                    link.closed_reason = "caller hung up (stop)"
                    break
    except TimeoutError:
        log.warning("[%s] the caller did not confirm the last words within %.1f s", link.call_id, timeout_s)
    return not waiting()


class TwilioInputTransport(ReceivingInput, BaseInputTransport):
    def __init__(self, transport: "TwilioTransport", link: StreamLink, params: TransportParams, **kwargs):
        super().__init__(params, **kwargs)
        self._transport = transport
        self._link = link
        self._meter = InboundMeter(link.stats.frames)
        # the call takes a transfer itself while the pipeline runs on (a warm one): True when it did
        self.on_transfer: Callable[[TransferCallFrame], Awaitable[bool]] | None = None

    async def process_frame(self, frame: Frame, direction: FrameDirection):
        if isinstance(frame, TransferCallFrame) and direction == FrameDirection.UPSTREAM:
            if self.on_transfer is not None and await self.on_transfer(frame):
                return
            # Twilio transfers by replacing the call's TwiML, which closes this stream: first let
            # the agent's words play out (the pipeline ends gracefully), then the call hands over.
            log.info("[%s] transfer to %s:%s requested", self._link.call_id, frame.kind, frame.target)
            self._link.pending_transfer = frame
            await self.push_frame(EndWorkerFrame(reason=f"transfer to {frame.kind}:{frame.target}"),
                                  FrameDirection.UPSTREAM)
            return
        await super().process_frame(frame, direction)

    async def _receive(self):
        link = self._link
        reason = "socket closed"
        async for msg in link.ws:
            if msg.type == WSMsgType.TEXT:
                raw: str | bytes = msg.data
            elif msg.type == WSMsgType.BINARY:
                raw = msg.data
            else:  # ERROR / CLOSE
                reason = f"socket {msg.type.name.lower()}"
                break
            try:
                message = parse_twilio(raw)
            except ProtocolError as exc:
                link.stats.bad_messages += 1
                n = link.stats.bad_messages
                if n <= LOGGED_BAD_MESSAGES or n % 1000 == 0:  # a flood must not flood the log
                    log.warning("[%s] bad Media Streams message skipped (%d so far): %.200s", link.call_id, n, exc)
                continue
            if isinstance(message, Media):
                link.stats.media_in += 1
                self._meter.arrived(index=message.chunk, media_s=message.timestamp_ms / 1000.0,
                                    now_s=time.monotonic())
                if link.held:   # on hold: nobody listens to the caller
                    continue
                pcm = ulaw_decode(message.payload)
                await self.push_audio_frame(
                    InputAudioRawFrame(audio=pcm.tobytes(), sample_rate=SAMPLE_RATE_HZ, num_channels=1)
                )
            elif isinstance(message, Mark):
                link.stats.marks_echoed += 1
                utt = link.tracker.mark_echoed(message.name)
                if utt is not None and utt.state is UtteranceState.HEARD:
                    self._transport.output().on_change()
                    await self._report_heard(utt)
            elif isinstance(message, Dtmf):
                link.stats.dtmf.append(message.digit)
                if self.recorder is not None:
                    self.recorder.key_pressed()
                key = keypad_frame(message.digit, link.call_id)
                if key is not None:
                    await self.push_frame(key)
            elif isinstance(message, Stop):
                reason = link.leaving or "caller hung up (stop)"
                break
            else:  # a second connected/start: out of order, harmless
                link.stats.bad_messages += 1
                if link.stats.bad_messages <= LOGGED_BAD_MESSAGES:
                    log.warning("[%s] unexpected %s mid-call skipped", link.call_id, type(message).__name__)
        link.closed_reason = link.closed_reason or reason
        log.info("[%s] media stream ended: %s", link.call_id, link.closed_reason)
        await link.on_closed(link.closed_reason)

    async def _report_heard(self, utt: Utterance) -> None:
        await self.push_frame(
            AgentSpeechHeardFrame(utterance=utt.number, text_sent=utt.text,
                                  text_heard=utt.heard_text(), complete=True),
            FrameDirection.DOWNSTREAM,
        )


class TwilioOutputTransport(PacedOutput, BaseOutputTransport):
    """The agent's voice as ``media``. ``route``: another stream it goes to instead (a warm
    transfer's summary to the person), marks and all; the caller's tracker keeps its utterances."""

    def __init__(self, transport: "TwilioTransport", link: StreamLink, params: TransportParams, **kwargs):
        super().__init__(params, tracker=link.tracker, call_id=link.call_id, frames=link.stats.frames, **kwargs)
        self._transport = transport
        self._link = link
        self.route: StreamLink | None = None

    @property
    def speaking_to_caller(self) -> bool:
        """An utterance is going out to the caller (from its first chunk to its end mark)."""
        return self._pacer.speaking and self.route is None

    async def _utterance_ended(self) -> None:
        # the media sender announces the end of an utterance right after its last audio chunk:
        # that is where the end mark belongs
        self._pacer.idle()
        name = self._link.tracker.end()
        if name is None:
            return
        self._counted_end()
        wire = self.route or self._link
        if await wire.send(OutMark(wire.start.stream_sid, name)):
            self._link.stats.marks_sent += 1
        self.on_change()

    async def _clear_wire(self, utterance: Utterance | None) -> None:
        self._pacer.idle()
        wire = self.route or self._link
        if utterance is not None and await wire.send(Clear(wire.start.stream_sid)):
            self._link.stats.clears_sent += 1

    async def write_audio_frame(self, frame: OutputAudioRawFrame) -> bool:
        link = self.route or self._link
        if link.ws.closed:
            return False
        if self._muted:
            log.debug("[%s] dropped a chunk of interrupted speech", link.call_id)
            return True
        pcm = np.frombuffer(frame.audio, dtype=np.int16)
        if frame.sample_rate != SAMPLE_RATE_HZ:  # the media sender resamples; this is a guard
            log.warning("[%s] dropping audio at %d Hz", link.call_id, frame.sample_rate)
            return False
        duration_s = len(pcm) / SAMPLE_RATE_HZ
        await self._pacer.wait(duration_s)
        if self._muted:  # interrupted while we waited for its slot
            return True
        if not await link.send(OutMedia(link.start.stream_sid, ulaw_encode(pcm))):
            return False
        self._link.stats.media_out_bytes += len(pcm)
        for name in self._link.tracker.audio_sent(duration_s * 1000.0):
            if await link.send(OutMark(link.start.stream_sid, name)):
                self._link.stats.marks_sent += 1
        return True


class TwilioTransport(BaseTransport):
    """Both halves of one Twilio call. Build it after ``connected`` and ``start`` were read."""

    def __init__(self, ws: web.WebSocketResponse, start: Start, *, call_id: str,
                 on_closed: Callable[[str], Awaitable[None]], params: TransportParams | None = None):
        super().__init__()
        params = params or paced_transport_params(SAMPLE_RATE_HZ)
        self.link = StreamLink(ws, start, call_id, on_closed)
        self._input = TwilioInputTransport(self, self.link, params, name=f"twilio-in-{call_id}")
        self._output = TwilioOutputTransport(self, self.link, params, name=f"twilio-out-{call_id}")

    def input(self) -> TwilioInputTransport:
        return self._input

    def output(self) -> TwilioOutputTransport:
        return self._output
