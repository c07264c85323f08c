"""Agent audio paced at real time on an absolute clock, counting what went out late or not at all.

The Twilio and SIP output transports send each chunk after ``await pacer.wait(duration_s)``::

    pacer = OutputPacer(counts, lead_s=LEAD_S)   # keep 120 ms in the far end's playout buffer
    await pacer.wait(0.02); send(chunk)
    pacer.idle()                               # the utterance ended or was cut: the next one restarts the clock

The clock is ``next_s``: when the audio sent so far in this utterance finishes playing. A chunk is
due ``lead_s`` before it; we sleep until then, never summing sleeps. A chunk that arrives a whole
frame or more after ``next_s`` means the caller's playout ran dry: those frame slots count as
``out_underrun`` and the clock restarts at now. When the event loop wakes us so late that frames
leave a whole frame or more past their playout slot (past ``next_s``, not past the lead), those
frames count as ``out_late``. See :mod:`telephony.audio_meter`.

``paced_transport_params(rate)`` are the pipecat ``TransportParams`` for such a transport.

Why a lead, and why 100 ms frames: with many calls on one event loop, each frame from the voice
to the wire waits a loop turn at every hop, and a 20 ms frame with no slack behind it is a gap as
soon as one hop runs late. In bench_transports (16 SIP calls, 2 cores) the transports found the
queue empty at most underruns, with the voice well ahead: frames were late in transit, not
missing. What fixed it, measured together (interleaved runs, underrun frames of ~6,800):
``VoiceUtterance.speak`` yielding one frame per answer of the voice (up to 100 ms) instead of one per
20 ms, 100 ms output frames (``audio_out_10ms_chunks=10``: a fifth of the media sender's writes
and pushes), and ``LEAD_S`` ahead of the far end's clock (60 ms then; RTP receivers' jitter buffers
and Twilio's playout buffer hold it): 1,100-1,200 underruns before, 24-98 after. None of the three
alone did better than ~900. A lead of 120 ms then cut the mixed load's underruns (16 calls over
Twilio, WebRTC and SIP) from 127 to 27 in three interleaved rounds against 60 ms, most of them on
SIP (benchmarks/RESULTS.md). What it costs: up to 120 ms sent past a barge-in on SIP (Twilio's
``clear`` drops its buffer), and a reply's first frame waits until 100 ms of it is made (one call:
v2v within noise of before, ~250-270 ms). What underran after that fell at the start of replies
(many calls replying at once, the voice with nothing made ahead): the SSM voice's service now
makes a reply's first 200 ms before any of it leaves (``SSMTTSService.start_buffer_s``), and the
mixed load ran with none.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from pipecat.transports.base_transport import TransportParams

from telephony.audio_meter import FRAME_S, FrameCounts
from telephony.errors import ConfigError


LEAD_S = 0.12  # how far ahead of the far end's playout clock the paced transports send


class OutputPacer:
    def __init__(self, counts: FrameCounts, *, lead_s: float = 0.0, frame_s: float = FRAME_S,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep):
        if lead_s < 0 or frame_s <= 0:
            raise ConfigError("need lead_s >= 0 and frame_s > 0")
        self.counts = counts
        self.lead_s = lead_s
        self.frame_s = frame_s
        self._clock = clock
        self._sleep = sleep
        self._next_s: float | None = None  # None: between utterances

    @property
    def speaking(self) -> bool:
        return self._next_s is not None

    def idle(self) -> None:
        """The utterance ended (or was interrupted): the next audio starts a new clock."""
        self._next_s = None

    async def wait(self, duration_s: float) -> None:
        """Return when the next ``duration_s`` of audio is due; count it, and any gap before it."""
        now = self._clock()
        frames = max(1, round(duration_s / self.frame_s))
        if self._next_s is None:
            self._next_s = now
        else:
            behind_s = now - self._next_s
            if behind_s >= self.frame_s:  # the caller's playout ran dry this long
                self.counts.out_underrun += int(behind_s / self.frame_s)
                self._next_s = now
        due_s = self._next_s - self.lead_s
        if due_s > now:
            await self._sleep(due_s - now)
            if self._next_s is None:  # idle() ran while we slept (end of utterance, barge-in)
                self._next_s = self._clock()
            # woken so late that frames leave a whole frame or more past their playout slot
            # (the lead absorbs a late wake-up shorter than itself)
            late_s = self._clock() - self._next_s
            if late_s >= self.frame_s:
                self.counts.out_late += min(frames, int(late_s / self.frame_s))
        self._next_s += duration_s
        self.counts.out_frames += frames


def paced_transport_params(sample_rate_hz: int) -> TransportParams:
    """Mono audio in and out at ``sample_rate_hz``, 100 ms output frames (module docstring), no
    pipecat per-write timeout.

    pipecat guards each ``write_audio_frame`` with ``asyncio.wait_for(..., timeout)``, which on
    Python 3.11 wraps every 20 ms write in a task of its own: two more event-loop turns per frame
    on each call's output. With many calls a loop turn takes several milliseconds, so the chain
    fell behind real time and the caller's playout ran dry between frames that were already made
    (bench_transports, 16 SIP calls: 1090 agent frames underrun, 280-490 without the guard). Our
    writes are bounded anyway: the pacer sleeps at most a frame and a lead, UDP never blocks, and
    the Twilio socket's send has a timeout of its own."""
    params = TransportParams(
        audio_in_enabled=True,
        audio_in_sample_rate=sample_rate_hz,
        audio_out_enabled=True,
        audio_out_sample_rate=sample_rate_hz,
        audio_out_10ms_chunks=10,
    )
    params.audio_out_write_timeout_secs = None  # type: ignore[assignment]  # None: await the write
    return params
