"""A scripted SIP caller: dials a SIP user agent over UDP, speaks G.711 and measures the replies.

::

    report = await place_sip_call("127.0.0.1", 5060, [pcm_8k_1, pcm_8k_2])
    [t.v2v_ms for t in report.turns], report.rtp.lost, report.rtp.late

It plays a phone on a SIP trunk: INVITE with an SDP offer (PCMU, telephone-event, ptime 20),
100/180 taken in stride (a provisional answer stops the INVITE retransmissions), ACK for the
200 (again for each retransmitted 200), one 20 ms RTP packet on an absolute clock
(``start + n * 20 ms - now``) for the whole call, mu-law silence whenever it is not talking, and a
BYE at the end. A BYE from the agent is answered 200 and ends the call.

Turns: wait for the greeting (the first packet with speech energy within ``greeting_wait_s``)
to finish, a ``gap_ms`` pause, utterance 1, wait for the reply to finish, pause, utterance 2, ...
A reply has *finished* when no packet with energy has arrived for ``reply_quiet_ms`` after it
started; a reply that never starts within ``reply_timeout_s`` leaves the turn unanswered.
``keys`` are pressed after the greeting, before utterance 1: RFC 4733 telephone-events (100 ms of
tone, then the end packet three times, on the call's RTP stream), then the caller waits for the
agent's answer to them to finish, as for a reply.

Measurements, per turn: ``v2v_ms``: the moment the last speech packet was sent to the arrival of
the first agent packet with speech energy (peak above ``energy_threshold``) after it. For the
whole call (:class:`RtpReceiveStats`): packets received, ``lost`` (RFC 3550: expected from the
sequence numbers minus received), ``out_of_order``, ``duplicates``, ``late`` (a packet that arrives
more than ``late_after_ms`` after its playout time on the talkspurt's clock: the first packet of a
talkspurt sets the clock, the RTP timestamp says where each later packet belongs; a phone with a
jitter buffer that deep would play a gap) and the RFC 3550 interarrival jitter, all kept per SSRC
(``ssrcs`` counts them: more than one means two senders answered the one call).

Bad input (an unparseable datagram, a foreign payload type) is counted and dropped; a refused or
unanswered INVITE raises :class:`~harness.errors.CallerError`.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np

from pipeline.audio.g711 import ULAW_SILENCE, ulaw_encode
from harness.callers.rtp_receiver import RtpReceiver, RtpReceiveStats
from harness.errors import CallerError
from telephony.sip.errors import SdpParseError, SipParseError
from telephony.sip.headers import NameAddr, SipUri, Via, split_commas
from telephony.sip.message import SipRequest, SipResponse, parse_message, response_to
from telephony.sip.rtp import DTMF_EVENTS, RtpPacket, TelephoneEvent
from telephony.sip.sdp import Codec, Connection, MediaDescription, Origin, SessionDescription

__all__ = ["RtpReceiveStats", "SipCallReport", "SipCaller", "SipCallerConfig", "SipTurn", "place_sip_call"]

log = logging.getLogger(__name__)

SAMPLE_RATE_HZ: Final = 8000
PACKET_S: Final = 0.020
PACKET_SAMPLES: Final = 160
PCMU: Final = Codec(0, "PCMU", 8000)
DTMF_PT: Final = 101
T1_S: Final = 0.5
KEY_PACKETS: Final = 5  # 100 ms of tone a key
_SILENCE: Final = bytes([ULAW_SILENCE]) * PACKET_SAMPLES


@dataclass(frozen=True)
class SipCallerConfig:
    host: str
    port: int
    utterances: tuple[np.ndarray, ...]  # int16 PCM at 8 kHz, one per turn
    local_host: str = "127.0.0.1"
    user: str = "caller"
    greeting_wait_s: float = 3.0  # how long to wait for a greeting to start before speaking
    reply_quiet_ms: int = 600
    reply_timeout_s: float = 20.0
    gap_ms: int = 300
    energy_threshold: int = 300  # int16 peak of a decoded packet that counts as speech
    late_after_ms: float = 60.0
    timeout_s: float = 60.0
    io_timeout_s: float = 5.0
    keys: str = ""  # pressed (RFC 4733) after the greeting, before the first utterance
    # a bad network, both ways, on RTP (tc netem where the kernel has it; this works anywhere):
    # each packet lost with probability ``loss``, the rest delayed by 0..``jitter_ms`` (uniform)
    loss: float = 0.0
    jitter_ms: float = 0.0
    seed: int | None = None

    def __post_init__(self) -> None:
        if not 0 < self.port < 65536:
            raise ValueError(f"bad SIP port {self.port}")
        for pcm in self.utterances:
            if not isinstance(pcm, np.ndarray) or pcm.dtype != np.int16 or pcm.ndim != 1 or pcm.size == 0:
                raise ValueError("utterances must be non-empty 1-D int16 arrays (8 kHz PCM)")
        for name in ("greeting_wait_s", "reply_timeout_s", "timeout_s", "io_timeout_s", "late_after_ms"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        if self.reply_quiet_ms <= 0 or self.gap_ms < 0:
            raise ValueError("reply_quiet_ms must be positive and gap_ms >= 0")
        if any(k not in DTMF_EVENTS for k in self.keys):
            raise ValueError(f"keys must be of {DTMF_EVENTS}, got {self.keys!r}")
        if not 0.0 <= self.loss < 1.0 or self.jitter_ms < 0:
            raise ValueError("loss must be in [0, 1) and jitter_ms >= 0")


@dataclass(frozen=True)
class SipTurn:
    turn: int  # 1 = the caller's first utterance
    v2v_ms: float | None  # None: no reply within reply_timeout_s
    reply_ms: float | None  # first to last packet with energy of the reply
    overlapped: bool = False  # agent audio with energy arrived while the caller was speaking


@dataclass(frozen=True)
class SipCallReport:
    call_id: str
    turns: tuple[SipTurn, ...]
    rtp: RtpReceiveStats
    packets_sent: int
    agent_audio: np.ndarray  # what arrived, int16 8 kHz, in arrival order (no gaps filled)
    server_hung_up: bool
    timed_out: bool
    history: tuple[str, ...] = ()  # 'invite', 'invite-100', 'invite-180', 'invite-200', 'ack', 'bye', 'bye-200', ...


class _Udp(asyncio.DatagramProtocol):
    def __init__(self, on_datagram):
        self._on = on_datagram

    def datagram_received(self, data: bytes, addr) -> None:
        self._on(data, (addr[0], addr[1]))

    def error_received(self, exc: Exception) -> None:
        log.debug("caller socket error: %s", exc)


class SipCaller:
    """One scripted SIP call. ``await SipCaller(config).run()`` returns its :class:`SipCallReport`."""

    def __init__(self, config: SipCallerConfig):
        self._cfg = config
        self.call_id = os.urandom(12).hex() + "@parley-caller"
        self._tag = os.urandom(6).hex()
        self._remote_tag: str | None = None
        self._remote_target = f"sip:parley@{config.host}:{config.port}"
        self._routes: list[str] = []    # the dialog's route set (RFC 3261 12.1.2): Route values to send
        self._cseq = 0
        self._sip: asyncio.DatagramTransport | None = None
        self._rtp: asyncio.DatagramTransport | None = None
        self._sip_port = 0
        self._rtp_port = 0
        self._rtp_remote: tuple[str, int] | None = None
        self._changed = asyncio.Event()
        self._closed = asyncio.Event()
        self._responses: dict[str, asyncio.Queue[SipResponse]] = {}
        self._net = random.Random(config.seed)   # the impaired network's dice
        self.lost_by_network = 0                 # packets the impairment dropped, both ways
        self._rx = RtpReceiver(self._changed, late_after_ms=config.late_after_ms,
                               energy_threshold=config.energy_threshold)
        self._tx = bytearray()
        self._keys: collections.deque[str] = collections.deque()  # still to press
        self._keys_done_t: float | None = None                  # when the last one ended
        self._tx_start_t: float | None = None
        self._tx_end_t: float | None = None
        self._sent = 0
        self._stop_clock = False
        self._ack: SipRequest | None = None
        self._server_hung_up = False
        self.history: list[str] = []

    # --- public -------------------------------------------------------------------------------

    async def run(self) -> SipCallReport:
        loop = asyncio.get_running_loop()
        cfg = self._cfg
        self._sip, _ = await loop.create_datagram_endpoint(
            lambda: _Udp(self._on_sip), local_addr=(cfg.local_host, 0))
        self._rtp, _ = await loop.create_datagram_endpoint(
            lambda: _Udp(lambda d, _a: self._impaired(lambda: self._rx.on_packet(d, loop.time()))),
            local_addr=(cfg.local_host, 0))
        self._sip_port = self._sip.get_extra_info("sockname")[1]
        self._rtp_port = self._rtp.get_extra_info("sockname")[1]
        turns: list[SipTurn] = []
        timed_out = False
        try:
            await self._invite()
            try:
                async with asyncio.timeout(cfg.timeout_s):
                    async with asyncio.TaskGroup() as tg:
                        clock = tg.create_task(self._clock_loop(), name="sip-caller-clock")
                        try:
                            await self._script(turns)
                        finally:
                            self._stop_clock = True
                        await clock
            except TimeoutError:
                timed_out = True
                log.warning("[%s] ended after the %.1f s call timeout", self.call_id, cfg.timeout_s)
            if not self._closed.is_set():
                await self._bye()
        finally:
            self._sip.close()
            self._rtp.close()
        audio = np.concatenate(self._rx.chunks) if self._rx.chunks else np.zeros(0, np.int16)
        return SipCallReport(call_id=self.call_id, turns=tuple(turns), rtp=self._rx.stats,
                             packets_sent=self._sent, agent_audio=audio, server_hung_up=self._server_hung_up,
                             timed_out=timed_out, history=tuple(self.history))

    # --- signalling ---------------------------------------------------------------------------

    def _request(self, method: str, cseq: int, *, body: bytes = b"", branch: str | None = None) -> SipRequest:
        cfg = self._cfg
        via = Via(cfg.local_host, self._sip_port, "UDP",
                  (("branch", branch or "z9hG4bK" + os.urandom(8).hex()), ("rport", None)))
        to = f"<sip:parley@{cfg.host}:{cfg.port}>" + (f";tag={self._remote_tag}" if self._remote_tag else "")
        headers = [("Via", str(via)), ("Max-Forwards", "70"),
                   ("From", f"<sip:{cfg.user}@{cfg.local_host}>;tag={self._tag}"), ("To", to),
                   ("Call-ID", self.call_id), ("CSeq", f"{cseq} {method}"),
                   ("Contact", f"<sip:{cfg.user}@{cfg.local_host}:{self._sip_port}>"), ("User-Agent", "parley-caller")]
        if body:
            headers.append(("Content-Type", "application/sdp"))
        uri = self._remote_target if method != "INVITE" else f"sip:parley@{cfg.host}:{cfg.port}"
        routes = self._routes if method != "INVITE" else []
        if routes and not SipUri.parse(NameAddr.parse(routes[0]).uri).has_param("lr"):
            # a strict router: it becomes the Request-URI, the remote target goes last (12.2.1.1)
            uri, routes = NameAddr.parse(routes[0]).uri, routes[1:] + [f"<{self._remote_target}>"]
        headers[1:1] = [("Route", r) for r in routes]
        return SipRequest(method=method, uri=uri, headers=tuple(headers), body=body)

    def _offer(self) -> bytes:
        ip = self._cfg.local_host
        sdp = SessionDescription(
            origin=Origin("caller", random.getrandbits(32), 0, "IN", "IP4", ip), session_name="parley-caller",
            connection=Connection(ip),
            media=(MediaDescription("audio", self._rtp_port, "RTP/AVP", ("0", str(DTMF_PT)), attributes=(
                ("rtpmap", "0 PCMU/8000"), ("rtpmap", f"{DTMF_PT} telephone-event/8000"),
                ("fmtp", f"{DTMF_PT} 0-15"), ("ptime", "20"), ("sendrecv", None))),))
        return bytes(sdp)

    def _send(self, msg: SipRequest | SipResponse) -> None:
        """To the first hop: the dialog's first route (a proxy that Record-Routed), else the
        host and port dialled."""
        assert self._sip is not None
        hop = (self._cfg.host, self._cfg.port)
        if isinstance(msg, SipRequest) and msg.method != "INVITE" and self._routes:
            hop = SipUri.parse(NameAddr.parse(self._routes[0]).uri).address
        self._sip.sendto(bytes(msg), hop)

    def _on_sip(self, data: bytes, addr: tuple[str, int]) -> None:
        try:
            msg = parse_message(data)
        except SipParseError as exc:
            log.debug("[%s] bad SIP datagram dropped: %s", self.call_id, exc)
            return
        if isinstance(msg, SipResponse):
            try:
                branch = msg.top_via.branch or ""
            except SipParseError:
                return
            queue = self._responses.get(branch)
            if queue is not None:
                queue.put_nowait(msg)
            elif msg.status == 200 and self._ack is not None and msg.cseq[1] == "INVITE":
                self._send(self._ack)  # our ACK was lost: the 200 came again
            return
        if msg.method == "BYE":
            assert self._sip is not None
            self._sip.sendto(bytes(response_to(msg, 200)), addr)
            self.history.append("bye-received")
            self._server_hung_up = True
            self._closed.set()
            self._changed.set()
        elif msg.method != "ACK":
            assert self._sip is not None
            self._sip.sendto(bytes(response_to(msg, 200 if msg.method == "OPTIONS" else 501)), addr)

    async def _transaction(self, req: SipRequest) -> SipResponse:
        """Send ``req``, retransmitting (T1 doubling) until a provisional or final response; return
        the final one (TimeoutError after ``io_timeout_s``). Provisional statuses go to ``history``."""
        branch = req.top_via.branch or ""
        queue: asyncio.Queue[SipResponse] = asyncio.Queue()
        self._responses[branch] = queue
        interval, provisional = T1_S, False
        try:
            async with asyncio.timeout(self._cfg.io_timeout_s):
                self._send(req)
                while True:
                    try:
                        async with asyncio.timeout(None if provisional else interval):
                            resp = await queue.get()
                    except TimeoutError:
                        self._send(req)
                        interval *= 2
                        continue
                    self.history.append(f"{req.method.lower()}-{resp.status}")
                    if resp.status >= 200:
                        return resp
                    provisional = True
        finally:
            self._responses.pop(branch, None)

    async def _invite(self) -> None:
        self._cseq += 1
        invite = self._request("INVITE", self._cseq, body=self._offer())
        self.history.append("invite")
        try:
            resp = await self._transaction(invite)
            if resp.status >= 300:
                self._remote_tag = NameAddr.parse(resp.header("to") or "").tag
                ack = self._request("ACK", self._cseq, branch=invite.top_via.branch)
                self._send(ack)  # the ACK of a failure answer belongs to the INVITE's transaction
                raise CallerError(f"INVITE refused: {resp.status} {resp.reason}")
            self._answered(resp)
        except TimeoutError as exc:
            raise CallerError(f"no answer to the INVITE within {self._cfg.io_timeout_s} s") from exc
        except (SipParseError, SdpParseError) as exc:
            raise CallerError(f"bad answer to the INVITE: {exc}") from exc

    def _answered(self, resp: SipResponse) -> None:
        self._remote_tag = NameAddr.parse(resp.header("to") or "").tag
        # a UAC's route set is the 2xx's Record-Route in reverse order
        self._routes = [r for value in reversed(resp.headers_named("record-route")) for r in reversed(split_commas(value))]
        contact = resp.header("contact")
        if contact:
            self._remote_target = NameAddr.parse(contact).uri
        sdp = SessionDescription.parse(resp.body)
        audio = sdp.audio()
        conn = sdp.connection_of(audio) if audio is not None else None
        if audio is None or conn is None or PCMU.payload_type not in audio.codecs:
            raise CallerError("the answer has no PCMU audio stream")
        self._rtp_remote = (conn.address, audio.port)
        self._ack = self._request("ACK", self._cseq)
        self._send(self._ack)
        self.history.append("ack")

    async def _bye(self) -> None:
        self._cseq += 1
        self.history.append("bye")
        try:
            await self._transaction(self._request("BYE", self._cseq))
        except TimeoutError:
            log.warning("[%s] BYE unanswered", self.call_id)

    # --- media out ----------------------------------------------------------------------------

    def _impaired(self, deliver) -> None:
        """``deliver()`` now, later (jitter) or never (loss), as the configured network would."""
        cfg = self._cfg
        if cfg.loss and self._net.random() < cfg.loss:
            self.lost_by_network += 1
            return
        if cfg.jitter_ms:
            asyncio.get_running_loop().call_later(self._net.uniform(0.0, cfg.jitter_ms) / 1000, deliver)
        else:
            deliver()

    def _send_rtp(self, data: bytes) -> None:
        rtp, remote = self._rtp, self._rtp_remote
        assert rtp is not None and remote is not None

        def send() -> None:
            if not rtp.is_closing():
                rtp.sendto(data, remote)
        self._impaired(send)

    async def _clock_loop(self) -> None:
        loop = asyncio.get_running_loop()
        ssrc = random.getrandbits(32)
        seq0 = random.getrandbits(16)
        ts0 = random.getrandbits(32)
        start = loop.time()
        n = 0
        talking = False
        event: tuple[int, int] | None = None  # the key being pressed: its event code, first packet
        while not self._stop_clock and not self._closed.is_set():
            delay = start + n * PACKET_S - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            if self._stop_clock or self._closed.is_set():
                break
            if event is None and self._keys and not self._tx:
                event = (DTMF_EVENTS.index(self._keys.popleft()), n)
            if event is not None:  # RFC 4733: 100 ms of tone, then the end packet three times
                code, first = event
                k = n - first
                tone = TelephoneEvent(code, end=k >= KEY_PACKETS - 1, duration=min(k + 1, KEY_PACKETS) * PACKET_SAMPLES)
                if k < KEY_PACKETS + 2:
                    pkt = RtpPacket(payload_type=DTMF_PT, sequence=(seq0 + n) & 0xFFFF,
                                    timestamp=(ts0 + first * PACKET_SAMPLES) & 0xFFFFFFFF, ssrc=ssrc,
                                    payload=bytes(tone), marker=k == 0)
                    if self._rtp is not None and self._rtp_remote is not None:
                        self._send_rtp(bytes(pkt))
                        self._sent += 1
                    n += 1
                    continue
                event = None  # then silence again, as between a person's presses
                if not self._keys:
                    self._keys_done_t = loop.time()
                    self._changed.set()
            payload = bytes(self._tx[:PACKET_SAMPLES]).ljust(PACKET_SAMPLES, bytes([ULAW_SILENCE])) \
                if self._tx else _SILENCE
            speech = bool(self._tx)
            del self._tx[:PACKET_SAMPLES]
            pkt = RtpPacket(payload_type=PCMU.payload_type, sequence=(seq0 + n) & 0xFFFF,
                            timestamp=(ts0 + n * PACKET_SAMPLES) & 0xFFFFFFFF, ssrc=ssrc, payload=payload,
                            marker=speech and not talking)
            if self._rtp is not None and self._rtp_remote is not None:
                self._send_rtp(bytes(pkt))
                self._sent += 1
            if speech and not talking:
                self._tx_start_t = loop.time()
            if speech and not self._tx:
                self._tx_end_t = loop.time()
                self._changed.set()
            talking = speech
            n += 1

    # --- turn taking --------------------------------------------------------------------------

    async def _wait(self, predicate, timeout_s: float) -> bool:
        """Wait until ``predicate()`` or the call closes; False on timeout."""
        try:
            async with asyncio.timeout(timeout_s):
                while not predicate():
                    if self._closed.is_set():
                        return False
                    self._changed.clear()
                    await self._changed.wait()
        except TimeoutError:
            return False
        return True

    async def _wait_quiet(self, since: float) -> float | None:
        """After energy arrived at ``since`` or later, wait until ``reply_quiet_ms`` pass without any;
        return the time of the last packet with energy (None if none came within reply_timeout_s)."""
        loop = asyncio.get_running_loop()
        quiet_s = self._cfg.reply_quiet_ms / 1000
        if not await self._wait(lambda: self._rx.last_energy_t >= since, self._cfg.reply_timeout_s):
            return None
        deadline = loop.time() + self._cfg.reply_timeout_s
        while not self._closed.is_set() and loop.time() < deadline:
            left = self._rx.last_energy_t + quiet_s - loop.time()
            if left <= 0:
                break
            await asyncio.sleep(left)
        return self._rx.last_energy_t

    async def _script(self, turns: list[SipTurn]) -> None:
        cfg = self._cfg
        if await self._wait(lambda: self._rx.last_energy_t > float("-inf"), cfg.greeting_wait_s):
            await self._wait_quiet(float("-inf"))
        if cfg.keys and not self._closed.is_set():
            self._keys_done_t = None
            self._keys.extend(cfg.keys)
            budget_s = len(cfg.keys) * (KEY_PACKETS + 8) * PACKET_S + cfg.io_timeout_s
            if await self._wait(lambda: self._keys_done_t is not None, budget_s):
                assert self._keys_done_t is not None
                await self._wait_quiet(self._keys_done_t)  # the agent's answer to them, if any
        for index, pcm in enumerate(cfg.utterances, start=1):
            if self._closed.is_set():
                break
            await asyncio.sleep(cfg.gap_ms / 1000)
            self._tx_end_t = None
            self._tx += ulaw_encode(pcm)
            if not await self._wait(lambda: self._tx_end_t is not None, len(pcm) / SAMPLE_RATE_HZ + cfg.io_timeout_s):
                break
            start_t, end_t = self._tx_start_t, self._tx_end_t
            assert start_t is not None and end_t is not None
            overlapped = any(start_t <= t < end_t for t in self._rx.energy_times)
            last = await self._wait_quiet(end_t)
            first = next((t for t in self._rx.energy_times if t >= end_t), None)
            turns.append(SipTurn(
                turn=index,
                v2v_ms=None if first is None else round((first - end_t) * 1000, 1),
                reply_ms=None if first is None or last is None else round((last - first) * 1000, 1),
                overlapped=overlapped))
            log.debug("[%s] turn %d: %s", self.call_id, index, turns[-1])


async def place_sip_call(host: str, port: int, utterances: Sequence[np.ndarray], **options) -> SipCallReport:
    """Call ``host:port``, say each utterance (int16 8 kHz PCM) in turn, hang up, and report.

    ``options`` are the other :class:`SipCallerConfig` fields."""
    return await SipCaller(SipCallerConfig(host=host, port=port, utterances=tuple(utterances), **options)).run()
