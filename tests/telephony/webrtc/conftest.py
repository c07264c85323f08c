"""A real call server on 127.0.0.1:0 with the browser routes, ICE pinned to loopback."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from pathlib import Path

import numpy as np
import pytest

from agent.echo import EchoAgentProcessor
from harness.flite import synthesize_flite
from pipeline.audio.wav import write_wav
from pipeline.builder import PipelineConfig
from telephony.server import CallServer, ServerConfig
from telephony.webrtc import WebRTCConfig, ice, register_webrtc_routes

TOKEN = "test-auth-token-0123456789abcdef"
SAID = "hello how are you"


@pytest.fixture(autouse=True)
def loopback_ice():
    """Every candidate offered in these tests is 127.0.0.1: nothing leaves the machine."""
    with ice.host_addresses(ice.LOOPBACK):
        yield


@contextlib.asynccontextmanager
async def started_webrtc_server(agent_factory, pipeline: PipelineConfig | None = None):
    """A started CallServer with the WebRTC routes (call errors re-raised), stopped afterwards."""
    srv = CallServer(ServerConfig(host="127.0.0.1", port=0, auth_token=TOKEN, pipeline=pipeline or PipelineConfig()),
                     agent_factory=agent_factory)
    if not any(getattr(r.resource, "canonical", None) == "/api/offer" for r in srv.app.router.routes()):
        srv.webrtc = register_webrtc_routes(
            srv.app, agent_factory=srv.agent_factory, pipeline_config=srv.config.pipeline,
            store=srv.store, live=srv.live, config=WebRTCConfig(reraise_call_errors=True),
        )
    await srv.start()
    try:
        yield srv
    finally:
        await srv.stop()


@pytest.fixture
async def webrtc_server():
    async with started_webrtc_server(lambda _info: EchoAgentProcessor()) as srv:
        yield srv


@pytest.fixture(scope="session")
def speech() -> tuple[np.ndarray, int]:
    """flite's slt saying SAID (16 kHz int16), no padding."""
    if shutil.which("flite") is None:
        pytest.skip("flite is not installed (scripts/install-system-deps installs it)")
    return asyncio.run(synthesize_flite(SAID))


@pytest.fixture(scope="session")
def microphone_wav(speech, tmp_path_factory) -> Path:
    """The fake microphone for Chromium: 4.5 s of silence (the greeting plays), speech, 4 s of silence."""
    pcm, rate_hz = speech
    silence = lambda s: np.zeros(int(s * rate_hz), np.int16)  # noqa: E731
    path = tmp_path_factory.mktemp("mic") / "caller.wav"
    write_wav(path, np.concatenate([silence(4.5), pcm, silence(4.0)]), rate_hz)
    return path


async def assert_caller_hung_up(server: CallServer, call_id: str) -> None:
    """The call's record: a WebRTC call that the caller ended, with its first turn heard."""
    record = server.store.get(call_id)
    assert record is not None and record.transport == "webrtc"
    for _ in range(50):
        if record.ended:
            break
        await asyncio.sleep(0.1)
    assert record.ended and record.end_reason == "caller hung up", record.end_reason
    assert record.turns and record.turns[0].user_text
