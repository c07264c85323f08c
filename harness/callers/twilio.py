"""A scripted phone caller that speaks Twilio Media Streams to our server, as Twilio would.

``parley call --twilio ws://127.0.0.1:8765/twilio/stream --say "hi" --say "book a table"``

The caller plays the part of Twilio plus a person on a phone:

- It first POSTs the voice webhook (``{http base}/twilio/voice``, signed, with the call's
  ``CallSid``), as Twilio does; a ``<Reject>`` or an HTTP error there is a :class:`CallerError`.
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

Playing Twilio for a call whose TwiML is replaced (the REST stand-in, ``harness.twilio_rest``):
``end_stream()`` sends ``stop`` and closes the socket, as Twilio does, and the call's script ends.
With ``keep_media``, ``media_received`` keeps each ``media`` payload with the loop time it
arrived, ``keys_sent`` each key pressed and when, and ``clock_start_t`` is tick 0 of the playout
recording (sample ``i`` played at ``clock_start_t + i / 8000``).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import secrets
from xml.etree import ElementTree
from collections.abc import Callable
from typing import Any

import aiohttp
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from pipeline.audio.dtmf_tones import key_tone
from pipeline.audio.g711 import ULAW_SILENCE, ulaw_decode, ulaw_encode
from pipeline.audio.wav import write_wav
from harness.callers.script import (
    FRAME_BYTES, FRAME_S, KEYS_ANSWER_S, DTMF_SPACING_S, POLL_S, REPORT_COUNTS, SAMPLE_RATE_HZ, STRAGGLER_GRACE_S,
    CallerConfig, CallerUtterance, CallReport, LatencyMs, TurnResult, TurnState,
    fetch_call_record, get_call_record, load_utterance_audio,
)
from harness.callers.speaker import MarkedSpeaker
from harness.errors import CallerError
from telephony.errors import ProtocolError
from telephony.twilio.signature import SIGNATURE_HEADER, compute_signature
from telephony.twilio.messages import (
    Clear, Connected, Dtmf, Mark, Media, OutMark, OutMedia, Start, Stop, TwilioMessage,
    parse_to_twilio,
)

__all__ = [
    "CallReport", "CallerConfig", "CallerUtterance", "LatencyMs", "TurnResult", "TwilioCaller",
    "load_utterance_audio", "run_call",
]

log = logging.getLogger(__name__)

KEY_TONE_S = 0.07   # a key's tone with dtmf_in_band: what a phone sends for a quick press


def _new_sid(prefix: str) -> str:
    return prefix + secrets.token_hex(16)  # 34 characters, like Twilio's


class TwilioCaller:
    """One scripted call. ``await TwilioCaller(config).run()`` returns its ``CallReport``."""

    def __init__(self, config: CallerConfig, *, call_sid: str | None = None, account_sid: str | None = None,
                 stream_params: dict[str, str] | None = None, keep_media: bool = False) -> None:
        """``call_sid``, ``account_sid`` and ``stream_params`` (the TwiML's ``<Parameter>``s): a
        call whose webhook was answered elsewhere (the Twilio REST stand-in's calls out).
        ``keep_media``: keep what arrived and when (module docstring)."""
        self._cfg = config
        self._keep_media = keep_media
        self.media_received: list[tuple[float, bytes]] = []
        self.keys_sent: list[tuple[float, str]] = []
        self.clock_start_t: float | None = None
        self.stream_ended_t: float | None = None   # when end_stream() closed it
        self.call_sid = call_sid or _new_sid("CA")
        self.stream_sid = _new_sid("MZ")
        self.account_sid = account_sid or _new_sid("AC")
        self._ws: ClientConnection | None = None
        self._twiml_params: dict[str, str] = dict(stream_params or {})
        self._changed = asyncio.Event()
        self._closed = asyncio.Event()
        self._clock_done = asyncio.Event()
        self._stop_clock = False
        self._stop_sent = False
        self._server_hung_up = False
        self._connection_lost = False
        self._seq = 0
        # Outgoing speech, and the turn it belongs to.
        self._tx_buf = bytearray()
        self._tx_turn: TurnState | None = None
        self._tx_keys = bytearray()   # keys' tones to send (dtmf_in_band)
        # Agent audio not yet played (bytes) with marks in between.
        self._speaker = MarkedSpeaker()
        self._recorded = bytearray()
        self._turns: list[TurnState] = []
        self._current_turn: TurnState | None = None
        self._first_media_t: float | None = None
        self._last_media_t = float("-inf")
        self._last_echo_t = float("-inf")
        self._counts: collections.Counter[str] = collections.Counter()
        self._words_seen = ""  # the agent's last words as a listening caller last read them

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
        record = await fetch_call_record(self._cfg, self.call_sid)
        report = self._report(record, timed_out)
        if cfg.record_path is not None:
            await asyncio.to_thread(write_wav, cfg.record_path, report.agent_audio, SAMPLE_RATE_HZ)
        return report

    # --- the call -------------------------------------------------------------------------------

    async def _answer_webhook(self) -> None:
        """What Twilio does when the call rings: POST the voice webhook; the TwiML must connect."""
        cfg = self._cfg
        url = f"{cfg.calls_url_base}/twilio/voice"
        form = {"CallSid": self.call_sid, "AccountSid": self.account_sid, "From": "+15550100", "To": "+15550199",
                "Direction": "inbound", "CallStatus": "ringing"}
        headers = {SIGNATURE_HEADER: compute_signature(cfg.auth_token, url, form)}
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=cfg.io_timeout_s)) as session:
                async with session.post(url, data=form, headers=headers) as resp:
                    body = await resp.text()
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise CallerError(f"the voice webhook {url} could not be reached: {exc}") from exc
        if resp.status != 200:
            raise CallerError(f"the voice webhook {url} answered HTTP {resp.status}: {body.strip()[:200]}")
        if "<Reject" in body:
            raise CallerError(f"the server rejected the call: {body.strip()[:200]}")
        try:   # Twilio hands the <Stream>'s <Parameter>s to the stream as its customParameters
            twiml = ElementTree.fromstring(body)
        except ElementTree.ParseError as exc:
            raise CallerError(f"the voice webhook answered something that is not TwiML: {exc}") from exc
        self._twiml_params = {p.get("name", ""): p.get("value", "") for p in twiml.iter("Parameter")}

    async def _call(self, audio: list[bytes | None]) -> None:
        cfg = self._cfg
        if cfg.webhook:
            await self._answer_webhook()
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
            params = {**self._twiml_params, **cfg.params}
            await self._send(Start(self._next_seq(), *sids, ("inbound",), params))
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
        if cfg.respond is not None:
            await self._converse()
            return
        await self._wait_greeting()
        prev: TurnState | None = None
        keys_sent_t: float | None = None  # when the last key of a run of DTMF was pressed
        loop = asyncio.get_running_loop()
        for utt, mulaw in zip(cfg.utterances, audio):
            if self._closed.is_set():
                break
            if utt.dtmf is not None:
                if keys_sent_t is None and prev is not None:
                    await self._wait_agent_done(prev)  # a person keys in after hearing the reply
                    prev = None
                await self._key(utt.dtmf)
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
            prev = TurnState(index=len(self._turns) + 1, caller_said=utt.label)
            await self._speak(prev, mulaw)
        if prev is not None and not self._closed.is_set():
            await self._wait_agent_done(prev)
        if cfg.linger_s > 0:  # stay on the line: the agent may hang up first
            until = cfg.linger_until
            await self._wait_until(lambda: self._closed.is_set() or (until is not None and until(self.media_received)),
                                   cfg.linger_s)
        await self._hang_up()

    async def _press(self, keys: tuple[CallerUtterance, ...]) -> None:
        """Press ``keys`` ``DTMF_SPACING_S`` apart, then hear the agent's answer to them."""
        for i, key in enumerate(keys):
            if i:
                await asyncio.sleep(DTMF_SPACING_S)
            assert key.dtmf is not None
            await self._key(key.dtmf)
        sent = asyncio.get_running_loop().time()
        if await self._wait_until(lambda: self._last_media_t > sent or self._closed.is_set(),
                                  KEYS_ANSWER_S):
            await self._wait_agent_done(None)

    async def _key(self, digit: str) -> None:
        """Press ``digit``: with ``dtmf_in_band``, its tone goes out on the media first; then the
        ``dtmf`` message."""
        if self._cfg.dtmf_in_band:
            tone = ulaw_encode(key_tone(digit, duration_s=KEY_TONE_S, sample_rate_hz=SAMPLE_RATE_HZ))
            self._tx_keys += tone.ljust(-(-len(tone) // FRAME_BYTES) * FRAME_BYTES, bytes([ULAW_SILENCE]))
            await self._wait_until(lambda: not self._tx_keys or self._closed.is_set(),
                                   KEY_TONE_S + self._cfg.io_timeout_s)
        if await self._send(Dtmf(self._next_seq(), self.stream_sid, digit)):
            self._counts["dtmf_sent"] += 1
            if self._keep_media:
                self.keys_sent.append((asyncio.get_running_loop().time(), digit))

    async def _converse(self) -> None:
        """A caller who listens: each step is ``respond``'s answer to what the agent last said."""
        cfg = self._cfg
        assert cfg.respond is not None
        await self._wait_greeting()
        for _ in range(cfg.max_turns):
            if self._closed.is_set():
                break
            step = await cfg.respond(await self._agent_words())
            if step is None or self._closed.is_set():
                break
            if isinstance(step, tuple):
                if not step or any(k.dtmf is None for k in step):
                    raise CallerError("a listening caller's run of steps must be keys (dtmf) only")
                await self._press(step)
                continue
            utt = step
            if utt.dtmf is not None:
                await self._press((utt,))
                continue
            if utt.raw is not None:
                raise CallerError("a listening caller speaks or keys; it sends no raw frames")
            mulaw = await load_utterance_audio(utt, cfg.voice, 4 * cfg.io_timeout_s)
            assert mulaw is not None
            turn = TurnState(index=len(self._turns) + 1, caller_said=utt.label)
            await self._speak(turn, mulaw)
            await self._wait_agent_done(turn)
        await self._hang_up()

    async def _agent_words(self) -> str:
        """What the agent said last, from the server's live call record: its last reply, or the
        greeting before any; "" when the record cannot be read. A reply to keys joins the turn
        before it in the record: only what was added since the last step is given (the whole
        reply again when nothing was)."""
        words = await self._agent_record_words()
        seen, self._words_seen = self._words_seen, words
        if seen and words.startswith(seen) and words != seen:
            return words[len(seen):].strip()
        return words

    async def _agent_record_words(self) -> str:
        cfg = self._cfg
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=cfg.io_timeout_s)) as session:
                data = await get_call_record(session, cfg, self.call_sid)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            log.warning("[%s] could not read the live call record: %s", self.call_sid, exc)
            return ""
        turns = data.get("turns") if isinstance(data, dict) else None
        for t in reversed(turns if isinstance(turns, list) else []):
            if isinstance(t, dict) and isinstance(t.get("agent_text"), str) and t["agent_text"]:
                return t["agent_text"]
        greeting = data.get("greeting") if isinstance(data, dict) else None
        return greeting if isinstance(greeting, str) else ""

    async def end_stream(self) -> None:
        """Twilio's side: the call's TwiML was replaced, so its stream ends (``stop``, then the
        socket closes); the call goes on elsewhere, and this script is over."""
        if self.stream_ended_t is None:
            self.stream_ended_t = asyncio.get_running_loop().time()
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
        return not self._speaker and self._last_echo_t >= self._last_media_t

    async def _wait_greeting(self) -> None:
        got_audio = await self._wait_until(
            lambda: self._first_media_t is not None or self._closed.is_set(),
            self._cfg.greeting_quiet_s,
        )
        if got_audio:
            await self._wait_agent_done(None)
        else:
            log.info("[%s] no greeting within %.1f s", self.call_sid, self._cfg.greeting_quiet_s)

    async def _wait_agent_done(self, turn: TurnState | None) -> None:
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

    async def _wait_barge_in_point(self, prev: TurnState) -> None:
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

    async def _speak(self, turn: TurnState, mulaw: bytes) -> None:
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
                async with asyncio.timeout(min(remaining, POLL_S)):
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
        self.clock_start_t = start
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
                    turn.barged_in = self._speaker.queued_bytes > 0
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

    def _take_tx_frame(self) -> tuple[bytes, TurnState | None, bool, bool]:
        """Next 160 bytes to send: speech if any is queued, else silence; and whether this frame
        is the first / last of an utterance."""
        turn = self._tx_turn
        if not self._tx_buf or turn is None:
            if self._tx_keys:   # a key's tone (dtmf_in_band), between utterances
                frame = bytes(self._tx_keys[:FRAME_BYTES])
                del self._tx_keys[:FRAME_BYTES]
                return frame, None, False, False
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
        played, marks = self._speaker.tick()
        for name in marks:
            await self._echo(name)
        self._recorded += played.ljust(FRAME_BYTES, bytes([ULAW_SILENCE]))
        if played or not self._speaker:
            self._notify()

    async def _echo(self, mark: str) -> None:
        if await self._send(Mark(self._next_seq(), self.stream_sid, mark)):
            self._counts["marks_echoed"] += 1
            self._last_echo_t = asyncio.get_running_loop().time()
            self._notify()

    # --- receiving ------------------------------------------------------------------------------

    async def _receive_loop(self) -> None:
        assert self._ws is not None
        try:
            async for raw in self._ws:  # bounded by the call timeout
                await self._on_message(raw)
        except ConnectionClosed as exc:
            if exc.rcvd is None and not self._stop_sent:  # no close frame: the server is gone
                self._connection_lost = True
                log.warning("[%s] the connection to the server was lost mid-call", self.call_sid)
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
            if not self._speaker.mark(msg.name):
                await self._echo(msg.name)
        elif isinstance(msg, Clear):
            self._counts["clears_received"] += 1
            turn = self._current_turn
            if turn is not None and turn.clear_t is None:
                turn.clear_t = now
            for mark in self._speaker.clear():
                await self._echo(mark)
        self._notify()

    def _on_media(self, payload: bytes, now: float) -> None:
        self._counts["media_bytes_received"] += len(payload)
        if self._keep_media:
            self.media_received.append((now, payload))
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
        self._speaker.audio(payload)

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

    def _report(self, record: dict[str, Any] | None, timed_out: bool) -> CallReport:
        server_turns = {t["turn"]: t for t in record["turns"]} if record is not None else {}
        return CallReport(
            call_sid=self.call_sid,
            stream_sid=self.stream_sid,
            turns=tuple(t.result(server_turns.get(t.index, {})) for t in self._turns),
            agent_audio=ulaw_decode(bytes(self._recorded)),
            server_hung_up=self._server_hung_up,
            connection_lost=self._connection_lost,
            timed_out=timed_out,
            server_record_fetched=record is not None,
            server_record_ended=None if record is None else record["ended"],
            **{name: self._counts[name] for name in REPORT_COUNTS},
        )


async def run_call(config: CallerConfig) -> CallReport:
    """Make one scripted call and return its report."""
    return await TwilioCaller(config).run()
