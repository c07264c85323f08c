"""Twilio call control (transfer, hang up) observed by a local stand-in for api.twilio.com."""

import asyncio
import base64

import pytest
from aiohttp import web

from telephony.errors import TelephonyError
from telephony.twilio.rest import TwilioCallControl, transfer_twiml

ACCOUNT = "AC" + "0" * 32
TOKEN = "secret-token"
CALL = "CA" + "1" * 32
WORKFLOW = "WW" + "0123456789abcdef" * 2


class FakeTwilio:
    def __init__(self):
        self.requests: list[dict] = []
        self.reply: tuple[int, dict] | str = (200, {"sid": CALL, "status": "in-progress"})

    async def handle(self, request: web.Request) -> web.Response:
        self.requests.append({"method": request.method, "path": request.path,
                              "auth": request.headers.get("Authorization"),
                              "content_type": request.content_type,
                              "form": dict(await request.post())})
        if self.reply == "slow":
            await asyncio.sleep(0.5)
            return web.json_response({})
        status, body = self.reply
        return web.json_response(body, status=status)


@pytest.fixture
async def twilio():
    fake = FakeTwilio()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", fake.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    fake.base = f"http://127.0.0.1:{runner.addresses[0][1]}"
    yield fake
    await runner.cleanup()


async def test_transfer_dial_posts_twiml_with_basic_auth(twilio):
    control = TwilioCallControl(ACCOUNT, TOKEN, api_base=twilio.base)
    reply = await control.transfer(CALL, "dial", "+15550100")
    assert reply["status"] == "in-progress"
    [req] = twilio.requests
    assert req["method"] == "POST"
    assert req["path"] == f"/2010-04-01/Accounts/{ACCOUNT}/Calls/{CALL}.json"
    assert req["content_type"] == "application/x-www-form-urlencoded"
    assert req["form"] == {"Twiml": "<Response><Dial>+15550100</Dial></Response>"}
    expected = base64.b64encode(f"{ACCOUNT}:{TOKEN}".encode()).decode()
    assert req["auth"] == f"Basic {expected}"


async def test_transfer_enqueue_for_flex(twilio):
    await TwilioCallControl(ACCOUNT, TOKEN, api_base=twilio.base).transfer(
        CALL, "enqueue", WORKFLOW)
    assert twilio.requests[0]["form"] == {
        "Twiml": f'<Response><Enqueue workflowSid="{WORKFLOW}"/></Response>'}


async def test_hangup_completes_the_call(twilio):
    await TwilioCallControl(ACCOUNT, TOKEN, api_base=twilio.base).hangup(CALL)
    assert twilio.requests[0]["form"] == {"Status": "completed"}


async def test_refusal_is_a_telephony_error_with_twilios_message(twilio):
    twilio.reply = (404, {"code": 20404, "message": "The requested resource was not found"})
    control = TwilioCallControl(ACCOUNT, TOKEN, api_base=twilio.base)
    with pytest.raises(TelephonyError, match=rf"call {CALL}: transfer \(dial\) refused by "
                                             r"Twilio: HTTP 404, error 20404: The requested"):
        await control.transfer(CALL, "dial", "+15550100")


async def test_timeout_is_a_telephony_error(twilio):
    twilio.reply = "slow"
    control = TwilioCallControl(ACCOUNT, TOKEN, api_base=twilio.base, timeout_s=0.1)
    with pytest.raises(TelephonyError, match=r"hang up timed out after 0.1 s"):
        await control.hangup(CALL)


async def test_unreachable_api_is_a_telephony_error():
    control = TwilioCallControl(ACCOUNT, TOKEN, api_base="http://127.0.0.1:9", timeout_s=2)
    with pytest.raises(TelephonyError, match=r"hang up failed"):
        await control.hangup(CALL)


def test_twiml_and_bad_input():
    assert transfer_twiml("sip", "sip:desk@pbx.example.com") == (
        "<Response><Dial><Sip>sip:desk@pbx.example.com</Sip></Dial></Response>")
    for kind, target in [("dial", "<Hangup/>"), ("enqueue", "WW12"), ("sip", "tel:1"),
                         ("fax", "+1555")]:
        with pytest.raises(TelephonyError):
            transfer_twiml(kind, target)
    control = TwilioCallControl(ACCOUNT, TOKEN)
    with pytest.raises(TelephonyError, match="not a call SID"):
        control.call_url("../../Accounts")
    with pytest.raises(TelephonyError, match="auth token"):
        TwilioCallControl(ACCOUNT, "")
