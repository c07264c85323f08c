"""Audio as a pcap of G.711 RTP that sipp plays (``<exec play_pcap_audio="..."/>``): one 20 ms
PCMU packet every 20 ms, on Ethernet/IPv4/UDP (sipp reads the UDP payloads and their times, and
sends them to the far end's SDP address from its own media port)."""

from __future__ import annotations

import random
import struct
from pathlib import Path

import numpy as np

from pipeline.audio.g711 import ulaw_encode
from telephony.sip.rtp import RtpPacket

RATE_HZ = 8000
PACKET = 160  # samples: 20 ms


def _ip_udp(payload: bytes) -> bytes:
    udp = struct.pack("!HHHH", 6000, 6000, 8 + len(payload), 0) + payload
    header = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0x4000, 64, 17, 0,
                         bytes([127, 0, 0, 1]), bytes([127, 0, 0, 1]))
    checksum = sum(struct.unpack("!10H", header))
    checksum = (checksum & 0xFFFF) + (checksum >> 16)
    header = header[:10] + struct.pack("!H", ~checksum & 0xFFFF) + header[12:]
    ethernet = b"\x00" * 12 + b"\x08\x00"
    return ethernet + header + udp


def write_rtp_pcap(path: Path, pcm: np.ndarray) -> float:
    """``pcm`` (int16, 8 kHz) as PCMU RTP packets in ``path``; returns its length in seconds."""
    pcm = np.concatenate([pcm.astype(np.int16), np.zeros(-len(pcm) % PACKET, np.int16)])
    ssrc, seq, ts = random.getrandbits(32), random.getrandbits(16), random.getrandbits(32)
    out = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)]
    for i in range(len(pcm) // PACKET):
        rtp = RtpPacket(payload_type=0, sequence=(seq + i) & 0xFFFF, timestamp=(ts + i * PACKET) & 0xFFFFFFFF,
                        ssrc=ssrc, payload=ulaw_encode(pcm[i * PACKET:(i + 1) * PACKET]), marker=i == 0)
        frame = _ip_udp(bytes(rtp))
        t_us = 1_000_000 + i * 20_000
        out.append(struct.pack("<IIII", t_us // 1_000_000, t_us % 1_000_000, len(frame), len(frame)) + frame)
    path.write_bytes(b"".join(out))
    return len(pcm) / RATE_HZ
