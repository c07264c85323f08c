"""A scripted browser-less caller: places a WebRTC call through ``/api/offer`` with aiortc.

It plays a PCM clip as its microphone (then silence), keeps the agent's audio it receives and
every data-channel message the server sends, and hangs up (``{"type": "hangup"}``, then closes
the peer connection) when ``until(messages)`` holds or ``timeout_s`` runs out; it stops at once
when the server ends the call (pipecat's ``peerLeft``) or the connection closes or fails. It sends pipecat's
``ping`` keep-alive every second, as the page does. Tests and benchmarks drive the server with
it; it offers only the ICE host addresses pinned with ``ice.pin_host_addresses``.
``drop_rtp`` plays a lossy network: audio RTP packet ``n`` (counted from 0) is never sent when
``drop_rtp(n)`` holds.
"""

from __future__ import annotations

import asyncio
import fractions
import itertools
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import aiohttp
import numpy as np
from aiortc import MediaStreamTrack, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError
from aiortc.rtp import is_rtcp
from av import AudioFrame

from harness.errors import CallerError
from telephony.webrtc.signaling import Answer, Offer

log = logging.getLogger(__name__)

FRAME_MS = 20
KEEPALIVE_S = 1.0
IO_TIMEOUT_S = 10.0
KEY_SPACING_S = 0.15  # between keypad presses, as a person presses them


class PcmTrack(MediaStreamTrack):
    """Mono int16 PCM as a microphone: ``lead_s`` of silence, the clip, then silence forever.

    Frames are paced against an absolute clock (``start + ts / rate - now``).
    """

    kind = "audio"

    def __init__(self, pcm: np.ndarray, sample_rate_hz: int, *, lead_s: float = 0.5):
        super().__init__()
        lead = np.zeros(int(lead_s * sample_rate_hz), np.int16)
        self._pcm = np.concatenate([lead, np.asarray(pcm, np.int16)])
        self._rate = sample_rate_hz
        self._samples = sample_rate_hz * FRAME_MS // 1000
        self._ts = 0
        self._start: float | None = None
        self.speech_end_s: float | None = None  # monotonic time the last clip sample was sent

    async def recv(self) -> AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        if self._start is None:
            self._start = time.monotonic()
        wait = self._start + self._ts / self._rate - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        chunk = self._pcm[self._ts:self._ts + self._samples]
        if self.speech_end_s is None and self._ts + self._samples >= self._pcm.size:
            self.speech_end_s = time.monotonic()
        if chunk.size < self._samples:
            chunk = np.concatenate([chunk, np.zeros(self._samples - chunk.size, np.int16)])
        frame = AudioFrame.from_ndarray(chunk.reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate = self._rate
        frame.pts = self._ts
        frame.time_base = fractions.Fraction(1, self._rate)
        self._ts += self._samples
        return frame


@dataclass
class CallResult:
    pc_id: str
    messages: list[dict] = field(default_factory=list)
    audio_chunks: list[np.ndarray] = field(default_factory=list)  # mono int16 as decoded
    audio_sample_rate_hz: int = 48000
    first_audio_s: float | None = None  # monotonic time of the first non-silent agent frame
    speech_end_s: float | None = None   # when the clip's last sample was sent
    reply_audio_s: float | None = None  # the first non-silent agent frame after that
    answer_sdp: str = ""
    server_hung_up: bool = False  # the server ended the call (peerLeft, or the connection closed) first

    @property
    def call_id(self) -> str | None:
        """The call record's id, from the server's ``call started`` message."""
        return next((m.get("call_id") for m in self.messages
                     if m.get("type") == "call" and m.get("state") == "started"), None)

    @property
    def v2v_ms(self) -> float | None:
        """End of the caller's speech to the first agent audio heard after it, as this client saw it."""
        if self.speech_end_s is None or self.reply_audio_s is None:
            return None
        return round((self.reply_audio_s - self.speech_end_s) * 1000.0, 1)

    @property
    def agent_audio(self) -> np.ndarray:
        return np.concatenate(self.audio_chunks) if self.audio_chunks else np.zeros(0, np.int16)

    def transcripts(self, role: str, *, final: bool = True) -> list[str]:
        return [m["text"] for m in self.messages
                if m.get("type") == "transcript" and m.get("role") == role and m.get("final") == final]


async def place_call(base_url: str, pcm: np.ndarray, sample_rate_hz: int, *,
                     until: Callable[[list[dict]], bool], timeout_s: float = 30.0,
                     lead_s: float = 0.5, keepalive_for_s: float | None = None,
                     drop_rtp: Callable[[int], bool] | None = None, keys: str = "",
                     keys_when: Callable[[list[dict]], bool] | None = None) -> CallResult:
    """Call ``base_url`` (``http://host:port``), say ``pcm``, and hang up once ``until`` holds.

    ``keepalive_for_s`` stops the pings that long after the first, as a vanished browser tab would.
    ``keys`` are pressed on the page's keypad (``{"type": "dtmf"}`` messages, ``KEY_SPACING_S``
    apart) once ``keys_when(messages)`` holds (default: the call has started).
    """
    pc = RTCPeerConnection()
    mic = PcmTrack(pcm, sample_rate_hz, lead_s=lead_s)
    sender = pc.addTrack(mic)
    channel = pc.createDataChannel("parley", ordered=True)
    result = CallResult(pc_id="")
    changed = asyncio.Event()
    tasks: list[asyncio.Task] = []

    @channel.on("message")
    def on_message(message):
        if isinstance(message, str):
            try:
                result.messages.append(json.loads(message))
            except ValueError:
                log.warning("non-JSON data-channel message skipped")
            changed.set()

    async def listen(track) -> None:
        try:
            while True:
                frame = await track.recv()
                pcm_in = frame.to_ndarray().reshape(-1, len(frame.layout.channels))[:, 0].astype(np.int16)
                result.audio_sample_rate_hz = frame.sample_rate
                if np.abs(pcm_in.astype(np.int32)).max() > 300:
                    now = time.monotonic()
                    result.first_audio_s = result.first_audio_s or now
                    if mic.speech_end_s is not None and result.reply_audio_s is None:
                        result.speech_end_s, result.reply_audio_s = mic.speech_end_s, now
                result.audio_chunks.append(pcm_in)
        except MediaStreamError:
            return

    @pc.on("track")
    def on_track(track):
        if track.kind == "audio":
            tasks.append(asyncio.create_task(listen(track)))

    def closed() -> bool:
        return pc.connectionState in ("closed", "failed")

    @pc.on("connectionstatechange")
    def on_state():
        changed.set()

    async def keepalive() -> None:
        stop_at = None  # set by the first ping, when keepalive_for_s is given
        while stop_at is None or time.monotonic() < stop_at:
            if channel.readyState == "open":
                channel.send(f"ping: {time.time()}")
                if stop_at is None and keepalive_for_s is not None:
                    stop_at = time.monotonic() + keepalive_for_s
            await asyncio.sleep(KEEPALIVE_S)

    try:
        async with asyncio.timeout(timeout_s):
            await pc.setLocalDescription(await pc.createOffer())  # gathers every candidate
            if drop_rtp is not None:
                _lose_packets(sender.transport, drop_rtp)
            offer = Offer(sdp=pc.localDescription.sdp, type="offer")
            async with aiohttp.ClientSession() as http:
                async with asyncio.timeout(IO_TIMEOUT_S):
                    async with http.post(f"{base_url}/api/offer", json=offer.to_dict()) as resp:
                        body = await resp.text()
                        if resp.status != 200:
                            raise CallerError(f"offer refused: {resp.status} {body.strip()}")
            answer = Answer.parse(body)
            result.pc_id = answer.pc_id
            result.answer_sdp = answer.sdp
            await pc.setRemoteDescription(RTCSessionDescription(sdp=answer.sdp, type=answer.type))
            tasks.append(asyncio.create_task(keepalive()))
            keys_left = keys
            ready_for_keys = keys_when or (lambda messages: any(
                m.get("type") == "call" and m.get("state") == "started" for m in messages))
            while not until(result.messages) and not _peer_left(result.messages) and not closed():
                changed.clear()
                if keys_left and channel.readyState == "open" and ready_for_keys(result.messages):
                    for digit in keys_left:
                        channel.send(json.dumps({"type": "dtmf", "digit": digit}))
                        await asyncio.sleep(KEY_SPACING_S)
                    keys_left = ""
                    continue
                await changed.wait()
            result.server_hung_up = not until(result.messages)
    except TimeoutError:
        log.info("call %s: gave up waiting after %.0f s", result.pc_id, timeout_s)
    finally:
        if channel.readyState == "open" and not _peer_left(result.messages):
            channel.send(json.dumps({"type": "hangup"}))
            await asyncio.sleep(0.05)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await pc.close()
    return result


def _lose_packets(transport, drop: Callable[[int], bool]) -> None:
    """Wrap the DTLS transport's RTP send so that the packets ``drop`` picks never leave."""
    send = transport._send_rtp  # aiortc 1.16: every RTP and RTCP packet of the connection
    counter = itertools.count()

    async def lossy_send(data: bytes) -> None:
        if is_rtcp(data) or not drop(next(counter)):
            await send(data)

    transport._send_rtp = lossy_send


def _peer_left(messages: list[dict]) -> bool:
    """pipecat's ``peerLeft``: the server ended the call (no hang-up to send)."""
    return any(m.get("type") == "signalling" and isinstance(m.get("message"), dict)
               and m["message"].get("type") == "peerLeft" for m in messages)
