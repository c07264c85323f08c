"""A flood of malformed and foreign packets at the SIP and RTP ports leaves a live call untouched."""

from __future__ import annotations

import asyncio
import random
import socket

from telephony.sip.rtp import RtpPacket

from .conftest import run_sipp, wait_for

FLOOD_PER_PORT = 1500


def _sip_junk(rng: random.Random, call_id: str) -> bytes:
    kind = rng.randrange(6)
    bye = (f"BYE sip:parley@127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:9;branch=z9hG4bK{rng.random()}\r\n"
           f"From: <sip:x@y>;tag=intruder\r\nTo: <sip:a@b>;tag=nope\r\nCall-ID: {call_id}\r\nCSeq: 9 BYE\r\n"
           "Content-Length: 0\r\n\r\n").encode()
    if kind == 0:
        return rng.randbytes(rng.randrange(0, 300))
    if kind == 1:  # truncated before the end of its headers
        return bye[: rng.randrange(1, bye.index(b"\r\n\r\n"))]
    if kind == 2:  # a byte flipped somewhere
        i = rng.randrange(len(bye))
        return bye[:i] + bytes([rng.randrange(256)]) + bye[i + 1:]
    if kind == 3:
        return bye.replace(b"Content-Length: 0", b"Content-Length: 999")
    if kind == 4:
        return b"\xff\xfe" + bye
    return bye.replace(b"tag=intruder", b"tag=intruder" + str(rng.random()).encode())  # well-formed, wrong dialog


def _rtp_junk(rng: random.Random) -> bytes:
    kind = rng.randrange(4)
    if kind == 0:
        return rng.randbytes(rng.randrange(0, 200))
    if kind == 1:
        return bytes([0x80 | 0x0F]) + rng.randbytes(rng.randrange(1, 40))  # 15 CSRCs announced, few sent
    if kind == 2:
        return bytes([0xA0, 0x00]) + rng.randbytes(10) + b"\x00" * 3 + b"\xff"  # padding longer than the packet
    return bytes(RtpPacket(rng.choice([8, 18, 96, 127]), rng.randrange(65536), 0, 1, rng.randbytes(160)))


async def test_flood_leaves_the_live_call_untouched(sip_server, seen, tmp_path):
    sipp = asyncio.create_task(run_sipp(sip_server, tmp_path, scenario="flood_call.xml"))
    await wait_for(lambda: any(c.session.port for c in sip_server.live.values()), timeout_s=5)
    [call] = sip_server.live.values()
    rng = random.Random(4733)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for i in range(FLOOD_PER_PORT):
            s.sendto(_sip_junk(rng, call.call_id), ("127.0.0.1", sip_server.port))
            s.sendto(_rtp_junk(rng), ("127.0.0.1", call.session.port))
            if i % 50 == 0:
                await asyncio.sleep(0.005)  # the loop shares the CPU with this sender
    result = await sipp
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    await wait_for(lambda: not sip_server.live)
    assert call.history == ["ringing", "answered", "acked", "bye-received", "ended"]
    assert call.record.end_reason == "caller hung up (BYE)"
    assert seen.dtmf == ["5"]  # the call's own media still got through after the flood
    # what the kernel did not drop from the full socket buffers was read, counted and discarded
    stats = call.session.stats
    assert stats.bad_packets + stats.foreign_packets >= FLOOD_PER_PORT * 0.5, stats
    assert stats.packets_in == 0 and stats.dropped_packets == 0
    assert sip_server.bad_datagrams >= FLOOD_PER_PORT * 0.3, sip_server.bad_datagrams
    assert sip_server.refused.get(481, 0) >= FLOOD_PER_PORT * 0.05  # well-formed BYEs of no dialog of ours
