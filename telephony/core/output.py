"""What every transport does with the agent's voice and the caller's keys, written once.

    class TwilioOutputTransport(PacedOutput, BaseOutputTransport):     # PacedOutput: PlayoutOutput + a pacer
        async def _clear_wire(self, utterance): ...     # barge-in: stop what the far end still plays
        async def _utterance_ended(self): ...           # the media sender sent an utterance's last chunk

:class:`PlayoutOutput` goes before a pipecat output transport in the bases. It keeps the call's
:class:`~telephony.playout.PlayoutTracker` (which words left, and which the caller heard) and
handles a barge-in in one order for every transport:

1. ``InterruptionFrame``: mute (the media sender may still hand over the chunk it had taken;
   nothing may reach the caller until the next utterance starts);
2. the tracker closes the interrupted utterance, and the edge clears its wire (Twilio ``clear``,
   the WebRTC track's queue, the RTP pacer);
3. what the caller heard of it goes upstream as ``AgentSpeechHeardFrame(complete=False)``, and
   the call record is written (``on_change``);
4. then the base class (which drops the queued audio and may announce ``BotStoppedSpeaking``:
   that must not count the cut utterance as heard, so it comes last).

``TTSStartedFrame`` or ``OutputDTMFFrame`` unmutes; ``TTSTextFrame`` words are timed into the
tracker; ``BotStoppedSpeakingFrame`` (right after an utterance's last chunk) calls the edge's
``_utterance_ended``.

:class:`PacedOutput` adds what a phone line's output needs (Twilio, SIP): the agent's audio paced on
the caller's clock, the transport ready once started (:class:`SentIsPlayedOutput`: for lines with no playout echo, what
was sent was heard); :class:`ReceivingInput` is the matching
input side (one task reads the wire for the pipeline's life). :class:`RecordedInput` (under
``ReceivingInput``, and the browser's input on its own) hands the caller's audio to the recording.

:func:`keypad_frame` turns a key the caller pressed (Twilio's ``dtmf``, RFC 4733) into pipecat's
``InputDTMFFrame``, or None for a key pipecat's keypad lacks. A phone line's edge (Twilio, SIP,
Genesys) also calls its recorder's ``key_pressed`` there: the key's tone must not stay in the
recording (a browser's keypad sends no tone).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from pipecat.audio.dtmf.types import KeypadEntry
from pipecat.frames.frames import (
    BotStoppedSpeakingFrame,
    CancelFrame,
    EndFrame,
    Frame,
    InputDTMFFrame,
    InputAudioRawFrame,
    InterruptionFrame,
    OutputAudioRawFrame,
    OutputDTMFFrame,
    StartFrame,
    TTSStartedFrame,
    TTSTextFrame,
)
from pipecat.processors.frame_processor import FrameDirection

from pipeline.frames import AgentSpeechHeardFrame
from telephony.audio_meter import FrameCounts
from telephony.core.recorder import CallRecorder
from telephony.pacer import LEAD_S, OutputPacer
from telephony.playout import PlayoutTracker, Utterance

log = logging.getLogger(__name__)


class PlayoutOutput:
    """Mixin for a pipecat output transport: the tracker, mute and barge-in (module docstring)."""

    def __init__(self, *args, tracker: PlayoutTracker, call_id: str, **kwargs):
        super().__init__(*args, **kwargs)
        self._tracker = tracker
        self._call_id = call_id
        self._muted = False
        # what was said or heard changed (an utterance ended, was heard, was cleared): the
        # supervisor points this at the call record
        self.on_change: Callable[[], None] = lambda: None
        self.recorder: CallRecorder | None = None  # the call's recording, when it is recorded

    @property
    def tracker(self) -> PlayoutTracker:
        return self._tracker

    # -- for the edge ---------------------------------------------------------------------------

    async def _clear_wire(self, utterance: Utterance | None) -> None:
        """Barge-in: stop what the far end would still play (``utterance``: the one cut, if any)."""

    async def _utterance_ended(self) -> None:
        """The media sender has just sent an utterance's last chunk."""

    # -- the one order ----------------------------------------------------------------------------

    async def process_frame(self, frame: Frame, direction: FrameDirection):
        if isinstance(frame, InterruptionFrame):
            self._muted = True
            await self._barge_in()
        elif isinstance(frame, (TTSStartedFrame, OutputDTMFFrame)):
            self._muted = False
        if isinstance(frame, TTSTextFrame) and direction == FrameDirection.DOWNSTREAM:
            self._tracker.add_words(frame.text, frame.pts)  # pts: the pipeline clock, ns
        await super().process_frame(frame, direction)  # type: ignore[misc]

    async def push_frame(self, frame: Frame, direction: FrameDirection = FrameDirection.DOWNSTREAM):
        if isinstance(frame, OutputAudioRawFrame) and direction == FrameDirection.DOWNSTREAM:
            # pipecat's media sender pushes a chunk on right after the edge's write_audio_frame took
            # it: on the wire, unless the edge dropped it muted (a barge-in's leftovers)
            if not self._muted:
                self._record_agent(frame)
        elif isinstance(frame, BotStoppedSpeakingFrame) and direction == FrameDirection.DOWNSTREAM:
            await self._utterance_ended()
        await super().push_frame(frame, direction)  # type: ignore[misc]

    def _record_agent(self, frame: OutputAudioRawFrame) -> None:
        """A chunk of the agent's audio has gone on the wire: into the call's recording."""
        if self.recorder is not None:
            self.recorder.agent(frame.audio, frame.sample_rate)

    async def _barge_in(self) -> None:
        if self.recorder is not None:
            self.recorder.clear()
        utt = self._tracker.clear()
        await self._clear_wire(utt)
        if utt is None:
            return
        self.on_change()
        log.info("[%s] barge-in: utterance %d stopped after %.0f of %.0f ms",
                 self._call_id, utt.number, utt.heard_ms, utt.sent_ms)
        await self.push_frame(
            AgentSpeechHeardFrame(utterance=utt.number, text_sent=utt.text, text_heard=utt.heard_text(),
                                  complete=False),
            FrameDirection.UPSTREAM,
        )


class PacedOutput(PlayoutOutput):
    """Mixin for a phone line's output (Twilio, SIP): :class:`PlayoutOutput`, plus the agent's
    audio paced on the caller's clock (``self._pacer``, an :class:`~telephony.pacer.OutputPacer`
    ``LEAD_S`` ahead) and the transport ready once started. The edge idles the pacer when an
    utterance ends or the wire is cleared, and waits on it before each chunk it sends."""

    def __init__(self, *args, tracker: PlayoutTracker, call_id: str, frames: FrameCounts, **kwargs):
        super().__init__(*args, tracker=tracker, call_id=call_id, **kwargs)
        self._pacer = OutputPacer(frames, lead_s=LEAD_S)
        self.utterances_ended = 0            # the edge counts each one (``_counted_end``)
        self._ended = asyncio.Event()

    def _counted_end(self) -> None:
        """An utterance has gone out whole: a warm transfer waits on these (``utterance_end``)."""
        self.utterances_ended += 1
        self._ended.set()

    async def utterance_end(self, after: int, timeout_s: float) -> bool:
        """Wait until more than ``after`` utterances have gone out; False when none did in time."""
        try:
            async with asyncio.timeout(timeout_s):
                while self.utterances_ended <= after:
                    self._ended.clear()
                    await self._ended.wait()
        except TimeoutError:
            return False
        return True

    async def start(self, frame: StartFrame):
        await super().start(frame)  # type: ignore[misc]
        await self.set_transport_ready(frame)  # type: ignore[attr-defined]


class SentIsPlayedOutput(PacedOutput):
    """Mixin for a line with no playout echo (RTP, Genesys's AudioHook): audio paced at real time is
    taken as heard when it is sent, so an utterance is played out once its last chunk has gone."""

    async def _utterance_ended(self) -> None:
        self._pacer.idle()
        self._tracker.finish()  # sent in real time = played
        self.on_change()


class RecordedInput:
    """Mixin for any edge's input transport, before pipecat's ``BaseInputTransport``: the caller's
    audio, as the edge read it, goes to the call's recording before the pipeline."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.recorder: CallRecorder | None = None  # the call's recording, when it is recorded

    async def push_audio_frame(self, frame: InputAudioRawFrame):
        if self.recorder is not None:
            self.recorder.caller(frame.audio, frame.sample_rate)
        await super().push_audio_frame(frame)  # type: ignore[misc]


class ReceivingInput(RecordedInput):
    """Mixin for a phone line's input transport (Twilio, SIP), before pipecat's
    ``BaseInputTransport``: :class:`RecordedInput`, and one task reads the wire (the edge's
    ``_receive``), started with the pipeline (not if a ``CancelFrame`` overtook the ``StartFrame``)
    and cancelled when it ends."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._receive_task: asyncio.Task | None = None
        self._closing = False

    async def _receive(self) -> None:
        """Read the wire until the far end leaves; push what it sends into the pipeline."""
        raise NotImplementedError

    async def start(self, frame: StartFrame):
        await super().start(frame)  # type: ignore[misc]
        if self._receive_task is None and not self._closing:
            self._receive_task = self.create_task(self._receive())  # type: ignore[attr-defined]
        await self.set_transport_ready(frame)  # type: ignore[attr-defined]

    async def stop(self, frame: EndFrame):
        self._closing = True
        await super().stop(frame)  # type: ignore[misc]
        await self._stop_receiving()

    async def cancel(self, frame: CancelFrame):
        self._closing = True
        await super().cancel(frame)  # type: ignore[misc]
        await self._stop_receiving()

    async def _stop_receiving(self) -> None:
        if self._receive_task is not None:
            await self.cancel_task(self._receive_task)  # type: ignore[attr-defined]
            self._receive_task = None


def keypad_frame(digit: str, call_id: str) -> InputDTMFFrame | None:
    """The caller pressed ``digit``: pipecat's frame for it, or None (logged) when its keypad lacks it."""
    try:
        return InputDTMFFrame(button=KeypadEntry(digit))
    except ValueError:
        log.info("[%s] DTMF %r has no pipecat key; skipped", call_id, digit)
        return None
