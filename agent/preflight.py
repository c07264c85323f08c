"""Before the server takes calls: can the agent's LLM backend answer at all?

    await check_llm(spec, env=os.environ)        # raises LLMError, one line that says what to fix

An agent built per call from a spec whose key is missing, or whose model server is down, used to
fail at the first pickup. ``parley serve`` now builds one agent at start (a missing model or API
key is an ``LLMError`` there) and, for an OpenAI-compatible server at ``llm.base_url``, asks
``GET {base_url}/models``: any HTTP answer shows the server is there; 401 or 403 means it refused
the key; no answer within ``timeout_s`` means it is not reachable. Bedrock is only built (its
credentials are the AWS SDK's to find; nothing is sent to AWS at start).
"""

from __future__ import annotations

from collections.abc import Mapping

import aiohttp

from agent.errors import LLMError
from agent.factory import build_agent
from agent.spec import AgentSpec

__all__ = ["check_llm"]


async def check_llm(spec: AgentSpec, *, env: Mapping[str, str] | None = None, probe: bool = True,
                    timeout_s: float = 3.0) -> None:
    """Raise ``LLMError`` when ``spec``'s LLM backend cannot serve a call; nothing for the
    embedded agent. ``probe=False`` builds the agent without asking the server."""
    if spec.llm.backend == "embedded":
        return
    env = {} if env is None else env
    build_agent(spec, call_sid="start-up check", params={}, env=env)   # a missing key or model
    if not probe or spec.llm.backend != "openai" or spec.llm.base_url is None:
        return
    url = spec.llm.base_url.rstrip("/") + "/models"
    key = env.get(spec.llm.api_key_env) if spec.llm.api_key_env else None
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as http:
            async with http.get(url, headers=headers) as resp:
                status = resp.status
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise LLMError(f"the LLM server at {spec.llm.base_url} is not reachable ({exc or 'timed out'}); "
                       "start it, fix llm.base_url, or pass --no-llm-check") from exc
    if status in (401, 403):
        raise LLMError(f"the LLM server at {spec.llm.base_url} refused the API key (HTTP {status}); "
                       f"check ${spec.llm.api_key_env or 'OPENAI_API_KEY'}")
