"""Who answered an outbound call, a person or an answering machine, from the callee's first seconds.

    det = AnsweringDetector(AnsweringConfig())      # words=... optional, see below
    for frame in frames:                            # 8 kHz 16-bit mono PCM from the moment of answer
        decision = det.push(frame)                  # Decision | None
        if decision is not None and decision.final:
            break
    decision = det.finish()                         # end of audio: whatever is still undecided

Decisions (``Decision.kind``, ``at_s`` seconds from answer):

1. The first, always by ``max_decide_s``:
   * ``machine``: a beep, a machine cue in the recogniser's words ("leave a message"), a first
     greeting that runs past ``human_max_greeting_s`` without a pause of ``human_pause_s``, or one
     still going at ``max_decide_s`` after at least ``deadline_machine_s``;
   * ``human``: a greeting of at most ``human_max_greeting_s`` followed by ``human_pause_s`` of
     silence (a person says "hello?" and waits), or less speech than that at the deadline;
   * ``unknown``: nobody spoke for ``no_speech_s``.
   ``human`` and ``unknown`` are final. A ``machine`` decision is not (``final=False``) unless the
   beep has already ended:
2. after ``machine`` the detector keeps listening and says when the caller may speak: at the end of
   the beep (``beep_at_s`` is its onset), or after ``greeting_end_s`` of silence when no beep comes,
   or at ``max_wait_s``. That decision is final.

Evidence per 20 ms frame: speech is a frame that webrtcvad (``vad_mode``) calls speech, louder than
``speech_floor_dbfs`` (webrtcvad alone takes steady line noise for speech) and not a tone. A tone is
a frame whose spectrum has ``tone_ratio`` of its 200-3800 Hz energy within about 110 Hz of its peak,
the peak between ``beep_min_hz`` and ``beep_max_hz``; a beep is ``beep_min_s`` to ``beep_max_s`` of
consecutive tone frames at one pitch and level (within ``beep_drift_hz`` and ``beep_level_db`` of
its first frame): a held vowel drifts in both, a beep does not.

``words`` is optional and injected: a callable returning the recogniser's text of the greeting so
far (on a call, ``pipeline.answering_words``: the streaming recogniser's greedy partial, then
from the callee's first pause the final pass of the greeting), asked every ``words_every_s``
until the first decision. Its phrases are matched approximately (``pipeline.greeting_words``, ``words_tolerance``
edits per character): a voicemail phrase ("leave a message", "you have reached") decides
``machine`` at once. With words, length alone calls a greeting a machine only past
``words_max_greeting_s`` (the words are expected to name a machine sooner), and at the deadline
only after ``words_deadline_machine_s`` of speech that did not open with a person's cue ("hello",
"yes?", with ``words_person_cues``). The detector runs no recogniser itself
(``telephony.core.screening`` feeds it the call's).

``benchmarks/bench_answering.py`` measures accuracy, time to decide and beep timing against a
timing-only rule; the defaults below were chosen on its tuning half (the words' on the tuning
halves of both seeds).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np
import webrtcvad

from pipeline.audio.pcm import as_int16
from pipeline.errors import AudioFormatError, ConfigError
from pipeline.greeting_words import GreetingCues, GreetingMatch

__all__ = ["AnsweringConfig", "AnsweringDetector", "Decision", "AnswerKind"]

AnswerKind = Literal["human", "machine", "unknown"]
FRAME_MS = 20
_FFT_SIZE = 512
_PEAK_HALF_WIDTH_HZ = 110.0         # a Hann window's main lobe on a 20 ms frame, a little more
_BAND_HZ = (200.0, 3800.0)

@dataclass(frozen=True, slots=True)
class AnsweringConfig:
    """Thresholds of ``AnsweringDetector`` (seconds unless named otherwise); see the module
    docstring for what each one decides."""

    sample_rate_hz: int = 8000
    vad_mode: int = 3
    speech_floor_dbfs: float = -45.0
    min_speech_s: float = 0.1
    human_max_greeting_s: float = 1.5
    human_pause_s: float = 0.7
    no_speech_s: float = 3.0
    max_decide_s: float = 3.0
    greeting_end_s: float = 1.5
    max_wait_s: float = 20.0
    beep_min_s: float = 0.16
    beep_max_s: float = 2.0
    beep_min_hz: float = 350.0
    beep_max_hz: float = 2100.0
    beep_drift_hz: float = 20.0
    beep_level_db: float = 3.0
    tone_ratio: float = 0.9
    deadline_machine_s: float = 1.5
    words_every_s: float = 0.1
    words_tolerance: float = 0.15
    words_max_greeting_s: float = 2.0
    words_deadline_machine_s: float = 1.5
    words_person_cues: bool = False

    def __post_init__(self) -> None:
        if self.sample_rate_hz not in (8000, 16000):
            raise ConfigError(f"sample_rate_hz must be 8000 or 16000, got {self.sample_rate_hz}")
        if self.vad_mode not in (0, 1, 2, 3):
            raise ConfigError(f"vad_mode must be 0..3, got {self.vad_mode}")
        for name in ("min_speech_s", "human_max_greeting_s", "human_pause_s", "no_speech_s",
                     "deadline_machine_s", "beep_drift_hz", "beep_level_db",
                     "max_decide_s", "greeting_end_s", "max_wait_s", "beep_min_s", "beep_max_s",
                     "words_every_s", "words_max_greeting_s", "words_deadline_machine_s"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name} must be positive, got {getattr(self, name)}")
        if self.no_speech_s > self.max_decide_s:
            raise ConfigError(f"no_speech_s ({self.no_speech_s}) must not exceed max_decide_s "
                              f"({self.max_decide_s})")
        if self.max_wait_s < self.max_decide_s:
            raise ConfigError(f"max_wait_s ({self.max_wait_s}) must be at least max_decide_s "
                              f"({self.max_decide_s})")
        if self.beep_min_s > self.beep_max_s:
            raise ConfigError(f"beep_min_s ({self.beep_min_s}) exceeds beep_max_s ({self.beep_max_s})")
        if not 0 < self.beep_min_hz < self.beep_max_hz < self.sample_rate_hz / 2:
            raise ConfigError(f"beep band {self.beep_min_hz}-{self.beep_max_hz} Hz is not inside "
                              f"0-{self.sample_rate_hz // 2} Hz")
        if not 0 <= self.words_tolerance < 0.5:
            raise ConfigError(f"words_tolerance must be in [0, 0.5), got {self.words_tolerance}")
        if not 0 < self.tone_ratio < 1:
            raise ConfigError(f"tone_ratio must be in (0, 1), got {self.tone_ratio}")


@dataclass(frozen=True, slots=True)
class Decision:
    """Who answered, and when it was known (``at_s``, seconds of audio after the answer).

    ``beep_at_s``: onset of the beep heard, if any. ``final``: False only for a first ``machine``
    decision; a final one follows when the caller may speak (at ``at_s``)."""

    kind: AnswerKind
    at_s: float
    reason: str
    beep_at_s: float | None = None
    final: bool = True


@dataclass(slots=True)
class _Tone:
    """A run of tone frames at one pitch and level."""

    start: int              # first frame index
    frames: int
    hz: float               # the first frame's peak
    dbfs: float             # the first frame's level


class AnsweringDetector:
    """Streaming person/machine detector; one per call, fed the callee's audio from the answer.

    ``push`` takes any whole number of samples (bytes or an int16 array), analyses each complete
    20 ms frame and returns the newest decision made during the call, if any (``decisions`` holds
    them all). Not thread-safe: one caller feeds it.
    """

    def __init__(self, config: AnsweringConfig | None = None, *,
                 words: Callable[[], str] | None = None) -> None:
        self.config = c = config or AnsweringConfig()
        self._words = words
        self._cues = GreetingCues.shared(c.words_tolerance) if words is not None else None
        self._heard = GreetingMatch()                   # what the words said at the last look
        self._vad = webrtcvad.Vad(c.vad_mode)
        self._hop = c.sample_rate_hz * FRAME_MS // 1000
        self._window = np.hanning(self._hop)
        freqs = np.fft.rfftfreq(_FFT_SIZE, 1.0 / c.sample_rate_hz)
        self._freqs = freqs
        self._band = (freqs >= _BAND_HZ[0]) & (freqs <= _BAND_HZ[1])
        self._half_width = int(round(_PEAK_HALF_WIDTH_HZ / (freqs[1] - freqs[0])))
        self._words_every = max(1, round(c.words_every_s * 1000 / FRAME_MS))
        self._pending = np.zeros(0, np.int16)
        self._frame = 0                                 # frames analysed
        self._burst_start: int | None = None            # first speech frame of the first greeting
        self._last_speech: int | None = None            # last speech frame heard
        self._burst_speech = 0                          # speech frames in the first greeting
        self._tone: _Tone | None = None
        self._beep: _Tone | None = None                 # the beep, once heard
        self._beep_ended = False
        self.decisions: list[Decision] = []

    # -- public --------------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        """True once a final decision has been made."""
        return bool(self.decisions) and self.decisions[-1].final

    @property
    def quiet_s(self) -> float | None:
        """Seconds of quiet since the callee last spoke, once the first greeting has real speech
        (``min_speech_s``); None before."""
        if self._last_speech is None or self._burst_speech * FRAME_MS / 1000 < self.config.min_speech_s:
            return None
        return (self._frame - 1 - self._last_speech) * FRAME_MS / 1000

    @property
    def heard_s(self) -> float:
        """Seconds of audio analysed so far."""
        return self._frame * FRAME_MS / 1000

    def push(self, pcm: bytes | bytearray | memoryview | np.ndarray) -> Decision | None:
        """Analyse more audio; the newest decision it led to, or None. After a final decision the
        audio is ignored."""
        samples = as_int16(pcm)
        if self.done:
            return None
        made = len(self.decisions)
        buf = np.concatenate([self._pending, samples]) if self._pending.size else samples
        n = len(buf) // self._hop
        for i in range(n):
            self._step(buf[i * self._hop: (i + 1) * self._hop])
            if self.done:
                break
        self._pending = buf[n * self._hop:].copy()
        return self.decisions[-1] if len(self.decisions) > made else None

    def finish(self) -> Decision | None:
        """The audio has ended: decide what is still open (None if a final decision exists)."""
        if self.done:
            return None
        if self._tone is not None:
            self._end_tone()
            if self.done:
                return self.decisions[-1]
        if not self.decisions:
            if self._burst_start is None:
                return self._decide("unknown", "audio ended before anyone spoke")
            if self._greeting_s() > self.config.human_max_greeting_s:
                self._decide("machine", "audio ended during a long greeting", final=False)
            else:
                return self._decide("human", "audio ended after a short greeting")
        return self._decide("machine", "audio ended before a beep")

    # -- per frame -----------------------------------------------------------------------------
    def _step(self, frame: np.ndarray) -> None:
        c = self.config
        i = self._frame
        self._frame += 1
        x = frame.astype(np.float64)
        energy = float(np.mean(x * x))
        dbfs = 10 * np.log10(energy / 32768.0 ** 2 + 1e-12)
        tone_hz = self._tone_hz(x) if dbfs > c.speech_floor_dbfs else None
        self._track_tone(i, tone_hz, dbfs)
        if self.done:
            return
        try:
            voiced = self._vad.is_speech(frame.tobytes(), c.sample_rate_hz)
        except Exception as exc:  # webrtcvad raises a bare Exception on a bad frame
            raise AudioFormatError(f"webrtcvad rejected a {frame.size}-sample frame") from exc
        if voiced and dbfs > c.speech_floor_dbfs and tone_hz is None:
            self._speech(i)
        if not self.decisions:
            self._first_decision(i)
        else:
            self._when_to_speak(i)

    def _tone_hz(self, x: np.ndarray) -> float | None:
        """The frequency of a pure tone filling this frame, or None."""
        spec = np.abs(np.fft.rfft(x * self._window, _FFT_SIZE)) ** 2
        spec[~self._band] = 0.0
        total = spec.sum()
        if total <= 0:
            return None
        k = int(np.argmax(spec))
        a, b, g = np.log(spec[k - 1: k + 2] + 1e-12) if 0 < k < spec.size - 1 else (0.0, 0.0, 0.0)
        shift = 0.5 * (a - g) / (a - 2 * b + g) if a - 2 * b + g < 0 else 0.0   # parabolic peak
        hz = float(self._freqs[k] + shift * (self._freqs[1] - self._freqs[0]))
        if not self.config.beep_min_hz <= hz <= self.config.beep_max_hz:
            return None
        peak = spec[max(0, k - self._half_width): k + self._half_width + 1].sum()
        return hz if peak / total >= self.config.tone_ratio else None

    def _track_tone(self, i: int, hz: float | None, dbfs: float) -> None:
        c = self.config
        t = self._tone
        if (t is not None and hz is not None and abs(hz - t.hz) <= c.beep_drift_hz
                and abs(dbfs - t.dbfs) <= c.beep_level_db):
            t.frames += 1
            if self._beep is None and t.frames * FRAME_MS / 1000 >= c.beep_min_s:
                self._beep = t
                if not self.decisions:
                    self._decide("machine", f"beep at {t.hz:.0f} Hz", final=False)
            if t.frames * FRAME_MS / 1000 > c.beep_max_s and self._beep is t:
                self._beep = None       # too long for a beep: a held tone (ringback, fax, hum)
            return
        if t is not None:
            self._end_tone()
        self._tone = _Tone(i, 1, hz, dbfs) if hz is not None else None

    def _end_tone(self) -> None:
        t, self._tone = self._tone, None
        if t is not None and self._beep is t:
            self._beep_ended = True
            if self.decisions:
                self._decide("machine", f"beep of {t.frames * FRAME_MS / 1000:.2f} s ended")

    def _speech(self, i: int) -> None:
        c = self.config
        pause = (i - self._last_speech - 1) * FRAME_MS / 1000 if self._last_speech is not None else None
        if self._burst_start is None or (not self.decisions and pause is not None
                                         and pause >= c.human_pause_s
                                         and self._burst_speech * FRAME_MS / 1000 < c.min_speech_s):
            self._burst_start, self._burst_speech = i, 0     # first speech, or the last was a blip
        if not self.decisions:
            self._burst_speech += 1
        self._last_speech = i

    def _greeting_s(self) -> float:
        if self._burst_start is None or self._last_speech is None:
            return 0.0
        return (self._last_speech - self._burst_start + 1) * FRAME_MS / 1000

    def _silence_s(self, i: int) -> float:
        return (i - self._last_speech) * FRAME_MS / 1000 if self._last_speech is not None else self.heard_s

    def _first_decision(self, i: int) -> None:
        c = self.config
        max_greeting_s, deadline_machine_s = c.human_max_greeting_s, c.deadline_machine_s
        by_length = True                                # length alone may say machine
        if self._cues is not None:
            assert self._words is not None
            if i % self._words_every == 0:
                self._heard = self._cues.match(self._words() or "")
                if self._heard.machine is not None:
                    self._decide("machine", f"the greeting says {self._heard.machine!r}", final=False)
                    return
            max_greeting_s, deadline_machine_s = c.words_max_greeting_s, c.words_deadline_machine_s
            by_length = not (c.words_person_cues and self._heard.person is not None)   # "hello?"
        real_burst = self._burst_speech * FRAME_MS / 1000 >= c.min_speech_s
        greeting = self._greeting_s()
        if real_burst and by_length and greeting > max_greeting_s:
            self._decide("machine", f"greeting longer than {max_greeting_s:g} s", final=False)
        elif real_burst and self._silence_s(i) >= c.human_pause_s:
            self._decide("human", f"a {greeting:.2f} s greeting, then {c.human_pause_s:g} s of silence")
        elif not real_burst and self.heard_s >= c.no_speech_s:
            self._decide("unknown", f"no speech in {c.no_speech_s:g} s")
        elif (self.heard_s >= c.max_decide_s and greeting >= deadline_machine_s and real_burst
              and by_length):
            self._decide("machine", f"deadline: still speaking after {greeting:.2f} s", final=False)
        elif self.heard_s >= c.max_decide_s:
            why = "too short for a machine" if by_length else f"it opened with {self._heard.person!r}"
            self._decide("human", f"deadline: {greeting:.2f} s of speech, {why}")

    def _when_to_speak(self, i: int) -> None:
        c = self.config
        if self._tone is not None and self._tone is self._beep:
            return                                      # a beep is sounding: wait for its end
        if self._silence_s(i) >= c.greeting_end_s:
            self._decide("machine", f"greeting ended, no beep in {c.greeting_end_s:g} s")
        elif self.heard_s >= c.max_wait_s:
            self._decide("machine", f"no beep or end of greeting in {c.max_wait_s:g} s")

    def _decide(self, kind: AnswerKind, reason: str, *, final: bool = True) -> Decision:
        beep = self._beep
        beep_at = round(beep.start * FRAME_MS / 1000, 3) if beep is not None else None
        d = Decision(kind, round(self.heard_s, 3), reason, beep_at, final or self._beep_ended)
        self.decisions.append(d)
        return d
