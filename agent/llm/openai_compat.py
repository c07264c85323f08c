"""Any OpenAI-compatible chat-completions endpoint (vLLM, llama.cpp server, Ollama, OpenAI).

    llm = make_openai_llm(spec.llm, system_prompt=prompt, api_key=key)

It is pipecat's ``OpenAILLMService`` (streaming ``delta.content`` tokens straight out as
``LLMTextFrame``s, tool calls gathered from ``delta.tool_calls``), with two changes for a phone
call: the SDK's own retries are off (a 500 retried twice with back-off is seconds of dead air;
the turn guard speaks a fallback instead), and the client timeout is the spec's ``timeout_s``
(a backstop: the guard cancels a silent request first), and the client's connections are closed
when the call ends. Servers that need no key (vLLM,
llama.cpp, Ollama) get a placeholder, since the SDK refuses an empty one.
"""

from __future__ import annotations

import logging

from openai import AsyncOpenAI, DefaultAsyncHttpxClient, Timeout
from pipecat.services.openai.llm import OpenAILLMService
from pipecat.utils.http import connection_limits

from agent.errors import LLMError
from agent.spec import LLMSpec

log = logging.getLogger(__name__)

NO_KEY = "sk-no-key-needed"


class OpenAICompatLLMService(OpenAILLMService):
    """pipecat's OpenAI LLM service with SDK retries off and a bounded client timeout."""

    def __init__(self, *, timeout_s: float = 8.0, **kwargs):
        self._client_timeout_s = timeout_s  # read by create_client, which the base calls
        super().__init__(**kwargs)

    def create_client(self, api_key=None, base_url=None, organization=None, project=None,
                      default_headers=None, **kwargs):
        timeout = Timeout(self._client_timeout_s, connect=min(self._client_timeout_s, 3.0))
        return AsyncOpenAI(
            api_key=api_key or NO_KEY,
            base_url=base_url,
            organization=organization,
            project=project,
            max_retries=0,
            timeout=timeout,
            http_client=DefaultAsyncHttpxClient(
                limits=connection_limits(max_keepalive_connections=4, max_connections=16),
            ),
            default_headers=default_headers,
        )

    async def cleanup(self):
        await super().cleanup()
        await self._client.close()  # pipecat leaves the client's keep-alive sockets open


def make_openai_llm(spec: LLMSpec, *, system_prompt: str,
                    api_key: str | None = None) -> OpenAICompatLLMService:
    """An OpenAI-compatible LLM service configured from the spec's ``llm:`` section."""
    if not spec.model:
        raise LLMError("llm.model is required for the openai backend")
    if spec.base_url is None and not api_key:
        raise LLMError("the openai backend needs llm.base_url (a local server) or an API key "
                       f"in ${spec.api_key_env or 'OPENAI_API_KEY'}")
    log.info("openai-compatible LLM: model %s at %s", spec.model,
             spec.base_url or "api.openai.com")
    return OpenAICompatLLMService(
        api_key=api_key,
        base_url=spec.base_url,
        timeout_s=spec.timeout_s,
        settings=OpenAILLMService.Settings(
            model=spec.model,
            system_instruction=system_prompt,
            temperature=spec.temperature,
            max_tokens=spec.max_tokens,
        ),
    )
