"""The agents a server runs for POST /calls: loaded once by name or path, picked per call by the
parameter the call carries, and only among those already loaded."""

from __future__ import annotations

import pytest

from agent.echo import EchoAgentProcessor
from deploy.agent_catalog import AgentCatalog
from deploy.serve_cli import _agent_factory, _load_agent_spec
from telephony.calls import CallInfo
from telephony.calls_api import AGENT_PARAM


class DefaultAgent(EchoAgentProcessor):
    pass


def catalog_of(default=lambda _info: DefaultAgent()) -> AgentCatalog:
    return AgentCatalog(default, build=lambda path: _agent_factory(_load_agent_spec(path), llm_check=False))


def call(**params: str) -> CallInfo:
    return CallInfo("CA1", "twilio", dict(params))


async def test_a_loaded_agent_is_picked_by_the_calls_parameter():
    catalog = catalog_of()
    assert isinstance(catalog(call(**{AGENT_PARAM: "echo"})), DefaultAgent)  # not loaded yet: the default
    assert await catalog.load("echo") == "echo"
    agent = catalog(call(**{AGENT_PARAM: "echo"}))
    assert isinstance(agent, EchoAgentProcessor) and not isinstance(agent, DefaultAgent)
    assert isinstance(catalog(call()), DefaultAgent)


async def test_an_example_loads_by_its_name():
    catalog = catalog_of()
    assert await catalog.load("receptionist") == "receptionist"
    assert not isinstance(catalog(call(**{AGENT_PARAM: "receptionist"})), DefaultAgent)


@pytest.mark.parametrize(("name", "message"), [
    ("no-such-agent", "no agent spec at"),
    ("/etc/passwd", "no agent spec at /etc/passwd"),
])
async def test_what_is_not_an_agent_spec_is_refused(name, message):
    with pytest.raises(ValueError, match=message):
        await catalog_of().load(name)
