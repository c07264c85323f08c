"""The phone's speaker in a scripted Twilio caller: agent audio played 160 bytes a tick, marks
echoed when the audio queued before them has played, ``clear`` dropping what is unplayed.

    speaker = MarkedSpeaker()
    speaker.audio(payload)                   # an outbound ``media`` frame's mu-law bytes
    if not speaker.mark("m1"): echo("m1")    # nothing queued: Twilio echoes a mark at once
    played, marks = speaker.tick()           # every 20 ms: up to 160 bytes, marks now finished
    marks = speaker.clear()                  # ``clear``: unplayed audio dropped, its marks echoed
"""

from __future__ import annotations

import collections
from dataclasses import dataclass

from harness.callers.script import FRAME_BYTES


@dataclass(frozen=True, slots=True)
class _Mark:
    name: str


class MarkedSpeaker:
    def __init__(self) -> None:
        self._queue: collections.deque[bytes | _Mark] = collections.deque()
        self.queued_bytes = 0
        """Agent audio received and not yet played."""

    def __bool__(self) -> bool:
        """Anything (audio or a mark) still waits to be played."""
        return bool(self._queue)

    def audio(self, payload: bytes) -> None:
        self._queue.append(payload)
        self.queued_bytes += len(payload)

    def mark(self, name: str) -> bool:
        """Queue a mark behind the audio; False when nothing is queued (echo it now)."""
        if not self._queue:
            return False
        self._queue.append(_Mark(name))
        return True

    def tick(self) -> tuple[bytes, list[str]]:
        """Play up to one frame: -> (the bytes played, the marks whose audio has finished, in order)."""
        marks: list[str] = []
        while self._queue and isinstance(self._queue[0], _Mark):
            marks.append(self._queue.popleft().name)  # type: ignore[union-attr]
        played = bytearray()
        while self._queue and len(played) < FRAME_BYTES:
            head = self._queue.popleft()
            if isinstance(head, _Mark):
                marks.append(head.name)  # its audio finished part-way through this frame
                continue
            take = FRAME_BYTES - len(played)
            played += head[:take]
            if len(head) > take:
                self._queue.appendleft(head[take:])
        self.queued_bytes -= len(played)
        return bytes(played), marks

    def clear(self) -> list[str]:
        """Drop everything unplayed: -> the marks that were waiting (echoed at once, as Twilio does)."""
        pending = [item.name for item in self._queue if isinstance(item, _Mark)]
        self._queue.clear()
        self.queued_bytes = 0
        return pending
