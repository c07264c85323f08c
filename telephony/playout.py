"""What the caller really heard of each agent utterance: from Twilio ``mark`` echoes, or as sent.

Twilio plays the ``media`` we send in order and echoes a ``mark`` when the audio before it has
played, or at once when that audio was cleared. So the server sends a progress mark every
``mark_every_ms`` of agent audio (``u3:400`` = utterance 3, 400 ms played) and one at its end
(``u3:end``). The furthest mark echoed *before* we sent ``clear`` is what the caller heard; marks
echoed after a ``clear`` are flushes and say nothing.

Transports with no playout echo (RTP for SIP, WebRTC) count audio as heard as it leaves their
output pacer: ``audio_played(ms)`` (or ``Utterance.played`` for audio queued per utterance) and
``finish()`` at the end of an utterance instead of marks.

Words are placed on the utterance's audio timeline by their TTS timestamps when the TTS gives
them (``add_words(text, pts_ns)``: pipecat's ``TTSTextFrame.pts``, relative to the utterance's
first word); otherwise by their share of the text, spread over the audio sent.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from enum import Enum

log = logging.getLogger(__name__)


class UtteranceState(Enum):
    PLAYING = "playing"
    HEARD = "heard"  # the end mark came back: every word was played
    CLEARED = "cleared"  # barge-in: only the words before the last progress mark were played


@dataclass
class Utterance:
    number: int
    began_at_s: float = field(default_factory=time.monotonic)
    sent_ms: float = 0.0
    heard_ms: float = 0.0
    words: list[tuple[str, float | None]] = field(default_factory=list)  # (word, start ms or None)
    state: UtteranceState = UtteranceState.PLAYING
    end_mark_sent: bool = False
    first_pts_ns: int | None = None  # the pts of its first timed word: the start of its audio
    elsewhere: bool = False  # played to someone other than the caller (a warm transfer's summary)
    stopped_at_s: float | None = None  # monotonic: when a barge-in cleared it off the wire

    @property
    def heard_until_s(self) -> float:
        """Where (monotonic) the caller stopped hearing it: a barge-in's clear, when it came before
        the end of what was sent (an echoed mark lags what was played by up to its spacing); else
        where what was heard ends."""
        heard = self.began_at_s + self.heard_ms / 1000.0
        if self.stopped_at_s is None:
            return heard
        return max(heard, min(self.stopped_at_s, self.began_at_s + self.sent_ms / 1000.0))

    def played(self, duration_ms: float) -> None:
        """``duration_ms`` more of it left an echo-less transport: sent and heard alike."""
        if self.state is UtteranceState.CLEARED:
            return  # a straggler after the barge-in: the caller never got it
        self.sent_ms += duration_ms
        self.heard_ms = self.sent_ms

    @property
    def text(self) -> str:
        return " ".join(w for w, _ in self.words)

    def heard_text(self) -> str:
        if self.state is UtteranceState.HEARD:
            return self.text
        if not self.words or self.sent_ms <= 0:
            return ""
        timed = all(t is not None for _, t in self.words)
        if timed:
            return " ".join(w for w, t in self.words if t is not None and t < self.heard_ms)
        # untimed: words spread over the audio by their character share
        total = sum(len(w) + 1 for w, _ in self.words)
        out, pos = [], 0.0
        for w, _ in self.words:
            start_ms = self.sent_ms * pos / total
            pos += len(w) + 1
            if start_ms + 0.5 * self.sent_ms * (len(w) + 1) / total <= self.heard_ms:
                out.append(w)
        return " ".join(out)


class PlayoutTracker:
    """Builds mark names as audio goes out and resolves echoes into heard text.

    Synchronous and free of I/O: the transport asks it what to send and tells it what came back.
    """

    def __init__(self, *, mark_every_ms: float = 200.0):
        self.mark_every_ms = mark_every_ms
        self.utterances: list[Utterance] = []
        self._next_mark_ms = mark_every_ms
        self._sent_marks: set[str] = set()  # names sent and not yet echoed: only these count

    @property
    def current(self) -> Utterance | None:
        u = self.utterances[-1] if self.utterances else None
        return u if u is not None and u.state is UtteranceState.PLAYING and not u.end_mark_sent else None

    def begin(self) -> Utterance:
        u = Utterance(number=len(self.utterances) + 1)
        self.utterances.append(u)
        self._next_mark_ms = self.mark_every_ms
        return u

    def set_aside(self, since: int) -> str:
        """The utterances after the first ``since`` went to someone else (a warm transfer's
        summary, to the person): no longer the caller's; returns their text."""
        aside = self.utterances[since:]
        for u in aside:
            u.elsewhere = True
        return " ".join(u.text for u in aside if u.text)

    def add_word(self, word: str, start_ms: float | None) -> None:
        if not word.strip():
            return
        u = self.current or self.begin()
        u.words.append((word, start_ms))

    def add_words(self, text: str, pts_ns: int | None) -> None:
        """A TTS text frame: its words, timed from ``pts_ns`` when the TTS gave word timestamps."""
        u = self.current or self.begin()
        start_ms = None
        if pts_ns:
            if u.first_pts_ns is None:
                u.first_pts_ns = pts_ns
            start_ms = (pts_ns - u.first_pts_ns) / 1e6
        for word in text.split():
            u.words.append((word, start_ms))

    def audio_played(self, duration_ms: float) -> None:
        """Echo-less transports: ``duration_ms`` of audio went out, so it was heard."""
        (self.current or self.begin()).played(duration_ms)

    def finish(self) -> Utterance | None:
        """Echo-less transports: the utterance's audio is all out, so every word was heard."""
        u = self.current
        if u is None:
            return None
        u.end_mark_sent = True
        u.state = UtteranceState.HEARD
        u.heard_ms = u.sent_ms
        return u

    def audio_sent(self, duration_ms: float) -> list[str]:
        """Account for ``duration_ms`` of audio sent; returns progress mark names to send after it."""
        u = self.current or self.begin()
        u.sent_ms += duration_ms
        marks = []
        while u.sent_ms >= self._next_mark_ms:
            marks.append(f"u{u.number}:{int(self._next_mark_ms)}")
            self._next_mark_ms += self.mark_every_ms
        self._sent_marks.update(marks)
        return marks

    def end(self) -> str | None:
        """The utterance's audio is all sent; returns the end mark to send (None if nothing played)."""
        u = self.current
        if u is None:
            return None
        u.end_mark_sent = True
        name = f"u{u.number}:end"
        self._sent_marks.add(name)
        return name

    def clear(self) -> Utterance | None:
        """A ``clear`` is being sent: the playing utterance stops where the last echoed mark was."""
        last = self.utterances[-1] if self.utterances else None
        if last is None or last.state is not UtteranceState.PLAYING:
            return None
        last.state = UtteranceState.CLEARED
        last.end_mark_sent = True
        last.stopped_at_s = time.monotonic()
        return last

    def mark_echoed(self, name: str) -> Utterance | None:
        """Twilio echoed ``name``. Returns the utterance whose heard state changed, if any.

        Only a name this tracker sent, echoed once, counts: a forged ``u0:end`` (index -1, the
        last utterance) or ``u1:end`` before the end was sent marks nothing heard."""
        if name not in self._sent_marks:
            log.debug("mark %.60r is not one we sent (or came back twice); ignored", name)
            return None
        self._sent_marks.discard(name)
        number_s, _, pos = name.partition(":")
        u = self.utterances[int(number_s.removeprefix("u")) - 1]
        if u.state is not UtteranceState.PLAYING:
            return None  # after a clear, echoes are flushes
        if pos == "end":
            u.state = UtteranceState.HEARD
            u.heard_ms = u.sent_ms
            return u
        try:
            u.heard_ms = max(u.heard_ms, float(pos))
        except ValueError:
            log.warning("mark %r has no position; ignored", name)
            return None
        return u
