"""A warm transfer over Twilio, on loopback: a real call server running the embedded agent, the
Twilio REST stand-in (harness/twilio_rest.py) playing both calls (the caller's, and the one
parley places to the person) with the scripted Twilio caller on each stream, and the stand-in's
conference model. The caller presses 0 (the spec's menu: transfer to the desk, warm).

What is asserted comes off the wire: what each stream received and when (hold audio is known by
its exact mu-law payloads), what the caller's phone played, the REST requests parley made and in
which order, who ended up in which conference room, and the call records."""

from __future__ import annotations

import asyncio
import logging

import numpy as np
import pytest

from agent.embedded import EmbeddedAgentProcessor
from agent.spec import parse_spec
from harness.callers.script import CallerConfig, CallerUtterance
from harness.callers.twilio import TwilioCaller
from harness.twilio_rest import Fault, Scenario, StandInCall, TwilioRestStandIn
from pipeline.audio.g711 import ulaw_decode, ulaw_encode
from pipeline.audio.hold import hold_pattern
from telephony.server import CallServer, ServerConfig
from telephony.twilio.outbound import TwilioDialer, TwilioDialRequest
from telephony.twilio.warm import BRIEFING_PARAM, BRIEFING_TOKEN_PARAM

from .conftest import TOKEN

ACCOUNT = "AC" + "0" * 32
PERSON, OURS, CALLER_NUMBER = "+15550142", "+15550199", "+15550100"

SPEC = """
name: Acme desk
persona: a receptionist
greeting: Hello.
handoffs:
  - name: desk
    kind: dial
    target: "{target}"
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

AGENT_BACK_S = 1.0   # the agent's speech after the hold that shows the caller got it back
OFFER = "Would you like to leave a message?"   # what the agent says once it has the caller back

_PATTERN = hold_pattern("music")
HOLD_PAYLOADS = {bytes(ulaw_encode(c)) for c in np.split(_PATTERN, len(_PATTERN) // 160)}


def is_hold(payload: bytes) -> bool:
    return payload in HOLD_PAYLOADS


def is_speech(payload: bytes) -> bool:
    """The agent's voice: loud, and not a hold chunk."""
    pcm = ulaw_decode(payload).astype(np.float64)
    return not is_hold(payload) and float(np.sqrt(np.mean(pcm ** 2))) > 300


def caller_scenario(linger_s: float, back_from: Line | None = None) -> Scenario:
    """Greets, presses 0, stays on the line ``linger_s`` (a conference keeps it until it ends);
    ``back_from``: hangs up sooner, once that line's agent offered to take a message (the transfer
    over) and the caller heard over AGENT_BACK_S of it after the hold."""
    def agent_back(media: list[tuple[float, bytes]]) -> bool:
        assert back_from is not None
        offered = any(OFFER in a.conversation.last_said for a in back_from.agents)
        return offered and any(is_hold(p) for _, p in media) and _speech_after_hold_s(media) > AGENT_BACK_S + 0.2

    return Scenario(utterances=(CallerUtterance(dtmf="0"),), linger_s=linger_s, greeting_quiet_s=5.0,
                    call_timeout_s=40.0, linger_until=agent_back if back_from is not None else None)


class Line:
    """The server, the stand-in, and the agents the server made."""

    def __init__(self, server: CallServer, twilio: TwilioRestStandIn):
        self.server, self.twilio = server, twilio
        self.agents: list[EmbeddedAgentProcessor] = []

    def spec(self, timeout_s: float) -> None:
        spec = parse_spec(SPEC.format(target=PERSON, timeout_s=timeout_s))

        def factory(info):
            self.agents.append(EmbeddedAgentProcessor(spec, call_sid=info.call_sid))
            return self.agents[-1]
        self.server.agent_factory = factory

    @property
    def voice_url(self) -> str:
        return f"http://127.0.0.1:{self.server.port}/twilio/voice"

    async def person(self, caller: StandInCall) -> StandInCall:
        """The call parley placed for ``caller``'s transfer."""
        for _ in range(200):
            found = [c for c in self.twilio.calls if c.form.get("To") == PERSON]
            if found:
                return found[0]
            await asyncio.sleep(0.05)
        raise AssertionError(f"parley placed no call to the person for {caller.sid}")


@pytest.fixture
async def line():
    async with TwilioRestStandIn(ACCOUNT, TOKEN) as twilio:
        srv = CallServer(ServerConfig(host="127.0.0.1", port=0, auth_token=TOKEN, twilio_account_sid=ACCOUNT,
                                      twilio_api_base=twilio.base_url),
                         agent_factory=lambda _info: None)  # type: ignore[arg-type, return-value]
        await srv.start()
        srv.outbound.dialer = TwilioDialer(ACCOUNT, TOKEN, f"http://127.0.0.1:{srv.port}", api_base=twilio.base_url)
        try:
            yield Line(srv, twilio)
        finally:
            await srv.stop()


async def over(*calls: StandInCall, timeout_s: float = 30.0) -> None:
    async with asyncio.timeout(timeout_s):
        for call in calls:
            await call.done.wait()


def longest_silence_s(call: StandInCall, since_t: float, until_t: float) -> float:
    """The longest run of silence the caller's phone played between two loop times (its playout
    recording: one 20 ms frame a tick of its clock)."""
    assert call.caller is not None and call.caller.clock_start_t is not None and call.report is not None
    pcm = call.report.agent_audio.astype(np.float64)
    frames = pcm[: len(pcm) // 160 * 160].reshape(-1, 160)
    first = int((since_t - call.caller.clock_start_t) / 0.02)
    last = min(len(frames), int((until_t - call.caller.clock_start_t) / 0.02))
    quiet = np.sqrt((frames[first:last] ** 2).mean(axis=1)) < 100
    run = best = 0
    for q in quiet:
        run = run + 1 if q else 0
        best = max(best, run)
    return best * 0.02


def pressed_at(call: StandInCall) -> float:
    assert call.caller is not None and call.caller.keys_sent, "the caller pressed no key"
    return call.caller.keys_sent[0][0]




def _speech_after_hold_s(media: list[tuple[float, bytes]]) -> float:
    last_hold = max(t for t, p in media if is_hold(p))
    return sum(len(p) for t, p in media if t > last_hold and is_speech(p)) / 8000


def agent_back_after_hold(call: StandInCall) -> float:
    """Seconds of the agent's speech the caller received after the last hold audio."""
    return _speech_after_hold_s(call.media_received)


# -- joined -----------------------------------------------------------------------------------------

async def test_the_person_is_briefed_then_both_join_a_conference(line):
    line.spec(timeout_s=10)
    line.twilio.scenarios.append(Scenario(ring_s=0.5, greeting_quiet_s=10.0, linger_s=30.0, conference_s=1.0,
                                          reply_timeout_s=30.0, call_timeout_s=40.0))
    caller = await line.twilio.call_in(line.voice_url, caller_scenario(linger_s=30.0), from_=CALLER_NUMBER, to=OURS)
    person = await line.person(caller)
    await over(caller, person)
    assert caller.error is None and person.error is None, (caller.error, person.error)
    record = line.server.store.get(caller.sid)
    assert record is not None and record.ended
    room_name = record.transfer["room"]

    # parley called the person from the number the caller dialled, streaming back to itself,
    # the stream's parameters naming the caller's call
    assert person.form["From"] == OURS and person.form["Timeout"] == "10" and "Url" not in person.form
    assert f'<Stream url="ws://127.0.0.1:{line.server.port}/twilio/stream">' in person.form["Twiml"]
    assert person.stream_params[BRIEFING_PARAM] == caller.sid and "MachineDetection" not in person.form

    # the caller: hold audio within a second of pressing 0, the phone never silent a second
    # from then until Twilio closed the stream
    start = pressed_at(caller)
    hold = [t for t, p in caller.media_received if t >= start and is_hold(p)]
    assert hold and hold[0] - start < 1.0, hold[:1]
    assert caller.caller is not None and caller.caller.stream_ended_t is not None
    assert longest_silence_s(caller, start, caller.caller.stream_ended_t) < 1.0

    # the person: the summary spoken (over a second of it played on their phone) before their
    # call's update, and no hold audio
    [person_update] = [u for u in line.twilio.updates if u.call_sid == person.sid]
    summary = [(t, p) for t, p in person.media_received if is_speech(p)]
    assert sum(len(p) for _, p in summary) > 8000
    assert max(t for t, _ in summary) < person_update.at
    assert person.report is not None
    played = np.abs(person.report.agent_audio.astype(np.int32)) > 1000
    assert played.sum() > 2000
    assert not any(is_hold(p) for _, p in person.media_received)

    # both into one room through the REST API, the person first; each ends the room on leaving
    assert [(u.call_sid, u.status) for u in line.twilio.updates] == [(person.sid, 200), (caller.sid, 200)]
    assert all(f">{room_name}</Conference>" in u.form["Twiml"] and 'endConferenceOnExit="true"' in u.form["Twiml"]
               for u in line.twilio.updates)
    room = line.twilio.rooms[room_name]
    assert [p.call_sid for p in room.participants] == [person.sid, caller.sid]
    assert all(p.end_conference_on_exit for p in room.participants)
    who = {p.call_sid: p for p in room.participants}
    assert any(is_hold(pl) for _, pl in who[caller.sid].heard_before)          # the caller was on hold
    assert not any(is_hold(pl) for _, pl in who[person.sid].heard_before)
    assert room.ended_at is not None and caller.status == person.status == "completed"

    # the records
    transfer = record.transfer
    assert (transfer["mode"], transfer["target"], transfer["outcome"], transfer["leg"]) == \
        ("warm", PERSON, "joined", person.sid)
    assert "I have a caller on the line" in transfer["summary"] and 1.0 < transfer["held_s"] < 30
    assert record.end_reason == f"warm transfer to {PERSON}: joined (conference {room_name})"
    assert "caller on the line" not in record.greeting_heard + " ".join(t.agent_text_heard for t in record.turns)
    leg = line.server.store.get(person.sid)
    assert leg is not None and leg.ended and leg.params["transfer_of"] == caller.sid
    assert [s["status"] for s in leg.dial["statuses"]] == ["initiated", "ringing", "in-progress", "completed"]
    [agent] = line.agents
    assert agent.conversation.last_said == "Please hold while I transfer you to a person."


# -- nobody takes the call ----------------------------------------------------------------------------

@pytest.mark.parametrize(("answer", "timeout_s", "ring_s", "outcome", "detail"), [
    ("no-answer", 10, 1.5, "no-answer", "no-answer (Twilio: no-answer)"),
    ("failed", 10, 0.3, "failed", "failed (Twilio: failed)"),
    ("human", 2, 15.0, "no-answer", "no answer within 2 s"),     # parley's own deadline: hung up over REST
])
async def test_nobody_answers_so_the_caller_gets_the_agent_back(line, answer, timeout_s, ring_s, outcome, detail):
    line.spec(timeout_s=timeout_s)
    line.twilio.scenarios.append(Scenario(answer=answer, ring_s=ring_s))
    caller = await line.twilio.call_in(line.voice_url, caller_scenario(linger_s=9.0, back_from=line), to=OURS)
    person = await line.person(caller)
    await over(caller, person)
    assert caller.error is None and person.report is None           # the person's phone never streamed
    record = line.server.store.get(caller.sid)
    assert record is not None
    transfer = record.transfer
    assert (transfer["outcome"], transfer["detail"], transfer["leg"]) == (outcome, detail, person.sid)
    # hold audio from the start, then the agent again: over a second of its speech after the hold
    start = pressed_at(caller)
    hold = [t for t, p in caller.media_received if t >= start and is_hold(p)]
    assert hold and hold[0] - start < 1.0
    assert agent_back_after_hold(caller) > AGENT_BACK_S
    [agent] = line.agents
    assert agent.conversation.last_said == ("Sorry, nobody is available to take your call right now. "
                                            "Would you like to leave a message?")
    assert record.end_reason == "caller hung up (stop)" and caller.room is None
    if detail.startswith("no answer within"):     # the ringing call was hung up through the REST API
        assert [(u.call_sid, u.form, u.status) for u in line.twilio.updates] == \
            [(person.sid, {"Status": "completed"}, 200)]
        assert person.status == "canceled" and [c[1] for c in person.callbacks][-1] == "canceled"
    else:
        assert line.twilio.updates == [] and person.status == answer


async def test_the_person_hanging_up_during_the_summary_gives_the_caller_back(line):
    line.spec(timeout_s=10)
    # answers, listens a second into the summary, hangs up (stop)
    line.twilio.scenarios.append(Scenario(ring_s=0.3, greeting_quiet_s=10.0, reply_timeout_s=1.0))
    caller = await line.twilio.call_in(line.voice_url, caller_scenario(linger_s=10.0, back_from=line), to=OURS)
    person = await line.person(caller)
    await over(caller, person)
    record = line.server.store.get(caller.sid)
    assert record is not None
    assert (record.transfer["outcome"], record.transfer["detail"]) == ("failed", "the person hung up during the summary")
    assert person.report is not None and not person.report.server_hung_up   # the person left first
    summary_s = sum(len(p) for _, p in person.media_received if is_speech(p)) / 8000
    assert 0.5 < summary_s < 3.0, summary_s                  # it heard the start of the summary only
    assert line.twilio.updates == [] and not line.twilio.rooms
    assert agent_back_after_hold(caller) > AGENT_BACK_S
    assert "Would you like to leave a message?" in line.agents[0].conversation.last_said


# -- Twilio refuses an update -------------------------------------------------------------------------

@pytest.mark.parametrize("refused", ["person", "caller"])
async def test_a_refused_update_gives_the_caller_back(line, caplog, refused):
    """A 500 on the person's update, or a 429 on the caller's (the person already in the room):
    one log line, the person's call ended, and the caller has the agent again."""
    line.spec(timeout_s=10)
    line.twilio.scenarios.append(Scenario(ring_s=0.3, greeting_quiet_s=10.0, linger_s=30.0, reply_timeout_s=30.0))
    if refused == "person":
        line.twilio.update_faults.append(Fault(500))
    else:
        line.twilio.update_faults.extend([None, Fault(429, retry_after="1")])
    with caplog.at_level(logging.WARNING, logger="telephony.twilio.warm"):
        caller = await line.twilio.call_in(line.voice_url, caller_scenario(linger_s=12.0, back_from=line), to=OURS)
        person = await line.person(caller)
        await over(caller, person)
    record = line.server.store.get(caller.sid)
    assert record is not None and record.transfer["outcome"] == "failed"
    [line_logged] = [r.getMessage() for r in caplog.records]
    code = "HTTP 500, error 20500" if refused == "person" else "HTTP 429, error 20429"
    assert f"the {refused} could not be joined" in line_logged and code in line_logged
    assert record.transfer["detail"].startswith(f"the {refused} could not be joined: ")
    assert agent_back_after_hold(caller) > AGENT_BACK_S
    assert caller.room is None and person.status == "completed"
    updates = [(u.call_sid, u.status, "Conference" in u.form.get("Twiml", ""), u.form.get("Status"))
               for u in line.twilio.updates]
    if refused == "person":      # the person's stream closed by parley: Twilio ends that call
        assert updates == [(person.sid, 500, True, None)] and person.room is None
    else:                        # in the room alone: hung up through the REST API
        assert updates == [(person.sid, 200, True, None), (caller.sid, 429, True, None),
                           (person.sid, 200, False, "completed")]
        [alone] = line.twilio.rooms[person.room].participants
        assert alone.call_sid == person.sid and alone.left_at is not None


# -- a call parley placed -------------------------------------------------------------------------------

async def test_a_call_parley_placed_is_warm_transferred_too(line):
    """parley calls a customer (the Calls API), the customer presses 0: the person is called from
    the number parley called from, briefed, and both end up in one room."""
    line.spec(timeout_s=10)
    line.twilio.scenarios.extend([caller_scenario(linger_s=30.0),
                                  Scenario(ring_s=0.3, greeting_quiet_s=10.0, linger_s=30.0, conference_s=0.5,
                                           reply_timeout_s=30.0)])
    placed = await line.server.outbound.place(TwilioDialRequest(CALLER_NUMBER, OURS, machine_detection=False))
    customer = line.twilio.call(placed.call_sid)
    person = await line.person(customer)
    await over(customer, person)
    assert customer.error is None and person.form["From"] == OURS
    record = line.server.store.get(customer.sid)
    assert record is not None and record.transfer["outcome"] == "joined" and record.transfer["leg"] == person.sid
    assert customer.room == person.room == record.transfer["room"]
    assert [u.call_sid for u in line.twilio.updates] == [person.sid, customer.sid]
    assert record.dial["outcome"] == "answered"
    assert [s["status"] for s in record.dial["statuses"]][-1] == "completed"


# -- the caller leaves; a stream that is not the person's ------------------------------------------------

async def test_the_caller_hanging_up_on_hold_cancels_the_persons_call(line):
    line.spec(timeout_s=10)
    line.twilio.scenarios.append(Scenario(ring_s=8.0))
    caller = await line.twilio.call_in(line.voice_url, caller_scenario(linger_s=2.0), to=OURS)   # hangs up on hold
    person = await line.person(caller)
    await over(caller, person, timeout_s=15.0)
    record = line.server.store.get(caller.sid)
    assert record is not None and record.end_reason == "caller hung up (stop)"
    assert (record.transfer["outcome"], record.transfer["detail"]) == \
        ("failed", "the call ended on hold: caller hung up (stop)")
    assert [(u.call_sid, u.form) for u in line.twilio.updates] == [(person.sid, {"Status": "completed"})]
    assert person.status == "canceled" and person.report is None
    assert any(is_hold(p) for _, p in caller.media_received)


async def test_a_briefing_stream_without_the_transfers_secret_is_refused(line, caplog):
    """A stream that names a call as the one it briefs for is taken only with the secret parley put
    in the person's TwiML, while that transfer waits for it: otherwise any signed upgrade could
    open one (and hear a summary)."""
    line.spec(timeout_s=10)
    url = f"ws://127.0.0.1:{line.server.port}/twilio/stream"
    forged = TwilioCaller(CallerConfig(url=url, utterances=(), auth_token=TOKEN, webhook=False, greeting_quiet_s=1.0,
                                       timeout_s=5.0),
                          stream_params={BRIEFING_PARAM: "CA" + "1" * 32, BRIEFING_TOKEN_PARAM: "guessed"})
    with caplog.at_level(logging.WARNING, logger="telephony.twilio.warm"):
        report = await forged.run()
    assert report.server_hung_up and report.media_bytes_received == 0
    [refusal] = [r.getMessage() for r in caplog.records if r.name == "telephony.twilio.warm"]
    assert f"[{forged.call_sid}] briefing stream from 127.0.0.1 refused" in refusal
    assert line.server.store.get(forged.call_sid) is None and not line.server.live and not line.agents
