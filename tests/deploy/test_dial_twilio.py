"""``parley dial +1...`` as a user runs it: a real process places the call through the Twilio REST
stand-in (harness/twilio_rest.py), which plays it back against the process's own call server."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
from pathlib import Path

import pytest

from deploy.cli import main
from harness.twilio_rest import Scenario, TwilioRestStandIn
from tests.deploy.conftest import calls_show

ROOT = Path(__file__).resolve().parents[2]
ACCOUNT = "AC" + "1" * 32
TOKEN = "dial-test-auth-token-0123456789"
ECHO = ("--agent", "echo", "--stt", "sphinx", "--tts", "espeak", "--from", "+15550100")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def parley_dial(twilio: TwilioRestStandIn, *argv: str, db: Path) -> tuple[int, str, str]:
    port = free_port()
    env = os.environ | {"TWILIO_ACCOUNT_SID": ACCOUNT, "TWILIO_AUTH_TOKEN": TOKEN, "TWILIO_API_BASE": twilio.base_url}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "deploy.cli", "dial", *argv, "--public-url", f"http://127.0.0.1:{port}",
        "--port", str(port), "--db", str(db), cwd=ROOT, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    async with asyncio.timeout(90):
        out, err = await proc.communicate()
    return proc.returncode or 0, out.decode(), err.decode()


@pytest.fixture
async def twilio():
    async with TwilioRestStandIn(ACCOUNT, TOKEN) as stand_in:
        yield stand_in


async def test_an_answered_call_prints_its_outcome_and_exits_0(twilio, tmp_path):
    code, out, err = await parley_dial(twilio, "+15551234567", *ECHO, "--param", "customer=C-42",
                                       db=tmp_path / "calls.db")
    assert code == 0, err[-2000:]
    [line] = out.splitlines()
    result = json.loads(line)
    assert result["outcome"] == "answered" and result["call_id"].startswith("CA")
    assert result["end_reason"] == "caller hung up (stop)"
    [call] = twilio.calls
    assert call.report is not None and call.report.media_bytes_received > 8000  # the echo agent's greeting
    assert call.stream_params["customer"] == "C-42"


async def test_busy_exits_1_with_one_line(twilio, tmp_path):
    twilio.scenarios.append(Scenario(answer="busy"))
    code, out, err = await parley_dial(twilio, "+15551234567", *ECHO, db=tmp_path / "calls.db")
    assert code == 1, err[-2000:]
    assert json.loads(out)["outcome"] == "busy"
    assert err.strip().splitlines()[-1] == "parley dial: busy: 486 busy"


@pytest.mark.parametrize(("argv", "env", "message"), [
    (("+15551234567", "--from", "+15550100"), {}, "set TWILIO_ACCOUNT_SID and TWILIO_AUTH_TOKEN"),
    (("+15551234567", "--from", "+15550100"), {"TWILIO_ACCOUNT_SID": ACCOUNT, "TWILIO_AUTH_TOKEN": TOKEN},
     "give --public-url"),
    (("+15551234567", "--public-url", "https://parley.example.com"),
     {"TWILIO_ACCOUNT_SID": ACCOUNT, "TWILIO_AUTH_TOKEN": TOKEN}, "from '' is not a phone number"),
])
def test_missing_settings_exit_2_with_one_line(argv, env, message, monkeypatch, capsys):
    for name in ("TWILIO_ACCOUNT_SID", "TWILIO_AUTH_TOKEN", "PARLEY_PUBLIC_URL"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert main(["dial", *argv, "--agent", "echo"]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("parley dial: ") and message in line


VOICEMAIL_AGENT = """\
name: Acme orders
greeting: Hello, this is Acme about your order.
voicemail:
  message: Hi {name}, this is Acme. Your order is ready. Please call us back.
"""


async def test_a_machine_gets_the_specs_message_once_twilio_says_so(twilio, tmp_path):
    """The deploy layer hands the spec's voicemail: plan to the call server: Twilio's
    AnsweredBy=machine_end_beep brings the message, --param name=Dana in it, and the JSON line
    and the record say so."""
    spec = tmp_path / "acme.yaml"
    spec.write_text(VOICEMAIL_AGENT)
    twilio.scenarios.append(Scenario(answered_by="machine_end_beep", amd_delay_s=1.0, greeting_quiet_s=8.0,
                                     linger_s=10.0))
    code, out, err = await parley_dial(twilio, "+15551234567", "--agent", str(spec), "--stt", "sphinx",
                                       "--tts", "espeak", "--from", "+15550100", "--param", "name=Dana",
                                       db=tmp_path / "calls.db")
    assert code == 0, err[-2000:]
    result = json.loads(out)
    assert (result["answered_by"], result["voicemail_left"]) == ("machine_end_beep", True)
    assert result["end_reason"] == "voicemail message left"
    [call] = twilio.calls
    assert call.report is not None and call.report.server_hung_up and call.report.media_bytes_received > 8000
    record = calls_show(result["call_id"], tmp_path / "calls.db")
    assert record["answered_by"] == "machine_end_beep" and record["voicemail_left"] is True
    assert record["greeting"].lower().replace(",", "").startswith("hi dana this is acme")
