"""Caller audio lost on the way to a browser call's server is counted, from the frames aiortc decodes.

(A clean call's zero is asserted in test_webrtc_heard.py.)
"""

from __future__ import annotations

import asyncio

from harness.callers.webrtc import place_call

DROPPED = {*range(150, 155), 260}  # packets 3.0-3.1 s and 5.2 s into the caller's audio
# aiortc 1.16's audio jitter buffer (capacity 16, prefetch 4) never fills a gap: once 16 packets
# wait behind it, it drops the gap *and* the 4 frames it was holding before it, and stays 15
# packets (300 ms) behind for the rest of the call
PREFETCHED = 4


def _replied(messages: list[dict]) -> bool:
    return any(m.get("type") == "transcript" and m.get("role") == "agent" and m.get("turn") == 1
               and m.get("final") for m in messages)


async def test_packets_lost_on_the_way_in_are_counted(webrtc_server, speech):
    pcm, rate_hz = speech
    base = f"http://127.0.0.1:{webrtc_server.port}"
    result = await place_call(base, pcm, rate_hz, until=_replied, timeout_s=30.0, lead_s=4.5,
                              drop_rtp=DROPPED.__contains__)
    assert _replied(result.messages)
    record = webrtc_server.store.get(result.call_id)
    for _ in range(50):
        if record.ended:
            break
        await asyncio.sleep(0.1)
    stats = record.stats
    assert stats["frames_in_lost"] == len(DROPPED) + 2 * PREFETCHED, stats
    assert stats["frames_in"] > 260 - 100, stats  # from when the pipeline started reading
    assert stats["frames_in_late"] > 100, stats  # everything after the first gap: 300 ms behind

