"""A scripted Genesys Cloud Audio Connector client: what Genesys does when an Architect flow calls
parley's bot, written from the AudioHook protocol ("2", the bot variant).

- Connects to ``url`` with the ``Audiohook-*`` headers and ``X-API-KEY``, signed with the client
  secret when given (``telephony.genesys.signature.sign``; ``sign=False`` or a ``tamper`` hook for
  tests of refusals).
- ``open`` (PCMU 8 kHz, the ``external`` channel, the caller's ani/dnis, ``input_variables``);
  ``opened`` must choose one of the offers.
- Sends the caller's audio as binary PCMU, 200 ms a message on an absolute clock (each at the end of
  the 200 ms it holds, as a live source can): silence, or the
  script's utterances (flite) one after the other, each after the agent's previous reply has
  finished (no agent audio for ``quiet_s``), or ``barge_in_s`` into it; ``dtmf`` steps send
  ``dtmf`` messages. A ``ping`` each ``ping_s``; each ``pong`` must carry the ping's seq.
- Checks the server's numbering: ``seq`` 1, 2, 3, ... and ``clientseq`` never ahead of ours.
- On ``disconnect`` it sends ``close`` (reason ``disconnect``); after the script, ``close``
  (reason ``end``); either way it waits for ``closed`` and closes the socket.

The report holds what the server sent: the agent's audio (seconds per turn), voice-to-voice per
utterance (when its speech ended in real time, inside the last message that held it, to the first
agent audio after it), events (``barge_in``),
the ``disconnect`` (reason, ``outputVariables``), whether ``closed`` came, and protocol faults.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from harness.callers.script import CallerUtterance, load_utterance_audio
from harness.errors import CallerError
from pipeline.audio.g711 import ULAW_SILENCE
from telephony.genesys.messages import duration
from telephony.genesys.routes import new_session_headers
from telephony.genesys.signature import sign

MESSAGE_S = 0.2
MESSAGE_BYTES = 1600


@dataclass
class GenesysCallerConfig:
    url: str                                   # ws://host:port/genesys/audiohook
    api_key: str
    client_secret: bytes | None = None
    utterances: tuple[CallerUtterance, ...] = ()
    input_variables: dict[str, str] = field(default_factory=dict)
    ani: str = "+15550100"
    dnis: str = "+18005550199"
    organization_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    conversation_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    probe: bool = False                        # a connection probe: null conversation, open then close
    voice: str = "kal"
    quiet_s: float = 0.8                       # agent audio silent this long: its reply is over
    barge_in_s: float | None = None            # speak this long into the agent's reply instead
    greeting_barge_in_s: float | None = None   # the first utterance this long into the greeting
    ping_s: float = 1.0
    timeout_s: float = 60.0
    sign: bool = True
    extra_messages: tuple[str, ...] = ()       # raw text frames sent after 'opened' (abuse tests)


@dataclass
class GenesysReport:
    status: int = 0                            # the HTTP status when the upgrade was refused
    opened: dict[str, Any] | None = None
    agent_audio_s: list[float] = field(default_factory=list)   # per turn: greeting first
    events: list[dict[str, Any]] = field(default_factory=list)
    disconnect: dict[str, Any] | None = None
    closed: bool = False
    pongs: int = 0
    v2v_ms: list[float] = field(default_factory=list)   # per utterance: the end of its speech -> agent audio
    faults: list[str] = field(default_factory=list)
    session_id: str = ""


class GenesysCaller:
    def __init__(self, config: GenesysCallerConfig) -> None:
        self.cfg = config
        self.report = GenesysReport()
        self._seq = 0
        self._serverseq = 0
        self._position_s = 0.0
        self._last_agent_audio = 0.0
        self._agent_bytes = 0
        self._speaking: bytes = b""
        self._speech_end: float | None = None   # when the last utterance's speech ended (sent at real time)
        self._pings: dict[int, float] = {}
        self._done = asyncio.Event()

    def _message(self, type_: str, parameters: dict | None = None) -> str:
        self._seq += 1
        return json.dumps({"version": "2", "id": self.report.session_id, "type": type_, "seq": self._seq,
                           "serverseq": self._serverseq, "position": duration(self._position_s),
                           "parameters": parameters or {}})

    def _headers(self) -> dict[str, str]:
        cfg = self.cfg
        headers = new_session_headers(cfg.organization_id)
        self.report.session_id = headers["audiohook-session-id"]
        if cfg.sign and cfg.client_secret is not None:
            parts = aiohttp.client.URL(cfg.url)
            authority = parts.host + (f":{parts.port}" if parts.port and not parts.is_default_port() else "")
            return sign(headers, target=parts.raw_path_qs, authority=authority, api_key=cfg.api_key,
                        secret=cfg.client_secret)
        return {**headers, "x-api-key": cfg.api_key}

    async def run(self) -> GenesysReport:
        cfg = self.cfg
        audio = [await load_utterance_audio(u, cfg.voice, 30.0) for u in cfg.utterances]
        async with aiohttp.ClientSession() as http:
            try:
                ws = await http.ws_connect(cfg.url, headers=self._headers(), heartbeat=None)
            except aiohttp.WSServerHandshakeError as exc:
                self.report.status = exc.status
                return self.report
            async with ws:
                try:
                    async with asyncio.timeout(cfg.timeout_s):
                        await self._session(ws, audio)
                except TimeoutError:
                    self.report.faults.append("the call ran past its timeout")
        return self.report

    async def _session(self, ws: aiohttp.ClientWebSocketResponse, audio: list[bytes | None]) -> None:
        cfg = self.cfg
        null = "00000000-0000-0000-0000-000000000000"
        await ws.send_str(self._message("open", {
            "organizationId": cfg.organization_id,
            "conversationId": null if cfg.probe else cfg.conversation_id,
            "participant": {"id": null if cfg.probe else str(uuid.uuid4()), "ani": "" if cfg.probe else cfg.ani,
                            "aniName": "", "dnis": "" if cfg.probe else cfg.dnis},
            "media": [{"type": "audio", "format": "PCMU", "channels": ["external"], "rate": 8000}],
            "language": "en-US", "inputVariables": cfg.input_variables}))
        first = await self._receive_text(ws)
        if first.get("type") != "opened":
            self.report.faults.append(f"expected opened, got {first.get('type')}")
            if first.get("type") == "disconnect":
                self.report.disconnect = first.get("parameters")
                await self._close(ws, "disconnect", reading=False)
            return
        self.report.opened = first.get("parameters")
        if cfg.probe:
            await self._close(ws, "end", reading=False)
            return
        for raw in cfg.extra_messages:
            self._seq += 1
            await ws.send_str(raw.replace("{seq}", str(self._seq)).replace("{id}", self.report.session_id))
        reader = asyncio.create_task(self._read(ws))
        sender = asyncio.create_task(self._send_audio(ws))
        try:
            await self._script(ws, audio)
            if not self._done.is_set():
                await self._close(ws, "end")
        finally:
            sender.cancel()
            await asyncio.gather(sender, return_exceptions=True)
            await asyncio.wait_for(reader, 10)

    async def _receive_text(self, ws) -> dict[str, Any]:
        while True:
            msg = await ws.receive()
            if msg.type == aiohttp.WSMsgType.TEXT:
                return self._check(json.loads(msg.data))
            if msg.type != aiohttp.WSMsgType.BINARY:
                raise CallerError(f"the server closed the AudioHook socket ({msg.type.name})")

    def _check(self, message: dict[str, Any]) -> dict[str, Any]:
        if message.get("seq") != self._serverseq + 1:
            self.report.faults.append(f"server seq {message.get('seq')} after {self._serverseq}")
        if message.get("clientseq", 0) > self._seq:
            self.report.faults.append(f"clientseq {message.get('clientseq')} ahead of our seq {self._seq}")
        if message.get("id") != self.report.session_id:
            self.report.faults.append("server message for another session id")
        self._serverseq = message.get("seq", self._serverseq)
        return message

    async def _read(self, ws) -> None:
        async for msg in ws:
            if msg.type == aiohttp.WSMsgType.BINARY:
                self._agent_bytes += len(msg.data)
                self._last_agent_audio = time.monotonic()
                if self._speech_end is not None and self._last_agent_audio > self._speech_end:
                    self.report.v2v_ms.append((self._last_agent_audio - self._speech_end) * 1000)
                    self._speech_end = None
                continue
            if msg.type != aiohttp.WSMsgType.TEXT:
                break
            message = self._check(json.loads(msg.data))
            kind = message.get("type")
            if kind == "pong":
                seq = message.get("clientseq")
                if seq in self._pings:
                    self.report.pongs += 1
                    del self._pings[seq]
                else:
                    self.report.faults.append(f"pong for clientseq {seq}, no such ping")
            elif kind == "event":
                self.report.events.extend(message.get("parameters", {}).get("entities", []))
            elif kind == "disconnect":
                self.report.disconnect = message.get("parameters")
                await ws.send_str(self._message("close", {"reason": "disconnect"}))
            elif kind == "closed":
                self.report.closed = True
                self._done.set()
                await ws.close()
                break
        self._done.set()

    async def _send_audio(self, ws) -> None:
        start = time.monotonic()
        n = 0
        next_ping = start + self.cfg.ping_s
        while not ws.closed:
            # a message leaves once its 200 ms have been "captured": at the end of its window
            await asyncio.sleep(max(0.0, start + (n + 1) * MESSAGE_S - time.monotonic()))
            chunk, self._speaking = self._speaking[:MESSAGE_BYTES], self._speaking[MESSAGE_BYTES:]
            await ws.send_bytes(chunk.ljust(MESSAGE_BYTES, bytes([ULAW_SILENCE])))
            if chunk and not self._speaking:     # the speech ended len(chunk) samples into this window
                self._speech_end = start + n * MESSAGE_S + len(chunk) / 8000
            self._position_s += MESSAGE_S
            n += 1
            if time.monotonic() >= next_ping:
                message = self._message("ping")
                self._pings[self._seq] = time.monotonic()
                await ws.send_str(message)
                next_ping += self.cfg.ping_s

    async def _reply_over(self, barge_in: bool, after_s: float | None = None) -> None:
        """Wait for the agent's reply to start, then to end (or ``after_s`` into it, by default
        ``barge_in_s`` when ``barge_in``)."""
        before = self._agent_bytes
        while self._agent_bytes == before and not self._done.is_set():  # noqa: ASYNC110 (a listener's 50 ms tick)
            await asyncio.sleep(0.05)
        started = time.monotonic()
        while not self._done.is_set():
            now = time.monotonic()
            cut = after_s if after_s is not None else self.cfg.barge_in_s if barge_in else None
            if cut is not None and now - started >= cut:
                break
            if now - self._last_agent_audio >= self.cfg.quiet_s:
                break
            await asyncio.sleep(0.05)
        self.report.agent_audio_s.append((self._agent_bytes - before) / 8000)

    async def _script(self, ws, audio: list[bytes | None]) -> None:
        await self._reply_over(barge_in=False, after_s=self.cfg.greeting_barge_in_s)   # the greeting
        for k, (utt, pcmu) in enumerate(zip(self.cfg.utterances, audio)):
            if self._done.is_set():
                return
            if utt.dtmf is not None:
                await ws.send_str(self._message("dtmf", {"digit": utt.dtmf}))
                continue
            assert pcmu is not None
            self._speaking += pcmu
            while self._speaking and not self._done.is_set():  # noqa: ASYNC110 (the sender's 200 ms clock drains it)
                await asyncio.sleep(0.05)
            await self._reply_over(barge_in=k + 1 < len(self.cfg.utterances))

    async def _close(self, ws, reason: str, *, reading: bool = True) -> None:
        """Send ``close`` and wait for ``closed`` (through the reader task, unless ``reading`` is
        False: then read it here)."""
        await ws.send_str(self._message("close", {"reason": reason}))
        try:
            if reading:
                await asyncio.wait_for(self._done.wait(), 5)
            else:
                self.report.closed = (await asyncio.wait_for(self._receive_text(ws), 5)).get("type") == "closed"
        except (TimeoutError, CallerError):
            pass
        if not self.report.closed:
            self.report.faults.append("no 'closed' after our 'close'")

async def run_genesys_call(config: GenesysCallerConfig) -> GenesysReport:
    return await GenesysCaller(config).run()
