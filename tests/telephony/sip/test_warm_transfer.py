"""A warm transfer over SIP, with real peers on loopback: a scripted caller calls parley's embedded
agent, presses 0 (the spec's menu: transfer to the desk, warm), and parley's own user agent rings
the desk. Answered (a scripted person): the caller hears hold audio, the person hears the summary
spoken, then each hears the other's tone and the agent is gone. Not answered (sipp rings out and
expects the CANCEL): the caller gets the agent back, offering a message. Both assert on the wire
what each side received and when, and the outcome the call record keeps."""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field

import numpy as np
import pytest

from agent.embedded import EmbeddedAgentProcessor
from agent.spec import parse_spec
from pipeline.audio.g711 import ulaw_decode, ulaw_encode
from pipeline.audio.hold import hold_pattern
from telephony.sip import DialOutcome, DialRequest, SipServer
from telephony.sip.headers import NameAddr
from telephony.sip.message import SipRequest, SipResponse, parse_message, response_to
from telephony.sip.rtp import DTMF_EVENTS, RtpPacket, TelephoneEvent
from telephony.sip.sdp import SessionDescription

from .conftest import UdpPeer, branch, callee, in_dialog, invite, wait_for

CALLER_HZ, PERSON_HZ = 1000.0, 600.0

SPEC = """
name: Acme desk
persona: a receptionist
greeting: Hello.
handoffs:
  - name: desk
    kind: sip
    target: {target}
    mode: warm
    timeout_s: {timeout_s}
    hold_audio: music
dtmf_menu:
  - key: "0"
    action: transfer
tasks:
  - name: message
    triggers: ["message"]
    slots: [note]
slots:
  - name: note
    prompt: What is your message?
"""


def offer(rtp_port: int) -> bytes:
    return (f"v=0\r\no=peer 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n"
            f"m=audio {rtp_port} RTP/AVP 0 101\r\na=rtpmap:101 telephone-event/8000\r\n").encode()


def audio_port(body: bytes) -> int:
    sdp = SessionDescription.parse(body)
    audio = sdp.audio()
    assert audio is not None
    return audio.port


def tone(freq_hz: float, n: int) -> np.ndarray:
    t = (np.arange(160) + 160 * n) / 8000
    return (np.sin(2 * np.pi * freq_hz * t) * 8000).astype(np.int16)


def share_at(pcm: np.ndarray, freq_hz: float) -> float:
    """The share of the packet's energy within 50 Hz of ``freq_hz``."""
    spectrum = np.abs(np.fft.rfft(pcm.astype(np.float64))) ** 2
    freqs = np.fft.rfftfreq(len(pcm), 1 / 8000)
    total = spectrum.sum()
    return float(spectrum[np.abs(freqs - freq_hz) <= 50].sum() / total) if total > 0 else 0.0


@dataclass
class Heard:
    """One RTP packet received: when (monotonic s), its PCM and whether it is parley's hold audio."""

    at_s: float
    pcm: np.ndarray
    hold: bool

    @property
    def rms(self) -> float:
        return float(np.sqrt(np.mean(self.pcm.astype(np.float64) ** 2)))


HOLD_PAYLOADS = {bytes(ulaw_encode(c)) for p in (hold_pattern("music"),)
                 for c in np.split(p, len(p) // 160)}


@dataclass
class RtpEnd(asyncio.DatagramProtocol):
    """One side's RTP: keeps what arrives and sends a tone (or silence) every 20 ms to ``remote``."""

    freq_hz: float
    heard: list[Heard] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)     # RFC 4733 events received, one a packet
    remote: tuple[str, int] | None = None
    sending_tone = False
    presses = 0
    transport: asyncio.DatagramTransport | None = None

    def datagram_received(self, data: bytes, addr) -> None:
        pkt = RtpPacket.parse(data)
        if pkt.payload_type == 101:
            self.keys.append(DTMF_EVENTS[TelephoneEvent.parse(pkt.payload).event])
        if pkt.payload_type == 0:
            self.heard.append(Heard(time.monotonic(), ulaw_decode(pkt.payload), bytes(pkt.payload) in HOLD_PAYLOADS))

    async def run(self) -> None:
        loop, n, ssrc = asyncio.get_running_loop(), 0, int.from_bytes(os.urandom(4), "big")
        start = loop.time()
        while True:
            if self.remote is not None and self.transport is not None:
                pcm = tone(self.freq_hz, n) if self.sending_tone else np.zeros(160, np.int16)
                self.transport.sendto(bytes(RtpPacket(0, n & 0xFFFF, 160 * n, ssrc, bytes(ulaw_encode(pcm)))),
                                      self.remote)
            n += 1
            await asyncio.sleep(max(0.0, start + 0.02 * n - loop.time()))

    def press(self, digit: str) -> None:
        assert self.transport is not None and self.remote is not None
        self.presses += 1                  # each press its own timestamp: a new key, not a repeat
        event, ts = DTMF_EVENTS.index(digit), 8000 * self.presses
        for i, end in enumerate((False, False, True, True, True)):
            payload = bytes(TelephoneEvent(event, end, 10, 400 * (i + 1)))
            self.transport.sendto(bytes(RtpPacket(101, 40000 + i, ts, 99, payload, marker=i == 0)), self.remote)


async def rtp_end(freq_hz: float) -> RtpEnd:
    transport, end = await asyncio.get_running_loop().create_datagram_endpoint(
        lambda: RtpEnd(freq_hz), local_addr=("127.0.0.1", 0))
    end.transport = transport
    return end


class Person:
    """The desk: a scripted SIP UAS that rings, answers after ``answer_after_s`` with its RTP, and
    can hang up; it answers BYEs from parley."""

    def __init__(self, sip: UdpPeer, rtp: RtpEnd, *, tone_on_answer: bool = True):
        self.sip, self.rtp = sip, rtp
        self.tone_on_answer = tone_on_answer
        self.invite: SipRequest | None = None
        self.ok: SipResponse | None = None
        self.bye_received = asyncio.Event()
        self.answered_at_s: float | None = None

    @property
    def uri(self) -> str:
        return f"sip:desk@127.0.0.1:{self.sip.port}"

    async def serve(self, answer_after_s: float, hang_up_after_s: float | None = None) -> None:
        while True:
            data, addr = await self.sip.queue.get()
            msg = parse_message(data)
            if isinstance(msg, SipRequest) and msg.method == "INVITE" and self.invite is None:
                self.invite = msg
                self._send(response_to(msg, 180, to_tag="desk"), addr)
                self.rtp.remote = ("127.0.0.1", audio_port(msg.body))
                await asyncio.sleep(answer_after_s)
                self.ok = response_to(msg, 200, to_tag="desk", body=offer(self._rtp_port()), headers=(
                    ("Contact", f"<{self.uri}>"), ("Content-Type", "application/sdp")))
                self._send(self.ok, addr)
                self.answered_at_s = time.monotonic()
                self.rtp.sending_tone = self.tone_on_answer
                if hang_up_after_s is not None:
                    await asyncio.sleep(hang_up_after_s)
                    self._send(self._bye(), addr)
            elif isinstance(msg, SipRequest) and msg.method == "BYE":
                self._send(response_to(msg, 200), addr)
                self.bye_received.set()

    def _rtp_port(self) -> int:
        assert self.rtp.transport is not None
        return self.rtp.transport.get_extra_info("sockname")[1]

    def _send(self, msg, addr) -> None:
        assert self.sip.transport is not None
        self.sip.transport.sendto(bytes(msg), addr)

    def _bye(self) -> SipRequest:
        assert self.invite is not None and self.ok is not None
        contact = NameAddr.parse(self.invite.header("contact") or "").uri
        return SipRequest(method="BYE", uri=contact, headers=(
            ("Via", f"SIP/2.0/UDP 127.0.0.1:{self.sip.port};branch={branch()}"), ("Max-Forwards", "70"),
            ("From", self.ok.header("to") or ""), ("To", self.invite.header("from") or ""),
            ("Call-ID", self.invite.call_id), ("CSeq", "1 BYE")))

    def hang_up(self, server: SipServer) -> None:
        self.sip.send(self._bye(), server)


async def call_in(server: SipServer, caller_sip: UdpPeer, caller_rtp: RtpEnd) -> SipResponse:
    """The caller's INVITE, answered and ACKed; its RTP starts towards parley."""
    assert caller_rtp.transport is not None
    req = invite(caller_sip, "warm-" + os.urandom(4).hex(), body=offer(caller_rtp.transport.get_extra_info("sockname")[1]))
    caller_sip.send(req, server)
    responses = await caller_sip.responses(8.0)
    ok = responses[-1]
    assert ok.status == 200, responses
    caller_sip.send(in_dialog("ACK", ok, 1, caller_sip.port), server)
    caller_rtp.remote = ("127.0.0.1", audio_port(ok.body))
    return ok


async def close_all(tasks: list[asyncio.Task], peers, rtps) -> None:
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for p in peers:
        p.close()
    for r in rtps:
        assert r.transport is not None
        r.transport.close()


async def press_zero(server: SipServer, caller_sip: UdpPeer, caller_rtp: RtpEnd, moments: dict[str, float],
                     tasks: list[asyncio.Task]):
    """The caller calls in and, a second later, presses 0 (the menu's transfer); the call's steps
    are timed into ``moments`` from then on. Returns the caller's 200 and parley's call."""
    ok = await call_in(server, caller_sip, caller_rtp)
    await wait_for(lambda: ok.call_id in server.live)
    call = server.live[ok.call_id]
    tasks.append(asyncio.create_task(watch(call, moments)))
    await asyncio.sleep(1.0)
    caller_rtp.press("0")
    return ok, call


@dataclass
class WarmLine:
    """A SIP server whose agent is the embedded one; ``line(target, timeout_s)`` sets its spec
    (the desk's hand-off) and returns the server; ``agents`` are the agents it made."""

    server: SipServer
    agents: list[EmbeddedAgentProcessor] = field(default_factory=list)

    def __call__(self, target: str, timeout_s: float) -> SipServer:
        spec = parse_spec(SPEC.format(target=target, timeout_s=timeout_s))

        def factory(info):
            self.agents.append(EmbeddedAgentProcessor(spec, call_sid=info.call_sid))
            return self.agents[-1]
        self.server.agent_factory = factory
        return self.server


@pytest.fixture
async def warm_server(make_sip_server) -> WarmLine:
    return WarmLine(await make_sip_server())


def announced_until(heard: list[Heard], start_s: float, first_hold_s: float) -> float:
    """When the agent's own words at the transfer ("please hold ...") ended: its last speech
    packet before the hold audio began, or the transfer's start when it said nothing then."""
    spoken = [h.at_s for h in heard if start_s <= h.at_s < first_hold_s and not h.hold and h.rms > 300]
    return max(spoken, default=start_s)


def step_at(call, name: str, moments: dict[str, float]) -> None:
    if name in call.history and name not in moments:
        moments[name] = time.monotonic()


async def watch(call, moments: dict[str, float]) -> None:
    """When each step of the call's history first appeared (to 10 ms)."""
    while True:
        for name in ("warm-transfer", "transfer-answered", "transfer-briefing", "transfer-joined",
                     "transfer-no-answer", "ended"):
            step_at(call, name, moments)
        await asyncio.sleep(0.01)


@pytest.mark.parametrize("who_hangs_up", ["person", "caller"])
async def test_warm_transfer_briefs_the_person_then_joins_the_caller(warm_server, who_hangs_up):
    person_sip, caller_sip = await UdpPeer.open(), await UdpPeer.open()
    person_rtp, caller_rtp = await rtp_end(PERSON_HZ), await rtp_end(CALLER_HZ)
    person = Person(person_sip, person_rtp)
    server = warm_server(person.uri, 10)
    moments: dict[str, float] = {}
    tasks = [asyncio.create_task(t) for t in (person.serve(answer_after_s=2.0), person_rtp.run(), caller_rtp.run())]
    try:
        ok, call = await press_zero(server, caller_sip, caller_rtp, moments, tasks)
        await wait_for(lambda: "warm-transfer" in moments, 5.0)
        caller_rtp.sending_tone = True     # the caller talks all through the hold: only the person may hear it, and only once joined
        await wait_for(lambda: "transfer-joined" in moments, 30.0)
        await wait_for(lambda: not call.pipeline_running, 5.0)   # the agent has left
        caller_rtp.press("5")              # a key crosses the bridge too
        await asyncio.sleep(1.5)           # the two talk
        if who_hangs_up == "person":       # parley hangs up the caller
            person.hang_up(server)
            caller_bye = await caller_sip.messages(5.0, until=lambda m: isinstance(m, SipRequest) and m.method == "BYE")
            assert caller_bye and isinstance(caller_bye[-1], SipRequest) and caller_bye[-1].method == "BYE"
            caller_sip.send(response_to(caller_bye[-1], 200), server)
        else:                              # parley hangs up the person
            caller_sip.send(in_dialog("BYE", ok, 2, caller_sip.port), server)
            async with asyncio.timeout(5.0):
                await person.bye_received.wait()
        await wait_for(lambda: ok.call_id not in server.live and not server.live, 5.0)
    finally:
        await close_all(tasks, (person_sip, caller_sip), (person_rtp, caller_rtp))

    start, joined = moments["warm-transfer"], moments["transfer-joined"]
    assert person.answered_at_s is not None and start < person.answered_at_s < moments["transfer-briefing"] < joined
    # the caller: hold audio within a second of the transfer (or of the agent's words announcing
    # it, which it does not talk over), and never a second without sound until joined
    hold = [h for h in caller_rtp.heard if h.hold and h.at_s >= start]
    assert hold and hold[0].at_s - announced_until(caller_rtp.heard, start, hold[0].at_s) < 1.0
    sounding = [h.at_s for h in caller_rtp.heard if start <= h.at_s <= joined and h.rms > 100]
    gaps = np.diff([start, *sounding, joined])
    assert gaps.max() < 1.0, gaps.max()
    # the person: the summary (speech, not the caller's tone) first, the caller's tone only once joined
    to_person = person_rtp.heard
    caller_tone = [h.at_s for h in to_person if h.rms > 1000 and share_at(h.pcm, CALLER_HZ) > 0.8]
    summary = [h.at_s for h in to_person if h.rms > 300 and share_at(h.pcm, CALLER_HZ) < 0.5 and not h.hold]
    assert len(summary) > 50, len(summary)            # over a second of speech
    assert caller_tone and min(caller_tone) >= joined - 0.05 and len(caller_tone) > 40
    assert max(summary) < min(caller_tone)
    assert not any(h.hold for h in to_person)          # hold audio is the caller's only
    assert set(person_rtp.keys) == {"5"}               # pressed once joined; the 0 before went to the agent
    # the caller: the person's tone only once joined
    person_tone = [h.at_s for h in caller_rtp.heard if h.rms > 1000 and share_at(h.pcm, PERSON_HZ) > 0.8]
    assert person_tone and min(person_tone) >= joined - 0.05 and len(person_tone) > 40
    # both legs ended, the outcome on the caller's record
    record = server.store.get(ok.call_id)
    assert record is not None and record.ended
    assert record.transfer["outcome"] == "joined" and record.transfer["ended_by"] == who_hangs_up
    assert record.transfer["target"] == person.uri and 2.0 < record.transfer["held_s"] < 30
    # the summary is the person's: the record keeps it as such, not among what the caller heard
    assert record.transfer["summary"] == "Hello this is Acme desk I have a caller on the line Connecting you now"
    assert record.greeting_heard == "Hello Please hold while I transfer you to a person"
    [leg] = [r for r in server.store.list() if r.params.get("transfer_of") == ok.call_id]
    assert leg.ended and record.transfer["leg"] == leg.call_sid
    if who_hangs_up == "person":
        assert leg.end_reason == "person hung up (BYE)"
        assert record.end_reason == f"warm transfer to {person.uri}: joined; the person hung up"
    else:
        assert record.end_reason == "caller hung up (BYE)" and leg.end_reason.startswith("caller's call ended")
    assert not server.live


@pytest.mark.parametrize("desk_scenario, rings_s", [("callee_rings_out.xml", 4.0), ("callee_busy.xml", 0.0)])
async def test_nobody_answers_so_the_caller_gets_the_agent_back(warm_server, tmp_path, desk_scenario, rings_s):
    caller_sip, caller_rtp = await UdpPeer.open(), await rtp_end(CALLER_HZ)
    moments: dict[str, float] = {}
    tasks = [asyncio.create_task(caller_rtp.run())]
    try:
        async with callee(desk_scenario, tmp_path) as desk:   # rings out (expects our CANCEL), or busy
            server = warm_server(desk.uri, rings_s or 4.0)   # longer than "please hold ...": the hold audio is heard
            ok, call = await press_zero(server, caller_sip, caller_rtp, moments, tasks)
            await wait_for(lambda: "transfer-no-answer" in moments, 10.0)
            desk_result = await desk.result()
            assert desk_result.returncode == 0, desk_result.stdout[-2000:] + desk_result.stderr[-2000:]
            back = moments["transfer-no-answer"]   # the agent speaks again: speech, not hold audio
            await wait_for(lambda: sum(h.at_s > back and not h.hold and h.rms > 300 for h in caller_rtp.heard) > 50, 15.0)
            assert call.pipeline_running and ok.call_id in server.live
            record = call.record
            caller_sip.send(in_dialog("BYE", ok, 2, caller_sip.port), server)
            await wait_for(lambda: ok.call_id not in server.live, 5.0)
    finally:
        await close_all(tasks, (caller_sip,), (caller_rtp,))

    start = moments["warm-transfer"]
    assert rings_s - 0.05 <= back - start < rings_s + 2.0   # the ring timeout (steps timed to 10 ms), or at once
    hold = [h.at_s for h in caller_rtp.heard if h.hold]
    if rings_s:
        assert hold and hold[0] - announced_until(caller_rtp.heard, start, hold[0]) < 1.0
    assert max(hold, default=back) < back + 0.1
    assert record.transfer["outcome"] == "no-answer"
    assert record.transfer["detail"].startswith("no-answer (487" if rings_s else "busy (486")
    [agent] = warm_server.agents     # it offered to take a message, and a "yes" now starts the message task
    assert agent.conversation.last_said == ("Sorry, nobody is available to take your call right now. "
                                            "Would you like to leave a message?")
    assert [a for a in agent.conversation.hear("yes please") if getattr(a, "text", "") == "What is your message?"]


async def test_an_outbound_call_is_warm_transferred_too(warm_server):
    """parley calls a customer (its own dialler), the customer presses 0, the desk answers: the
    two are joined, and the desk hanging up ends the customer's call with a BYE."""
    peers = [await UdpPeer.open() for _ in range(2)]
    customer_rtp, desk_rtp = await rtp_end(CALLER_HZ), await rtp_end(PERSON_HZ)
    customer = Person(peers[0], customer_rtp, tone_on_answer=False)
    desk = Person(peers[1], desk_rtp)
    server = warm_server(desk.uri, 10)
    tasks = [asyncio.create_task(t) for t in (customer.serve(answer_after_s=0.2), desk.serve(answer_after_s=1.0),
                                               customer_rtp.run(), desk_rtp.run())]
    try:
        dial = asyncio.create_task(server.dial(DialRequest(customer.uri)))
        await wait_for(lambda: customer.answered_at_s is not None, 5.0)
        await asyncio.sleep(1.5)           # the dialler's ACK, then the agent's greeting
        customer_rtp.press("0")
        call = server.live[dial_call_id(customer)]
        await wait_for(lambda: "transfer-joined" in call.history, 20.0)
        joined = time.monotonic()
        customer_rtp.sending_tone = True
        await asyncio.sleep(1.5)
        desk.hang_up(server)
        async with asyncio.timeout(5.0):
            await customer.bye_received.wait()
        result = await asyncio.wait_for(dial, 5.0)
    finally:
        await close_all(tasks, peers, (customer_rtp, desk_rtp))
    assert result.outcome is DialOutcome.ANSWERED
    assert result.end_reason == f"warm transfer to {desk.uri}: joined; the person hung up"
    assert "transfer-joined" in result.history and result.history[-2:] == ("bye-sent", "ended")
    tone_at_desk = [h.at_s for h in desk_rtp.heard if h.rms > 1000 and share_at(h.pcm, CALLER_HZ) > 0.8]
    tone_at_customer = [h.at_s for h in customer_rtp.heard if h.rms > 1000 and share_at(h.pcm, PERSON_HZ) > 0.8]
    assert len(tone_at_desk) > 40                 # the customer's tone starts once joined: it crosses
    assert len(tone_at_customer) > 40 and min(tone_at_customer) >= joined - 0.3   # the desk's, sent since it answered, only then
    record = server.store.get(result.call_id)
    assert record is not None and record.transfer["outcome"] == "joined" and record.transfer["ended_by"] == "person"


def dial_call_id(customer: Person) -> str:
    assert customer.invite is not None
    return customer.invite.call_id


async def test_the_person_hanging_up_during_the_summary_gives_the_caller_back(warm_server):
    person_sip, caller_sip = await UdpPeer.open(), await UdpPeer.open()
    person_rtp, caller_rtp = await rtp_end(PERSON_HZ), await rtp_end(CALLER_HZ)
    person = Person(person_sip, person_rtp)
    server = warm_server(person.uri, 10)
    moments: dict[str, float] = {}
    tasks = [asyncio.create_task(t) for t in (person.serve(answer_after_s=0.5, hang_up_after_s=2.5),
                                               person_rtp.run(), caller_rtp.run())]
    try:
        ok, call = await press_zero(server, caller_sip, caller_rtp, moments, tasks)
        await wait_for(lambda: "transfer-failed" in call.history, 15.0)
        await wait_for(lambda: call.warm is None and call.pipeline_running, 2.0)
        caller_sip.send(in_dialog("BYE", ok, 2, caller_sip.port), server)
        await wait_for(lambda: not server.live, 5.0)
    finally:
        await close_all(tasks, (person_sip, caller_sip), (person_rtp, caller_rtp))
    assert "transfer-briefing" in call.history and "transfer-joined" not in call.history
    record = server.store.get(ok.call_id)
    assert record is not None
    assert (record.transfer["outcome"], record.transfer["detail"]) == ("failed", "the person hung up during the summary")
    [agent] = warm_server.agents
    assert agent.conversation.last_said.endswith("Would you like to leave a message?")
    assert not [h for h in caller_rtp.heard if h.rms > 1000 and share_at(h.pcm, PERSON_HZ) > 0.8]  # never bridged


async def test_the_caller_hanging_up_on_hold_cancels_the_persons_leg(warm_server, tmp_path):
    caller_sip, caller_rtp = await UdpPeer.open(), await rtp_end(CALLER_HZ)
    moments: dict[str, float] = {}
    tasks = [asyncio.create_task(caller_rtp.run())]
    try:
        async with callee("callee_rings_out.xml", tmp_path) as desk:   # rings; passes only if CANCELed
            server = warm_server(desk.uri, 15)
            ok, call = await press_zero(server, caller_sip, caller_rtp, moments, tasks)
            await wait_for(lambda: len(server.live) == 2, 5.0)          # the desk's leg is ringing
            await asyncio.sleep(0.5)
            caller_sip.send(in_dialog("BYE", ok, 2, caller_sip.port), server)
            desk_result = await desk.result(10.0)
            assert desk_result.returncode == 0, desk_result.stdout[-2000:] + desk_result.stderr[-2000:]
            await wait_for(lambda: not server.live, 5.0)
    finally:
        await close_all(tasks, (caller_sip,), (caller_rtp,))
    record = server.store.get(ok.call_id)
    assert record is not None and record.end_reason == "caller hung up (BYE)"
    assert record.transfer["outcome"] == "failed"
    assert record.transfer["detail"] == "the call ended on hold: caller hung up (BYE)"
    [leg] = [r for r in server.store.list() if r.params.get("transfer_of") == ok.call_id]
    assert leg.end_reason == "caller's call ended: caller hung up (BYE)"
