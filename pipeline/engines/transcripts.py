"""One stream contract for every recogniser: push audio, mark utterances, iterate events, close.

    stream = TranscriptStream(backend, sample_rate_hz=8000, preroll_s=0.5)
    await stream.start()                  # the backend takes its engine (loads, or from a pool)
    stream.push(pcm)                      # 16-bit PCM at sample_rate_hz, in arrival order
    stream.start_utterance(hints)         # the VAD heard the caller start
    stream.pause(True)                    # ... its stop timer started (False: speech again)
    stream.flush(received_s)              # ... and stop: the utterance's Final follows
    stream.end_input()                    # nothing follows: iteration ends after what is queued
    async for event in stream:            # Partial, Final, Failed, in order
        ...
    await stream.aclose()                 # drop what is left, abort an open utterance, release

The commands (``push``, ``start_utterance``, ``pause``, ``flush``, ``end_input``) never wait: they
are queued, typed (``AudioIn``, ``SpeechStarted``, ``SpeechPaused``, ``SpeechStopped``,
``CloseQueue``), and applied in order
by whoever iterates the stream, which is the only place an engine is awaited: consecutive audio
is joined into one call, so a slow engine never holds up the event loop or the caller's audio.
Between utterances the last ``preroll_s`` of audio is kept (the VAD fires after speech began)
and fed when the next utterance opens.

A spelling (an utterance opened with hints that expect one) spans the caller's pauses: at the
VAD's stop it stays open for ``spell_span_s`` more, hearing the pause (counted in the audio that
comes, or by the clock where none comes), and goes on if the caller speaks again within it (the
VAD's start, or more letters heard: a short soft letter may not reach the VAD's start), so
that the recogniser hears "dee, eigh, vee, ..." whole, as one string of letters its spelling
search and the names near it can read (decoded in pieces cut at each pause, 36 names spelled
by three voices came out right 5 times against 29 whole: bench_stt_hints, RESULTS.md). Its
Final follows once the caller has been silent that long; until then the turn has no
transcript, so the end of turn waits for it.

What differs between recognisers is only a ``RecognizerBackend`` (``recognizer_backends``: the
SSM recogniser in process or in its worker process, on the model tier, pocketsphinx in a thread
or a worker process, Whisper): it takes its engine in ``start``, opens an ``Utterance`` per
caller utterance, and lets the engine go in ``close``. An error of a type the backend lists in
``errors`` becomes a ``Failed`` event and the stream goes on, and what the caller said is kept:
an utterance whose ``push`` failed is dropped (the rest of its audio goes to the pre-roll again)
and what it had heard (``heard``) is its ``Final`` at the VAD's stop; one whose ``finish``
failed yields a ``Final`` of what it had heard before the ``Failed``.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Protocol, TypeAlias

from pipeline.errors import PipelineError
from ssm_engine.stt.hints import NO_HINTS, Hints, Recognition

__all__ = ["SPELL_SPAN_S", "SPAN_HEARD_MAX_S", "AudioIn", "CloseQueue", "Command", "Event",
           "Failed", "Final", "Partial", "RecognizerBackend", "SpeechPaused", "SpeechStarted",
           "SpeechStopped",
           "TranscriptStream", "Utterance"]


SPELL_SPAN_S = 0.45
"""How long a spelling's utterance stays open after the VAD's stop for the caller to go on: the
pauses between letters and names of the voices in bench_conversations are 130-250 ms past the
VAD's 200 ms, and people pause longer while they think of the next letter."""


SPAN_HEARD_MAX_S = 4.0
"""After the VAD's stop, letters the recogniser hears without the VAD starting again keep a
spelling open this long at most (a noisy line must not keep a turn open)."""


# -- commands (in) --------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class AudioIn:
    """Caller audio (16-bit PCM at the stream's rate), in arrival order."""

    pcm: bytes


@dataclass(frozen=True, slots=True)
class SpeechStarted:
    """The VAD heard the caller start: open an utterance (with the pre-roll) listening for
    ``hints``."""

    hints: Hints = NO_HINTS


@dataclass(frozen=True, slots=True)
class SpeechPaused:
    """The VAD's stop timer started (``paused``) or speech came again (not ``paused``): the open
    utterance may begin its final now, to have it when the stop comes (``Utterance.pause``)."""

    paused: bool


@dataclass(frozen=True, slots=True)
class SpeechStopped:
    """The VAD heard the caller stop: finish the utterance; its ``Final`` follows (a spelling's
    after its pause, unless ``last``: nothing more will come).

    ``received_s``: ``time.perf_counter()`` when the stop arrived (the final's latency is from it)."""

    received_s: float
    last: bool = False


@dataclass(frozen=True, slots=True)
class CloseQueue:
    """Nothing follows: iteration ends once what came before is done."""


Command: TypeAlias = AudioIn | SpeechStarted | SpeechPaused | SpeechStopped | CloseQueue


# -- events (out) ---------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Partial:
    """The open utterance's transcript so far changed."""

    text: str


@dataclass(frozen=True, slots=True)
class Final:
    """An utterance ended (``text`` may be empty: nothing was heard). ``received_s`` is its
    ``SpeechStopped``'s; ``recognition`` carries the confidence and hint outcome, where the
    recogniser gives them."""

    text: str
    received_s: float
    recognition: Recognition | None = None


@dataclass(frozen=True, slots=True)
class Failed:
    """The engine failed (one of the backend's ``errors``); the stream goes on."""

    error: Exception


Event: TypeAlias = Partial | Final | Failed


# -- what a recogniser implements -----------------------------------------------------------------
class Utterance(Protocol):
    """One caller utterance on an engine."""

    @property
    def heard(self) -> str:
        """The transcript so far (what a failed ``finish`` still reports)."""
        ...

    async def push(self, pcm: bytes) -> str | None:
        """Decode audio; -> the new partial transcript, or None when it did not change."""
        ...

    def pause(self, paused: bool) -> None:
        """The VAD's stop timer started (``paused``: the caller may be done) or speech came again;
        a recogniser that decodes its final after the stop may begin it here. Never
        raises; one that cannot does nothing."""
        ...

    async def finish(self) -> tuple[str, Recognition | None]:
        """End of speech: -> (the final transcript, its Recognition or None)."""
        ...

    def abort(self) -> None:
        """Drop the utterance (a cancelled call); never raises."""
        ...


class RecognizerBackend(Protocol):
    errors: tuple[type[Exception], ...]
    """Engine errors that become ``Failed`` events; anything else is a bug and ends the stream."""

    async def start(self, sample_rate_hz: int, report: Callable[[Exception], None]) -> None:
        """Take the engine. ``report`` yields a ``Failed`` event for an error the backend got
        past by itself (a worker replaced between utterances)."""
        ...

    async def open(self, sample_rate_hz: int, hints: Hints) -> Utterance | None:
        """A new utterance, or None when no engine can be had (the call goes on unheard)."""
        ...

    async def close(self) -> None:
        """Let the engine go (back to its pool); safe after a failed or missing ``start``."""
        ...


# -- the executor ---------------------------------------------------------------------------------
class TranscriptStream:
    """See the module docstring. One iteration per stream; commands before ``start`` wait."""

    def __init__(self, backend: RecognizerBackend, sample_rate_hz: int, *,
                 preroll_s: float = 0.5, spell_span_s: float = SPELL_SPAN_S) -> None:
        if preroll_s < 0:
            raise PipelineError(f"TranscriptStream: preroll_s must be >= 0, got {preroll_s}")
        if not 0 <= spell_span_s <= 3:
            raise PipelineError(f"TranscriptStream: spell_span_s must be within 0..3 s, got "
                                f"{spell_span_s}")
        self.spell_span_s = spell_span_s
        self._spelling = False         # the open utterance listens for a spelling
        self._span_until: float | None = None   # a spelling's pause ends it then (perf_counter)
        self._span_stop_s = 0.0        # when the VAD's stop that began the pause came
        self._span_left = 0            # bytes of the pause still to hear before it ends it
        self._span_heard = 0           # bytes heard since the VAD's stop
        self.backend = backend
        self.sample_rate_hz = sample_rate_hz
        self._preroll_limit = int(preroll_s * sample_rate_hz) * 2
        self._queue: asyncio.Queue[Command] = asyncio.Queue()
        self._utt: Utterance | None = None
        self._lost = ""                # what a dropped utterance had heard, for its Final
        self._preroll: collections.deque[bytes] = collections.deque()
        self._preroll_bytes = 0
        self._reported: list[Event] = []
        self._iterated = False
        self._closed = False

    async def start(self) -> None:
        await self.backend.start(self.sample_rate_hz, self._report)

    # -- commands ---------------------------------------------------------------------------------
    def push(self, pcm: bytes) -> None:
        self._queue.put_nowait(AudioIn(pcm))

    def start_utterance(self, hints: Hints = NO_HINTS) -> None:
        self._queue.put_nowait(SpeechStarted(hints))

    def pause(self, paused: bool) -> None:
        self._queue.put_nowait(SpeechPaused(paused))

    def flush(self, received_s: float | None = None) -> None:
        self._queue.put_nowait(SpeechStopped(time.perf_counter() if received_s is None
                                             else received_s))

    def end_input(self) -> None:
        """Finish an open utterance (its Final is the last event), then end the iteration."""
        self._queue.put_nowait(SpeechStopped(time.perf_counter(), last=True))
        self._queue.put_nowait(CloseQueue())

    @property
    def in_utterance(self) -> bool:
        return self._utt is not None

    # -- events -----------------------------------------------------------------------------------
    def __aiter__(self) -> AsyncIterator[Event]:
        if self._iterated:
            raise PipelineError("a TranscriptStream is iterated once")
        self._iterated = True
        return self._run()

    async def _run(self) -> AsyncIterator[Event]:
        while True:
            try:
                if self._span_until is None:
                    batch = [await self._queue.get()]
                else:       # a spelling's pause: nothing may come (a transport that sends no
                    #         silence), so the pause's end is also kept by the clock
                    batch = [await asyncio.wait_for(
                        self._queue.get(), max(0.0, self._span_until - time.perf_counter()))]
            except TimeoutError:           # silent that long, and nothing came
                spanned: list[Event] = []
                try:
                    await self._finish(self._span_stop_s, spanned)
                except self.backend.errors as exc:
                    spanned.append(Failed(exc))
                for event in self._take_reported(spanned):
                    yield event
                continue
            while not self._queue.empty():
                batch.append(self._queue.get_nowait())
            for kind, group in itertools.groupby(batch, key=type):
                commands = list(group)
                if kind is CloseQueue:
                    return
                events: list[Event] = []
                try:
                    if kind is AudioIn:
                        await self._on_audio(b"".join(c.pcm for c in commands
                                                      if isinstance(c, AudioIn)), events)
                    else:
                        for command in commands:
                            if isinstance(command, SpeechStarted):
                                await self._on_started(command.hints, events)
                            elif isinstance(command, SpeechStopped):
                                await self._on_stopped(command.received_s, events,
                                                       last=command.last)
                            elif isinstance(command, SpeechPaused) and self._utt is not None:
                                self._utt.pause(command.paused)
                except self.backend.errors as exc:
                    events.append(Failed(exc))
                for event in self._take_reported(events):
                    yield event

    def _report(self, exc: Exception) -> None:
        self._reported.append(Failed(exc))

    def _take_reported(self, events: list[Event]) -> list[Event]:
        if not self._reported:
            return events
        reported, self._reported = self._reported, []
        return reported + events

    async def _on_audio(self, pcm: bytes, events: list[Event]) -> None:
        if self._utt is None:
            self._keep_preroll(pcm)
            return
        if self._span_until is None:
            await self._feed(pcm, events)
            return
        # a spelling's pause, counted in the audio heard, 20 ms at a time as a call sends it:
        # it ends when it is over, or begins again when the recogniser hears more letters (a
        # short soft letter, "ee", may not reach the VAD's start)
        step = self.sample_rate_hz // 50 * 2
        for i in range(0, len(pcm), step):
            chunk = pcm[i:i + step]
            before = len(events)
            await self._feed(chunk, events)
            self._span_heard += len(chunk)
            if len(events) > before and self._span_heard < SPAN_HEARD_MAX_S * self.sample_rate_hz * 2:
                self._span_left = int(self._span_s * self.sample_rate_hz) * 2
                self._span_until = time.perf_counter() + self._span_s
            else:
                self._span_left -= len(chunk)
            if self._span_left <= 0:               # the pause is over: what follows is the
                await self._finish(self._span_stop_s, events)   # next utterance's pre-roll
                self._keep_preroll(pcm[i + step:])
                return

    async def _feed(self, pcm: bytes, events: list[Event]) -> None:
        utt = self._utt
        assert utt is not None
        try:
            partial = await utt.push(pcm)
        except self.backend.errors:
            self._utt = None           # its engine lost it: one error, not one per chunk;
            self._lost = utt.heard     # the next utterance opens afresh
            utt.abort()
            if self._span_until is not None:      # in a spelling's pause: the VAD's stop has
                self._span_until = None           # come, so what was heard is its Final now
                if self._lost:
                    events.append(Final(self._lost, self._span_stop_s))
                self._lost = ""
            raise
        if partial is not None:
            events.append(Partial(partial))

    async def _on_started(self, hints: Hints, events: list[Event]) -> None:
        if self._utt is not None:
            self._span_until = None    # the caller spells on: the same utterance goes on
            return
        self._lost = ""
        preroll = self._take_preroll()
        self._spelling = "spelling" in hints.expect and self.spell_span_s > 0
        self._utt = await self.backend.open(self.sample_rate_hz, hints)
        if self._utt is not None and preroll:
            await self._feed(preroll, events)

    @property
    def _span_s(self) -> float:
        """A spelling's pause: ``spell_span_s``, and the time the recogniser's partials trail
        the audio (letters said in the pause are heard that much later)."""
        return self.spell_span_s + float(getattr(self.backend, "partial_lag_s", 0.0))

    async def _on_stopped(self, received_s: float, events: list[Event], *,
                          last: bool = False) -> None:
        if self._utt is not None and self._spelling and self._span_until is None and not last:
            self._span_until = received_s + self._span_s           # a pause: more may follow
            self._span_stop_s = received_s
            self._span_left = int(self._span_s * self.sample_rate_hz) * 2        # bytes
            self._span_heard = 0
            return
        await self._finish(received_s, events)

    async def _finish(self, received_s: float, events: list[Event]) -> None:
        self._span_until = None
        self._spelling = False
        utt, self._utt = self._utt, None
        if utt is None:
            if self._lost:
                events.append(Final(self._lost, received_s))
                self._lost = ""
            return
        try:
            text, recognition = await utt.finish()
        except self.backend.errors:
            if utt.heard:              # what was heard before the engine failed is kept
                events.append(Final(utt.heard, received_s))
            raise
        events.append(Final(text, received_s, recognition))

    def _keep_preroll(self, pcm: bytes) -> None:
        self._preroll.append(pcm)
        self._preroll_bytes += len(pcm)
        while self._preroll and self._preroll_bytes - len(self._preroll[0]) >= self._preroll_limit:
            self._preroll_bytes -= len(self._preroll.popleft())

    def _take_preroll(self) -> bytes:
        preroll = b"".join(self._preroll)
        self._preroll.clear()
        self._preroll_bytes = 0
        return preroll

    # -- close ------------------------------------------------------------------------------------
    async def aclose(self) -> None:
        """Abort an open utterance and let the engine go; what is still queued is dropped.
        Idempotent. (Cancel the task iterating the stream first.)"""
        if self._closed:
            return
        self._closed = True
        utt, self._utt = self._utt, None
        if utt is not None:
            utt.abort()
        await self.backend.close()
