"""``build_agent``: the one FrameProcessor that answers a call, from an agent spec.

    agent = build_agent(spec, call_sid="CA123", params={"caller_name": "Ann"})
    call = build_pipeline(transport, agent, config)

``llm.backend`` picks it:

- ``embedded``: :class:`agent.embedded.EmbeddedAgentProcessor`, no network, no model;
- ``openai``: any OpenAI-compatible endpoint (``llm.base_url``; the key in ``$llm.api_key_env``);
- ``bedrock``: Amazon Bedrock's Converse stream (``llm.region``, ``llm.base_url`` overrides the
  endpoint).

An LLM backend is put together as::

    OpeningProcessor (greeting, tools on the context)
      -> TurnGuard.before -> LLM service -> TurnGuard.after      filler, fallback, timeout

with the system prompt of :func:`agent.llm.prompt.build_system_prompt` and the function calls
of :class:`agent.llm.tool_calls.ToolRunner`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import aiohttp
from pipecat.pipeline.pipeline import Pipeline
from pipecat.processors.frame_processor import FrameProcessor
from pipecat.services.llm_service import LLMService

from agent.errors import LLMError
from agent.llm.guards import GuardConfig, TurnGuard
from agent.llm.opening import OpeningProcessor
from agent.llm.prompt import build_system_prompt
from agent.llm.tool_calls import ToolRunner
from agent.spec import AgentSpec
from agent.tools import ToolBox

log = logging.getLogger(__name__)


def build_agent(
    spec: AgentSpec,
    *,
    call_sid: str,
    params: Mapping[str, str],
    http_session: aiohttp.ClientSession | None = None,
    env: Mapping[str, str] | None = None,
    toolbox: ToolBox | None = None,
) -> FrameProcessor:
    """The agent for one call. ``env`` holds the API key variables (None: none; the command line
    passes ``os.environ``); ``toolbox`` runs its tools (None: ``ToolBox(spec)``, over
    ``http_session``)."""
    toolbox = toolbox if toolbox is not None else ToolBox(spec, http=http_session)
    backend = spec.llm.backend
    log.info("[%s] %s agent %r", call_sid, backend, spec.name)
    if backend == "embedded":
        from agent.embedded import EmbeddedAgentProcessor
        from agent.semantic import SentenceEncoder

        return EmbeddedAgentProcessor(spec, toolbox, call_sid=call_sid,
                                      encoder=SentenceEncoder.default())
    runner = ToolRunner(spec, toolbox)
    prompt = build_system_prompt(spec, tools=runner.schemas(), params=params)
    env = {} if env is None else env
    llm: LLMService[Any]
    if backend == "openai":
        from agent.llm.openai_compat import make_openai_llm

        key = env.get(spec.llm.api_key_env) if spec.llm.api_key_env else None
        llm = make_openai_llm(spec.llm, system_prompt=prompt, api_key=key)
    elif backend == "bedrock":
        from agent.llm.bedrock import make_bedrock_llm

        llm = make_bedrock_llm(spec.llm, system_prompt=prompt)
    else:
        raise LLMError(f"unknown llm.backend {backend!r}")
    runner.register(llm)
    guard = TurnGuard(GuardConfig(
        filler=spec.messages.filler,
        fallback=spec.messages.fallback,
        filler_after_s=spec.llm.filler_after_s,
        timeout_s=spec.llm.timeout_s,
    ), call_sid=call_sid)
    opening = OpeningProcessor(greeting=spec.greeting, tools=runner.tools_schema(), toolbox=toolbox)
    return Pipeline([opening, guard.before, llm, guard.after])
