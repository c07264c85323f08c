"""A real call server on 127.0.0.1:0 for each test that asks for one."""

from __future__ import annotations

import pytest

from agent.echo import EchoAgentProcessor
from telephony.server import CallServer, ServerConfig

TOKEN = "test-auth-token-0123456789abcdef"


@pytest.fixture
async def server():
    srv = CallServer(
        ServerConfig(host="127.0.0.1", port=0, auth_token=TOKEN),
        agent_factory=lambda _info: EchoAgentProcessor(),
    )
    await srv.start()
    try:
        yield srv
    finally:
        await srv.stop()
