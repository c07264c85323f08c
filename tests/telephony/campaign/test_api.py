"""``POST /campaigns`` and its routes on a real call server with a SQLite store, the Twilio REST
stand-in playing the calls: the token, a refused file's problems, a run to its end, stop and resume."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import aiohttp
import pytest

from agent.echo import EchoAgentProcessor
from harness.twilio_rest import Scenario, TwilioRestStandIn
from pipeline.records_sqlite import SQLiteCallStore
from telephony.server import CallServer, ServerConfig
from telephony.twilio.outbound import TwilioDialer

from ..conftest import TOKEN

ACCOUNT = "AC" + "2" * 32
API_TOKEN = "api-token-campaigns-0123"
QUICK = Scenario(stream=False, talk_s=0.2, amd_delay_s=0.05, ring_s=0.02)


def contacts(n: int) -> str:
    return "to,timezone,account\n" + "".join(f"+1555888{i:04d},Europe/Paris,A-{i}\n" for i in range(n))


@pytest.fixture
async def twilio():
    async with TwilioRestStandIn(ACCOUNT, TOKEN) as stand_in:
        stand_in.scenario_for = lambda form: replace(QUICK, answer="busy") if form["To"].endswith("3") else QUICK
        yield stand_in


@pytest.fixture
async def server(twilio, tmp_path):
    store = SQLiteCallStore(tmp_path / "calls.db")
    srv = CallServer(ServerConfig(host="127.0.0.1", port=0, auth_token=TOKEN, api_token=API_TOKEN, max_calls=3),
                     agent_factory=lambda _info: EchoAgentProcessor(), store=store)
    await srv.start()
    srv.outbound.dialer = TwilioDialer(ACCOUNT, TOKEN, f"http://127.0.0.1:{srv.port}", api_base=twilio.base_url,
                                       backoff_s=0.05)
    try:
        yield srv
    finally:
        await srv.stop()
        store.close()


async def call(server: CallServer, method: str, path: str, body: object = None, token: str | None = API_TOKEN):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with aiohttp.ClientSession() as http:
        async with http.request(method, f"http://127.0.0.1:{server.port}{path}", json=body, headers=headers) as resp:
            text = await resp.text()
            return resp.status, (await resp.json() if resp.content_type == "application/json" else text)


async def wait_state(server: CallServer, name: str, state: str) -> dict:
    async with asyncio.timeout(20):
        while True:
            status, reply = await call(server, "GET", f"/campaigns/{name}")
            assert status == 200, reply
            if reply["state"] == state and not reply["running_here"]:
                return reply
            await asyncio.sleep(0.1)


async def test_a_campaign_runs_to_its_end_over_http_and_its_results_come_back(server, twilio):
    body = {"name": "spring", "contacts": contacts(8), "from": "+15550100", "dnc": ["+15558880005"],
            "window": "00:00-24:00", "max_concurrent": 2, "calls_per_minute": 600, "retry_on": ["busy"],
            "max_attempts": 2, "backoff_s": 0.1}
    assert (await call(server, "POST", "/campaigns", body, token=None))[0] == 401
    status, reply = await call(server, "POST", "/campaigns", body)
    assert status == 202 and reply == {"name": "spring", "state": "running", "contacts": 8, "created": True}
    done = await wait_state(server, "spring", "done")
    assert done["outcomes"] == {"answered": 6, "busy": 1, "dnc": 1}
    assert twilio.max_in_flight <= 2
    dialled = [c.form["To"] for c in twilio.calls]
    assert "+15558880005" not in dialled and dialled.count("+15558880003") == 2
    assert len(dialled) == 8                                  # 6 answered, the busy one twice
    status, rows = await call(server, "GET", "/campaigns/spring/results")
    assert status == 200 and [r["outcome"] for r in rows][:4] == ["answered", "answered", "answered", "busy"]
    assert rows[0]["params"] == {"account": "A-0"} and rows[0]["answered_by"] == "human"
    status, text = await call(server, "GET", "/campaigns/spring/results?format=csv")
    assert status == 200 and text.splitlines()[0].startswith("line,to,timezone,state,outcome,attempts")
    assert len(text.splitlines()) == 9


async def test_a_bad_file_is_refused_with_every_problem(server, twilio):
    body = {"name": "bad", "contacts": "to,timezone\n+1555,UTC\n+15551230001,Nowhere/Zone\n", "from": "+15550100"}
    status, reply = await call(server, "POST", "/campaigns", body)
    assert status == 400 and reply["problems"] == [
        "contacts:2: '+1555' is neither a phone number in E.164 form (+15551234567) nor a sip: URI",
        "contacts:3: unknown time zone 'Nowhere/Zone' (an IANA name, e.g. America/New_York)"]
    assert twilio.calls == []
    assert (await call(server, "GET", "/campaigns/bad"))[0] == 404


async def test_stop_holds_new_dials_and_resume_finishes_it(server, twilio):
    body = {"name": "slow", "contacts": contacts(6), "from": "+15550100", "window": "00:00-24:00",
            "max_concurrent": 1, "calls_per_minute": 600, "retry_on": []}
    assert (await call(server, "POST", "/campaigns", body))[0] == 202
    async with asyncio.timeout(10):
        while not twilio.calls:
            await asyncio.sleep(0.02)
    assert (await call(server, "POST", "/campaigns/slow/stop"))[0] == 202
    stopped = await wait_state(server, "slow", "stopped")
    assert 1 <= len(twilio.calls) < 6 and stopped["outcomes"].get("pending", 0) == 6 - len(twilio.calls)
    assert (await call(server, "POST", "/campaigns/slow/resume"))[0] == 202
    done = await wait_state(server, "slow", "done")
    assert done["outcomes"] == {"answered": 5, "busy": 1} and len(twilio.calls) == 6
