"""A microphone for a browser under test: paced 16 kHz s16le audio into a PulseAudio pipe source.

    python -m tests.telephony.webrtc.mic_feeder FIFO CLIP.raw     # then "say\\n" on stdin

Writes silence in real time, 20 ms at a time, kept ``LEAD_S`` ahead of the clock so that a late
wake-up never leaves the source without audio (a gap would reach the browser as silence, and a
long one would end the caller's turn early). Each ``say`` line queues the clip. Runs in a process
of its own, so the test's busy event loop cannot delay it. Exits when stdin closes.
"""

from __future__ import annotations

import os
import select
import sys
import time

RATE_HZ = 16000
FRAME_BYTES = RATE_HZ // 50 * 2
LEAD_S = 0.2


def main(fifo: str, clip_path: str) -> int:
    clip = open(clip_path, "rb").read()
    pending = b""
    fd = os.open(fifo, os.O_WRONLY)
    t0, sent = time.monotonic(), 0
    try:
        while True:
            ready, _, _ = select.select([sys.stdin], [], [], 0)
            if ready:
                line = sys.stdin.readline()
                if not line:
                    return 0
                if line.strip() == "say":
                    pending += clip
            chunk, pending = pending[:FRAME_BYTES], pending[FRAME_BYTES:]
            chunk += bytes(FRAME_BYTES - len(chunk))
            os.write(fd, chunk)
            sent += 1
            time.sleep(max(0.0, t0 + sent * 0.02 - LEAD_S - time.monotonic()))
    except BrokenPipeError:
        return 0
    finally:
        os.close(fd)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
