"""Exceptions raised by the agent package.

::

    AgentError                     base of everything below
     ├── SpecError                 an agent spec (YAML) that cannot be loaded; names the file and line
     ├── ScenarioError             a scenario file (``parley test``) that cannot be loaded; names the
     │                             file, the line and the field
     ├── ToolError                 a tool call that failed (HTTP error, timeout, bad JSON, unknown tool)
     │    └── ToolArgumentsError   arguments (or a reply) that do not match the tool's JSON schema
     ├── LLMError                  an LLM backend that failed (network, timeout, bad reply)
     └── EncoderError              the sentence-embedding model cannot be loaded (a ValueError)

Foreign exceptions (yaml, aiohttp, json, asyncio.TimeoutError) are translated once, at the
boundary, with ``raise X from exc``.
"""

from __future__ import annotations

__all__ = ["AgentError", "EncoderError", "LLMError", "ScenarioError", "SpecError", "ToolArgumentsError",
           "ToolError"]


class AgentError(Exception):
    """Base class for agent errors."""


class SpecError(AgentError):
    """An agent spec that is not valid YAML or not a valid spec: ``path:line: what is wrong``."""


class ScenarioError(AgentError):
    """A scenario file that is not valid YAML or not valid scenarios: ``path:line: field: what``."""


class ToolError(AgentError):
    """A tool call that could not be made or did not succeed."""


class ToolArgumentsError(ToolError):
    """Tool arguments (or a tool's reply) that do not match the declared JSON schema."""


class LLMError(AgentError):
    """An LLM backend that could not answer (network, timeout, malformed reply)."""


class EncoderError(AgentError, ValueError):
    """The sentence-embedding model's files are missing, unreadable, or not a BERT checkpoint."""
