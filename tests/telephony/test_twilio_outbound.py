"""Calls parley places through Twilio, over loopback: a real call server, and the Twilio REST
stand-in (harness/twilio_rest.py) that takes the create-call request, sends signed status and
answering-machine callbacks, and opens the media stream as Twilio would."""

from __future__ import annotations

import logging
import time

import aiohttp
import numpy as np
import pytest

from agent.echo import EchoAgentProcessor
from harness.twilio_rest import Fault, Scenario, TwilioRestStandIn
from telephony.errors import PlacementError
from telephony.server import CallServer, ServerConfig
from telephony.sip.dialer import DialOutcome
from telephony.twilio.outbound import TwilioDialer, TwilioDialRequest
from telephony.twilio.signature import SIGNATURE_HEADER, compute_signature

from .conftest import TOKEN

ACCOUNT = "AC" + "0" * 32
API_TOKEN = "api-token-0123456789"
TO, FROM = "+15551234567", "+15550100"


@pytest.fixture
async def twilio():
    async with TwilioRestStandIn(ACCOUNT, TOKEN) as stand_in:
        yield stand_in


@pytest.fixture
async def server(twilio):
    srv = CallServer(ServerConfig(host="127.0.0.1", port=0, auth_token=TOKEN, api_token=API_TOKEN),
                     agent_factory=lambda _info: EchoAgentProcessor())
    await srv.start()
    # the public URL is the bound port's: known once listening
    srv.outbound.dialer = TwilioDialer(ACCOUNT, TOKEN, f"http://127.0.0.1:{srv.port}", api_base=twilio.base_url,
                                       backoff_s=0.05)
    try:
        yield srv
    finally:
        await srv.stop()


async def post_calls(server: CallServer, body: object, token: str | None = API_TOKEN) -> tuple[int, dict]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with aiohttp.ClientSession() as http:
        kwargs = {"data": body} if isinstance(body, (str, bytes)) else {"json": body}
        async with http.post(f"http://127.0.0.1:{server.port}/calls", headers=headers, **kwargs) as resp:
            return resp.status, await resp.json()


async def test_an_answered_call_carries_the_greeting_to_the_callee(server, twilio):
    status, reply = await post_calls(server, {"to": TO, "from": FROM, "params": {"customer": "C-42"}})
    assert status == 202, reply
    assert reply["via"] == "twilio" and reply["call_id"].startswith("CA")

    call = await twilio.next_call()
    assert call.error is None and call.sid == reply["call_id"]
    # what parley asked Twilio for
    assert call.form["To"] == TO and call.form["From"] == FROM
    assert call.form["Url"] == f"http://127.0.0.1:{server.port}/twilio/voice?param.customer=C-42"
    assert call.form["StatusCallbackEvent"] == "initiated ringing answered completed"
    assert call.form["MachineDetection"] == "DetectMessageEnd" and call.form["AsyncAmd"] == "true"
    # the answered call got the inbound stream TwiML, with the call's parameters
    assert call.stream_params["customer"] == "C-42" and call.stream_params["Direction"] == "outbound-api"
    assert "parley_answered" in call.stream_params
    # the agent's greeting reached the stand-in's media socket as speech
    assert call.report is not None and call.report.media_bytes_received > 8000
    assert np.abs(call.report.agent_audio.astype(np.int32)).max() > 1000
    # every signed callback was taken
    assert [(kind, what) for kind, what, _ in call.callbacks] == [
        ("status", "initiated"), ("status", "ringing"), ("voice", "in-progress"), ("status", "in-progress"),
        ("amd", "human"), ("status", "completed")]
    assert all(code in (200, 204) for _, _, code in call.callbacks), call.callbacks

    record = server.store.get(call.sid)
    assert record is not None and record.ended and record.greeting.startswith("Hello")
    assert record.params["customer"] == "C-42" and "parley_answered" not in record.params
    dial = record.to_dict()["dial"]
    assert [s["status"] for s in dial["statuses"]] == ["initiated", "ringing", "in-progress", "completed"]
    assert dial["outcome"] == "answered" and dial["answered_by"] == "human" and dial["to"] == TO
    [placed] = server.outbound.placed.values()
    result = server.outbound.result(placed)
    assert result.outcome is DialOutcome.ANSWERED and result.talk_s >= 1
    assert result.history[-1] == "answered-by:human"


@pytest.mark.parametrize(("answer", "outcome"), [("busy", DialOutcome.BUSY), ("no-answer", DialOutcome.NO_ANSWER)])
async def test_calls_not_answered_are_recorded_with_their_outcome(server, twilio, answer, outcome):
    twilio.scenarios.append(Scenario(answer=answer))
    placed = await server.outbound.place(TwilioDialRequest(TO, FROM))
    result = await server.outbound.wait(placed, timeout_s=10)
    assert result.outcome is outcome and result.call_id == placed.call_sid
    assert result.history == ("initiated", "ringing", answer)
    record = server.store.get(placed.call_sid)
    assert record is not None and record.ended and record.end_reason == f"{outcome.value} (Twilio: {answer})"
    assert record.dial["outcome"] == outcome.value and not record.turns
    call = await twilio.next_call()
    assert call.report is None and [c[2] for c in call.callbacks] == [204, 204, 204]


async def test_429_waits_its_retry_after_then_places(server, twilio, caplog):
    twilio.faults.append(Fault(429, retry_after="1"))
    twilio.scenarios.append(Scenario(answer="busy"))
    t0 = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="telephony.twilio.outbound"):
        placed = await server.outbound.place(TwilioDialRequest(TO, FROM))
    assert time.monotonic() - t0 >= 1.0
    assert twilio.requests == [429, 201] and placed.call_sid.startswith("CA")
    [line] = [r.getMessage() for r in caplog.records]
    assert "HTTP 429, error 20429" in line and "try 2 of 4 in 1.0 s" in line and TO not in line
    assert (await server.outbound.wait(placed, timeout_s=10)).outcome is DialOutcome.BUSY


async def test_500s_are_retried_then_the_call_fails(server, twilio, caplog):
    twilio.faults.extend([Fault(500)] * 4)
    with caplog.at_level(logging.WARNING, logger="telephony.twilio.outbound"), \
            pytest.raises(PlacementError, match="HTTP 500, error 20500.*4 times; gave up") as raised:
        await server.outbound.place(TwilioDialRequest(TO, FROM))
    assert raised.value.status == 500 and twilio.requests == [500] * 4
    assert len(caplog.records) == 3  # one line a retry
    [placed] = server.outbound.placed.values()
    assert placed.outcome is DialOutcome.FAILED and not placed.call_sid


async def test_wrong_credentials_fail_at_once(server, twilio):
    server.outbound.dialer = TwilioDialer(ACCOUNT, "not-the-token", f"http://127.0.0.1:{server.port}",
                                          api_base=twilio.base_url)
    with pytest.raises(PlacementError, match="refused the credentials .*HTTP 401.*TWILIO_AUTH_TOKEN"):
        await server.outbound.place(TwilioDialRequest(TO, FROM))
    assert twilio.requests == [401]
    status, reply = await post_calls(server, {"to": TO, "from": FROM})
    assert status == 502 and "HTTP 401" in reply["error"]


async def test_a_status_callback_with_a_bad_signature_is_refused(server, twilio, caplog):
    twilio.scenarios.append(Scenario(answer="busy"))
    placed = await server.outbound.place(TwilioDialRequest(TO, FROM))
    await server.outbound.wait(placed, timeout_s=10)
    url = f"http://127.0.0.1:{server.port}/twilio/dial-status?dial={placed.dial_id}"
    form = {"CallSid": placed.call_sid, "CallStatus": "completed", "CallDuration": "99"}
    with caplog.at_level(logging.WARNING, logger="telephony.server"):
        async with aiohttp.ClientSession() as http:
            bad = compute_signature("another-token", url, form)
            async with http.post(url, data=form, headers={SIGNATURE_HEADER: bad}) as resp:
                assert resp.status == 403
    [line] = [r.getMessage() for r in caplog.records]
    assert "refused POST /twilio/dial-status" in line and SIGNATURE_HEADER in line
    record = server.store.get(placed.call_sid)
    assert record is not None and record.dial["outcome"] == "busy" and record.dial["duration_s"] == 0
    assert [s["status"] for s in record.dial["statuses"]] == ["initiated", "ringing", "busy"]  # not the forgery


async def test_post_calls_wants_the_token_and_a_good_body(server, twilio):
    assert (await post_calls(server, {"to": TO, "from": FROM}, token=None))[0] == 401
    assert (await post_calls(server, {"to": TO, "from": FROM}, token="wrong"))[0] == 401
    bad = [
        ("{not json", "not JSON"),
        ("[1, 2]", "not a JSON object"),
        ({"from": FROM}, "'to' is missing"),
        ({"to": "5551234", "from": FROM}, "neither a phone number in E.164 form"),
        ({"to": TO}, "'from' is missing"),
        ({"to": TO, "from": "bob"}, "from 'bob' is not a phone number"),
        ({"to": TO, "from": FROM, "params": {"a": 1}}, "'params' is not an object of strings"),
        ({"to": TO, "from": FROM, "colour": "red"}, "unknown field 'colour'"),
        ({"to": TO, "from": FROM, "params": {"x": "y" * 17_000}}, "over 16384 bytes"),
    ]
    for body, message in bad:
        status, reply = await post_calls(server, body)
        assert status == 400 and message in reply["error"], (body, reply)
    assert twilio.requests == []  # none of them reached Twilio
    status, reply = await post_calls(server, {"to": "sip:alice@127.0.0.1:5999", "from": FROM})
    assert status == 501 and "--sip-port" in reply["error"]


async def test_post_calls_is_off_without_a_token(twilio):
    srv = CallServer(ServerConfig(host="127.0.0.1", port=0, auth_token=TOKEN),
                     agent_factory=lambda _info: EchoAgentProcessor())
    await srv.start()
    try:
        status, reply = await post_calls(srv, {"to": TO, "from": FROM})
    finally:
        await srv.stop()
    assert status == 404 and "--api-token" in reply["error"]
