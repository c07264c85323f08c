"""Audio frames that did not make it, per call and direction, counted the same way on every transport.

A frame is 20 ms of audio (a Twilio ``media`` chunk, an RTP packet, an Opus packet).

Caller -> agent (:class:`InboundMeter`, fed where the transport reads the caller's audio):
    ``in_frames`` frames that reached the transport
    ``in_lost``   frames that never did: gaps in the sender's numbering (Twilio ``chunk``, the RTP
                  timestamp of decoded Opus frames), frames the SIP jitter buffer concealed or
                  dropped because the pipeline had stopped reading
    ``in_late``   frames that arrived ``LATE_AFTER_S`` or more behind the sender's clock, measured
                  against the quickest transit seen (in the talkspurt, for RTP), or out of order

Agent -> caller (the output pacers: :class:`telephony.pacer.OutputPacer` for Twilio and SIP,
:class:`telephony.webrtc.media.PlayoutTrack` for WebRTC):
    ``out_frames``    frames of agent audio sent
    ``out_underrun``  frame slots inside an utterance that went by with no audio to send (the
                      caller heard a gap: the pipeline did not deliver in time)
    ``out_late``      frames sent a whole frame or more after their slot (the sender woke late)

A clean call has zero in every ``*_lost``, ``*_late`` and ``*_underrun``::

    counts = FrameCounts()
    meter = InboundMeter(counts)
    meter.arrived(index=chunk, media_s=timestamp_ms / 1000, now_s=time.monotonic())
    record.stats.update(counts.as_dict())   # {"frames_in": ..., "frames_in_lost": ..., ...}
"""

from __future__ import annotations

from dataclasses import dataclass, fields

FRAME_S = 0.020
LATE_AFTER_S = 0.060  # a typical jitter buffer's depth: later than this, a phone plays a gap


@dataclass
class FrameCounts:
    """One call's frame counters (both directions); transports and pacers add to them."""

    in_frames: int = 0
    in_lost: int = 0
    in_late: int = 0
    out_frames: int = 0
    out_underrun: int = 0
    out_late: int = 0

    def as_dict(self) -> dict[str, int]:
        """``frames_in``, ``frames_in_lost``, ... for the call record's ``stats``."""
        return {"frames_" + f.name.removesuffix("_frames"): getattr(self, f.name) for f in fields(self)}

    @property
    def missed(self) -> int:
        """Frames not delivered on time, both directions: the number a clean call keeps at zero."""
        return self.in_lost + self.in_late + self.out_underrun + self.out_late


MAX_GAP_FRAMES = 3000  # one minute of 20 ms frames: a gap beyond it is no loss but a jump


class InboundMeter:
    """Counts caller frames as they reach the transport: received, lost (numbering gaps), late.

    ``index`` is the frame's number on the sender's count (Twilio ``chunk``; ``pts // samples``
    for decoded RTP audio); pass ``None`` where another part counts the gaps (SIP's jitter
    buffer). ``media_s`` is where the frame starts on the sender's clock, ``now_s`` when it came.
    ``new_spurt`` (an RTP marker bit, a new sender) restarts the transit baseline, so a sender
    that stops its clock in silence is not counted late afterwards.
    """

    def __init__(self, counts: FrameCounts, *, late_after_s: float = LATE_AFTER_S):
        self.counts = counts
        self.late_after_s = late_after_s
        self._next: int | None = None
        self._min_transit_s: float | None = None

    def arrived(self, *, index: int | None, media_s: float, now_s: float, new_spurt: bool = False) -> None:
        c = self.counts
        c.in_frames += 1
        if index is not None:
            if self._next is not None and index < self._next:
                c.in_late += 1  # out of order or repeated: its place has passed
                return
            if self._next is not None and index - self._next <= MAX_GAP_FRAMES:
                c.in_lost += index - self._next
            # a larger jump is a sender's numbering gone wrong (one absurd chunk number), not
            # loss: counting it would add 1e15 to the call's lost frames; numbering resumes there
            self._next = index + 1
        transit_s = now_s - media_s
        if new_spurt or self._min_transit_s is None or transit_s < self._min_transit_s:
            self._min_transit_s = transit_s
        elif transit_s - self._min_transit_s >= self.late_after_s:
            c.in_late += 1

    def restart(self) -> None:
        """A new sender (RTP SSRC): its numbering and clock start afresh."""
        self._next = None
        self._min_transit_s = None
