"""A call's recording: two channels on the caller's playout clock, written as the call goes.

    recorder = CallRecorder.open(folder, call_id, sample_rate_hz=8000)   # folder/YYYY-MM-DD/<id>.opus
    recorder.caller(pcm, rate)     # the input transport, for each frame from the caller
    recorder.agent(pcm, rate)      # the output transport, for each chunk it put on the wire
    recorder.clear()               # barge-in: what was sent and not yet played is not heard
    recorder.key_pressed()         # the edge heard a key out of band: the caller's channel goes quiet around it
    recorder.close()               # hang-up: the rest written, the file closed whole

Channel 0 is the caller, channel 1 the agent as the caller heard it. The timeline is the
caller's audio: each caller frame moves it on by its length. The agent's audio is the far end's
playout buffer: a chunk plays right after the one before it, or now if the buffer ran dry, and
``clear`` empties it, so a reply cut by a barge-in stops where its playback stopped: where the
caller's clock is, which runs ahead of the frames read when the event loop reads late (it is
taken from the wall clock, anchored on the least late frame, at most ``MAX_READ_LAG_S`` ahead). Only the
audio past the timeline (the lead the pacer keeps, ~120 ms) waits in memory; the rest goes to disk
in batches of ``batch_s`` through one writer thread shared by every call (:class:`DiskWriter`), so
the event loop never waits on a file and the encoder never runs on it. The file is Ogg/Opus by
default, a 16-bit WAV with ``fmt="wav"`` (``pipeline.audio.recordings``); either keeps what reached
the disk when the process dies (at most ``batch_s`` + ``HOLD_S`` plus an Ogg page, 1.3 s, is lost).

Keypad tones never reach the file (card numbers keyed on the phone must not be kept, PCI DSS): on
the caller's channel, each 10 ms block where :class:`~pipeline.audio.dtmf_tones.DtmfToneDetector`
hears a key is written as silence, with ``TONE_GUARD_S`` either side (the tone's edges, an echo), and
so is ``KEY_BEFORE_S``..``KEY_AFTER_S`` around each key the edge reports out of band
(``key_pressed``: Twilio's ``dtmf``, RFC 4733, Genesys), whose tone may be partly in-band and
too faint or short to hear. The detector runs once a batch, on the batch, and the last
``HOLD_S`` of each batch waits for the next, so a tone found late is silenced from its start;
``keys_silenced`` counts the stretches.

Hooked in once for every transport: the output side in
:class:`~telephony.core.output.PlayoutOutput`, the input side in
:class:`~telephony.core.output.RecordedInput`, opened and closed by the
:class:`~telephony.core.supervisor.CallSupervisor`.
"""

from __future__ import annotations

import logging
import queue
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from pipeline.audio.dtmf_tones import DtmfToneDetector
from pipeline.audio.recordings import SUFFIXES, RecordingWriter, open_recording
from pipeline.errors import AudioFormatError
from pipeline.options import RecordingFormat

__all__ = ["CallRecorder", "DiskWriter", "prune_recordings"]

log = logging.getLogger(__name__)

MAX_AGENT_AHEAD_S = 60.0   # agent audio written faster than real time is kept this far ahead at most
MAX_READ_LAG_S = 2.0       # how far the caller's clock may be taken to run ahead of the frames read
TONE_GUARD_S = 0.04        # silenced either side of an in-band keypad tone
KEY_BEFORE_S = 0.3         # a key reported out of band: silenced this long before the report
KEY_AFTER_S = 0.3          # ... and after it (RFC 4733 reports a key as it starts, Twilio as it ends)
HOLD_S = 0.3               # of each batch, kept back for the next: the look-behind of both


class DiskWriter:
    """One daemon thread that does every recording's file work, in order per file."""

    _shared: DiskWriter | None = None
    _lock = threading.Lock()

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._failed: set[Path] = set()   # files a write failed on (said once each)
        self._thread = threading.Thread(target=self._run, name="recordings", daemon=True)
        self._thread.start()

    @classmethod
    def shared(cls) -> DiskWriter:
        with cls._lock:
            if cls._shared is None:
                cls._shared = cls()
            return cls._shared

    def write(self, file: RecordingWriter, data: bytes) -> None:
        self._queue.put((file, data))

    def close(self, file: RecordingWriter) -> threading.Event:
        done = threading.Event()
        self._queue.put((file, done))
        return done

    def _run(self) -> None:
        while True:
            file, what = self._queue.get()
            try:
                if isinstance(what, threading.Event):
                    file.close()
                else:
                    file.write(what)
            except (OSError, AudioFormatError) as exc:  # a full disk: the call goes on unrecorded, said once
                if file.path not in self._failed:
                    self._failed.add(file.path)
                    log.error("recording %s: %s; the rest of this call may be missing", file.path, exc)
            finally:
                if isinstance(what, threading.Event):
                    what.set()
                    self._failed.discard(file.path)


def _resample(pcm: np.ndarray, from_hz: int, to_hz: int) -> np.ndarray:
    if from_hz == to_hz or pcm.size == 0:
        return pcm
    n = int(round(pcm.size * to_hz / from_hz))
    x = np.arange(n) * (from_hz / to_hz)
    return np.interp(x, np.arange(pcm.size), pcm.astype(np.float32)).astype(np.int16)


class CallRecorder:
    def __init__(self, file: RecordingWriter, writer: DiskWriter, *, batch_s: float = 0.5,
                 clock: Callable[[], float] = time.monotonic):
        self.file = file
        self.path = file.path
        self.sample_rate_hz = file.sample_rate_hz
        self._writer = writer
        self._now = 0                        # timeline: caller samples so far
        self._agent = np.zeros(0, np.int16)  # agent samples not yet played, the first at _agent_at
        self._agent_at = 0
        self._out: list[np.ndarray] = []     # (n, 2) frames not yet handed to the writer
        self._out_samples = 0
        self._batch = int(batch_s * self.sample_rate_hz)
        self._hold = int(HOLD_S * self.sample_rate_hz)
        self._detector = DtmfToneDetector(self.sample_rate_hz)
        self._detected_to = 0                # timeline: caller samples the detector has had
        self._quiet: list[list[int]] = []    # [start, end) of the caller's channel to silence, in order
        self._quiet_done = 0                 # stretches written out already
        self._closed = False
        self._clock = clock
        self._t0: float | None = None        # when the caller's clock was 0 (the least late frame says)
        self._early_s: float | None = None   # when agent audio began playing before the caller's first frame

    @classmethod
    def open(cls, folder: str | Path, call_id: str, *, sample_rate_hz: int, fmt: RecordingFormat = "opus",
             writer: DiskWriter | None = None, clock: Callable[[], float] = time.monotonic) -> CallRecorder:
        name = re.sub(r"[^A-Za-z0-9._-]", "_", call_id)[:120] or "call"
        stem = Path(folder) / time.strftime("%Y-%m-%d") / name
        return cls(open_recording(stem, fmt, sample_rate_hz=sample_rate_hz, channels=2),
                   writer or DiskWriter.shared(), clock=clock)

    @property
    def started_at_s(self) -> float | None:
        """The monotonic time of the recording's first sample (None before the caller's first frame)."""
        return self._t0

    @property
    def seconds(self) -> float:
        return self._now / self.sample_rate_hz

    @property
    def keys_silenced(self) -> int:
        """How many stretches of the caller's channel were (or will be) written as silence for keys."""
        return self._quiet_done + len(self._quiet)

    def caller(self, pcm: bytes, sample_rate_hz: int) -> None:
        if self._closed:
            return
        said = _resample(np.frombuffer(pcm, np.int16), sample_rate_hz, self.sample_rate_hz)
        n = said.size
        t0 = self._clock() - (self._now + n) / self.sample_rate_hz
        self._t0 = t0 if self._t0 is None else min(self._t0, t0)
        if self._early_s is not None:   # the agent spoke before the caller's first frame (a browser's
            played = round((self._t0 - self._early_s) * self.sample_rate_hz)   # greeting): what played
            self._agent, self._early_s = self._agent[max(0, played):], None    # before second 0 is not in it
        heard = np.zeros(n, np.int16)
        start = self._agent_at - self._now   # where the agent's buffer begins within this frame
        if start < n and self._agent.size:
            take = min(n - start, self._agent.size)
            heard[start:start + take] = self._agent[:take]
            self._agent = self._agent[take:]
            self._agent_at += take
        self._now += n
        self._agent_at = max(self._agent_at, self._now) if not self._agent.size else self._agent_at
        self._out.append(np.column_stack((said, heard)))
        self._out_samples += n
        if self._out_samples >= self._batch + self._hold:
            self._flush(keep=self._hold)

    def agent(self, pcm: bytes, sample_rate_hz: int, *, playing: bool = False) -> None:
        """Agent audio put on the wire. ``playing``: it plays as it is handed over (a browser's
        track is paced at real time), so when the far end's buffer ran dry it starts where the
        caller's clock is, not where the frames read so far are (behind it when the loop is late);
        otherwise (a line paced on the caller's frames, as Twilio's and SIP's are) at the frames read."""
        if self._closed:
            return
        sent = _resample(np.frombuffer(pcm, np.int16), sample_rate_hz, self.sample_rate_hz)
        if not self._agent.size:
            # the far end's buffer ran dry: this plays now
            self._agent_at = self._playing_at() if playing else self._now
            if self._t0 is None:
                self._early_s = self._clock()
        room = int(MAX_AGENT_AHEAD_S * self.sample_rate_hz) - self._agent.size
        self._agent = np.concatenate((self._agent, sent[:max(0, room)]))

    def clear(self) -> None:
        """Barge-in: the agent's audio not yet played by the caller's clock is dropped."""
        self._agent = self._agent[:max(0, self._playing_at() - self._agent_at)]
        if not self._agent.size:
            self._agent_at = self._now

    def _playing_at(self) -> int:
        """Where on the timeline the caller's clock is now: the frames read so far, or, where the
        loop reads them late, the wall clock since the least late one (at most ``MAX_READ_LAG_S`` on)."""
        if self._t0 is None:
            return self._now
        by_clock = round((self._clock() - self._t0) * self.sample_rate_hz)
        return max(self._now, min(by_clock, self._now + int(MAX_READ_LAG_S * self.sample_rate_hz)))

    def key_pressed(self) -> None:
        """The edge reported a key (out of band) now: the caller's channel around it is silenced."""
        if not self._closed:
            rate = self.sample_rate_hz
            self._silence(self._now - int(KEY_BEFORE_S * rate), self._now + int(KEY_AFTER_S * rate))

    def close(self) -> threading.Event:
        """Write what is left (not the agent's unplayed audio) and close; the event is set once the
        file is closed on disk."""
        if not self._closed:
            self._closed = True
            self._flush()
            self._agent = np.zeros(0, np.int16)
            self._done = self._writer.close(self.file)
        return self._done

    def _flush(self, keep: int = 0) -> None:
        """Find the keys in what came since the last batch, silence them, and hand all but the last
        ``keep`` samples to the writer."""
        if not self._out:
            return
        out = np.concatenate(self._out)
        first = self._now - out.shape[0]     # timeline index of out[0]
        guard = int(TONE_GUARD_S * self.sample_rate_hz)
        for tone in self._detector.push(out[self._detected_to - first:, 0]):
            self._silence(tone.start - guard, tone.end + guard)
        self._detected_to = self._now
        for start, end in self._quiet:
            if end > first:
                out[max(0, start - first):max(0, end - first), 0] = 0
        cut = max(0, out.shape[0] - keep)
        if cut > 0:
            self._writer.write(self.file, out[:cut].astype("<i2").tobytes())
        self._out, self._out_samples = [out[cut:]], out.shape[0] - cut
        done = sum(1 for _, end in self._quiet if end <= first + cut)
        self._quiet_done += done
        del self._quiet[:done]

    def _silence(self, start: int, end: int) -> None:
        """Mark ``[start, end)`` of the caller's channel to be written as silence (merged with any
        stretch it touches)."""
        start = max(start, 0)
        kept = [q for q in self._quiet if q[1] < start or q[0] > end]
        touched = [q for q in self._quiet if not (q[1] < start or q[0] > end)]
        if touched:
            start, end = min(start, *(q[0] for q in touched)), max(end, *(q[1] for q in touched))
        self._quiet = sorted(kept + [[start, end]])


def prune_recordings(folder: str | Path, retention_days: int, *, now: float | None = None) -> int:
    """Delete the recordings under ``folder`` last written over ``retention_days`` ago (and the day
    folders left empty). Returns how many files went."""
    cutoff = (time.time() if now is None else now) - retention_days * 86400.0
    removed = 0
    root = Path(folder)
    for path in (p for suffix in SUFFIXES.values() for p in root.glob(f"*/*{suffix}")):
        try:
            if path.stat().st_mtime < cutoff:
                path.unlink()
                removed += 1
        except OSError as exc:
            log.warning("recordings: cannot remove %s: %s", path, exc)
    for day in root.glob("*/"):
        if day.is_dir() and not any(day.iterdir()):
            day.rmdir()
    return removed
