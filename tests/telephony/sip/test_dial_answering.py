"""Who answered a dialled call: sipp callees on loopback play a person's "hello?", a voicemail
greeting and beep, or silence (flite speech through the mu-law channel, as RTP from a pcap), and
the tests assert when parley's audio reaches the callee (none before the decision; the greeting
right after a person's hello; the message only after the beep), the BYE, and the record."""

from __future__ import annotations

import asyncio
import re
import time

import numpy as np
import pytest

from agent.echo import EchoAgentProcessor
from pipeline.answering import AnsweringConfig
from pipeline.voicemail import AnsweringPlan
from telephony.sip import DialOutcome, DialRequest, SipServer
from telephony.sip.dialer import DialedCall

from .conftest import RtpSink, callee, wait_for
from .pcap import RATE_HZ, write_rtp_pcap

MESSAGE = "Hi Dana, this is Acme about your order. Please call us back."
LONG_MESSAGE = ("Hi Dana, this is Acme calling about your order number four two seven. It is ready to collect "
                "from our shop on the high street. Please call us back when you can. Thank you and goodbye.")


def noise(s: float, seed: int = 0) -> np.ndarray:
    """Line noise around -60 dBFS."""
    return (np.random.default_rng(seed).standard_normal(int(s * RATE_HZ)) * 30).astype(np.int16)


def beep(s: float = 0.5, hz: float = 1000.0) -> np.ndarray:
    t = np.arange(int(s * RATE_HZ)) / RATE_HZ
    return (6000 * np.sin(2 * np.pi * hz * t)).astype(np.int16)


def words(text: str) -> list[str]:
    """The words of a text, as the call record keeps what was said (no punctuation)."""
    return re.findall(r"[a-z0-9']+", text.lower())


class TimedSink(RtpSink):
    """The callee's RTP port: each packet of parley's audio with its arrival time."""

    def __init__(self) -> None:
        super().__init__()
        self.times: list[float] = []

    def datagram_received(self, data: bytes, addr) -> None:
        super().datagram_received(data, addr)
        self.times.append(time.monotonic())


async def _call(server: SipServer, scenario: str, audio: np.ndarray, tmp_path, plan: AnsweringPlan | None):
    """Dial a sipp callee that plays ``audio`` after the answer; returns (result, call, sink, the
    audio's length in seconds)."""
    server.agent_factory = lambda _info: EchoAgentProcessor()  # greets at once when it starts
    server.answering_plans = lambda _info: plan
    (tmp_path / "pcap").mkdir(parents=True, exist_ok=True)
    played_s = write_rtp_pcap(tmp_path / "pcap" / "answer.pcap", audio)
    transport, sink = await asyncio.get_running_loop().create_datagram_endpoint(TimedSink,
                                                                                local_addr=("127.0.0.1", 0))
    try:
        async with callee(scenario, tmp_path, rtp_port=transport.get_extra_info("sockname")[1]) as peer:
            dial = asyncio.create_task(server.dial(DialRequest(peer.uri)))
            await wait_for(lambda: any(getattr(c, "answered_at", None) for c in server.live.values()))
            [call] = server.live.values()
            assert isinstance(call, DialedCall)
            result = await dial
            sipp = await peer.result()
            assert sipp.returncode == 0, sipp.stdout[-2000:] + sipp.stderr[-2000:]
    finally:
        transport.close()
    return result, call, sink, played_s


def _first_out_s(call: DialedCall, sink: TimedSink) -> float:
    """When parley's first packet reached the callee, in seconds after the answer."""
    assert sink.times and call.answered_at is not None
    return sink.times[0] - call.answered_at


async def test_a_person_says_hello_and_the_agent_greets_right_after(make_sip_server, flite_speech, tmp_path):
    server = await make_sip_server()
    hello = flite_speech("hello?", RATE_HZ)
    loud = np.flatnonzero(np.abs(hello.astype(np.float32)) > 0.05 * np.abs(hello).max())
    hello_end_s = 0.3 + (loud[-1] + 1) / RATE_HZ       # where its speech ends (flite adds silence)
    result, call, sink, _ = await _call(server, "callee_plays_then_hangs_up.xml",
                                        np.concatenate([noise(0.3), hello, noise(5.0)]), tmp_path,
                                        AnsweringPlan(message=MESSAGE))
    assert result.outcome is DialOutcome.ANSWERED and result.end_reason == "callee hung up (BYE)"
    assert result.history[:6] == ("inviting", "ringing", "answered", "acked", "screening",
                                  "answered-by-human"), result
    assert result.answered_by == "human" and result.voicemail_left is None
    # nothing went out while the callee said hello; the greeting came once its pause confirmed a person
    pause_s = AnsweringConfig().human_pause_s
    first_s = _first_out_s(call, sink)
    assert hello_end_s + pause_s - 0.1 < first_s < hello_end_s + pause_s + 1.5, (first_s, hello_end_s, result)
    assert len(sink.packets) >= 40 and sink.rms() > 300
    [record] = server.store.list()
    assert record.answered_by == "human" and record.voicemail_left is None
    assert words(record.greeting) == words("Hello, this is parley. How can I help you today?")


async def test_a_machine_hears_nothing_until_the_beep_then_the_message_then_bye(make_sip_server, flite_speech,
                                                                                 tmp_path):
    server = await make_sip_server()
    greeting = flite_speech("Hi, you have reached Dana. Please leave a message after the tone.", RATE_HZ)
    beep_end_s = 0.3 + len(greeting) / RATE_HZ + 0.3 + 0.5
    result, call, sink, _ = await _call(server, "callee_plays_until_bye.xml",
                                        np.concatenate([noise(0.3), greeting, noise(0.3, 1), beep(), noise(9.0, 2)]),
                                        tmp_path, AnsweringPlan(message=MESSAGE))
    assert result.outcome is DialOutcome.ANSWERED and result.end_reason == "voicemail message left"
    assert result.history == ("inviting", "ringing", "answered", "acked", "screening", "answered-by-machine",
                              "greeting-over", "bye-sent", "ended")
    assert result.answered_by == "machine" and result.voicemail_left is True
    # silence through the greeting and the beep; the message right after the beep's end
    assert beep_end_s < _first_out_s(call, sink) < beep_end_s + 1.5
    # all of it went out (espeak-ng says it in about 3.5 s), then the BYE (sipp checked it came)
    spoken_s = len(sink.packets) * 0.02
    assert 2.5 < spoken_s < 6 and sink.rms() > 300
    assert sink.times[-1] - sink.times[0] == pytest.approx(spoken_s, abs=0.5)  # paced, not burst
    [record] = server.store.list()
    assert record.answered_by == "machine" and record.voicemail_left is True
    assert words(record.greeting) == words(record.greeting_heard) == words(MESSAGE)
    assert record.end_reason == "voicemail message left"


async def test_the_callee_hangs_up_during_the_message(make_sip_server, flite_speech, tmp_path):
    """sipp sends BYE 5 s after the ACK, about 2 s into a message that lasts over 8."""
    server = await make_sip_server()
    greeting = flite_speech("Please leave a message after the tone.", RATE_HZ)
    beep_end_s = 0.2 + len(greeting) / RATE_HZ + 0.3 + 0.5
    assert beep_end_s < 3.5
    result, call, sink, _ = await _call(server, "callee_plays_then_hangs_up.xml",
                                        np.concatenate([noise(0.2), greeting, noise(0.3, 1), beep(), noise(6.0, 2)]),
                                        tmp_path, AnsweringPlan(message=LONG_MESSAGE))
    assert result.end_reason == "callee hung up (BYE)"
    assert result.history[-3:] == ("greeting-over", "bye-received", "ended")
    assert result.answered_by == "machine" and result.voicemail_left is False
    assert beep_end_s < _first_out_s(call, sink) < beep_end_s + 1.5
    assert sink.times[-1] - call.answered_at < 5.5  # the message stopped at the BYE
    assert 0.5 < len(sink.packets) * 0.02 < 5.0 - beep_end_s + 0.3
    [record] = server.store.list()
    assert record.ended and record.answered_by == "machine" and record.voicemail_left is False
    heard = words(record.greeting_heard)
    assert words(record.greeting) == words(LONG_MESSAGE) and heard and heard == words(LONG_MESSAGE)[:len(heard)]
    assert len(heard) < len(words(LONG_MESSAGE)) / 2


async def test_silence_is_unknown_and_the_plan_hangs_up(make_sip_server, tmp_path):
    server = await make_sip_server()
    result, call, sink, _ = await _call(server, "callee_plays_until_bye.xml", noise(6.0), tmp_path,
                                        AnsweringPlan(message=MESSAGE, on_unknown="hang_up"))
    assert result.end_reason == "nobody spoke" and result.answered_by == "unknown"
    assert result.history == ("inviting", "ringing", "answered", "acked", "screening", "answered-by-unknown",
                              "bye-sent", "ended")
    assert not sink.packets  # not a word to nobody
    no_speech_s = AnsweringConfig().no_speech_s
    assert no_speech_s - 0.2 < result.talk_s < no_speech_s + 1.0
    [record] = server.store.list()
    assert record.answered_by == "unknown" and record.voicemail_left is None and not record.greeting


async def test_silence_is_unknown_and_the_default_plan_greets_after_3_s(make_sip_server, tmp_path):
    server = await make_sip_server()
    result, call, sink, _ = await _call(server, "callee_plays_then_hangs_up.xml", noise(6.0), tmp_path,
                                        AnsweringPlan(message=MESSAGE))
    assert result.answered_by == "unknown" and result.end_reason == "callee hung up (BYE)"
    assert "answered-by-unknown" in result.history and result.voicemail_left is None
    no_speech_s = AnsweringConfig().no_speech_s
    assert no_speech_s - 0.2 < _first_out_s(call, sink) < no_speech_s + 1.5
    assert len(sink.packets) >= 40 and sink.rms() > 300  # the agent's greeting, to whoever is there


async def test_a_machine_with_hang_up_in_its_plan_gets_a_bye_at_the_first_decision(make_sip_server,
                                                                                       flite_speech, tmp_path):
    server = await make_sip_server()
    greeting = flite_speech("Hi, you have reached Dana. Please leave a message after the tone.", RATE_HZ)
    result, call, sink, _ = await _call(server, "callee_plays_until_bye.xml",
                                        np.concatenate([noise(0.3), greeting, noise(0.3, 1), beep(), noise(4.0, 2)]),
                                        tmp_path, AnsweringPlan(on_machine="hang_up"))
    assert result.end_reason == "answering machine: no message left"
    assert result.answered_by == "machine" and result.voicemail_left is False and not sink.packets
    assert "greeting-over" not in result.history  # no waiting for the beep
    assert result.talk_s < 0.3 + len(greeting) / RATE_HZ  # the BYE went during the greeting
