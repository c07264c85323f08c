"""Who answered a call parley placed through Twilio, over loopback: a real call server with an
answering plan, and the Twilio REST stand-in (harness/twilio_rest.py) that sends the signed
answering-machine callback (AnsweredBy) while the media stream runs, plays the callee's audio and
records what the callee heard on the stream's own clock (``report.agent_audio``, 8 kHz)."""

from __future__ import annotations

import asyncio
import re

import numpy as np
import pytest

from agent.echo import EchoAgentProcessor
from agent.voicemail import fill_message
from harness.callers.script import CallerUtterance
from harness.twilio_rest import Scenario, StandInCall, TwilioRestStandIn
from pipeline.answering import AnsweringConfig
from pipeline.builder import PipelineConfig
from pipeline.audio.wav import write_wav
from pipeline.voicemail import AnsweringPlan
from telephony.server import CallServer, ServerConfig
from telephony.sip.dialer import DialOutcome
from telephony.twilio.outbound import TwilioDialer, TwilioDialRequest

from .conftest import TOKEN

ACCOUNT = "AC" + "2" * 32
TO, FROM = "+15551234567", "+15550100"
RATE_HZ = 8000
TEMPLATE = "Hi {customer}, this is Acme about your order. Please call us back."
MESSAGE = "Hi Dana, this is Acme about your order. Please call us back."
LONG_TEMPLATE = ("Hi {customer}, this is Acme calling about your order number four two seven. It is ready to "
                 "collect from our shop on the high street. Please call us back when you can. Thank you and goodbye.")
GREETING = "Hello, this is parley. How can I help you today?"   # the echo agent's
DEFAULT = AnsweringConfig()
SLOW = AnsweringConfig(no_speech_s=8.0, max_decide_s=8.0)   # a detector that says nothing for 8 s


def words(text: str | None) -> list[str]:
    return re.findall(r"[a-z0-9']+", (text or "").lower())


def first_audible_s(call: StandInCall) -> float | None:
    """When the callee first heard the agent, in seconds on the stream's clock (None: never)."""
    assert call.report is not None
    loud = np.flatnonzero(np.abs(call.report.agent_audio.astype(np.int32)) > 500)
    return loud[0] / RATE_HZ if loud.size else None


def audible_s(call: StandInCall) -> float:
    assert call.report is not None
    pcm = call.report.agent_audio.astype(np.int32)
    frames = pcm[: pcm.size // 160 * 160].reshape(-1, 160)
    return float((np.abs(frames).max(axis=1) > 500).sum() * 0.02)


@pytest.fixture
async def twilio():
    async with TwilioRestStandIn(ACCOUNT, TOKEN) as stand_in:
        yield stand_in


@pytest.fixture
async def make_server(twilio):
    servers: list[CallServer] = []

    async def make(plan: AnsweringPlan | None = None, template: str = TEMPLATE,
                   detector: AnsweringConfig = DEFAULT, pipeline: PipelineConfig | None = None) -> CallServer:
        srv = CallServer(ServerConfig(host="127.0.0.1", port=0, auth_token=TOKEN,
                                      pipeline=pipeline or PipelineConfig()),
                         agent_factory=lambda _info: EchoAgentProcessor())
        # the message is filled from the call's parameters, as agent.voicemail does from the spec
        srv.answering_plans = lambda info: plan or AnsweringPlan(message=fill_message(template, info.params),
                                                                 detector=detector)
        await srv.start()
        servers.append(srv)
        srv.outbound.dialer = TwilioDialer(ACCOUNT, TOKEN, f"http://127.0.0.1:{srv.port}", api_base=twilio.base_url)
        return srv

    try:
        yield make
    finally:
        for srv in servers:
            await srv.stop()


async def _dial(server: CallServer, twilio: TwilioRestStandIn, scenario: Scenario, *, amd: bool = True):
    twilio.scenarios.append(scenario)
    placed = await server.outbound.place(TwilioDialRequest(TO, FROM, params=(("customer", "Dana"),),
                                                           machine_detection=amd))
    result = await server.outbound.wait(placed, timeout_s=40)
    call = await twilio.next_call()
    assert call.error is None, call.error
    for _ in range(50):  # noqa: ASYNC110 - the stream's end may still be being written (a plain dict)
        if placed.call_sid not in server.live:
            break
        await asyncio.sleep(0.1)
    record = server.store.get(placed.call_sid)
    assert record is not None and record.ended
    return result, call, record


async def test_a_machine_hears_the_message_after_twilios_amd_then_the_call_ends(make_server, twilio):
    server = await make_server(detector=SLOW)
    amd_s = 1.0   # long before parley's own detector decides anything on this silent line
    result, call, record = await _dial(server, twilio, Scenario(answered_by="machine_end_beep", amd_delay_s=amd_s,
                                                                greeting_quiet_s=8.0, linger_s=10.0))
    assert ("amd", "machine_end_beep", 204) in call.callbacks
    # the message, filled from the call's parameters, and never the agent's greeting
    assert words(record.greeting) == words(record.greeting_heard) == words(MESSAGE)
    assert "parley" not in words(record.greeting) and not record.turns
    assert record.answered_by == "machine_end_beep" and record.voicemail_left is True
    assert record.end_reason == "voicemail message left"
    assert record.dial["answered_by"] == "machine_end_beep"
    # nothing before Twilio's answer; the message right after it, all of it, then parley hung up
    first = first_audible_s(call)
    assert first is not None and amd_s - 0.1 < first < amd_s + 3.0, first
    assert 2.0 < audible_s(call) < 7.0
    assert call.report is not None and call.report.server_hung_up and not call.report.timed_out
    assert result.outcome is DialOutcome.ANSWERED
    assert result.answered_by == "machine_end_beep" and result.voicemail_left is True


async def test_a_person_gets_the_greeting_as_soon_as_twilio_says_human(make_server, twilio):
    server = await make_server(detector=SLOW)
    result, call, record = await _dial(server, twilio, Scenario(answered_by="human", amd_delay_s=0.5,
                                                                greeting_quiet_s=8.0))
    first = first_audible_s(call)
    # parley's detector alone would wait 8 s on this silent line; Twilio's "human" came at 0.5 s
    assert first is not None and 0.4 < first < 4.0, first
    assert words(record.greeting) == words(GREETING)
    assert record.answered_by == "human" and record.voicemail_left is None
    assert record.end_reason == "caller hung up (stop)"
    assert result.answered_by == "human"


async def test_a_fax_is_hung_up_on_without_a_word(make_server, twilio):
    server = await make_server()
    result, call, record = await _dial(server, twilio, Scenario(answered_by="fax", amd_delay_s=0.5,
                                                                greeting_quiet_s=8.0, linger_s=10.0))
    assert call.report is not None and call.report.media_bytes_received == 0 and call.report.server_hung_up
    assert record.answered_by == "fax" and record.end_reason == "a fax answered" and not record.greeting
    assert record.voicemail_left is None
    assert call.status == "completed" and result.outcome is DialOutcome.ANSWERED and result.talk_s < 5


async def test_the_callee_hangs_up_during_the_message(make_server, twilio):
    server = await make_server(template=LONG_TEMPLATE)
    result, call, record = await _dial(server, twilio, Scenario(answered_by="machine_end_silence", amd_delay_s=0.5,
                                                                greeting_quiet_s=8.0, reply_timeout_s=1.5))
    assert record.end_reason == "caller hung up (stop)"
    assert record.answered_by == "machine_end_silence" and record.voicemail_left is False
    heard = words(record.greeting_heard)
    assert words(record.greeting) == words(fill_message(LONG_TEMPLATE, {"customer": "Dana"}))
    assert heard == words(record.greeting)[:len(heard)] and len(heard) < len(words(record.greeting)) / 2
    assert result.voicemail_left is False


async def test_no_amd_answer_leaves_it_to_parleys_detector(make_server, twilio):
    """Twilio never answers (or answers late): on a silent line the detector says nobody, and
    this plan hangs up then."""
    server = await make_server(AnsweringPlan(message=MESSAGE, on_unknown="hang_up"))
    result, call, record = await _dial(server, twilio, Scenario(answered_by=None, greeting_quiet_s=8.0,
                                                                linger_s=10.0))
    assert not [c for c in call.callbacks if c[0] == "amd"]
    assert record.end_reason == "nobody spoke" and record.answered_by == "unknown"
    assert call.report is not None and call.report.media_bytes_received == 0 and call.report.server_hung_up
    no_speech_s = AnsweringConfig().no_speech_s
    assert record.ended_at is not None
    assert no_speech_s - 0.2 < record.ended_at - record.started_at < no_speech_s + 1.5


async def test_a_dial_without_amd_is_screened_by_parleys_detector(make_server, twilio, flite_speech, tmp_path):
    """No MachineDetection asked for: the callee's voicemail greeting and beep, played into the
    stream, are heard by parley's detector; the message starts after the beep's end."""
    server = await make_server()
    greeting = flite_speech("Hi, you have reached Dana. Please leave a message after the tone.", RATE_HZ)
    t = np.arange(int(0.5 * RATE_HZ)) / RATE_HZ
    beep = (6000 * np.sin(2 * np.pi * 1000.0 * t)).astype(np.int16)
    wav = tmp_path / "voicemail.wav"
    write_wav(wav, np.concatenate([greeting, np.zeros(int(0.3 * RATE_HZ), np.int16), beep]), RATE_HZ)
    result, call, record = await _dial(server, twilio, Scenario(answered_by=None, greeting_quiet_s=0.1,
                                                                utterances=(CallerUtterance(wav=wav),),
                                                                linger_s=10.0), amd=False)
    assert "MachineDetection" not in call.form
    assert record.answered_by == "machine" and record.voicemail_left is True
    assert record.end_reason == "voicemail message left" and words(record.greeting) == words(MESSAGE)
    assert call.report is not None and call.report.server_hung_up
    [turn] = call.report.turns
    # all of parley's audio came after the beep ended (the end of the callee's audio), and soon after
    assert turn.agent_audio_bytes == call.report.media_bytes_received > 8000
    assert turn.v2v_ms is not None and turn.v2v_ms < 1500


async def test_a_greeting_that_never_ends_gets_the_message_at_max_wait(make_server, twilio, flite_speech, tmp_path):
    """No AMD answer and a callee that keeps talking: the detector says machine, no beep and no
    silence come, and at max_wait_s the message is spoken anyway; parley then hangs up."""
    server = await make_server(detector=AnsweringConfig(max_wait_s=5.0))
    speech = flite_speech("Hello, you have reached the offices of Acme and Sons, purveyors of fine goods since "
                          "nineteen twenty. Our hours are nine to five, Monday to Friday, and ten to four on "
                          "Saturdays. For deliveries press one, for accounts press two, for anything else, please "
                          "stay on the line and somebody will be with you shortly.", RATE_HZ)
    assert len(speech) / RATE_HZ > 12.0
    wav = tmp_path / "endless.wav"
    write_wav(wav, speech, RATE_HZ)
    result, call, record = await _dial(server, twilio, Scenario(answered_by=None, greeting_quiet_s=0.1,
                                                                utterances=(CallerUtterance(wav=wav),),
                                                                linger_s=10.0))
    assert record.answered_by == "machine" and record.voicemail_left is True
    assert record.end_reason == "voicemail message left" and words(record.greeting) == words(MESSAGE)
    first = first_audible_s(call)
    assert first is not None and 4.8 < first < 7.5, first
    assert call.report is not None and call.report.server_hung_up


async def test_a_one_sentence_greeting_is_a_machine_by_the_calls_recognisers_words(make_server, twilio, flite_speech,
                                                                                     tmp_path, caplog):
    """A server whose calls run parley's recogniser (``stt="ssm"``) screens with its words: "Leave a
    message." then silence, which timing alone takes for a person's "hello?", is a machine, and
    the plan hangs up on it."""
    server = await make_server(AnsweringPlan(on_machine="hang_up"), pipeline=PipelineConfig(stt="ssm"))
    wav = tmp_path / "short.wav"
    write_wav(wav, flite_speech("Leave a message.", RATE_HZ), RATE_HZ)
    with caplog.at_level("INFO", logger="telephony.twilio.call"):
        _, call, record = await _dial(server, twilio, Scenario(answered_by=None, greeting_quiet_s=0.1,
                                                               utterances=(CallerUtterance(wav=wav),),
                                                               linger_s=4.0), amd=False)
    assert record.answered_by == "machine" and record.end_reason == "answering machine: no message left"
    assert "the greeting says" in caplog.text
    assert not record.turns and call.report is not None and call.report.server_hung_up
