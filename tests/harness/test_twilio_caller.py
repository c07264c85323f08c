"""The scripted caller against a fake Twilio-speaking server over loopback.

The fake server checks the signature on the upgrade and on ``GET /calls/{sid}`` (served by the
same websockets server through ``process_request``), greets with a tone and a mark, answers each
caller utterance (300 ms of silence ends one) with a tone and a mark, and sends ``clear`` when the
caller talks while its audio is still playing.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import logging
import math
import time
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.http11 import Request, Response

from pipeline.audio.g711 import ulaw_decode, ulaw_encode
from pipeline.audio.wav import read_wav
from harness.callers.twilio import (
    CallerConfig,
    TurnResult,
    TwilioCaller,
    CallerUtterance,
    run_call,
)
from harness.call_cli import config_from_args, register_cli
from harness.errors import CallerError
from telephony.errors import ProtocolError
from telephony.twilio.messages import (
    Clear,
    Connected,
    Dtmf,
    Mark,
    Media,
    OutMark,
    OutMedia,
    Start,
    Stop,
    parse_twilio,
)
from telephony.twilio.signature import SIGNATURE_HEADER, verify_signature

TOKEN = "test-auth-token"
SPEECH_RMS = 500.0
END_OF_UTTERANCE_FRAMES = 15  # 300 ms of silence
LATENCY = {"vad_stop": 300.0, "stt_final": 310.0, "first_text": None, "tts_first_audio": 320.0,
           "transport_first_byte": 321.0}


def tone(ms: int, hz: float = 440.0) -> bytes:
    t = np.arange(8 * ms) / 8000
    return ulaw_encode((8000 * np.sin(2 * math.pi * hz * t)).astype(np.int16))


@dataclass
class FakeServer:
    reply_ms: list[int]
    greeting_ms: int = 300
    hang_up_after_greeting: bool = False
    vanish_after_greeting: bool = False  # drop the TCP connection, no close frame (a killed server)
    straggler_after_clear: bool = False
    port: int = 0
    start: Start | None = None
    got_connected: bool = False
    records: dict[str, dict[str, Any]] = field(default_factory=dict)
    media: list[tuple[float, Media]] = field(default_factory=list)
    mark_echoes: list[tuple[str, float]] = field(default_factory=list)  # (name, seconds after sent)
    dtmf: list[str] = field(default_factory=list)
    protocol_errors: int = 0
    clears_sent: int = 0
    upgrade_rejections: int = 0
    stop_received: bool = False
    _server: Server | None = None

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/twilio/stream"

    async def __aenter__(self) -> FakeServer:
        self._server = await serve(
            self._handler, "127.0.0.1", 0, process_request=self._process_request, compression=None
        )
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    def _process_request(self, conn: ServerConnection, request: Request) -> Response | None:
        signature = request.headers.get(SIGNATURE_HEADER)
        if request.path.startswith("/calls/"):
            url = f"http://127.0.0.1:{self.port}{request.path}"
            if not verify_signature(TOKEN, url, {}, signature):
                return conn.respond(HTTPStatus.FORBIDDEN, "bad signature\n")
            record = self.records.get(request.path.removeprefix("/calls/"))
            if record is None:
                return conn.respond(HTTPStatus.NOT_FOUND, "no such call\n")
            return conn.respond(HTTPStatus.OK, json.dumps(record))
        if not verify_signature(TOKEN, self.ws_url, {}, signature):
            self.upgrade_rejections += 1
            return conn.respond(HTTPStatus.FORBIDDEN, "bad signature\n")
        return None

    async def _say(self, ws: ServerConnection, ms: int, name: str) -> None:
        """Send ``ms`` of tone at once (faster than real time, like a TTS), then a mark."""
        if ms == 0:
            return
        sid = self.start.stream_sid  # type: ignore[union-attr]
        audio = tone(ms)
        for i in range(0, len(audio), 800):  # 100 ms per message: any length is allowed
            await ws.send(OutMedia(sid, audio[i : i + 800]).to_json())
        await ws.send(OutMark(sid, name).to_json())
        self._outstanding[name] = time.monotonic()

    async def _handler(self, ws: ServerConnection) -> None:
        self._outstanding: dict[str, float] = {}  # marks sent, not yet echoed
        self._speaking, self._loud, self._silent, self._turn = False, 0, 0, 0
        try:
            async for raw in ws:
                try:
                    msg = parse_twilio(raw)
                except ProtocolError:
                    self.protocol_errors += 1
                    continue
                if isinstance(msg, Connected):
                    self.got_connected = True
                elif isinstance(msg, Start):
                    self.start = msg
                    self.records[msg.call_sid] = {"call_sid": msg.call_sid, "turns": [],
                                                  "ended": False}
                    await self._say(ws, self.greeting_ms, "greeting")
                elif isinstance(msg, Media):
                    await self._on_media(ws, msg)
                elif isinstance(msg, Mark):
                    sent_at = self._outstanding.pop(msg.name)
                    self.mark_echoes.append((msg.name, time.monotonic() - sent_at))
                    if msg.name == "greeting" and self.hang_up_after_greeting:
                        return
                    if msg.name == "greeting" and self.vanish_after_greeting:
                        ws.transport.abort()
                        return
                elif isinstance(msg, Dtmf):
                    self.dtmf.append(msg.digit)
                elif isinstance(msg, Stop):
                    self.stop_received = True
        finally:
            if self.start is not None:
                self.records[self.start.call_sid]["ended"] = True

    async def _on_media(self, ws: ServerConnection, msg: Media) -> None:
        """Energy VAD: 2 loud frames start speech (barge-in if audio is playing), 300 ms of
        silence ends it and triggers the reply."""
        self.media.append((time.monotonic(), msg))
        rms = float(np.sqrt(np.mean(ulaw_decode(msg.payload).astype(np.float64) ** 2)))
        if rms > SPEECH_RMS:
            self._silent, self._loud = 0, self._loud + 1
            if not self._speaking and self._loud >= 2:
                self._speaking = True
                if self._outstanding:
                    await ws.send(Clear(msg.stream_sid).to_json())
                    self.clears_sent += 1
                    if self.straggler_after_clear:
                        await ws.send(OutMedia(msg.stream_sid, tone(20)).to_json())
            return
        self._loud = 0
        if self._speaking:
            self._silent += 1
            if self._silent >= END_OF_UTTERANCE_FRAMES:
                self._speaking, self._turn = False, self._turn + 1
                n = self._turn
                self.records[self.start.call_sid]["turns"].append(  # type: ignore[union-attr]
                    {"turn": n, "user_text": f"utterance {n}", "agent_text": f"reply {n}",
                     "agent_text_heard": f"reply {n}", "latency_ms": LATENCY}
                )
                await self._say(ws, self.reply_ms[n - 1], f"reply-{n}")


def loud_frames(pcm: np.ndarray) -> int:
    frames = pcm[: pcm.size // 160 * 160].reshape(-1, 160).astype(np.float64)
    return int(np.sum(np.sqrt(np.mean(frames**2, axis=1)) > 1000))


async def test_two_turns_with_dtmf_and_raw(tmp_path: Path) -> None:
    async with FakeServer(reply_ms=[300, 400]) as server:
        config = CallerConfig(
            webhook=False,
            url=server.ws_url,
            utterances=(
                CallerUtterance(text="Hello there."),
                CallerUtterance(dtmf="5"),
                CallerUtterance(raw="this is not json"),
                CallerUtterance(text="Thank you."),
            ),
            auth_token=TOKEN,
            params={"lang": "en"},
            record_path=tmp_path / "heard.wav",
            timeout_s=20,
        )
        report = await run_call(config)

    # The stream looked like Twilio's.
    assert server.got_connected and server.stop_received
    start = server.start
    assert start is not None and start.call_sid == report.call_sid
    assert start.call_sid.startswith("CA") and len(start.call_sid) == 34
    assert start.stream_sid.startswith("MZ") and len(start.stream_sid) == 34
    assert start.custom_parameters == {"lang": "en"}
    fmt = start.media_format
    assert (fmt.encoding, fmt.sample_rate_hz, fmt.channels) == ("audio/x-mulaw", 8000, 1)
    frames = [m for _, m in server.media]
    assert [m.chunk for m in frames] == list(range(1, len(frames) + 1))
    assert [m.timestamp_ms for m in frames] == [20 * i for i in range(len(frames))]
    assert all(len(m.payload) == 160 for m in frames)
    seqs = [m.sequence_number for m in frames]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    assert report.media_frames_sent == len(frames)
    # Paced on an absolute clock: n frames span (n - 1) * 20 ms, not more.
    span_s = server.media[-1][0] - server.media[0][0]
    assert span_s == pytest.approx((len(frames) - 1) * 0.020, abs=0.1)
    assert server.dtmf == ["5"] and report.dtmf_sent == 1
    assert server.protocol_errors == 1 and report.raw_sent == 1

    # Marks came back in order, each once its audio had played in real time.
    assert [name for name, _ in server.mark_echoes] == ["greeting", "reply-1", "reply-2"]
    for (_, delay_s), audio_ms in zip(server.mark_echoes, [300, 300, 400]):
        assert audio_ms / 1000 - 0.005 <= delay_s <= audio_ms / 1000 + 0.15
    assert report.marks_received == report.marks_echoed == 3
    assert report.clears_received == 0 and report.protocol_errors == 0

    # Turns, v2v and the server's record.
    assert [t.turn for t in report.turns] == [1, 2]
    assert [t.caller_said for t in report.turns] == ["Hello there.", "Thank you."]
    for t in report.turns:
        assert t.v2v_ms is not None and 150 < t.v2v_ms < 1500  # the fake waits 300 ms of silence
        assert not t.barged_in and not t.clear_received and t.media_after_clear_bytes == 0
        assert t.agent_transcript == f"utterance {t.turn}" and t.agent_reply == f"reply {t.turn}"
        assert t.latency_ms.stt_final == 310.0 and t.latency_ms.first_text is None
    assert [t.agent_audio_bytes for t in report.turns] == [2400, 3200]
    assert report.server_record_fetched and report.server_record_ended is True
    assert not report.server_hung_up and not report.timed_out

    # The recording is the caller's timeline: the tones are in it, for as long as they lasted.
    pcm, rate_hz = read_wav(tmp_path / "heard.wav")
    assert rate_hz == 8000 and np.array_equal(pcm, report.agent_audio)
    assert loud_frames(pcm) == (300 + 300 + 400) // 20
    assert pcm.size == 160 * report.media_frames_sent

    line = json.loads(report.turns[0].to_json_line())
    assert set(line) == {"turn", "caller_said", "agent_transcript", "agent_reply", "v2v_ms",
                         "stt_final_ms", "tts_ttfa_ms", "barged_in", "clear_received",
                         "media_after_clear_bytes"}
    assert line["stt_final_ms"] == 310.0 and line["tts_ttfa_ms"] == 320.0


async def test_barge_in_gets_clear_and_counts_stragglers() -> None:
    async with FakeServer(reply_ms=[1500, 300], straggler_after_clear=True) as server:
        config = CallerConfig(
            webhook=False,
            url=server.ws_url,
            utterances=(CallerUtterance(text="Hello there."), CallerUtterance(text="Wait a moment.")),
            auth_token=TOKEN,
            barge_in_ms=300,
            timeout_s=20,
        )
        report = await run_call(config)

    first, second = report.turns
    assert not first.barged_in and not first.clear_received
    assert second.barged_in and second.clear_received and server.clears_sent == 1
    assert second.clear_after_speech_start_ms is not None
    assert 20 <= second.clear_after_speech_start_ms < 500
    assert second.media_after_clear_bytes == 160  # the one frame the fake sent after its clear
    assert second.v2v_ms is not None and second.v2v_ms > 150
    assert second.agent_audio_bytes == 2400  # only the new reply, not the straggler
    # reply-1 was cleared: its mark came back at the clear, long before its 1.5 s had played.
    echoes = dict(server.mark_echoes)
    assert echoes["reply-1"] < 1.2 and set(echoes) == {"greeting", "reply-1", "reply-2"}
    assert report.clears_received == 1
    # Heard: greeting, part of reply 1, the straggler, reply 2 (not all 1.5 s of reply 1).
    assert loud_frames(report.agent_audio) < (300 + 1500 + 300) // 20


async def test_server_hang_up_ends_the_call_cleanly() -> None:
    async with FakeServer(reply_ms=[300], hang_up_after_greeting=True) as server:
        config = CallerConfig(
            webhook=False,
            url=server.ws_url,
            utterances=(CallerUtterance(text="Hello there."), CallerUtterance(text="Thank you.")),
            auth_token=TOKEN,
            timeout_s=10,
        )
        report = await run_call(config)
    assert report.server_hung_up and not report.timed_out and not report.connection_lost
    assert not server.stop_received
    assert report.turns == ()  # it hung up before the caller spoke
    assert report.server_record_ended is True


async def test_a_server_that_vanishes_mid_call_makes_parley_call_fail(monkeypatch, capsys) -> None:
    """Regression: `parley call` exited 0 when the server went away mid-call."""
    async with FakeServer(reply_ms=[300], vanish_after_greeting=True) as server:
        parser = argparse.ArgumentParser(prog="parley")
        register_cli(parser.add_subparsers(dest="command"))
        monkeypatch.setenv("TWILIO_AUTH_TOKEN", TOKEN)
        monkeypatch.setattr("harness.call_cli.CallerConfig", functools.partial(CallerConfig, webhook=False))
        args = parser.parse_args(["call", "--twilio", server.ws_url, "--say", "Hello there.", "--timeout-s", "10"])
        code = await asyncio.to_thread(args.func, args)
    assert code == 1
    assert "the server went away mid-call" in capsys.readouterr().err


async def test_no_greeting_caller_speaks_after_quiet_timeout() -> None:
    async with FakeServer(reply_ms=[200], greeting_ms=0) as server:
        config = CallerConfig(
            webhook=False,
            url=server.ws_url,
            utterances=(CallerUtterance(text="Hello there."),),
            auth_token=TOKEN,
            greeting_quiet_s=0.3,
            timeout_s=10,
        )
        report = await run_call(config)
    (turn,) = report.turns
    assert turn.v2v_ms is not None and turn.agent_audio_bytes == 1600
    assert [name for name, _ in server.mark_echoes] == ["reply-1"]
    # The caller waited the quiet timeout (15 frames), not the 3 s default, before speaking.
    first_loud = next(i for i, (_, m) in enumerate(server.media) if m.payload != b"\xff" * 160)
    assert 14 <= first_loud <= 30


async def test_bad_signature_is_refused() -> None:
    async with FakeServer(reply_ms=[]) as server:
        config = CallerConfig(webhook=False, url=server.ws_url, utterances=(), auth_token="wrong", timeout_s=5)
        with pytest.raises(CallerError, match="403"):
            await TwilioCaller(config).run()
    assert server.upgrade_rejections == 1


async def test_failed_record_fetch_leaves_server_fields_null(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with FakeServer(reply_ms=[], greeting_ms=100) as server:
        config = CallerConfig(
            webhook=False,
            url=server.ws_url,
            utterances=(),
            auth_token=TOKEN,
            calls_base_url="http://127.0.0.1:9",  # nothing listens on the discard port
            timeout_s=5,
            io_timeout_s=1,
        )
        with caplog.at_level(logging.WARNING, logger="harness.callers.script"):
            report = await run_call(config)
    assert not report.server_record_fetched and report.server_record_ended is None
    assert "could not fetch the call record" in caplog.text
    assert server.stop_received and report.marks_echoed == 1


def test_cli_keeps_the_script_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    parser = argparse.ArgumentParser(prog="parley")
    register_cli(parser.add_subparsers(dest="command"))
    monkeypatch.setenv("TWILIO_AUTH_TOKEN", "from-env")
    args = parser.parse_args(
        ["call", "--twilio", "ws://127.0.0.1:8765/twilio/stream", "--say", "one", "--wav", "a.wav",
         "--dtmf", "#", "--say", "two", "--param", "lang=en", "--param", "x=a=b",
         "--barge-in-ms", "250", "--timeout-s", "30"]
    )
    config = config_from_args(args)
    assert callable(args.func)
    assert config.utterances == (
        CallerUtterance(text="one"), CallerUtterance(wav="a.wav"), CallerUtterance(dtmf="#"), CallerUtterance(text="two")
    )
    assert config.auth_token == "from-env" and dict(config.params) == {"lang": "en", "x": "a=b"}
    assert (config.barge_in_ms, config.timeout_s, config.voice) == (250, 30.0, "slt")
    assert config.calls_url_base == "http://127.0.0.1:8765"
    assert CallerConfig(url="wss://h.example/x", utterances=(), auth_token="t").calls_url_base == (
        "https://h.example"
    )


async def test_a_listening_caller_answers_what_the_agent_said_last() -> None:
    """``respond``: each step is chosen from the agent's last words, read from the live record
    (the greeting before any turn: this server's record has none, so ""); None hangs up."""
    heard: list[str] = []

    async def respond(words: str) -> CallerUtterance | None:
        heard.append(words)
        steps = {1: CallerUtterance(text="Hello there."), 2: CallerUtterance(dtmf="1"),
                 3: CallerUtterance(text="Thank you.")}
        return steps.get(len(heard))

    async with FakeServer(reply_ms=[300, 300]) as server:
        report = await run_call(CallerConfig(webhook=False, url=server.ws_url, utterances=(),
                                             auth_token=TOKEN, respond=respond, timeout_s=30))
    # after the key the agent said nothing new: its last words are still the first reply
    assert heard == ["", "reply 1", "reply 1", "reply 2"]
    assert server.dtmf == ["1"] and report.dtmf_sent == 1
    assert [t.caller_said for t in report.turns] == ["Hello there.", "Thank you."]
    assert all(t.v2v_ms is not None for t in report.turns) and server.stop_received


async def test_a_listening_caller_types_a_run_of_keys_and_hears_the_answer_once() -> None:
    """A tuple from ``respond`` is a run of keys (a number typed, then #), pressed in order; the
    caller then waits for the agent's answer once, not after every key."""
    heard: list[str] = []

    async def respond(words: str) -> CallerUtterance | tuple[CallerUtterance, ...] | None:
        heard.append(words)
        if len(heard) == 1:
            return CallerUtterance(text="Hello there.")
        if len(heard) == 2:
            return tuple(CallerUtterance(dtmf=k) for k in "5550123#")
        return None

    async with FakeServer(reply_ms=[300]) as server:
        report = await run_call(CallerConfig(webhook=False, url=server.ws_url, utterances=(),
                                             auth_token=TOKEN, respond=respond, timeout_s=30))
    assert server.dtmf == list("5550123#") and report.dtmf_sent == 8
    assert len(heard) == 3 and [t.caller_said for t in report.turns] == ["Hello there."]


async def test_a_listening_caller_s_run_must_be_keys() -> None:
    async def respond(words: str) -> tuple[CallerUtterance, ...]:
        return (CallerUtterance(dtmf="1"), CallerUtterance(text="and hello"))

    async with FakeServer(reply_ms=[300]) as server:
        with pytest.raises(CallerError, match="keys"):
            await run_call(CallerConfig(webhook=False, url=server.ws_url, utterances=(),
                                        auth_token=TOKEN, respond=respond, timeout_s=30))


def test_config_and_utterance_validation() -> None:
    with pytest.raises(ValueError):
        CallerUtterance()
    with pytest.raises(ValueError):
        CallerUtterance(text="hi", dtmf="1")
    with pytest.raises(ValueError):
        CallerUtterance(dtmf="x")
    with pytest.raises(ValueError):
        CallerConfig(url="http://127.0.0.1/x", utterances=(), auth_token="t")
    with pytest.raises(ValueError):
        CallerConfig(url="ws://127.0.0.1/x", utterances=(), auth_token="")
    with pytest.raises(ValueError, match="max_turns"):
        CallerConfig(url="ws://127.0.0.1/x", utterances=(), auth_token="t", max_turns=0)


def test_turn_line_nulls() -> None:
    line = json.loads(TurnResult(1, "hi", None, False, False, None, 0, 0).to_json_line())
    assert line["v2v_ms"] is None and line["stt_final_ms"] is None
    assert line["agent_transcript"] is None
