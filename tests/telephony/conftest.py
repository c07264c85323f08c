"""A real call server on 127.0.0.1:0 for each test that asks for one, and an echo agent that
keeps the conversations it was handed (barge-in tests check what stayed in them)."""

from __future__ import annotations

import aiohttp
import pytest
from pipecat.frames.frames import LLMContextFrame

from agent.echo import EchoAgentConfig, EchoAgentProcessor
from telephony.server import CallServer, ServerConfig
from telephony.twilio.signature import SIGNATURE_HEADER, compute_signature

TOKEN = "test-auth-token-0123456789abcdef"


class ContextKeepingAgent(EchoAgentProcessor):
    """The echo agent, appending a copy of each conversation it is handed (a list of message
    dicts) to ``contexts``."""

    def __init__(self, contexts: list, config: EchoAgentConfig | None = None):
        super().__init__(config)
        self._contexts = contexts

    async def process_frame(self, frame, direction):
        if isinstance(frame, LLMContextFrame):
            self._contexts.append([dict(m) for m in frame.context.get_messages()])
        await super().process_frame(frame, direction)


async def answer(port: int, call_sid: str) -> None:
    """What Twilio does before a stream: POST the signed voice webhook for ``call_sid`` (the
    server takes a stream only for a CallSid it answered)."""
    url = f"http://127.0.0.1:{port}/twilio/voice"
    form = {"CallSid": call_sid, "From": "+15550100", "To": "+15550199", "Direction": "inbound"}
    async with aiohttp.ClientSession() as s:
        async with s.post(url, data=form, headers={SIGNATURE_HEADER: compute_signature(TOKEN, url, form)}) as r:
            assert r.status == 200 and "<Stream" in await r.text()


def words(text: str) -> list[str]:
    """Lower-case words, punctuation dropped: how the heard text is compared."""
    return "".join(c.lower() if c.isalnum() or c.isspace() else " " for c in text).split()


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
