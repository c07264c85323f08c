"""One call's RTP endpoint: a UDP socket from the port range, G.711 in and out, RFC 4733 DTMF.

Receiving (``datagram_received``, synchronous): a datagram from an unexpected address, one that
does not parse, or one of a payload type not negotiated is counted and dropped; audio goes
through the :class:`JitterBuffer` (a lost packet becomes 20 ms of silence) and is queued, decoded
to 8 kHz PCM, for the input transport; a telephone event is queued once, when its first packet
arrives (the retransmitted end packets share its timestamp; a late packet of an earlier event,
stamped before the newest one, is no new key). ``stats.frames``
(:class:`~telephony.audio_meter.FrameCounts`): packets the jitter buffer concealed and those
dropped on a full queue are ``in_lost``; packets arriving 60 ms or more behind their RTP
timestamp (against the talkspurt's quickest) are ``in_late``; the output transport adds the
``out_*`` counts.

Sending: :meth:`send_audio` writes one packet per call, numbering sequence and timestamp itself;
after an idle gap the timestamp jumps by the wall-clock time that passed and the marker bit is set
(RFC 3551 4.1). Pacing is the output transport's business. Nothing leaves before
:meth:`start_sending` (the call's ACK): an INVITE nobody confirms must not aim our audio at
whatever address its SDP named. Until then up to a second of packets is held, and sent on.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
import random
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from pipeline.audio.g711 import alaw_decode, alaw_encode, ulaw_decode, ulaw_encode
from telephony.audio_meter import FrameCounts, InboundMeter
from telephony.sip.errors import RtpParseError, SipError
from telephony.sip.rtp import DTMF_EVENTS, JitterBuffer, RtpPacket, TelephoneEvent
from telephony.sip.sdp import NegotiatedMedia

log = logging.getLogger(__name__)

SAMPLE_RATE_HZ = 8000
SAMPLES_PER_PACKET = 160  # 20 ms at 8 kHz
MAX_QUEUED = 500  # 10 s of audio: beyond this the pipeline is stuck and packets are dropped
MAX_HELD = 50  # 1 s of our audio held until the caller's ACK; older packets are dropped


def is_ip(host: str) -> bool:
    """Whether ``host`` is an IP literal (a name would be resolved, blocking, for every packet)."""
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


@dataclass
class MediaStats:
    packets_in: int = 0
    packets_out: int = 0
    bad_packets: int = 0
    foreign_packets: int = 0  # wrong source address or payload type
    dropped_packets: int = 0  # queue full
    dtmf_in: list[str] = field(default_factory=list)
    dtmf_out: list[str] = field(default_factory=list)
    frames: FrameCounts = field(default_factory=FrameCounts)

    def as_dict(self) -> dict[str, int]:
        return {"rtp_in": self.packets_in, "rtp_out": self.packets_out, "bad_packets": self.bad_packets,
                "foreign_packets": self.foreign_packets, "dropped_packets": self.dropped_packets,
                "dtmf_in": len(self.dtmf_in), "dtmf_out": len(self.dtmf_out), **self.frames.as_dict()}


@dataclass(frozen=True)
class AudioIn:
    pcm: bytes  # int16 little-endian, 8 kHz mono


@dataclass(frozen=True)
class DtmfIn:
    digit: str


class RtpSession(asyncio.DatagramProtocol):
    """The RTP side of one call. ``open()`` binds it; ``queue`` holds what the caller sent."""

    def __init__(self, call_id: str, media: NegotiatedMedia, *, allowed_sources: set[str],
                 jitter_depth: int = 3):
        self.call_id = call_id
        self.media = media
        self.allowed_sources = set(allowed_sources)
        self.stats = MediaStats()
        self.queue: asyncio.Queue[AudioIn | DtmfIn] = asyncio.Queue(MAX_QUEUED)
        self.port: int | None = None
        self._jitter = JitterBuffer(depth=jitter_depth)
        self._jitter_lost = 0  # of the current jitter buffer, already added to stats.frames
        self._meter = InboundMeter(self.stats.frames)
        self._transport: asyncio.DatagramTransport | None = None
        self._ssrc = random.getrandbits(32)
        self._seq = random.getrandbits(16)
        self._ts = random.getrandbits(32)
        self._last_sent_s: float | None = None
        self._in_ssrc: int | None = None
        self._last_event_ts: int | None = None
        self._event_ssrc: int | None = None
        self._last_samples = SAMPLES_PER_PACKET
        self._sending = False
        self._held: deque[RtpPacket] = deque(maxlen=MAX_HELD)
        self.last_packet_s: float | None = None   # monotonic time of the caller's last packet
        # set: the caller's decoded audio goes here instead of the queue (a warm transfer's hold,
        # where nobody listens, and its bridge, where the other leg does); keys still queue unless
        # ``key_tap`` takes them (the bridge)
        self.tap: Callable[[bytes], None] | None = None
        self.key_tap: Callable[[str], None] | None = None
        self._update_allowed(media)

    # -- lifecycle ----------------------------------------------------------------------------

    async def open(self, host: str, port_min: int, port_max: int) -> int:
        """Bind an even port in ``port_min..port_max`` (tried in random order); returns it."""
        loop = asyncio.get_running_loop()
        ports = list(range(port_min + (port_min & 1), port_max + 1, 2))
        random.shuffle(ports)
        for port in ports[:200]:
            try:
                self._transport, _ = await loop.create_datagram_endpoint(lambda: self, local_addr=(host, port))
            except OSError:
                continue
            self.port = port
            return port
        raise SipError(f"no free RTP port in {port_min}-{port_max}")

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
            self._transport = None

    @property
    def closed(self) -> bool:
        return self._transport is None

    def update(self, media: NegotiatedMedia) -> None:
        """A re-INVITE changed the remote address, direction (hold) or codec."""
        self.media = media
        self._update_allowed(media)

    def _update_allowed(self, media: NegotiatedMedia) -> None:
        if media.remote_address is not None:
            self.allowed_sources.add(media.remote_address[0])

    # -- receiving ----------------------------------------------------------------------------

    def datagram_received(self, data: bytes, addr) -> None:
        if addr[0] not in self.allowed_sources:
            self.stats.foreign_packets += 1
            return
        self.last_packet_s = time.monotonic()
        try:
            pkt = RtpPacket.parse(data)
        except RtpParseError:
            self.stats.bad_packets += 1
            return
        media = self.media
        if pkt.payload_type == media.dtmf_payload_type:
            self._on_event(pkt)
            return
        if pkt.payload_type != media.codec.payload_type:
            self.stats.foreign_packets += 1
            return
        self.stats.packets_in += 1
        new_sender = self._in_ssrc != pkt.ssrc
        if new_sender:  # a new stream (or the first): start the buffer afresh
            self._in_ssrc = pkt.ssrc
            self._jitter = JitterBuffer(depth=self._jitter.depth)
            self._jitter_lost = 0
            self._meter.restart()
        self._meter.arrived(index=None, media_s=pkt.timestamp / SAMPLE_RATE_HZ, now_s=time.monotonic(),
                            new_spurt=pkt.marker or new_sender)
        self._last_samples = len(pkt.payload) or SAMPLES_PER_PACKET
        released = self._jitter.push(pkt)
        self.stats.frames.in_lost += self._jitter.lost - self._jitter_lost
        self._jitter_lost = self._jitter.lost
        for item in released:
            if item is None:  # lost: conceal with silence as long as the packets around it
                pcm = bytes(2 * self._last_samples)
            else:
                decode = alaw_decode if media.codec.name.upper() == "PCMA" else ulaw_decode
                pcm = decode(item.payload).tobytes()
            self._enqueue(AudioIn(pcm))

    def _on_event(self, pkt: RtpPacket) -> None:
        try:
            event = TelephoneEvent.parse(pkt.payload)
        except RtpParseError:
            self.stats.bad_packets += 1
            return
        if self._last_event_ts is not None and pkt.ssrc == self._event_ssrc:
            ahead = (pkt.timestamp - self._last_event_ts) & 0xFFFFFFFF
            if ahead == 0 or ahead >= 0x80000000:  # RTP timestamps wrap: serial-number order
                return  # the same key press (continuation, retransmitted end), or a late packet of an earlier one
        self._last_event_ts, self._event_ssrc = pkt.timestamp, pkt.ssrc
        digit = event.digit
        if digit is None:
            log.debug("[%s] telephone event %d is not a key; ignored", self.call_id, event.event)
            return
        self.stats.dtmf_in.append(digit)
        self._enqueue(DtmfIn(digit))

    def _enqueue(self, item: AudioIn | DtmfIn) -> None:
        if self.tap is not None and isinstance(item, AudioIn):
            self.tap(item.pcm)
            return
        if self.key_tap is not None and isinstance(item, DtmfIn):
            self.key_tap(item.digit)
            return
        try:
            self.queue.put_nowait(item)
        except asyncio.QueueFull:
            self.stats.dropped_packets += 1
            if isinstance(item, AudioIn):
                self.stats.frames.in_lost += 1

    def error_received(self, exc: Exception) -> None:  # ICMP port unreachable and friends
        log.debug("[%s] RTP socket error: %s", self.call_id, exc)

    # -- sending ------------------------------------------------------------------------------

    def start_sending(self) -> None:
        """The caller confirmed the call (ACK): send what was held, then everything as it comes."""
        if self._sending:
            return
        self._sending = True
        held, self._held = list(self._held), deque(maxlen=MAX_HELD)
        for pkt in held:
            self._send(pkt)

    def _send(self, pkt: RtpPacket) -> None:
        remote = self.media.remote_address
        if self._transport is None or remote is None:
            return
        if not self._sending:
            self._held.append(pkt)
            return
        self._transport.sendto(bytes(pkt), remote)
        self.stats.packets_out += 1

    def _next_header(self, samples: int) -> tuple[int, int, bool]:
        """(sequence, timestamp, marker) for a packet of ``samples`` sent now."""
        now = time.monotonic()
        marker = False
        if self._last_sent_s is None or now - self._last_sent_s > 0.1:  # a new talkspurt
            marker = True
            if self._last_sent_s is not None:
                self._ts = (self._ts + int((now - self._last_sent_s) * SAMPLE_RATE_HZ)) & 0xFFFFFFFF
        self._last_sent_s = now
        seq, ts = self._seq, self._ts
        self._seq = (self._seq + 1) & 0xFFFF
        self._ts = (self._ts + samples) & 0xFFFFFFFF
        return seq, ts, marker

    def send_audio(self, pcm: np.ndarray) -> None:
        """Send one packet of int16 8 kHz PCM (normally 160 samples) unless on hold."""
        if self.media.on_hold:
            return
        encode = alaw_encode if self.media.codec.name.upper() == "PCMA" else ulaw_encode
        seq, ts, marker = self._next_header(len(pcm))
        self._send(RtpPacket(payload_type=self.media.codec.payload_type, sequence=seq, timestamp=ts,
                             ssrc=self._ssrc, payload=encode(pcm), marker=marker))

    async def send_dtmf(self, digit: str, duration_ms: int = 100) -> None:
        """Send one key press as RFC 4733 events: updates every 50 ms, the end packet three times."""
        pt = self.media.dtmf_payload_type
        if pt is None or digit not in DTMF_EVENTS or self.media.on_hold:
            raise SipError(f"cannot send DTMF {digit!r}: telephone-event not negotiated or on hold")
        event = DTMF_EVENTS.index(digit)
        seq, ts, _ = self._next_header(0)
        step = 400  # 50 ms
        total = duration_ms * SAMPLE_RATE_HZ // 1000
        first = True
        for dur in range(step, total, step):
            self._send(RtpPacket(pt, seq, ts, self._ssrc, bytes(TelephoneEvent(event, False, 10, dur)), marker=first))
            first = False
            seq, _, _ = self._next_header(0)
            await asyncio.sleep(0.05)
        end = bytes(TelephoneEvent(event, True, 10, min(total, 0xFFFF)))
        for i in range(3):
            if i:
                seq, _, _ = self._next_header(0)
            self._send(RtpPacket(pt, seq, ts, self._ssrc, end, marker=first and i == 0))
        self._ts = (ts + total) & 0xFFFFFFFF
        self.stats.dtmf_out.append(digit)


def random_tag() -> str:
    return os.urandom(6).hex()
