"""LLM backends for the agent, behind one interface: a pipecat LLM service between turn guards.

Public API::

    from agent.llm import (
        GuardConfig, TurnGuard, guarded,            # filler / fallback / timeout around an LLM
        make_openai_llm, OpenAICompatLLMService,    # vLLM, llama.cpp, Ollama, OpenAI
        make_bedrock_llm,                           # Amazon Bedrock Converse stream (lazy)
        build_system_prompt, ToolRunner, OpeningProcessor,
    )

``agent.factory.build_agent`` puts them together from a spec. The Bedrock service imports
aiobotocore only when it is made.
"""

from agent.llm.guards import GuardConfig, TurnGuard, guarded
from agent.llm.opening import OpeningProcessor
from agent.llm.openai_compat import OpenAICompatLLMService, make_openai_llm
from agent.llm.prompt import build_system_prompt
from agent.llm.tool_calls import ToolRunner


def make_bedrock_llm(*args, **kwargs):
    """See :func:`agent.llm.bedrock.make_bedrock_llm` (imported on first use)."""
    from agent.llm.bedrock import make_bedrock_llm as make

    return make(*args, **kwargs)


__all__ = [
    "GuardConfig", "OpeningProcessor", "OpenAICompatLLMService", "ToolRunner", "TurnGuard",
    "build_system_prompt", "guarded", "make_bedrock_llm", "make_openai_llm",
]
