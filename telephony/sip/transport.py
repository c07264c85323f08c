"""A pipecat transport over one call's RTP session (:class:`telephony.sip.media.RtpSession`).

In: decoded 20 ms packets become ``InputAudioRawFrame`` (8 kHz), RFC 4733 key presses become
``InputDTMFFrame``. A ``TransferCallFrame`` that the agent pushes upstream reaches the input
transport and is handed to the call (``on_transfer``: a SIP REFER, or a warm transfer that steers
the output below).

Out: agent audio leaves as 20 ms RTP packets paced on an absolute clock
(:class:`~telephony.pacer.OutputPacer`: each packet's slot is 20 ms after the last, we send it
60 ms before its slot, for the caller's jitter buffer to hold, and sleep until then, never summing
sleeps; it counts underruns and late packets into ``session.stats.frames``); an
interruption drops the queued audio (pipecat's output base class) and restarts the clock. RTP has
no playout echo, so audio is heard as it is sent: the :class:`PlayoutTracker` is fed that way
(words timed by the TTS's word timestamps), and a barge-in reports the words already played
upstream as ``AgentSpeechHeardFrame``. ``OutputDTMFFrame`` is sent as RFC 4733.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

import numpy as np
from pipecat.frames.frames import (
    Frame,
    InputAudioRawFrame,
    OutputAudioRawFrame,
    OutputDTMFFrame,
    OutputDTMFUrgentFrame,
)
from pipecat.processors.frame_processor import FrameDirection
from pipecat.transports.base_input import BaseInputTransport
from pipecat.transports.base_output import BaseOutputTransport
from pipecat.transports.base_transport import BaseTransport, TransportParams

from pipeline.frames import TransferCallFrame
from telephony.sip.errors import SipError
from telephony.sip.media import SAMPLE_RATE_HZ, AudioIn, DtmfIn, RtpSession
from telephony.pacer import paced_transport_params
from telephony.core.output import ReceivingInput, SentIsPlayedOutput, keypad_frame
from telephony.playout import PlayoutTracker, Utterance

log = logging.getLogger(__name__)

PACKET_S = 0.02


class SipInputTransport(ReceivingInput, BaseInputTransport):
    def __init__(self, session: RtpSession, on_transfer: Callable[[TransferCallFrame], Awaitable[None]],
                 params: TransportParams, **kwargs):
        super().__init__(params, **kwargs)
        self._session = session
        self._on_transfer = on_transfer

    async def process_frame(self, frame: Frame, direction: FrameDirection):
        if isinstance(frame, TransferCallFrame) and direction == FrameDirection.UPSTREAM:
            await self._on_transfer(frame)
            return
        await super().process_frame(frame, direction)

    async def _receive(self):
        session = self._session
        while True:
            item = await session.queue.get()
            if isinstance(item, AudioIn):
                await self.push_audio_frame(
                    InputAudioRawFrame(audio=item.pcm, sample_rate=SAMPLE_RATE_HZ, num_channels=1))
            elif isinstance(item, DtmfIn):
                if self.recorder is not None:
                    self.recorder.key_pressed()
                key = keypad_frame(item.digit, session.call_id)
                if key is not None:
                    await self.push_frame(key)


class SipOutputTransport(SentIsPlayedOutput, BaseOutputTransport):
    """The agent's voice as RTP. A warm transfer steers it: ``route`` sends it to another leg (the
    summary to the person) and ``detached`` drops it (the legs are bridged, the agent has left);
    ``last_sent_s`` and ``utterances_ended`` tell the hold audio and the transfer when it speaks."""

    def __init__(self, session: RtpSession, tracker: PlayoutTracker, params: TransportParams, **kwargs):
        super().__init__(params, tracker=tracker, call_id=session.call_id, frames=session.stats.frames,
                         **kwargs)
        self._session = session
        self.route: RtpSession | None = None
        self.detached = False
        self.last_sent_s = 0.0        # monotonic time the agent's last packet went to the caller

    async def _clear_wire(self, utterance: Utterance | None) -> None:
        self._pacer.idle()  # RTP has no playout to clear: what was sent was played

    async def _utterance_ended(self) -> None:
        await super()._utterance_ended()
        self._counted_end()

    async def write_audio_frame(self, frame: OutputAudioRawFrame) -> bool:
        if self.detached:
            return True
        session = self.route or self._session
        if session.closed:
            return False
        if frame.sample_rate != SAMPLE_RATE_HZ:  # the base class resamples; this is a guard
            log.warning("[%s] dropping audio at %d Hz", session.call_id, frame.sample_rate)
            return False
        pcm = np.frombuffer(frame.audio, dtype=np.int16)
        for start in range(0, len(pcm), 160):
            await self._pacer.wait(PACKET_S)
            if self._muted:
                return True
            chunk = pcm[start:start + 160]
            if self.detached:
                return True
            session = self.route or self._session
            session.send_audio(chunk)
            if session is self._session:
                self.last_sent_s = time.monotonic()
            self._tracker.audio_played(len(chunk) * 1000.0 / SAMPLE_RATE_HZ)
        return True

    def _supports_native_dtmf(self) -> bool:
        return self._session.media.dtmf_payload_type is not None

    async def _write_dtmf_native(self, frame: OutputDTMFFrame | OutputDTMFUrgentFrame):
        buttons = frame.buttons or ([frame.button] if frame.button is not None else [])
        for button in buttons:
            try:
                await self._session.send_dtmf(str(button.value))
            except SipError as exc:
                log.warning("[%s] %s", self._session.call_id, exc)


class SipTransport(BaseTransport):
    """Both halves of one SIP call's media."""

    def __init__(self, session: RtpSession, *, on_transfer: Callable[[TransferCallFrame], Awaitable[None]],
                 params: TransportParams | None = None):
        super().__init__()
        params = params or paced_transport_params(SAMPLE_RATE_HZ)
        self.session = session
        self.tracker = PlayoutTracker()
        self._input = SipInputTransport(session, on_transfer, params, name=f"sip-in-{session.call_id}")
        self._output = SipOutputTransport(session, self.tracker, params, name=f"sip-out-{session.call_id}")

    def input(self) -> SipInputTransport:
        return self._input

    def output(self) -> SipOutputTransport:
        return self._output
