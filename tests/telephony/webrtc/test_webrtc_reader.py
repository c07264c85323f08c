"""The browser's audio is read without a task per frame (MeteredWebRTCClient.read_audio_frame).

pipecat 1.14 reads each 20 ms frame through ``asyncio.wait_for``, a new task per frame on Python
3.11: under the 16-call mixed load half of every WebRTC caller's frames reached the pipeline 60 ms
or more late (benchmarks/RESULTS.md). Ours reads the same frames, resampled the same way, in the
reading task itself.
"""

from __future__ import annotations

import asyncio
import fractions

import numpy as np
from av import AudioFrame, AudioResampler
from aiortc.mediastreams import MediaStreamError
from pipecat.transports.smallwebrtc.transport import SmallWebRTCClient

from telephony.webrtc.media import MeteredWebRTCClient

N = 50


class _Track:
    """aiortc's decoded frames: 48 kHz stereo s16, 20 ms each, all queued; then the track ends."""

    def __init__(self) -> None:
        self.frames = []
        for i in range(N):
            pcm = (np.full((1, 2 * 960), i, dtype=np.int16))
            frame = AudioFrame.from_ndarray(pcm, format="s16", layout="stereo")
            frame.sample_rate, frame.pts, frame.time_base = 48000, i * 960, fractions.Fraction(1, 48000)
            self.frames.append(frame)

    async def recv(self):
        if not self.frames:
            raise MediaStreamError
        return self.frames.pop(0)

    def is_enabled(self) -> bool:
        return True


class _Connection:
    def is_connected(self) -> bool:
        return True


def _client(cls):
    client = cls.__new__(cls)       # only what read_audio_frame uses, as pipecat's setup() sets it
    client._audio_input_track = _Track()
    client._webrtc_connection = _Connection()
    client._in_sample_rate, client._audio_in_channels, client._audio_in_layout = 16000, 1, "mono"
    client._audio_in_resampler = AudioResampler(format="s16", layout="mono", rate=16000)
    return client


async def _read(cls) -> tuple[list, int]:
    """The frames read until the track ends, and the tasks created meanwhile."""
    loop = asyncio.get_running_loop()
    created = 0
    default = loop.get_task_factory()

    def counting(loop, coro, **kwargs):
        nonlocal created
        created += 1
        return asyncio.Task(coro, loop=loop, **kwargs) if default is None else default(loop, coro, **kwargs)

    client = _client(cls)
    frames = []
    reader = client.read_audio_frame()
    loop.set_task_factory(counting)
    try:
        while client._audio_input_track is not None:
            frames.append(await reader.__anext__())
            if len(frames) == N - 2:        # the resampler holds back a little: enough read
                break
    finally:
        loop.set_task_factory(default)
        await reader.aclose()
    return frames, created


async def test_frames_are_read_without_a_task_each_and_as_pipecat_reads_them():
    ours, our_tasks = await _read(MeteredWebRTCClient)
    theirs, their_tasks = await _read(SmallWebRTCClient)
    assert our_tasks == 0
    assert their_tasks >= len(theirs)                 # pipecat's: one task per frame
    assert [f.audio for f in ours] == [f.audio for f in theirs]
    assert [f.pts for f in ours] == [f.pts for f in theirs]
    assert all(f.sample_rate == 16000 and f.num_channels == 1 for f in ours)
    assert {len(f.audio) for f in ours[1:]} == {640}  # 20 ms of 16-bit mono at 16 kHz
