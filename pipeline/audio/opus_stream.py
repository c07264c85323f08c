"""An Ogg/Opus file written as it goes, and read back even when its writer died before closing it.

    w = OpusStreamWriter(path, sample_rate_hz=8000, channels=2)   # the file opened, still empty
    w.write(interleaved_int16_bytes)     # encoded; a whole Ogg page reaches the OS every ``page_s``
    w.close()                            # the encoder drained, the last page (end of stream) written
    pcm, rate = read_opus_frames(path)   # (n, channels) int16 at the rate that was written

Written with PyAV (``av``: FFmpeg's Ogg muxer over libopus, both inside its wheel), not soundfile
(libsndfile), because crash safety comes down to two knobs only FFmpeg's muxer gives from Python:
``page_duration`` (a page closes once it holds ``page_s`` of audio) and ``flush_packets`` (what is
muxed goes to the file at once, not into a 32 kB buffer). A writer killed mid-call leaves every
page closed before it, at most ``page_s`` of audio lost on top of what its caller had not yet
handed over. libsndfile holds up to a second a page with no Python knob for it (measured: 3 s
written, 2.0 s readable after SIGKILL, against 2.5 s here), and sets no exact bitrate.

Nothing is held in memory but the encoder's state and the page being filled. The encoder opens on
the first write, on the thread that writes (the caller runs it off the event loop); the file is
created at once, empty, so a folder that cannot be written to fails where the writer is made.
FFmpeg writes the file itself (its file protocol retries short writes; no Python buffer between).

Time alignment: libopus looks 312 samples (at 48 kHz) ahead; FFmpeg writes that as the Ogg
header's pre-skip, every decoder drops it, and the last page's granule position trims the last
frame's padding, so the decoded file has as many samples as were written and sample 0 is the
first one written (``tests/pipeline/test_opus_stream.py`` checks a click's place and the length).

Bitrate: ``bitrate_for(rate)`` for two channels, ``BITRATE_BPS`` at 8 kHz and ``WIDEBAND_BITRATE_BPS``
above. Below about 24 kbit/s libopus narrows the stereo image and one channel leaks into the
other, which a caller/agent recording cannot have (measured at 8 kHz: 16 kbit/s -6 dB, 24 kbit/s
-26 dB, 32 kbit/s -60 dB). At 16 kHz (a browser call), 32 kbit/s coded a soft onset (the "h" of
"hello", near -50 dBFS for 50 ms) quieter while the other channel spoke, so the caller's speech
began in the file 28-48 ms past where the call's record has it; at 48 kbit/s, 2-3 ms (the browser
recording test, ``tests/telephony/webrtc/test_webrtc_recording.py``, run repeatedly 2026-12-08). A minute is about 240 kB at 8 kHz and
360 kB at 16 kHz; a 16-bit WAV of the same is 1.9 MB and 3.8 MB.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import av
import av.error
import numpy as np

from pipeline.errors import AudioFormatError

__all__ = ["BITRATE_BPS", "OPUS_RATES_HZ", "WIDEBAND_BITRATE_BPS", "OpusStreamWriter", "bitrate_for",
           "read_opus_frames"]

BITRATE_BPS = 32_000            # two channels at 8 kHz (the phone)
WIDEBAND_BITRATE_BPS = 48_000   # two channels above 8 kHz (a browser call's 16 kHz)
OPUS_RATES_HZ = (8000, 12000, 16000, 24000, 48000)  # what libopus takes as input
_LAYOUTS = {1: "mono", 2: "stereo"}


def bitrate_for(sample_rate_hz: int) -> int:
    """The bitrate for a two-channel recording at ``sample_rate_hz`` (module docstring)."""
    return BITRATE_BPS if sample_rate_hz <= 8000 else WIDEBAND_BITRATE_BPS


@contextmanager
def _ffmpeg_errors(path: object) -> Iterator[None]:
    """FFmpeg's errors as ours, once, here; its errno errors stay OSErrors (a full disk reads as one)."""
    try:
        yield
    except OSError:
        raise
    except av.error.FFmpegError as exc:
        raise AudioFormatError(f"{path}: {exc}") from exc


class OpusStreamWriter:
    """16-bit PCM in, ``channels`` interleaved; not thread-safe (one writer thread owns it)."""

    def __init__(self, path: str | os.PathLike, *, sample_rate_hz: int, channels: int = 2,
                 page_s: float = 0.5, bitrate_bps: int | None = None):
        if sample_rate_hz not in OPUS_RATES_HZ:
            raise AudioFormatError(f"{path}: Opus takes {OPUS_RATES_HZ} Hz, not {sample_rate_hz}")
        if channels not in _LAYOUTS:
            raise AudioFormatError(f"{path}: {channels} channels (1 or 2 here)")
        self.path = Path(path)
        self.sample_rate_hz = sample_rate_hz
        self.channels = channels
        self.samples = 0
        self._page_us = max(1, int(page_s * 1e6))
        self._bitrate_bps = bitrate_for(sample_rate_hz) if bitrate_bps is None else bitrate_bps
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_bytes(b"")         # there from the start, as the call record says
        self._out: av.container.OutputContainer | None = None
        self._stream: av.AudioStream | None = None
        self._closed = False

    def _open(self) -> None:
        with _ffmpeg_errors(self.path):
            out = av.open(str(self.path), "w", format="ogg",
                          options={"page_duration": str(self._page_us), "flush_packets": "1"})
            stream = out.add_stream("libopus", rate=self.sample_rate_hz, layout=_LAYOUTS[self.channels])
            stream.bit_rate = self._bitrate_bps
            out.start_encoding()           # the two header pages, on disk before any audio
        self._out, self._stream = out, stream

    def write(self, interleaved: bytes) -> None:
        block = 2 * self.channels
        if len(interleaved) % block:
            raise AudioFormatError(f"{self.path}: {len(interleaved)} bytes is not whole {self.channels}-channel frames")
        if self._closed:
            raise AudioFormatError(f"{self.path}: written after it was closed")
        n = len(interleaved) // block
        if n == 0:
            return
        if self._out is None:
            self._open()
        frame = av.AudioFrame.from_ndarray(np.frombuffer(interleaved, "<i2").reshape(1, -1), format="s16",
                                           layout=_LAYOUTS[self.channels])
        frame.sample_rate = self.sample_rate_hz
        frame.pts = self.samples
        self.samples += n
        self._encode(frame)

    def _encode(self, frame: av.AudioFrame | None) -> None:
        assert self._out is not None and self._stream is not None
        with _ffmpeg_errors(self.path):
            self._out.mux(self._stream.encode(frame))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._out is None:
            self._open()                   # no audio: a valid file with its headers and nothing else
        try:
            self._encode(None)             # the encoder's last frames, padding trimmed by the granule
        finally:
            assert self._out is not None
            self._out.close()              # the last page, marked end of stream

    @property
    def seconds(self) -> float:
        return self.samples / self.sample_rate_hz


def _opus_head(raw: bytes, path: object) -> tuple[int, int]:
    """``(channels, input_sample_rate_hz)`` from the first Ogg page's OpusHead packet (RFC 7845)."""
    if len(raw) < 27 or raw[:4] != b"OggS":
        raise AudioFormatError(f"{path}: not an Ogg file")
    body = 27 + raw[26]
    head = raw[body:body + 19]
    if len(head) < 19 or head[:8] != b"OpusHead":
        raise AudioFormatError(f"{path}: an Ogg file, but not Opus")
    channels, _pre_skip, rate_hz = struct.unpack("<BHI", head[9:16])
    return channels, rate_hz


def read_opus_frames(path: str | os.PathLike) -> tuple[np.ndarray, int]:
    """``((n, channels) int16, sample_rate_hz)``, decoded and put back on the rate that was written
    (the OpusHead's input rate). A file whose writer died is read to its last whole page; a torn
    page after it is ignored."""
    with open(path, "rb") as f:
        channels, rate_hz = _opus_head(f.read(4096), path)
    if channels not in _LAYOUTS or rate_hz not in OPUS_RATES_HZ:
        raise AudioFormatError(f"{path}: {channels} channels at {rate_hz} Hz is not what is read here")
    chunks: list[np.ndarray] = []
    with _ffmpeg_errors(path):
        try:
            container = av.open(str(path))
        except av.error.EOFError:          # the headers and no audio page: a recording with no audio
            return np.zeros((0, channels), np.int16), rate_hz
    with container, _ffmpeg_errors(path):
        resampler = av.AudioResampler(format="s16", layout=_LAYOUTS[channels], rate=rate_hz)
        try:
            for frame in container.decode(audio=0):
                chunks += [f.to_ndarray().reshape(-1, channels) for f in resampler.resample(frame)]
        except av.error.InvalidDataError:   # a torn last page: what came before it stands
            pass
        chunks += [f.to_ndarray().reshape(-1, channels) for f in resampler.resample(None)]
    return (np.concatenate(chunks) if chunks else np.zeros((0, channels), np.int16)), rate_hz
