"""What a scripted Twilio call says and what it reports: the script's steps (``CallerUtterance``),
the call's settings (``CallerConfig``), each turn's measurements (``TurnResult``), the whole
call's report (``CallReport``) and the check of the server's call record it fetches.
``harness.callers.twilio`` places the call.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import numpy as np

from harness.errors import CallerAudioError
from harness.flite import synthesize_flite, to_ulaw_frames
from pipeline.audio.wav import read_wav
from pipeline.errors import AudioFormatError, EngineUnavailableError
from telephony.twilio.signature import SIGNATURE_HEADER, compute_signature

__all__ = [
    "CallReport", "CallerConfig", "CallerUtterance", "LatencyMs", "TurnResult", "TurnState",
    "fetch_call_record", "load_utterance_audio", "spelled_out", "validate_record",
]


log = logging.getLogger(__name__)

SAMPLE_RATE_HZ: Final = 8000
FRAME_S: Final = 0.020
FRAME_BYTES: Final = 160
STRAGGLER_GRACE_S: Final = 0.150
POLL_S: Final = 0.05
_DTMF_DIGITS: Final = frozenset("0123456789*#ABCD")
DTMF_SPACING_S: Final = 0.15  # between keypresses in a run of --dtmf items
KEYS_ANSWER_S: Final = 3.0  # after keys, how long to wait for the agent to answer them, if at all


@dataclass(frozen=True, slots=True)
class CallerUtterance:
    """One step of the script: speak ``text`` (flite) or a ``wav`` file, press ``dtmf``, or send
    ``raw`` text as a WebSocket frame as-is (for protocol-abuse tests). Exactly one is set."""

    text: str | None = None
    wav: Path | str | None = None
    dtmf: str | None = None
    raw: str | None = None

    def __post_init__(self) -> None:
        if sum(v is not None for v in (self.text, self.wav, self.dtmf, self.raw)) != 1:
            raise ValueError("a CallerUtterance sets exactly one of text, wav, dtmf, raw")
        if self.text is not None and not self.text.strip():
            raise ValueError("CallerUtterance.text is empty")
        if self.dtmf is not None and self.dtmf not in _DTMF_DIGITS:
            raise ValueError(f"CallerUtterance.dtmf must be one of 0-9 * # A-D, got {self.dtmf!r}")

    @property
    def label(self) -> str:
        """What the caller said, for reports: the text, or the WAV path."""
        return self.text if self.text is not None else str(self.wav)


Responder = Callable[[str], Awaitable["CallerUtterance | tuple[CallerUtterance, ...] | None"]]
"""A caller who listens (``CallerConfig.respond``): given the agent's last words (the greeting,
then each reply, as the server's call record has them), what to say or key next (a tuple: a run
of keys, such as a number typed and ``#``, pressed ``DTMF_SPACING_S`` apart); None hangs up."""


@dataclass(frozen=True, slots=True)
class CallerConfig:
    url: str
    utterances: tuple[CallerUtterance, ...]
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
    linger_s: float = 0.0  # after the last reply, stay on the line this long (the agent may hang up)
    # the Twilio caller with ``keep_media``: end the linger early once this holds of what it has
    # received (``media_received``), as a person hangs up once they heard what they waited for
    linger_until: Callable[[list[tuple[float, bytes]]], bool] | None = field(default=None, hash=False,
                                                                             compare=False)
    # POST {calls base}/twilio/voice (signed) before the stream, as Twilio does: parley takes a
    # stream only for a call its webhook answered moments before. False for servers without one.
    webhook: bool = True
    # instead of ``utterances`` in order: ask ``respond`` for each next step, at most
    # ``max_turns`` times (a caller who answers what the agent said, not a fixed script)
    respond: Responder | None = field(default=None, hash=False, compare=False)
    max_turns: int = 12
    # the Twilio caller: a key pressed also sounds on the media (its tone, as a phone line carries
    # it) before its ``dtmf`` message goes
    dtmf_in_band: bool = False

    def __post_init__(self) -> None:
        if urlsplit(self.url).scheme not in ("ws", "wss"):
            raise ValueError(f"caller URL must be ws:// or wss://, got {self.url!r}")
        if not self.auth_token:
            raise ValueError("an auth token is required to sign the WebSocket upgrade")
        if (self.barge_in_ms or 0) < 0 or self.gap_ms < 0:
            raise ValueError("barge_in_ms and gap_ms must be >= 0")
        if self.linger_s < 0:
            raise ValueError("linger_s must be >= 0")
        if self.max_turns < 1:
            raise ValueError("max_turns must be >= 1")
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
    connection_lost: bool = False  # the socket dropped without a close handshake: the server went away
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
class TurnState:
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


async def load_utterance_audio(utt: CallerUtterance, voice: str, timeout_s: float) -> bytes | None:
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
        raise CallerAudioError(f"no audio for {utt.label!r}: {exc}") from exc
    mulaw = to_ulaw_frames(pcm, rate_hz, FRAME_BYTES)
    if not mulaw:
        raise CallerAudioError(f"no speech in {utt.label!r}")
    return mulaw


REPORT_COUNTS: Final = ("marks_received", "marks_echoed", "clears_received", "media_bytes_received",
                  "media_frames_sent", "dtmf_sent", "raw_sent", "protocol_errors")


_LATENCY_KEYS: Final = (
    "vad_stop", "stt_final", "first_text", "tts_first_audio", "transport_first_byte"
)


def validate_record(data: Any) -> dict[str, Any]:
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


async def get_call_record(session: aiohttp.ClientSession, cfg: CallerConfig,
                          call_sid: str) -> Any:
    """One signed GET of ``{calls base}/calls/{sid}`` -> its JSON as sent, or None (with a
    warning) for an HTTP error. aiohttp's errors and a body that is not JSON propagate."""
    url = f"{cfg.calls_url_base}/calls/{call_sid}"
    headers = {SIGNATURE_HEADER: compute_signature(cfg.auth_token, url, {})}
    async with session.get(url, headers=headers) as resp:
        if resp.status != 200:
            log.warning("[%s] GET %s -> HTTP %d", call_sid, url, resp.status)
            return None
        return await resp.json(content_type=None)


async def fetch_call_record(cfg: CallerConfig, call_sid: str) -> dict[str, Any] | None:
    """GET the server's record of the call; None (with a warning) if that fails."""
    url = f"{cfg.calls_url_base}/calls/{call_sid}"
    record: dict[str, Any] | None = None
    timeout = aiohttp.ClientTimeout(total=cfg.io_timeout_s)
    try:
        async with aiohttp.ClientSession(timeout=timeout) as session:
            for attempt in range(5):  # the server may still be closing the call
                data = await get_call_record(session, cfg, call_sid)
                if data is None:
                    return None
                record = validate_record(data)
                if record["ended"] or attempt == 4:
                    return record
                await asyncio.sleep(0.2)
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        log.warning("[%s] could not fetch the call record from %s: %s", call_sid, url, exc)
    return record


_LETTERS_SAID = dict(zip("abcdefghijklmnopqrstuvwxyz", (
    "eigh bee see dee ee ef gee aitch eye jay kay el em en oh pee cue are ess tee you vee "
    "double-you ex why zee").split()))


def spelled_out(name: str) -> str:
    """A name spelled as a person says it to someone taking it down: each letter's name, a
    short pause between letters, a longer one between the names ("dee, eigh, vee, eye, dee.
    em, ..."). The letters are written as they sound: the voices read a lone "a" as the
    article, "uh" (espeak-ng and flite both)."""
    return ". ".join(", ".join(_LETTERS_SAID[c] for c in part if c in _LETTERS_SAID)
                     for part in name.lower().split())
