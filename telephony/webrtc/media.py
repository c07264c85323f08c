"""A browser call's media, measured: pipecat's SmallWebRTC transport with our own two tracks.

    transport = WebRTCCallTransport(connection, params, name="webrtc-WR...")
    transport.frames      # FrameCounts: caller frames lost/late, agent frames underrun/late
    transport.tracker     # PlayoutTracker: which agent words left before a barge-in

In (:class:`MeteredInputTrack`): every Opus frame aiortc decodes passes the
:class:`~telephony.audio_meter.InboundMeter` before pipecat resamples it. Its ``pts`` is the RTP
timestamp, so a jump in ``pts // samples`` is audio that never reached us (lost in the network,
or dropped late by aiortc's jitter buffer; browsers send 20 ms Opus frames, one size all call);
a frame 60 ms or more behind its ``pts`` on our clock came late.

Out (:class:`PlayoutTrack`, in place of pipecat's ``RawAudioTrack``): the agent's audio in 10 ms
frames on an absolute clock (``start + ts / rate - now``; the clock starts at the first ``recv``,
not when the track is made). It is the transport's own playout clock: each chunk taken for the
wire tells its utterance how much was played (``Utterance.played``), and words timed by the TTS
say which of them went out before a barge-in. A slot with nothing queued between two chunks of one
utterance is an underrun; a ``recv`` a whole frame late, a late frame. A written frame's future
resolves once no more than ``LEAD_CHUNKS`` chunks are queued ahead of its last one, so the media
sender brings the next frame 20-30 ms before it is needed (pipecat's resolves when the last chunk
is taken, leaving 10 ms, and a busy event loop turns that into gaps).

The output transport (:class:`WebRTCOutputTransport`) is a
:class:`~telephony.core.output.PlayoutOutput`, as the Twilio and SIP ones are: it feeds the
tracker, and on an interruption drops the queued audio and reports what was heard upstream. The
input transport (:class:`WebRTCInputTransport`) is a :class:`~telephony.core.output.RecordedInput`:
the caller's audio, after pipecat's resampling, goes to the call's recording.
"""

from __future__ import annotations

import asyncio
import fractions
import itertools
import logging
import time
from collections import deque
from dataclasses import dataclass
from collections.abc import Callable
from typing import cast

import numpy as np
from av import AudioFrame
from aiortc import MediaStreamTrack
from aiortc.mediastreams import MediaStreamError
from pipecat.frames.frames import InputAudioRawFrame, OutputAudioRawFrame
from pipecat.transports.base_transport import BaseTransport, TransportParams
from pipecat.transports.smallwebrtc.connection import SmallWebRTCConnection
from pipecat.transports.smallwebrtc.transport import (
    SmallWebRTCCallbacks,
    SmallWebRTCClient,
    SmallWebRTCInputTransport,
    SmallWebRTCOutputTransport,
    SmallWebRTCTransport,
)

from telephony.audio_meter import FRAME_S, FrameCounts, InboundMeter
from telephony.core.output import PlayoutOutput, RecordedInput
from telephony.core.recorder import CallRecorder
from telephony.playout import PlayoutTracker, Utterance

log = logging.getLogger(__name__)

CHUNK_S = 0.010
LEAD_CHUNKS = 2


@dataclass
class _Chunk:
    pcm: bytes
    utterance: Utterance | None
    done: asyncio.Future | None  # the written frame's future, on its last chunk


class PlayoutTrack(MediaStreamTrack):
    """The agent's voice to aiortc, paced and counted (see the module docstring)."""

    kind = "audio"

    def __init__(self, sample_rate_hz: int, counts: FrameCounts, sent: Callable[[bytes], None] | None = None):
        super().__init__()
        self.sample_rate_hz = sample_rate_hz
        self.counts = counts
        self._on_sent = sent  # each chunk of the agent's audio as it leaves (the call's recording)
        self._samples = int(sample_rate_hz * CHUNK_S)
        self._queue: deque[_Chunk] = deque()
        self._ts = 0
        self._start_s: float | None = None
        self._last: Utterance | None = None  # the utterance of the last chunk sent
        self._gap_chunks = 0  # empty slots since then
        self._half_frame = False  # a 20 ms frame is two chunks
        self._late_frame = False

    def add_audio(self, pcm: bytes, utterance: Utterance | None) -> asyncio.Future:
        """Queue int16 PCM at the track's rate; the future resolves when it is nearly all sent."""
        done = asyncio.get_running_loop().create_future()
        step = self._samples * 2
        if len(pcm) % step:
            pcm += bytes(step - len(pcm) % step)
        for i in range(0, len(pcm), step):
            last = i + step >= len(pcm)
            self._queue.append(_Chunk(pcm[i:i + step], utterance, done if last else None))
        self._release()
        return done

    def clear(self) -> None:
        """Barge-in: drop everything queued (its writers are released)."""
        for chunk in self._queue:
            if chunk.done is not None and not chunk.done.done():
                chunk.done.set_result(False)
        self._queue.clear()
        self._last, self._gap_chunks = None, 0

    def _release(self) -> None:
        for chunk in itertools.islice(self._queue, LEAD_CHUNKS + 1):
            if chunk.done is not None and not chunk.done.done():
                chunk.done.set_result(True)

    async def recv(self) -> AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        now = time.monotonic()
        if self._start_s is None:
            self._start_s = now
        due_s = self._start_s + self._ts / self.sample_rate_hz
        if due_s > now:
            await asyncio.sleep(due_s - now)
        late = time.monotonic() - due_s >= FRAME_S
        if self._queue:
            chunk = self._queue.popleft()
            self._release()
            self._sent(chunk, late)
            pcm = chunk.pcm
            if self._on_sent is not None:
                self._on_sent(pcm)
        else:
            if self._last is not None:
                self._gap_chunks += 1
            pcm = bytes(self._samples * 2)
        frame = AudioFrame.from_ndarray(np.frombuffer(pcm, np.int16)[None, :], format="s16", layout="mono")
        frame.sample_rate = self.sample_rate_hz
        frame.pts = self._ts
        frame.time_base = fractions.Fraction(1, self.sample_rate_hz)
        self._ts += self._samples
        return frame

    def _sent(self, chunk: _Chunk, late: bool) -> None:
        c = self.counts
        if chunk.utterance is not None and chunk.utterance is self._last and self._gap_chunks:
            c.out_underrun += (self._gap_chunks + 1) // 2  # 20 ms frames that had a hole
        self._last, self._gap_chunks = chunk.utterance, 0
        self._half_frame = not self._half_frame
        if self._half_frame:  # the first half of a 20 ms frame
            c.out_frames += 1
            self._late_frame = late
        elif late or self._late_frame:
            c.out_late += 1
        if chunk.utterance is not None:
            if chunk.utterance.sent_ms == 0:   # it begins now, not when its first chunk was queued
                chunk.utterance.began_at_s = time.monotonic()
            chunk.utterance.played(CHUNK_S * 1000.0)


class MeteredInputTrack:
    """Wraps pipecat's input track: every decoded frame passes the meter on its way in."""

    def __init__(self, track, meter: InboundMeter):
        self._track = track
        self._meter = meter

    async def recv(self):
        frame = await self._track.recv()
        if isinstance(frame, AudioFrame) and frame.pts is not None and frame.samples:
            self._meter.arrived(index=frame.pts // frame.samples, media_s=frame.pts / frame.sample_rate,
                                now_s=time.monotonic())
        return frame

    def __getattr__(self, name):
        return getattr(self._track, name)


class MeteredWebRTCClient(SmallWebRTCClient):
    """pipecat's client with our tracks in place of its own."""

    def __init__(self, connection: SmallWebRTCConnection, callbacks: SmallWebRTCCallbacks, counts: FrameCounts):
        super().__init__(connection, callbacks)
        self.counts = counts
        self.meter = InboundMeter(counts)
        self.recorder: CallRecorder | None = None  # the call's recording: the agent's audio as it leaves

    async def _handle_client_connected(self):
        # pipecat 1.14's, with a metered input track and a PlayoutTrack (audio only: no video)
        if not self._params:
            return
        track = self._webrtc_connection.audio_input_track()
        self._audio_input_track = MeteredInputTrack(track, self.meter) if track is not None else None
        if self._params.audio_out_enabled:
            if isinstance(self._audio_output_track, PlayoutTrack):  # connected again (renegotiation)
                self._audio_output_track.clear()  # its writers must not wait on a track nobody reads
                self._audio_output_track.stop()
            self._audio_output_track = PlayoutTrack(self._out_sample_rate, self.counts, sent=self._agent_sent)
            self._webrtc_connection.replace_audio_track(self._audio_output_track)
        await self._callbacks.on_client_connected(self._webrtc_connection)

    async def read_audio_frame(self):
        """pipecat 1.14's, reading each frame without a task of its own.

        pipecat awaits every 20 ms frame through ``asyncio.wait_for(track.recv(), 2.0)``, which
        on Python 3.11 wraps each read in a new task: three event-loop turns per frame before the
        frame moves on. With many calls on the loop a turn takes milliseconds, and the reader
        fell behind the browser's clock: under the 16-call mixed load about half of every WebRTC
        caller's frames reached the pipeline 60 ms or more late (``in_late``), none lost.
        ``asyncio.timeout`` bounds the same wait in the reading task itself."""
        assert self._audio_in_resampler is not None  # setup() builds it before the reader starts
        while True:
            track = self._audio_input_track
            if track is None:
                await asyncio.sleep(0.01)
                continue
            try:
                async with asyncio.timeout(2.0):
                    frame = await track.recv()
            except TimeoutError:
                if self._webrtc_connection.is_connected() and track.is_enabled():
                    log.warning("no audio from the browser for 2 s")
                frame = None
            except MediaStreamError:
                # the track is dead: every later recv() would fail alike; park until a
                # renegotiation brings a new one (as pipecat does)
                log.warning("the browser's audio track ended; waiting for a new one")
                self._audio_input_track = None
                frame = None
            if frame is None or not isinstance(frame, AudioFrame):
                await asyncio.sleep(0.01)
                continue
            resampled = (self._audio_in_resampler.resample(frame)
                         if frame.sample_rate != self._in_sample_rate
                         or frame.layout.name != self._audio_in_layout else [frame])
            for out in resampled:
                audio = InputAudioRawFrame(audio=out.to_ndarray().astype(np.int16).tobytes(),
                                           sample_rate=self._in_sample_rate,
                                           num_channels=self._audio_in_channels)
                audio.pts = frame.pts
                yield audio

    def _agent_sent(self, pcm: bytes) -> None:
        if self.recorder is not None:
            self.recorder.agent(pcm, self._out_sample_rate, playing=True)

    async def write_audio(self, pcm: bytes, utterance: Utterance | None) -> bool:
        track = self._audio_output_track
        if not (self._can_send() and isinstance(track, PlayoutTrack)):
            return False
        await track.add_audio(pcm, utterance)
        return True

    def clear_audio(self) -> None:
        if isinstance(self._audio_output_track, PlayoutTrack):
            self._audio_output_track.clear()


class WebRTCOutputTransport(PlayoutOutput, SmallWebRTCOutputTransport):
    """Feeds the playout tracker and reports the heard words on a barge-in (:class:`PlayoutOutput`).
    The call's recording takes the agent's audio from the :class:`PlayoutTrack` as it leaves,
    not as it is queued: the track is the browser's playout clock."""

    def __init__(self, client: MeteredWebRTCClient, params: TransportParams, tracker: PlayoutTracker,
                 *, call_id: str, **kwargs):
        self._metered = client
        super().__init__(client, params, tracker=tracker, call_id=call_id, **kwargs)

    @property
    def recorder(self) -> CallRecorder | None:
        return self._metered.recorder

    @recorder.setter
    def recorder(self, recorder: CallRecorder | None) -> None:
        self._metered.recorder = recorder

    def _record_agent(self, frame: OutputAudioRawFrame) -> None:
        """Recorded by the track as it leaves (``MeteredWebRTCClient._agent_sent``)."""

    async def _utterance_ended(self) -> None:
        self._tracker.finish()  # the last chunks are queued in the track: sent = played
        self.on_change()

    async def _clear_wire(self, utterance: Utterance | None) -> None:
        self._metered.clear_audio()

    async def write_audio_frame(self, frame: OutputAudioRawFrame) -> bool:
        if self._muted:
            return True
        utterance = self._tracker.current or self._tracker.begin()
        return await self._metered.write_audio(frame.audio, utterance)


class WebRTCInputTransport(RecordedInput, SmallWebRTCInputTransport):
    """pipecat's input, the caller's audio recorded on its way in (:class:`RecordedInput`)."""


class WebRTCCallTransport(SmallWebRTCTransport):
    """SmallWebRTC with the metered client and output transport; ``frames`` and ``tracker`` per call."""

    def __init__(self, connection: SmallWebRTCConnection, params: TransportParams, *, name: str = "webrtc",
                 call_id: str = "webrtc"):
        # pipecat 1.14's SmallWebRTCTransport.__init__, with our client (its own would register a
        # second set of handlers on the connection)
        BaseTransport.__init__(self, input_name=f"{name}-in", output_name=f"{name}-out")
        self._params = params
        self._callbacks = SmallWebRTCCallbacks(
            on_app_message=self._on_app_message,
            on_client_connected=self._on_client_connected,
            on_client_disconnected=self._on_client_disconnected,
            on_track_status=self._on_track_status,
        )
        self.frames = FrameCounts()
        self.tracker = PlayoutTracker()
        self._call_id = call_id
        self._client = MeteredWebRTCClient(connection, self._callbacks, self.frames)
        self._input = None
        self._output = None
        self._register_event_handler("on_app_message")
        self._register_event_handler("on_client_connected")
        self._register_event_handler("on_client_disconnected")

    def input(self) -> WebRTCInputTransport:
        if not isinstance(self._input, WebRTCInputTransport):    # pipecat types it as its own
            self._input = WebRTCInputTransport(self._client, self._params, name=self._input_name)
        return self._input

    def output(self) -> WebRTCOutputTransport:
        if not isinstance(self._output, WebRTCOutputTransport):   # pipecat types it as its own
            client = cast(MeteredWebRTCClient, self._client)      # made in __init__, above
            self._output = WebRTCOutputTransport(client, self._params, self.tracker,
                                                 call_id=self._call_id, name=self._output_name)
        return self._output
