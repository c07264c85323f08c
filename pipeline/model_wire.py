"""The model tier's wire protocol: Cartesia's TTS and STT WebSocket APIs, as parley speaks them.

parley's model server (``deploy.model_server``) serves its speech models on the paths and messages
of Cartesia's API, so that pipecat's own ``CartesiaTTSService(url=...)`` and
``CartesiaSTTService(base_url=...)`` work against it unchanged, and so do parley's remote engines.
Messages are typed here, at the edge; nothing past this module handles them as dicts.

TTS, ``/tts/websocket`` (text frames, JSON both ways)::

    client: {"context_id", "transcript", "continue", "output_format": {"container": "raw",
             "encoding": "pcm_s16le" | "pcm_mulaw" | "pcm_alaw", "sample_rate"},
             "add_timestamps", "model_id", "voice": {"mode": "id", "id"}, "language"}
                                                                        -> TTSGenerate
            {"context_id", "cancel": true}                              -> TTSCancel
    server: {"type": "chunk", "data": base64 audio, "done": false, "context_id", ...}
            {"type": "timestamps", "word_timestamps": {"words", "start", "end"}, "context_id"}
            {"type": "done", "done": true, "context_id"}      after a context's last chunk
            {"type": "error", "error", "status_code", "done": true, "context_id"}

A context is one reply: its transcripts (``continue: true``) are spoken in order, one after the
other, and the one with ``continue: false`` (an empty one is a flush) ends it with ``done``.

STT, ``/stt/websocket?model=&language=&encoding=&sample_rate=[&vad=off]`` (binary audio in, JSON out)::

    client: binary audio; text "finalize" (end of the caller's turn), "done" or "close" (end
            of the stream); parley's own: {"type": "hints", "expect": [...], "phrases": [...],
            "keywords": [...]} (for the next utterance), {"type": "pause", "paused": true|false}
            (the client's VAD started its stop timer, or heard speech again: the final may begin)
    server: {"type": "transcript", "text", "is_final", "words": [...], "request_id", ...}
            (a final after keyword hints: "spotted": [{"keyword", "score"}, ...])
            {"type": "flush_done"} after the final that a "finalize" asked for
            {"type": "done"} before closing
            {"type": "error", "message"}

parley's addition to both: ``{"type": "goaway", "reason", "deadline_ms", "context_id": ""}`` when
the server is draining (SIGTERM): streams still run until they leave or the grace ends, and a
client should open its next one on another replica. (``context_id`` is there, empty, because
pipecat's Cartesia TTS reads it from every message.)
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, get_args

from pipeline.errors import WireError
from ssm_engine.stt.hints import HintKind

__all__ = [
    "ENCODINGS", "MAX_TEXT_MESSAGE_BYTES", "MAX_TRANSCRIPT_CHARS", "STT_PATH", "STT_RATES_HZ",
    "TTS_PATH", "TTS_RATES_HZ", "Encoding", "OutputFormat", "SttFinalize", "SttEnd", "SttHints",
    "SttParams", "SttPause", "TTSCancel", "TTSGenerate", "parse_stt_text", "parse_tts_message",
    "tts_chunk", "tts_done", "tts_error", "tts_timestamps", "stt_transcript", "stt_flush_done",
    "stt_done", "stt_error", "goaway",
]

TTS_PATH: Final = "/tts/websocket"
STT_PATH: Final = "/stt/websocket"
Encoding = Literal["pcm_s16le", "pcm_mulaw", "pcm_alaw"]
ENCODINGS: Final[tuple[Encoding, ...]] = ("pcm_s16le", "pcm_mulaw", "pcm_alaw")
TTS_RATES_HZ: Final = (8000, 16000, 22050, 24000, 44100, 48000)
STT_RATES_HZ: Final = (8000, 16000)
MAX_TEXT_MESSAGE_BYTES: Final = 64 * 1024
"""A text message longer than this is refused (a reply's sentence is a few hundred bytes)."""
MAX_TRANSCRIPT_CHARS: Final = 5000
"""One transcript's longest text; a context may hold many."""
HINT_KINDS: Final[tuple[str, ...]] = get_args(HintKind)
"""The recogniser's hint kinds, as ``ssm_engine.stt.hints`` defines them."""


def _obj(raw: str | bytes) -> dict[str, Any]:
    if len(raw) > MAX_TEXT_MESSAGE_BYTES:
        raise WireError(f"message of {len(raw)} bytes, over the {MAX_TEXT_MESSAGE_BYTES}-byte limit")
    try:
        msg = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise WireError(f"not JSON: {exc}") from None
    if not isinstance(msg, dict):
        raise WireError(f"expected a JSON object, got {type(msg).__name__}")
    return msg


def _str(msg: Mapping[str, Any], key: str, *, default: str | None = None, limit: int = 256) -> str:
    value = msg.get(key, default)
    if not isinstance(value, str):
        raise WireError(f"{key!r} must be a string, got {value!r:.60}")
    if len(value) > limit:
        raise WireError(f"{key!r} is {len(value)} characters, over the limit of {limit}")
    return value


def _bool(msg: Mapping[str, Any], key: str, default: bool) -> bool:
    value = msg.get(key, default)
    if not isinstance(value, bool):
        raise WireError(f"{key!r} must be true or false, got {value!r:.60}")
    return value


def _language(value: object) -> None:
    if value is not None and (not isinstance(value, str) or value.split("-")[0].lower() != "en"):
        raise WireError(f"language {value!r:.20} is not served here: parley's models speak English ('en')")


@dataclass(frozen=True)
class OutputFormat:
    """How a context's audio is sent: raw samples in ``encoding`` at ``sample_rate_hz``."""

    encoding: Encoding = "pcm_s16le"
    sample_rate_hz: int = 8000

    @classmethod
    def parse(cls, value: object) -> OutputFormat:
        if not isinstance(value, dict):
            raise WireError("'output_format' must be an object with container, encoding and sample_rate")
        container = value.get("container", "raw")
        if container != "raw":
            raise WireError(f"output_format.container {container!r:.20} is not served: only 'raw'")
        encoding = value.get("encoding")
        if encoding not in ENCODINGS:
            raise WireError(f"output_format.encoding {encoding!r:.20} is not served: one of {', '.join(ENCODINGS)}")
        rate = value.get("sample_rate")
        if isinstance(rate, bool) or rate not in TTS_RATES_HZ:
            raise WireError(f"output_format.sample_rate {rate!r:.20} is not served: one of {TTS_RATES_HZ}")
        return cls(encoding, rate)


@dataclass(frozen=True)
class TTSGenerate:
    """Speak ``transcript`` in context ``context_id``; ``more`` (the wire's ``continue``): more
    transcripts follow in this context."""

    context_id: str
    transcript: str
    more: bool
    output_format: OutputFormat
    add_timestamps: bool = False
    model_id: str = ""
    voice: str = ""          # the voice's id ("" when the message names none: the default)


@dataclass(frozen=True)
class TTSCancel:
    """Stop context ``context_id`` now: nothing more is made or sent for it."""

    context_id: str


def parse_tts_message(raw: str | bytes) -> TTSGenerate | TTSCancel:
    """One client message of ``/tts/websocket``, or ``WireError`` saying what is wrong."""
    msg = _obj(raw)
    context_id = _str(msg, "context_id")
    if not context_id:
        raise WireError("'context_id' must name the context (a non-empty string)")
    if msg.get("cancel") is True:
        return TTSCancel(context_id)
    _language(msg.get("language"))
    return TTSGenerate(
        context_id=context_id,
        transcript=_str(msg, "transcript", limit=MAX_TRANSCRIPT_CHARS),
        more=_bool(msg, "continue", False),
        output_format=OutputFormat.parse(msg.get("output_format")),
        add_timestamps=_bool(msg, "add_timestamps", False),
        model_id=_str(msg, "model_id", default=""),
        voice=_voice(msg.get("voice")),
    )


def _voice(value: object) -> str:
    """Cartesia's ``voice``: ``{"mode": "id", "id": "joe"}`` -> "joe"; absent -> "". A voice is
    picked by id only (parley's voices are trained, not cloned from an embedding)."""
    if value is None:
        return ""
    if not isinstance(value, dict) or value.get("mode", "id") != "id":
        raise WireError(f"'voice' must be {{\"mode\": \"id\", \"id\": NAME}}, got {value!r:.60}")
    return _str(value, "id", default="", limit=128)


def _dumps(msg: dict[str, Any]) -> str:
    return json.dumps(msg, separators=(",", ":"))


def tts_chunk(context_id: str, audio: bytes, step_time_ms: float) -> str:
    return _dumps({"type": "chunk", "data": base64.b64encode(audio).decode("ascii"), "done": False,
                   "status_code": 206, "step_time": round(step_time_ms, 3), "context_id": context_id})


def tts_timestamps(context_id: str, words: list[tuple[str, float, float]]) -> str:
    """``words``: (word, start_s, end_s), offsets in the context's audio."""
    return _dumps({"type": "timestamps", "done": False, "status_code": 206, "context_id": context_id,
                   "word_timestamps": {"words": [w for w, _, _ in words],
                                       "start": [round(s, 4) for _, s, _ in words],
                                       "end": [round(e, 4) for _, _, e in words]}})


def tts_done(context_id: str) -> str:
    return _dumps({"type": "done", "done": True, "status_code": 200, "context_id": context_id})


def tts_error(context_id: str, error: str, status_code: int = 400) -> str:
    return _dumps({"type": "error", "done": True, "status_code": status_code, "error": error,
                   "title": "Bad request" if status_code < 500 else "Server error",
                   "context_id": context_id})


def goaway(reason: str, deadline_ms: int) -> str:
    return _dumps({"type": "goaway", "reason": reason, "deadline_ms": deadline_ms, "context_id": ""})


# -- STT --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SttParams:
    """The query of ``/stt/websocket``: how the client's audio is encoded."""

    encoding: Encoding = "pcm_s16le"
    sample_rate_hz: int = 8000
    model: str = ""
    gate: bool = True
    """The server finds where speech starts (Cartesia's clients send every frame). parley's own
    client sends each utterance alone, from a little before its speech (``vad=off`` in the query),
    and the server hears all of it."""

    @classmethod
    def from_query(cls, query: Mapping[str, str]) -> SttParams:
        _language(query.get("language"))
        encoding = query.get("encoding", "pcm_s16le")
        if encoding not in ENCODINGS:
            raise WireError(f"encoding {encoding!r:.20} is not served: one of {', '.join(ENCODINGS)}")
        rate_text = query.get("sample_rate", "")
        try:
            rate = int(rate_text)
        except ValueError:
            raise WireError(f"sample_rate must be a number of Hz, one of {STT_RATES_HZ}; "
                            f"got {rate_text!r:.20}") from None
        if rate not in STT_RATES_HZ:
            raise WireError(f"sample_rate {rate} is not served: one of {STT_RATES_HZ}")
        vad = query.get("vad", "on")
        if vad not in ("on", "off"):
            raise WireError(f"vad must be 'on' or 'off', got {vad!r:.20}")
        return cls(encoding, rate, query.get("model", "")[:128], gate=vad == "on")


@dataclass(frozen=True)
class SttFinalize:
    """The caller's turn ended: send the final transcript of what was heard, then flush_done."""


@dataclass(frozen=True)
class SttEnd:
    """The client is done with the stream ("done" or "close")."""


@dataclass(frozen=True)
class SttHints:
    """parley's addition: what the next utterance is expected to hold (``ssm_engine.stt.hints``)."""

    expect: tuple[str, ...] = ()
    phrases: tuple[str, ...] = ()
    keywords: tuple[str, ...] = ()


@dataclass(frozen=True)
class SttPause:
    """parley's addition: the client's VAD started its stop timer (``paused``) or heard speech
    again (not ``paused``), after the audio sent before it; the recogniser may begin the final."""

    paused: bool


def _strings(msg: dict, name: str, most: int, longest: int) -> tuple[str, ...]:
    value = msg.get(name, [])
    if (not isinstance(value, list) or len(value) > most
            or any(not isinstance(p, str) or len(p) > longest for p in value)):
        raise WireError(f"hints.{name} must be a list of at most {most} strings of at most "
                        f"{longest} characters")
    return tuple(value)


def parse_stt_text(raw: str) -> SttFinalize | SttEnd | SttHints | SttPause:
    """One text message of ``/stt/websocket``, or ``WireError``."""
    word = raw.strip()
    if word == "finalize":
        return SttFinalize()
    if word in ("done", "close"):
        return SttEnd()
    msg = _obj(raw)
    if msg.get("type") == "pause":
        paused = msg.get("paused")
        if not isinstance(paused, bool):
            raise WireError(f"pause.paused must be true or false, got {paused!r:.20}")
        return SttPause(paused)
    if msg.get("type") != "hints":
        raise WireError(f"unknown message {raw!r:.60}: expected 'finalize', 'done', 'close', a hints "
                        "or a pause object")
    expect = msg.get("expect", [])
    if not isinstance(expect, list) or any(k not in HINT_KINDS for k in expect):
        raise WireError(f"hints.expect must be a list of {', '.join(HINT_KINDS)}, got {expect!r:.60}")
    return SttHints(tuple(expect), _strings(msg, "phrases", 64, 200),
                    _strings(msg, "keywords", 128, 60))


def stt_transcript(text: str, *, is_final: bool, request_id: str, duration_s: float,
                   confidence: float | None = None,
                   spotted: tuple[tuple[str, float], ...] = ()) -> str:
    """A transcript event. ``words`` carries the words without times: parley's recogniser does
    not align its words to the audio (``start``/``end`` are absent, not invented). ``spotted``
    (parley's addition, finals only): the hinted keywords heard, with their scores."""
    msg: dict[str, Any] = {"type": "transcript", "request_id": request_id, "text": text,
                           "is_final": is_final, "duration": round(duration_s, 3), "language": "en",
                           "words": [{"word": w} for w in text.split()]}
    if confidence is not None and math.isfinite(confidence):
        msg["confidence"] = round(confidence, 4)
    if spotted:
        msg["spotted"] = [{"keyword": k, "score": round(v, 3)} for k, v in spotted]
    return _dumps(msg)


def parse_spotted(event: dict) -> tuple[tuple[str, float], ...]:
    """A final transcript event's ``spotted`` keywords; what is not well formed is left out."""
    items = event.get("spotted")
    if not isinstance(items, list):
        return ()
    out = []
    for item in items[:128]:
        if isinstance(item, dict) and isinstance(k := item.get("keyword"), str) \
                and isinstance(v := item.get("score"), (int, float)) and math.isfinite(v):
            out.append((k[:60], float(v)))
    return tuple(out)


def stt_flush_done(request_id: str) -> str:
    return _dumps({"type": "flush_done", "request_id": request_id})


def stt_done(request_id: str) -> str:
    return _dumps({"type": "done", "request_id": request_id})


def stt_error(message: str, request_id: str = "") -> str:
    return _dumps({"type": "error", "message": message, "request_id": request_id})
