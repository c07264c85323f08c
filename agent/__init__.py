"""The turn handler: what the caller talks to.

Public API::

    from agent import EchoAgentProcessor, EchoAgentConfig
"""

from agent.echo import EchoAgentConfig, EchoAgentProcessor

__all__ = ["EchoAgentConfig", "EchoAgentProcessor"]
