"""``parley serve``'s admission cap: the calibrated number (or ``--max-calls``) is said in one log
line, and it is what every transport enforces: the call past it gets Twilio's
``<Reject reason="busy">``, a browser 503 and a SIP 503, wired as ``parley serve`` wires them."""

from __future__ import annotations

import asyncio
import logging
import os
import signal

import aiohttp
import pytest

import pipeline.capacity
from agent.echo import EchoAgentProcessor
from deploy.cli import build_parser
from deploy.serve_cli import _admission_cap, _sip_server
from pipeline.builder import PipelineConfig
from telephony.server import CallServer, ServerConfig, serve_forever
from telephony.twilio.signature import SIGNATURE_HEADER, compute_signature
from tests.telephony.sip.conftest import UdpPeer, invite

TOKEN = "test-auth-token-0123456789abcdef"
SHIPPED = PipelineConfig(vad="silero", stt="ssm", tts="ssm", turn="hold")  # parley serve's defaults


@pytest.fixture
def three_quarters_of_a_core(monkeypatch):
    """This machine as 0.75 of a core, and the engines' recorded figures (no model timed): the
    calibration then admits floor(0.75 * 0.5 * 1000 / 117.1) = 3 calls."""
    monkeypatch.setattr(pipeline.capacity, "usable_cores", lambda: 0.75)
    monkeypatch.setattr(pipeline.capacity, "engine_probes", lambda *a, **k: {})


def _admitting(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("admitting at most")]


def test_the_default_cap_is_the_calibrated_one_said_in_one_line(three_quarters_of_a_core, caplog):
    caplog.set_level(logging.INFO)
    assert _admission_cap(build_parser().parse_args(["serve"]), SHIPPED) == 3
    [line] = _admitting(caplog)
    assert "\n" not in line and line.startswith("admitting at most 3 calls: 0.75 cores x 50% busy / 117 ms")


def test_max_calls_overrides_without_calibrating(monkeypatch, caplog):
    caplog.set_level(logging.INFO)

    def no_calibration(*_a, **_k):
        raise AssertionError("--max-calls given: nothing to calibrate")

    monkeypatch.setattr(pipeline.capacity, "engine_probes", no_calibration)
    assert _admission_cap(build_parser().parse_args(["serve", "--max-calls", "5"]), SHIPPED) == 5
    assert _admitting(caplog) == ["admitting at most 5 calls: --max-calls"]


async def test_the_calibrated_cap_is_what_every_transport_enforces(three_quarters_of_a_core):
    args = build_parser().parse_args(["serve", "--port", "0", "--sip-port", "0", "--sip-rtp-ports", "31000-31099"])
    config = ServerConfig(host="127.0.0.1", port=0, auth_token=TOKEN,
                          max_calls=_admission_cap(args, SHIPPED))
    server = CallServer(config, agent_factory=lambda _info: EchoAgentProcessor())
    sip = _sip_server(args, lambda _info: EchoAgentProcessor(), server)
    ports: asyncio.Future = asyncio.get_running_loop().create_future()
    serving = asyncio.create_task(serve_forever(server, sip=sip, listening=ports.set_result))
    peer = await UdpPeer.open()
    try:
        await asyncio.wait_for(asyncio.shield(ports), 10)
        assert config.max_calls == 3 and sip.config.max_calls == 3
        url = f"http://127.0.0.1:{server.port}/twilio/voice"
        async with aiohttp.ClientSession() as s:

            async def ring(sid: str) -> str:
                form = {"CallSid": sid, "From": "+15550100", "To": "+15550199"}
                async with s.post(url, data=form, headers={SIGNATURE_HEADER: compute_signature(TOKEN, url, form)}) as r:
                    assert r.status == 200
                    return await r.text()

            for i in range(3):  # answered, their streams not come yet: each holds a place
                assert "<Stream" in await ring(f"CA{i:032d}")
            assert '<Reject reason="busy"/>' in await ring("CA" + "f" * 32)
            offer = {"type": "offer", "sdp": "v=0\r\nm=audio 9 UDP/TLS/RTP/SAVPF 111\r\n"}
            async with s.post(f"http://127.0.0.1:{server.port}/api/offer", json=offer) as r:
                assert r.status == 503
        peer.send(invite(peer, "past-the-cap"), sip)
        final = (await peer.responses())[-1]
        assert final.status == 503 and final.header("retry-after") == "30"
        assert server.metrics.refused["capacity"] == 3
    finally:
        peer.close()
        os.kill(os.getpid(), signal.SIGINT)  # serve_forever's own way out
        await asyncio.wait_for(serving, 20)


async def test_a_sigterm_as_soon_as_the_ports_are_known_drains_and_stops():
    """Regression: the ports (``parley serve --ready-file``) were given out before SIGTERM was
    handled, so a SIGTERM right after them killed the server with no drain, its file left behind."""
    server = CallServer(ServerConfig(host="127.0.0.1", port=0, auth_token=TOKEN),
                        agent_factory=lambda _info: EchoAgentProcessor())
    unhandled: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, _frame: unhandled.append(signum))
    try:
        serving = asyncio.create_task(serve_forever(server, listening=lambda _ports: os.kill(os.getpid(),
                                                                                             signal.SIGTERM)))
        done, _ = await asyncio.wait({serving}, timeout=10)
        if not done:
            serving.cancel()
            await asyncio.gather(serving, return_exceptions=True)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert not unhandled and done and server.draining
