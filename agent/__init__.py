"""The turn handler: what the caller talks to.

Public API::

    from agent import load_spec, build_agent          # an agent per call, from its YAML spec
    from agent import EmbeddedAgentProcessor, ToolBox # the offline agent and its tools
    from agent import EchoAgentProcessor              # the minimal echo agent
"""

from agent.echo import EchoAgentConfig, EchoAgentProcessor
from agent.embedded import EmbeddedAgentProcessor
from agent.errors import AgentError, SpecError, ToolError
from agent.factory import build_agent
from agent.spec import AgentSpec, load_spec
from agent.tools import ToolBox

__all__ = [
    "AgentError",
    "AgentSpec",
    "EchoAgentConfig",
    "EchoAgentProcessor",
    "EmbeddedAgentProcessor",
    "SpecError",
    "ToolBox",
    "ToolError",
    "build_agent",
    "load_spec",
]
