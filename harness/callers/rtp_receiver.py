"""RTP in, as the scripted SIP caller counts it: loss, order, duplicates, lateness and RFC 3550
jitter per sender (SSRC), summed for the call, and the energy clock its turn-taking listens to.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Final

import numpy as np

from pipeline.audio.g711 import ulaw_decode
from telephony.sip.errors import RtpParseError
from telephony.sip.rtp import RtpPacket, seq_delta

__all__ = ["RtpReceiveStats", "RtpReceiver"]

SAMPLE_RATE_HZ: Final = 8000
PACKET_SAMPLES: Final = 160
PCMU_PAYLOAD_TYPE: Final = 0


@dataclass
class RtpReceiveStats:
    received: int = 0
    lost: int = 0
    out_of_order: int = 0
    duplicates: int = 0
    late: int = 0
    foreign: int = 0  # not PCMU: another payload type, or a datagram that is not RTP
    ssrcs: int = 0  # RTP streams (senders) seen: 1 for a sound call
    jitter_ms: float = 0.0  # RFC 3550 interarrival jitter at the end of the call (the worst stream)
    max_late_ms: float = 0.0



class _Stream:
    """Sequence and timing bookkeeping of one SSRC."""

    def __init__(self, late_after_ms: float):
        self._late_after_ms = late_after_ms
        self.seen: set[int] = set()
        self.first_ext: int | None = None
        self.highest_ext = 0
        self._spurt: tuple[float, int] | None = None  # (arrival of the talkspurt's first packet, its ts)
        self._last_ts: int | None = None
        self._transit: float | None = None
        self.jitter_samples = 0.0

    def accept(self, pkt: RtpPacket, st: RtpReceiveStats) -> bool:
        """Count ``pkt`` into ``st``; False for a duplicate."""
        if self.first_ext is None:
            self.first_ext = self.highest_ext = pkt.sequence
            ext = pkt.sequence
        else:
            ext = self.highest_ext + seq_delta(pkt.sequence, self.highest_ext & 0xFFFF)
            if ext in self.seen:
                st.duplicates += 1
                return False
            if ext < self.highest_ext:
                st.out_of_order += 1
            self.highest_ext = max(self.highest_ext, ext)
            self.first_ext = min(self.first_ext, ext)
        self.seen.add(ext)
        return True

    @property
    def lost(self) -> int:
        return 0 if self.first_ext is None else self.highest_ext - self.first_ext + 1 - len(self.seen)

    def timing(self, pkt: RtpPacket, now: float, st: RtpReceiveStats) -> None:
        ts = pkt.timestamp
        # A talkspurt starts at the marker bit, or when the timestamp jumps past where it should be.
        new_spurt = self._spurt is None or pkt.marker or \
            (self._last_ts is not None and not 0 <= (ts - self._last_ts) & 0xFFFFFFFF <= 10 * PACKET_SAMPLES)
        if new_spurt:
            self._spurt = (now, ts)
        else:
            assert self._spurt is not None
            t0, ts0 = self._spurt
            due = t0 + ((ts - ts0) & 0xFFFFFFFF) / SAMPLE_RATE_HZ
            behind_ms = (now - due) * 1000
            if behind_ms > self._late_after_ms:
                st.late += 1
            st.max_late_ms = max(st.max_late_ms, behind_ms)
        self._last_ts = ts
        transit = now * SAMPLE_RATE_HZ - ts
        if self._transit is not None and not new_spurt:
            d = abs(transit - self._transit)
            self.jitter_samples += (d - self.jitter_samples) / 16
        self._transit = transit


class RtpReceiver:
    """RTP in: loss, order, lateness and jitter bookkeeping (per SSRC, summed), and the energy
    clock for turn-taking. More than one SSRC means more than one sender answered the call."""

    def __init__(self, changed: asyncio.Event, *, late_after_ms: float = 60.0,
                 energy_threshold: int = 300):
        self._late_after_ms = late_after_ms
        self._energy_threshold = energy_threshold
        self._changed = changed
        self.stats = RtpReceiveStats()
        self.chunks: list[np.ndarray] = []
        self._streams: dict[int, _Stream] = {}
        self.last_energy_t = float("-inf")
        self.energy_times: list[float] = []

    def on_packet(self, data: bytes, now: float) -> None:
        try:
            pkt = RtpPacket.parse(data)
        except RtpParseError:
            self.stats.foreign += 1
            return
        if pkt.payload_type != PCMU_PAYLOAD_TYPE:
            self.stats.foreign += 1
            return
        st = self.stats
        stream = self._streams.get(pkt.ssrc)
        if stream is None:
            stream = self._streams[pkt.ssrc] = _Stream(self._late_after_ms)
            st.ssrcs = len(self._streams)
        if not stream.accept(pkt, st):
            return
        st.received += 1
        st.lost = sum(s.lost for s in self._streams.values())
        stream.timing(pkt, now, st)
        st.jitter_ms = max(s.jitter_samples for s in self._streams.values()) * 1000 / SAMPLE_RATE_HZ
        pcm = ulaw_decode(pkt.payload)
        self.chunks.append(pcm)
        if pcm.size and int(np.abs(pcm.astype(np.int32)).max()) > self._energy_threshold:
            self.last_energy_t = now
            self.energy_times.append(now)
            self._changed.set()
