"""RTP (RFC 3550) packets, RFC 4733 telephone events, and the receive-side jitter buffer.

::

    pkt = RtpPacket.parse(datagram)     # or raises RtpParseError
    datagram = bytes(pkt)
    event = TelephoneEvent.parse(pkt.payload)

The jitter buffer favours latency: packets that arrive in order leave at once; a gap waits for
the missing packet until ``depth`` later packets have arrived, then is concealed. Duplicates and
packets older than what was already played are dropped; a jump of more than ``max_gap`` sequence
numbers (a new stream, a restarted sender) resynchronises. The first packet sets where playing
starts, so a packet older than the first one to arrive counts as late.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

from telephony.sip.errors import RtpParseError
from telephony.errors import ConfigError

__all__ = ["JitterBuffer", "RtpPacket", "TelephoneEvent", "DTMF_EVENTS"]

RTP_VERSION: Final = 2
_HEADER = struct.Struct("!BBHII")
# RFC 4733 section 3.2: events 0-15 are the DTMF keys
DTMF_EVENTS: Final = "0123456789*#ABCD"


@dataclass(frozen=True)
class RtpPacket:
    payload_type: int
    sequence: int
    timestamp: int
    ssrc: int
    payload: bytes = b""
    marker: bool = False
    csrc: tuple[int, ...] = ()
    extension: tuple[int, bytes] | None = None  # (profile, data: a multiple of 4 bytes)
    padding: int = 0  # padding bytes after the payload (written as zeros, the last one the count)

    def __post_init__(self) -> None:
        for name, bits in (("payload_type", 7), ("sequence", 16), ("timestamp", 32), ("ssrc", 32)):
            v = getattr(self, name)
            if not isinstance(v, int) or not 0 <= v < (1 << bits):
                raise RtpParseError(f"bad {name} {v!r}")
        if len(self.csrc) > 15 or any(not isinstance(c, int) or not 0 <= c < 1 << 32 for c in self.csrc):
            raise RtpParseError("bad CSRC list")
        if self.extension is not None:
            profile, data = self.extension
            if not 0 <= profile < 1 << 16 or len(data) % 4 or len(data) > 4 * 0xFFFF:
                raise RtpParseError("bad header extension")
        if not isinstance(self.padding, int) or not 0 <= self.padding <= 255:
            raise RtpParseError(f"bad padding {self.padding!r}")

    @classmethod
    def parse(cls, data: bytes) -> "RtpPacket":
        """Parse one RTP datagram. Raises :class:`RtpParseError` and nothing else."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise RtpParseError(f"expected bytes, got {type(data).__name__}")
        data = bytes(data)
        if len(data) < _HEADER.size:
            raise RtpParseError(f"RTP packet of {len(data)} bytes is shorter than its header")
        b0, b1, seq, ts, ssrc = _HEADER.unpack_from(data)
        if b0 >> 6 != RTP_VERSION:
            raise RtpParseError(f"RTP version {b0 >> 6}, not 2")
        pos = _HEADER.size
        cc = b0 & 0x0F
        if len(data) < pos + 4 * cc:
            raise RtpParseError("truncated CSRC list")
        csrc = struct.unpack_from(f"!{cc}I", data, pos)
        pos += 4 * cc
        extension = None
        if b0 & 0x10:
            if len(data) < pos + 4:
                raise RtpParseError("truncated header extension")
            profile, words = struct.unpack_from("!HH", data, pos)
            pos += 4
            if len(data) < pos + 4 * words:
                raise RtpParseError("truncated header extension data")
            extension = (profile, data[pos: pos + 4 * words])
            pos += 4 * words
        end = len(data)
        padding = 0
        if b0 & 0x20:
            padding = data[-1]
            if padding == 0 or end - padding < pos:
                raise RtpParseError(f"bad padding count {padding}")
            end -= padding
        return cls(payload_type=b1 & 0x7F, sequence=seq, timestamp=ts, ssrc=ssrc, payload=data[pos:end],
                   marker=bool(b1 & 0x80), csrc=tuple(csrc), extension=extension, padding=padding)

    def __bytes__(self) -> bytes:
        b0 = (RTP_VERSION << 6) | (0x20 if self.padding else 0) | (0x10 if self.extension else 0) | len(self.csrc)
        b1 = (0x80 if self.marker else 0) | self.payload_type
        out = [_HEADER.pack(b0, b1, self.sequence, self.timestamp, self.ssrc)]
        out += [struct.pack("!I", c) for c in self.csrc]
        if self.extension is not None:
            profile, ext = self.extension
            out.append(struct.pack("!HH", profile, len(ext) // 4) + ext)
        out.append(self.payload)
        if self.padding:
            out.append(bytes(self.padding - 1) + bytes([self.padding]))
        return b"".join(out)


@dataclass(frozen=True)
class TelephoneEvent:
    """The 4-byte RFC 4733 payload: event, end bit, volume (dBm0, negated), duration (samples)."""

    event: int
    end: bool = False
    volume: int = 10
    duration: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.event <= 255 or not 0 <= self.volume <= 63 or not 0 <= self.duration <= 0xFFFF:
            raise RtpParseError(f"bad telephone event {self!r}")

    @classmethod
    def parse(cls, payload: bytes) -> "TelephoneEvent":
        if not isinstance(payload, (bytes, bytearray)) or len(payload) < 4:
            raise RtpParseError("telephone-event payload shorter than 4 bytes")
        event, flags, duration = struct.unpack_from("!BBH", payload)
        return cls(event=event, end=bool(flags & 0x80), volume=flags & 0x3F, duration=duration)

    def __bytes__(self) -> bytes:
        return struct.pack("!BBH", self.event, (0x80 if self.end else 0) | self.volume, self.duration)

    @property
    def digit(self) -> str | None:
        return DTMF_EVENTS[self.event] if self.event < len(DTMF_EVENTS) else None


def seq_delta(a: int, b: int) -> int:
    """``a - b`` on the 16-bit sequence circle, in -32768..32767."""
    return ((a - b + 0x8000) & 0xFFFF) - 0x8000


class JitterBuffer:
    """Reorders one stream's packets; yields them in sequence order, ``None`` for a lost one.

    ``push(packet)`` returns what may be played now. Synchronous and free of I/O.
    """

    def __init__(self, depth: int = 3, max_gap: int = 100):
        if depth < 0 or max_gap <= depth:
            raise ConfigError("need 0 <= depth < max_gap")
        self.depth = depth
        self.max_gap = max_gap
        self._next: int | None = None
        self._pending: dict[int, RtpPacket] = {}
        self.lost = 0
        self.late = 0
        self.resyncs = 0

    def push(self, packet: RtpPacket) -> list[RtpPacket | None]:
        if self._next is None:
            self._next = packet.sequence
        delta = seq_delta(packet.sequence, self._next)
        if delta < 0 or packet.sequence in self._pending:
            if delta < -self.max_gap:  # far behind: the sender restarted
                return self._resync(packet)
            self.late += 1
            return []
        if delta > self.max_gap:
            return self._resync(packet)
        self._pending[packet.sequence] = packet
        return self._release()

    def _resync(self, packet: RtpPacket) -> list[RtpPacket | None]:
        out = self.flush()
        self.resyncs += 1
        self._next = packet.sequence
        self._pending[packet.sequence] = packet
        return out + self._release()

    def _release(self) -> list[RtpPacket | None]:
        out: list[RtpPacket | None] = []
        assert self._next is not None
        while self._pending:
            pkt = self._pending.pop(self._next, None)
            if pkt is None:
                if len(self._pending) <= self.depth:
                    break
                out.append(None)  # waited long enough: conceal it
                self.lost += 1
            else:
                out.append(pkt)
            self._next = (self._next + 1) & 0xFFFF
        return out

    def flush(self) -> list[RtpPacket | None]:
        """Everything still held, in order, gaps included (end of stream)."""
        out: list[RtpPacket | None] = []
        while self._pending:
            assert self._next is not None
            pkt = self._pending.pop(self._next, None)
            if pkt is None:
                self.lost += 1
            out.append(pkt)
            self._next = (self._next + 1) & 0xFFFF
        return out
