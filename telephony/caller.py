"""A scripted phone caller that speaks Twilio Media Streams to our server, as Twilio would.

``parley call --twilio ws://127.0.0.1:8765/twilio/stream --say "hi" --say "book a table"``

The caller plays the part of Twilio plus a person on a phone:

- It connects with a valid ``X-Twilio-Signature`` (the ws URL as given, empty params), sends
  ``connected`` and ``start`` (fresh ``MZ``/``CA``/``AC`` sids, 8 kHz mu-law, ``--param`` values as
  ``customParameters``), then one 160-byte ``media`` frame every 20 ms on an absolute clock
  (``start + n * 20 ms - now``), mu-law silence (0xFF) whenever it is not talking, and ``stop``.
- It plays the agent's audio in simulated real time: received ``media`` joins a playout queue that
  drains 160 bytes per tick; an ``OutMark`` is echoed as ``mark`` when the audio queued before it
  has played (at once if nothing is queued); ``clear`` drops unplayed audio and echoes pending marks
  at once. What was played, with silence in between, is the call recording (8 kHz, 16-bit).
- Turns: wait for the greeting to finish (a mark echoed after the last audio and the queue empty,
  or no audio within ``greeting_quiet_s``), a ``gap_ms`` pause, utterance 1, wait for the reply to
  finish, pause, utterance 2, and so on; after the last one, wait for its reply, send ``stop``.
- ``barge_in_ms``: from the second utterance on, start talking that long after the previous
  reply's first audio arrived instead of waiting for it to finish.

Measurements, per caller turn:

- ``v2v_ms``: end of caller speech (the moment the last speech frame was sent) to the first agent
  audio byte received after it.
- Barge-in: the time ``clear`` arrived, and ``media_after_clear_bytes``. The rule: audio received
  after this turn's ``clear`` and before the end of this turn's speech + ``STRAGGLER_GRACE_S``
  (150 ms) belongs to the interrupted reply (a correct server sends none). The first audio after
  that window is the new reply and starts ``v2v_ms``; if no ``clear`` came, ``v2v_ms`` is the first
  audio after the end of speech, which may still be the old reply.
- After hanging up it GETs ``{http base}/calls/{callSid}`` (signed over the full URL, empty
  params) for what only the server knows: its transcript, reply and stage latencies.

Timeouts: the whole call runs under ``timeout_s``; each send, connect, close and HTTP request has
``io_timeout_s``; each wait for the agent has ``reply_timeout_s``.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import numpy as np
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from pipeline.audio.flite import synthesize_flite, to_ulaw_frames
from pipeline.audio.g711 import ULAW_SILENCE, ulaw_decode
from pipeline.audio.wav import read_wav, write_wav
from pipeline.errors import AudioFormatError, EngineUnavailableError
from telephony.errors import CallerError, ProtocolError, SynthesisError
from telephony.twilio.messages import (
    Clear, Connected, Dtmf, Mark, Media, OutMark, OutMedia, Start, Stop, TwilioMessage,
    parse_to_twilio,
)
from telephony.twilio.signature import SIGNATURE_HEADER, compute_signature

__all__ = [
    "CallReport", "CallerConfig", "LatencyMs", "TurnResult", "TwilioCaller", "Utterance",
    "load_utterance_audio", "run_call",
]

log = logging.getLogger(__name__)

SAMPLE_RATE_HZ: Final = 8000
FRAME_S: Final = 0.020
FRAME_BYTES: Final = 160
STRAGGLER_GRACE_S: Final = 0.150
_POLL_S: Final = 0.05
_DTMF_DIGITS: Final = frozenset("0123456789*#ABCD")
DTMF_SPACING_S: Final = 0.15  # between keypresses in a run of --dtmf items
KEYS_ANSWER_S: Final = 3.0  # after keys, how long to wait for the agent to answer them, if at all


@dataclass(frozen=True, slots=True)
class Utterance:
    """One step of the script: speak ``text`` (flite) or a ``wav`` file, press ``dtmf``, or send
    ``raw`` text as a WebSocket frame as-is (for protocol-abuse tests). Exactly one is set."""

    text: str | None = None
    wav: Path | str | None = None
    dtmf: str | None = None
    raw: str | None = None

    def __post_init__(self) -> None:
        if sum(v is not None for v in (self.text, self.wav, self.dtmf, self.raw)) != 1:
            raise ValueError("an Utterance sets exactly one of text, wav, dtmf, raw")
        if self.text is not None and not self.text.strip():
            raise ValueError("Utterance.text is empty")
        if self.dtmf is not None and self.dtmf not in _DTMF_DIGITS:
            raise ValueError(f"Utterance.dtmf must be one of 0-9 * # A-D, got {self.dtmf!r}")

    @property
    def label(self) -> str:
        """What the caller said, for reports: the text, or the WAV path."""
        return self.text if self.text is not None else str(self.wav)


@dataclass(frozen=True, slots=True)
class CallerConfig:
    url: str
    utterances: tuple[Utterance, ...]
    auth_token: str
    params: Mapping[str, str] = field(default_factory=dict, hash=False)
    voice: str = "slt"
    barge_in_ms: int | None = None
    record_path: Path | None = None
    timeout_s: float = 60.0
    calls_base_url: str | None = None  # default: the ws URL's scheme and host, as http(s)
    gap_ms: int = 300
    greeting_quiet_s: float = 3.0
    reply_timeout_s: float = 20.0
    io_timeout_s: float = 5.0

    def __post_init__(self) -> None:
        if urlsplit(self.url).scheme not in ("ws", "wss"):
            raise ValueError(f"caller URL must be ws:// or wss://, got {self.url!r}")
        if not self.auth_token:
            raise ValueError("an auth token is required to sign the WebSocket upgrade")
        if (self.barge_in_ms or 0) < 0 or self.gap_ms < 0:
            raise ValueError("barge_in_ms and gap_ms must be >= 0")
        for name in ("timeout_s", "greeting_quiet_s", "reply_timeout_s", "io_timeout_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")

    @property
    def calls_url_base(self) -> str:
        if self.calls_base_url:
            return self.calls_base_url.rstrip("/")
        parts = urlsplit(self.url)
        scheme = {"ws": "http", "wss": "https"}[parts.scheme]
        return urlunsplit((scheme, parts.netloc, "", "", ""))


@dataclass(frozen=True, slots=True)
class LatencyMs:
    """Server-side stage times, ms after the end of caller speech as the server saw it."""

    vad_stop: float | None = None
    stt_final: float | None = None
    first_text: float | None = None
    tts_first_audio: float | None = None
    transport_first_byte: float | None = None


@dataclass(frozen=True, slots=True)
class TurnResult:
    turn: int  # 1 = the caller's first utterance, as in the server's call record
    caller_said: str
    v2v_ms: float | None
    barged_in: bool  # agent audio was still playing when the caller started talking
    clear_received: bool
    clear_after_speech_start_ms: float | None
    media_after_clear_bytes: int
    agent_audio_bytes: int  # reply audio received for this turn (after the straggler window)
    agent_transcript: str | None = None  # the server's user_text
    agent_reply: str | None = None
    agent_reply_heard: str | None = None
    latency_ms: LatencyMs = LatencyMs()

    def to_json_line(self) -> str:
        """The CLI's one line per turn."""
        def ms(v: float | None) -> float | None:
            return None if v is None else round(v, 1)

        return json.dumps({
            "turn": self.turn, "caller_said": self.caller_said,
            "agent_transcript": self.agent_transcript, "agent_reply": self.agent_reply,
            "v2v_ms": ms(self.v2v_ms), "stt_final_ms": ms(self.latency_ms.stt_final),
            "tts_ttfa_ms": ms(self.latency_ms.tts_first_audio), "barged_in": self.barged_in,
            "clear_received": self.clear_received,
            "media_after_clear_bytes": self.media_after_clear_bytes,
        })


@dataclass(frozen=True, slots=True)
class CallReport:
    call_sid: str
    stream_sid: str
    turns: tuple[TurnResult, ...]
    agent_audio: np.ndarray = field(compare=False, hash=False, repr=False)  # int16, 8 kHz timeline
    server_hung_up: bool = False
    timed_out: bool = False
    server_record_fetched: bool = False
    server_record_ended: bool | None = None
    marks_received: int = 0
    marks_echoed: int = 0
    clears_received: int = 0
    media_bytes_received: int = 0
    media_frames_sent: int = 0
    dtmf_sent: int = 0
    raw_sent: int = 0
    protocol_errors: int = 0  # server messages the caller could not parse, or for another stream


@dataclass(slots=True)
class _TurnState:
    index: int
    caller_said: str
    speech_start_t: float | None = None
    speech_end_t: float | None = None
    first_audio_t: float | None = None
    clear_t: float | None = None
    barged_in: bool = False
    media_after_clear_bytes: int = 0
    agent_audio_bytes: int = 0

    def result(self, server: Mapping[str, Any]) -> TurnResult:
        """This turn as measured, with the server's record of it (``{}`` if none)."""
        def ms(end: float | None, begin: float | None) -> float | None:
            return None if end is None or begin is None else (end - begin) * 1000

        return TurnResult(
            turn=self.index,
            caller_said=self.caller_said,
            v2v_ms=ms(self.first_audio_t, self.speech_end_t),
            barged_in=self.barged_in,
            clear_received=self.clear_t is not None,
            clear_after_speech_start_ms=ms(self.clear_t, self.speech_start_t),
            media_after_clear_bytes=self.media_after_clear_bytes,
            agent_audio_bytes=self.agent_audio_bytes,
            agent_transcript=server.get("user_text"),
            agent_reply=server.get("agent_text"),
            agent_reply_heard=server.get("agent_text_heard"),
            latency_ms=LatencyMs(**server["latency_ms"]) if server else LatencyMs(),
        )


@dataclass(frozen=True, slots=True)
class _PendingMark:
    name: str


# --- caller audio ------------------------------------------------------------------------------


async def load_utterance_audio(utt: Utterance, voice: str, timeout_s: float) -> bytes | None:
    """8 kHz mu-law for a ``text`` (flite) or ``wav`` utterance, silence trimmed, padded to whole
    20 ms frames; None for ``dtmf`` and ``raw`` items."""
    try:
        if utt.text is not None:
            pcm, rate_hz = await synthesize_flite(utt.text, voice, timeout_s)
        elif utt.wav is not None:
            pcm, rate_hz = await asyncio.to_thread(read_wav, utt.wav)
        else:
            return None
    except (EngineUnavailableError, AudioFormatError, OSError) as exc:
        raise SynthesisError(f"no audio for {utt.label!r}: {exc}") from exc
    mulaw = to_ulaw_frames(pcm, rate_hz, FRAME_BYTES)
    if not mulaw:
        raise SynthesisError(f"no speech in {utt.label!r}")
    return mulaw


def _new_sid(prefix: str) -> str:
    return prefix + secrets.token_hex(16)  # 34 characters, like Twilio's


class TwilioCaller:
    """One scripted call. ``await TwilioCaller(config).run()`` returns its ``CallReport``."""

    def __init__(self, config: CallerConfig) -> None:
        self._cfg = config
        self.call_sid = _new_sid("CA")
        self.stream_sid = _new_sid("MZ")
        self.account_sid = _new_sid("AC")
        self._ws: ClientConnection | None = None
        self._changed = asyncio.Event()
        self._closed = asyncio.Event()
        self._clock_done = asyncio.Event()
        self._stop_clock = False
        self._stop_sent = False
        self._server_hung_up = False
        self._seq = 0
        # Outgoing speech, and the turn it belongs to.
        self._tx_buf = bytearray()
        self._tx_turn: _TurnState | None = None
        # Agent audio not yet played (bytes) with marks in between.
        self._playout: collections.deque[bytes | _PendingMark] = collections.deque()
        self._playout_bytes = 0
        self._recorded = bytearray()
        self._turns: list[_TurnState] = []
        self._current_turn: _TurnState | None = None
        self._first_media_t: float | None = None
        self._last_media_t = float("-inf")
        self._last_echo_t = float("-inf")
        self._counts: collections.Counter[str] = collections.Counter()

    # --- public ---------------------------------------------------------------------------------

    async def run(self) -> CallReport:
        """Prepare the audio, make the call, fetch the server's record, and report."""
        cfg = self._cfg
        audio = [await load_utterance_audio(u, cfg.voice, 4 * cfg.io_timeout_s)
                 for u in cfg.utterances]
        timed_out = False
        try:
            async with asyncio.timeout(cfg.timeout_s):
                await self._call(audio)
        except TimeoutError:
            timed_out = True
            log.warning("[%s] ended after the %.1f s call timeout", self.call_sid, cfg.timeout_s)
        record = await self._fetch_call_record()
        report = self._report(record, timed_out)
        if cfg.record_path is not None:
            await asyncio.to_thread(write_wav, cfg.record_path, report.agent_audio, SAMPLE_RATE_HZ)
        return report

    # --- the call -------------------------------------------------------------------------------

    async def _call(self, audio: list[bytes | None]) -> None:
        cfg = self._cfg
        headers = {SIGNATURE_HEADER: compute_signature(cfg.auth_token, cfg.url, {})}
        try:
            ws = await connect(
                cfg.url,
                additional_headers=headers,
                open_timeout=cfg.io_timeout_s,
                close_timeout=cfg.io_timeout_s,
                compression=None,
                proxy=None,
            )
        except (OSError, TimeoutError, InvalidHandshake, InvalidURI) as exc:
            raise CallerError(f"could not connect to {cfg.url}: {exc}") from exc
        async with ws:
            self._ws = ws
            await self._send(Connected())
            sids = (self.stream_sid, self.account_sid, self.call_sid)
            await self._send(Start(self._next_seq(), *sids, ("inbound",), dict(cfg.params)))
            try:
                async with asyncio.TaskGroup() as tg:
                    tg.create_task(self._clock_loop(), name="caller-clock")
                    tg.create_task(self._receive_loop(), name="caller-receive")
                    tg.create_task(self._script(audio), name="caller-script")
            except ExceptionGroup as group:
                if len(group.exceptions) == 1:
                    raise group.exceptions[0] from None  # keeps its own traceback
                raise

    async def _script(self, audio: list[bytes | None]) -> None:
        cfg = self._cfg
        await self._wait_greeting()
        prev: _TurnState | None = None
        keys_sent_t: float | None = None  # when the last key of a run of DTMF was pressed
        loop = asyncio.get_running_loop()
        for utt, mulaw in zip(cfg.utterances, audio):
            if self._closed.is_set():
                break
            if utt.dtmf is not None:
                if keys_sent_t is None and prev is not None:
                    await self._wait_agent_done(prev)  # a person keys in after hearing the reply
                    prev = None
                if await self._send(Dtmf(self._next_seq(), self.stream_sid, utt.dtmf)):
                    self._counts["dtmf_sent"] += 1
                keys_sent_t = loop.time()
                await asyncio.sleep(DTMF_SPACING_S)
                continue
            if keys_sent_t is not None:  # hear the answer to the keys before speaking again
                sent = keys_sent_t
                if await self._wait_until(lambda sent=sent: self._last_media_t > sent or self._closed.is_set(),
                                          KEYS_ANSWER_S):
                    await self._wait_agent_done(None)
                keys_sent_t = None
            if utt.raw is not None:
                if await self._send_text(utt.raw):
                    self._counts["raw_sent"] += 1
                continue
            assert mulaw is not None
            if prev is not None:
                if cfg.barge_in_ms is not None:
                    await self._wait_barge_in_point(prev)
                else:
                    await self._wait_agent_done(prev)
            prev = _TurnState(index=len(self._turns) + 1, caller_said=utt.label)
            await self._speak(prev, mulaw)
        if prev is not None and not self._closed.is_set():
            await self._wait_agent_done(prev)
        await self._hang_up()

    async def _hang_up(self) -> None:
        self._stop_clock = True
        await self._wait_until(self._clock_done.is_set, self._cfg.io_timeout_s)
        if not self._closed.is_set():
            stop = Stop(self._next_seq(), self.stream_sid, self.account_sid, self.call_sid)
            self._stop_sent = await self._send(stop)
        if self._ws is not None:
            await self._ws.close()  # bounded by close_timeout

    # --- turn taking ----------------------------------------------------------------------------

    def _agent_quiet(self) -> bool:
        """Nothing left to play, and a mark has been echoed since the last audio arrived."""
        return not self._playout and self._last_echo_t >= self._last_media_t

    async def _wait_greeting(self) -> None:
        got_audio = await self._wait_until(
            lambda: self._first_media_t is not None or self._closed.is_set(),
            self._cfg.greeting_quiet_s,
        )
        if got_audio:
            await self._wait_agent_done(None)
        else:
            log.info("[%s] no greeting within %.1f s", self.call_sid, self._cfg.greeting_quiet_s)

    async def _wait_agent_done(self, turn: _TurnState | None) -> None:
        """Wait for the reply to ``turn`` (or the greeting) to finish playing, plus the gap."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._cfg.reply_timeout_s
        gap_s = self._cfg.gap_ms / 1000

        def done() -> bool:
            started = turn is None or turn.first_audio_t is not None
            return self._closed.is_set() or (started and self._agent_quiet())

        while True:
            if not await self._wait_until(done, deadline - loop.time()):
                log.warning(
                    "[%s] turn %s: no finished reply within %.1f s",
                    self.call_sid, turn.index if turn else "greeting", self._cfg.reply_timeout_s,
                )
                return
            if self._closed.is_set():
                return
            quiet_since = loop.time()
            await asyncio.sleep(gap_s)
            if self._closed.is_set() or (self._agent_quiet() and self._last_media_t < quiet_since):
                return

    async def _wait_barge_in_point(self, prev: _TurnState) -> None:
        """Wait until ``barge_in_ms`` after the reply to ``prev`` started arriving."""
        cfg = self._cfg
        assert cfg.barge_in_ms is not None
        started = await self._wait_until(
            lambda: prev.first_audio_t is not None or self._closed.is_set(), cfg.reply_timeout_s
        )
        if not started or prev.first_audio_t is None:
            if not self._closed.is_set():
                log.warning("[%s] turn %d: no reply to barge in on", self.call_sid, prev.index)
            return
        delay = prev.first_audio_t + cfg.barge_in_ms / 1000 - asyncio.get_running_loop().time()
        if delay > 0:
            await asyncio.sleep(delay)

    async def _speak(self, turn: _TurnState, mulaw: bytes) -> None:
        self._turns.append(turn)
        self._current_turn = turn
        self._tx_turn = turn
        self._tx_buf = bytearray(mulaw)
        budget_s = len(mulaw) / SAMPLE_RATE_HZ + self._cfg.io_timeout_s
        if not await self._wait_until(
            lambda: turn.speech_end_t is not None or self._closed.is_set(), budget_s
        ):
            raise CallerError(f"turn {turn.index}: speech was not sent within {budget_s:.1f} s")

    async def _wait_until(self, predicate: Callable[[], bool], timeout_s: float) -> bool:
        """Wait until ``predicate()`` holds (re-checked on every state change and every 50 ms)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not predicate():
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            self._changed.clear()
            try:
                async with asyncio.timeout(min(remaining, _POLL_S)):
                    await self._changed.wait()
            except TimeoutError:
                pass
        return True

    def _notify(self) -> None:
        self._changed.set()

    # --- the 20 ms clock: send one frame, play one frame ----------------------------------------

    async def _clock_loop(self) -> None:
        loop = asyncio.get_running_loop()
        start = loop.time()
        n = 0
        try:
            while not self._stop_clock and not self._closed.is_set():
                delay = start + n * FRAME_S - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                if self._stop_clock or self._closed.is_set():
                    break
                frame, turn, first, last = self._take_tx_frame()
                if first and turn is not None:
                    turn.speech_start_t = loop.time()
                    turn.barged_in = self._playout_bytes > 0
                media = Media(self._next_seq(), self.stream_sid, n + 1, n * 20, frame, "inbound")
                if not await self._send(media):
                    break
                self._counts["media_frames_sent"] += 1
                if last and turn is not None:
                    turn.speech_end_t = loop.time()
                    self._notify()
                await self._play_tick()
                n += 1
        finally:
            self._clock_done.set()
            self._notify()

    def _take_tx_frame(self) -> tuple[bytes, _TurnState | None, bool, bool]:
        """Next 160 bytes to send: speech if any is queued, else silence; and whether this frame
        is the first / last of an utterance."""
        turn = self._tx_turn
        if not self._tx_buf or turn is None:
            return bytes([ULAW_SILENCE]) * FRAME_BYTES, None, False, False
        first = turn.speech_start_t is None
        frame = bytes(self._tx_buf[:FRAME_BYTES]).ljust(FRAME_BYTES, bytes([ULAW_SILENCE]))
        del self._tx_buf[:FRAME_BYTES]
        last = not self._tx_buf
        if last:
            self._tx_turn = None
        return frame, turn, first, last

    async def _play_tick(self) -> None:
        """Play 20 ms of agent audio; echo marks whose audio has finished."""
        while self._playout and isinstance(self._playout[0], _PendingMark):
            await self._echo(self._playout.popleft())  # type: ignore[arg-type]
        played = bytearray()
        while self._playout and len(played) < FRAME_BYTES:
            head = self._playout.popleft()
            if isinstance(head, _PendingMark):
                await self._echo(head)  # its audio finished part-way through this frame
                continue
            take = FRAME_BYTES - len(played)
            played += head[:take]
            if len(head) > take:
                self._playout.appendleft(head[take:])
        self._playout_bytes -= len(played)
        self._recorded += played.ljust(FRAME_BYTES, bytes([ULAW_SILENCE]))
        if played or not self._playout:
            self._notify()

    async def _echo(self, mark: _PendingMark) -> None:
        if await self._send(Mark(self._next_seq(), self.stream_sid, mark.name)):
            self._counts["marks_echoed"] += 1
            self._last_echo_t = asyncio.get_running_loop().time()
            self._notify()

    # --- receiving ------------------------------------------------------------------------------

    async def _receive_loop(self) -> None:
        assert self._ws is not None
        try:
            async for raw in self._ws:  # bounded by the call timeout
                await self._on_message(raw)
        except ConnectionClosed:
            pass
        finally:
            if not self._stop_sent:
                self._server_hung_up = True
                log.info("[%s] the server closed the stream", self.call_sid)
            self._closed.set()
            self._notify()

    async def _on_message(self, raw: str | bytes) -> None:
        now = asyncio.get_running_loop().time()
        try:
            msg = parse_to_twilio(raw)
        except ProtocolError as exc:
            self._counts["protocol_errors"] += 1
            log.warning("[%s] unparseable server message: %s", self.call_sid, exc)
            return
        if msg.stream_sid != self.stream_sid:
            self._counts["protocol_errors"] += 1
            log.warning("[%s] %s message for another stream", self.call_sid, msg.event)
            return
        if isinstance(msg, OutMedia):
            self._on_media(msg.payload, now)
        elif isinstance(msg, OutMark):
            self._counts["marks_received"] += 1
            if self._playout:
                self._playout.append(_PendingMark(msg.name))
            else:
                await self._echo(_PendingMark(msg.name))
        elif isinstance(msg, Clear):
            self._counts["clears_received"] += 1
            turn = self._current_turn
            if turn is not None and turn.clear_t is None:
                turn.clear_t = now
            pending = [item for item in self._playout if isinstance(item, _PendingMark)]
            self._playout.clear()
            self._playout_bytes = 0
            for mark in pending:
                await self._echo(mark)
        self._notify()

    def _on_media(self, payload: bytes, now: float) -> None:
        self._counts["media_bytes_received"] += len(payload)
        if not payload:
            return
        self._last_media_t = now
        if self._first_media_t is None:
            self._first_media_t = now
        turn = self._current_turn
        if turn is not None:
            end = turn.speech_end_t
            in_straggler_window = end is None or now < end + STRAGGLER_GRACE_S
            if turn.clear_t is not None and in_straggler_window:
                turn.media_after_clear_bytes += len(payload)
            elif turn.speech_end_t is not None:
                turn.agent_audio_bytes += len(payload)
                if turn.first_audio_t is None:
                    turn.first_audio_t = now
        self._playout.append(payload)
        self._playout_bytes += len(payload)

    # --- sending --------------------------------------------------------------------------------

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    async def _send(self, msg: TwilioMessage) -> bool:
        return await self._send_text(msg.to_json())

    async def _send_text(self, text: str) -> bool:
        """Send one frame; False (and the call marked closed) if the socket is gone."""
        if self._ws is None or self._closed.is_set():
            return False
        try:
            async with asyncio.timeout(self._cfg.io_timeout_s):
                await self._ws.send(text)
        except ConnectionClosed:
            self._closed.set()
            self._notify()
            return False
        except TimeoutError as exc:
            raise CallerError(f"a send took longer than {self._cfg.io_timeout_s} s") from exc
        return True

    # --- the server's record and the report -----------------------------------------------------

    async def _fetch_call_record(self) -> dict[str, Any] | None:
        """GET the server's record of this call; None (with a warning) if that fails."""
        cfg = self._cfg
        url = f"{cfg.calls_url_base}/calls/{self.call_sid}"
        record: dict[str, Any] | None = None
        timeout = aiohttp.ClientTimeout(total=cfg.io_timeout_s)
        try:
            async with aiohttp.ClientSession(timeout=timeout) as session:
                for attempt in range(5):  # the server may still be closing the call
                    headers = {SIGNATURE_HEADER: compute_signature(cfg.auth_token, url, {})}
                    async with session.get(url, headers=headers) as resp:
                        if resp.status != 200:
                            log.warning("[%s] GET %s -> HTTP %d", self.call_sid, url, resp.status)
                            return None
                        data = await resp.json(content_type=None)
                    record = _validate_record(data)
                    if record["ended"] or attempt == 4:
                        return record
                    await asyncio.sleep(0.2)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            log.warning("[%s] could not fetch the call record from %s: %s", self.call_sid, url, exc)
        return record

    def _report(self, record: dict[str, Any] | None, timed_out: bool) -> CallReport:
        server_turns = {t["turn"]: t for t in record["turns"]} if record is not None else {}
        return CallReport(
            call_sid=self.call_sid,
            stream_sid=self.stream_sid,
            turns=tuple(t.result(server_turns.get(t.index, {})) for t in self._turns),
            agent_audio=ulaw_decode(bytes(self._recorded)),
            server_hung_up=self._server_hung_up,
            timed_out=timed_out,
            server_record_fetched=record is not None,
            server_record_ended=None if record is None else record["ended"],
            **{name: self._counts[name] for name in _COUNTS},
        )


_COUNTS: Final = ("marks_received", "marks_echoed", "clears_received", "media_bytes_received",
                  "media_frames_sent", "dtmf_sent", "raw_sent", "protocol_errors")


_LATENCY_KEYS: Final = (
    "vad_stop", "stt_final", "first_text", "tts_first_audio", "transport_first_byte"
)


def _validate_record(data: Any) -> dict[str, Any]:
    """Check the shape of ``GET /calls/{sid}``; raise ValueError if it is not as documented."""
    if not isinstance(data, dict) or not isinstance(data.get("turns"), list):
        raise ValueError("call record is not an object with a 'turns' list")
    if not isinstance(data.get("ended"), bool):
        raise ValueError("call record has no boolean 'ended'")
    turns = []
    for t in data["turns"]:
        if not isinstance(t, dict) or not isinstance(t.get("turn"), int):
            raise ValueError("call record turn has no integer 'turn'")
        lat = t.get("latency_ms") or {}
        if not isinstance(lat, dict):
            raise ValueError("call record latency_ms is not an object")
        latency: dict[str, float | None] = {}
        for key in _LATENCY_KEYS:
            v = lat.get(key)
            if v is not None and (not isinstance(v, (int, float)) or isinstance(v, bool)):
                raise ValueError(f"call record latency_ms.{key} is not a number")
            latency[key] = None if v is None else float(v)
        texts = {k: t.get(k) if isinstance(t.get(k), str) else None
                 for k in ("user_text", "agent_text", "agent_text_heard")}
        turns.append({"turn": t["turn"], **texts, "latency_ms": latency})
    return {"call_sid": data.get("call_sid"), "turns": turns, "ended": data["ended"]}


async def run_call(config: CallerConfig) -> CallReport:
    """Make one scripted call and return its report."""
    return await TwilioCaller(config).run()
