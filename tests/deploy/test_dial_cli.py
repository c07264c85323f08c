"""``parley dial`` as a user runs it: a real process dials sipp callees on loopback, prints the
outcome as one JSON line and says with its exit status how the call went; bad input is one line."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from deploy.cli import main
from tests.deploy.conftest import calls_show
from tests.telephony.sip.conftest import KAMAILIO_MODULES, RtpSink, callee, free_udp_port, kamailio

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(shutil.which("sipp") is None, reason="sipp not installed (apt-get install sip-tester)")


async def parley_dial(*argv: str, db: Path, timeout_s: float = 60.0,
                      env: dict[str, str] | None = None) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "deploy.cli", "dial", *argv, "--db", str(db), cwd=ROOT,
        env=os.environ | (env or {}), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    async with asyncio.timeout(timeout_s):
        out, err = await proc.communicate()
    return proc.returncode or 0, out.decode(), err.decode()


ECHO = ("--agent", "echo", "--stt", "sphinx", "--tts", "espeak", "--rtp-ports", "30000-39999")


async def test_an_answered_call_prints_its_outcome_and_exits_0(tmp_path):
    transport, sink = await asyncio.get_running_loop().create_datagram_endpoint(RtpSink, local_addr=("127.0.0.1", 0))
    try:
        async with callee("callee_answers.xml", tmp_path, rtp_port=transport.get_extra_info("sockname")[1]) as peer:
            code, out, err = await parley_dial(peer.uri, *ECHO, "--param", "customer=C-42", db=tmp_path / "calls.db")
            sipp = await peer.result()
    finally:
        transport.close()
    assert code == 0, err[-2000:]
    assert sipp.returncode == 0, sipp.stderr[-2000:]
    [line] = out.splitlines()
    result = json.loads(line)
    assert result["outcome"] == "answered" and result["status"] == 200
    assert result["end_reason"] == "callee hung up (BYE)" and result["rtp_out"] > 40
    assert len(sink.packets) == result["rtp_out"] and sink.rms() > 300  # the echo agent's greeting
    assert err == ""
    record = calls_show(result["call_id"], tmp_path / "calls.db")
    assert record["params"]["customer"] == "C-42" and record["params"]["direction"] == "outbound"


async def test_busy_exits_1_with_one_line(tmp_path):
    async with callee("callee_busy.xml", tmp_path) as peer:
        code, out, err = await parley_dial(peer.uri, *ECHO, db=tmp_path / "calls.db")
        assert (await peer.result()).returncode == 0
    assert code == 1
    assert json.loads(out)["outcome"] == "busy"
    assert err == "parley dial: busy: 486 Busy Here\n"


@pytest.mark.parametrize("target, message", [
    ("sip:alice@bad host", "parley dial: target 'sip:alice@bad host' is not a SIP URI"),
    ("sip:alice@no-such-host.invalid", "parley dial: host 'no-such-host.invalid' does not resolve"),
])
def test_bad_targets_exit_2_with_one_line(target, message, tmp_path, capsys):
    assert main(["dial", target, *ECHO, "--db", str(tmp_path / "calls.db")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(message) and err.count("\n") == 1, err


VOICEMAIL_AGENT = """\
name: Acme orders
greeting: Hello, this is Acme about your order.
voicemail:
  message: Hi {name}, this is Acme. Your order is ready. Please call us back.
  on_unknown: hang_up
"""


async def test_a_spec_with_voicemail_leaves_the_message_filled_from_the_params(tmp_path, flite_speech):
    """The deploy layer hands the spec's plan to the dialler: a machine gets the message, with
    --param name=Dana in it, after its beep, and the JSON line says so."""
    import numpy as np

    from tests.telephony.sip.pcap import RATE_HZ, write_rtp_pcap

    spec = tmp_path / "acme.yaml"
    spec.write_text(VOICEMAIL_AGENT)
    greeting = flite_speech("Hi, you have reached Dana. Please leave a message after the tone.", RATE_HZ)
    t = np.arange(RATE_HZ // 2) / RATE_HZ
    beep = (6000 * np.sin(2 * np.pi * 1000 * t)).astype(np.int16)
    (tmp_path / "pcap").mkdir()
    write_rtp_pcap(tmp_path / "pcap" / "answer.pcap",
                   np.concatenate([np.zeros(2400, np.int16), greeting, np.zeros(2400, np.int16), beep,
                                   np.zeros(RATE_HZ * 9, np.int16)]))
    transport, sink = await asyncio.get_running_loop().create_datagram_endpoint(RtpSink, local_addr=("127.0.0.1", 0))
    try:
        async with callee("callee_plays_until_bye.xml", tmp_path,
                          rtp_port=transport.get_extra_info("sockname")[1]) as peer:
            code, out, err = await parley_dial(peer.uri, "--agent", str(spec), "--stt", "sphinx", "--tts", "espeak",
                                               "--rtp-ports", "30000-39999", "--param", "name=Dana",
                                               db=tmp_path / "calls.db")
            sipp = await peer.result()
    finally:
        transport.close()
    assert code == 0, err[-2000:]
    assert sipp.returncode == 0, sipp.stderr[-2000:]
    result = json.loads(out)
    assert (result["answered_by"], result["voicemail_left"]) == ("machine", True)
    assert result["end_reason"] == "voicemail message left" and result["rtp_out"] == len(sink.packets) > 100
    record = calls_show(result["call_id"], tmp_path / "calls.db")
    assert record["answered_by"] == "machine" and record["voicemail_left"] is True
    assert record["greeting"].lower().startswith("hi dana this is acme")


AUTH_PROXY_CFG = """#!KAMAILIO
debug=2
log_stderror=yes
children=1
auto_aliases=no
listen=udp:127.0.0.1:{port}
mpath="{modules}"
loadmodule "pv.so"
loadmodule "sl.so"
loadmodule "rr.so"
loadmodule "siputils.so"
loadmodule "textops.so"
loadmodule "xlog.so"
loadmodule "auth.so"

request_route {{
    if (has_totag()) {{
        if (loose_route()) {{
            forward();
            exit;
        }}
        if ($sp != {target}) {{  # the callee (sipp) sends its BYE here with no Route: to its Request-URI
            $du = "sip:127.0.0.1:{target}";
        }}
        forward();
        exit;
    }}
    if (is_method("INVITE")) {{
        if (!pv_proxy_authenticate("proxy.test", "trunk-pw", "0") || $au != "parley") {{
            xlog("L_NOTICE", "CHALLENGE $rm $ru user=$au\\n");
            proxy_challenge("proxy.test", "1");
            exit;
        }}
        xlog("L_NOTICE", "AUTHENTICATED $au\\n");
        consume_credentials();
        record_route();
    }}
    $du = "sip:127.0.0.1:{target}";
    forward();
}}
"""


@contextlib.asynccontextmanager
async def auth_proxy(target_port: int, workdir: Path):
    """A real Kamailio in front of ``target_port`` that asks INVITEs for proxy digest credentials
    (407, qop=auth; user parley, password trunk-pw) and forwards those that carry them."""
    port = free_udp_port()
    config = AUTH_PROXY_CFG.format(port=port, target=target_port, modules=f"{KAMAILIO_MODULES}/")
    async with kamailio(config, workdir, needs=("auth.so",)) as log_path:
        yield port, log_path


async def test_an_outbound_proxy_asking_407_gets_proxy_authorization_and_the_call_connects(tmp_path):
    """The trunk (Kamailio's auth module) challenges with 407 Proxy-Authenticate; parley answers
    with Proxy-Authorization (its password from $PARLEY_TRUNK_PASSWORD) and the callee behind the
    trunk answers."""
    async with callee("callee_answers.xml", tmp_path) as peer, auth_proxy(peer.port, tmp_path / "proxy") as (port, log):
        code, out, err = await parley_dial("sip:+15550100@carrier.invalid", "--trunk", f"127.0.0.1:{port}",
                                           "--auth-user", "parley", *ECHO, db=tmp_path / "calls.db",
                                           env={"PARLEY_TRUNK_PASSWORD": "trunk-pw"})
        sipp = await peer.result()
        proxy_log = log.read_text(errors="replace")
    assert code == 0, err[-2000:]
    assert sipp.returncode == 0, sipp.stderr[-2000:] + proxy_log[-3000:]
    result = json.loads(out)
    assert result["outcome"] == "answered" and result["end_reason"] == "callee hung up (BYE)"
    assert result["history"][:4] == ["inviting", "challenged", "inviting", "ringing"]
    assert proxy_log.count("CHALLENGE INVITE") == 1 and "AUTHENTICATED parley" in proxy_log


@pytest.mark.parametrize("auth, message", [
    (("--auth-user", "parley"), "parley dial: failed: 407 Proxy Authentication Required: the trunk refused "
                                "the credentials of user 'parley'"),
    ((), "parley dial: failed: 407 Proxy Authentication Required: the trunk asks for digest credentials: "
         "give --auth-user and $PARLEY_TRUNK_PASSWORD"),
])
async def test_refused_or_missing_proxy_credentials_are_one_line_and_exit_2(auth, message, tmp_path):
    async with callee("callee_answers.xml", tmp_path) as peer, auth_proxy(peer.port, tmp_path / "proxy") as (port, log):
        code, out, err = await parley_dial("sip:+15550100@carrier.invalid", "--trunk", f"127.0.0.1:{port}",
                                           *auth, *ECHO, db=tmp_path / "calls.db",
                                           env={"PARLEY_TRUNK_PASSWORD": "wrong"})
        proxy_log = log.read_text(errors="replace")
    assert code == 2
    result = json.loads(out)
    assert (result["outcome"], result["status"]) == ("failed", 407)
    assert result["history"] == (["inviting", "challenged", "inviting", "ended"] if auth else ["inviting", "ended"])
    assert err == message + "\n"
    assert "AUTHENTICATED" not in proxy_log and proxy_log.count("CHALLENGE INVITE") == (2 if auth else 1)
