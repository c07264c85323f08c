"""Amazon Bedrock through the Converse stream API.

    llm = make_bedrock_llm(spec.llm, system_prompt=prompt)   # region from llm.region

It is pipecat's ``AWSBedrockLLMService`` (aiobotocore ``converse_stream``: ``contentBlockDelta``
text goes out as ``LLMTextFrame``s as it arrives, ``toolUse`` blocks become function calls),
with botocore's retries off and its read timeout set to the spec's ``timeout_s`` (the turn guard
speaks a fallback instead of retrying into dead air), and an optional ``endpoint_url``
(``llm.base_url``: a VPC interface endpoint, or a local test server). The aiobotocore session
is shared by all calls in the process, so only the first turn of the first call loads the
service model (~0.2 s here); pipecat still opens a client per request (~10-25 ms). Credentials come from
botocore's default chain (instance role, ECS task role, ``AWS_*`` variables). Needs
``aiobotocore`` (``pipecat-ai[aws]``).
"""

from __future__ import annotations

import logging

from agent.errors import LLMError
from agent.spec import LLMSpec

log = logging.getLogger(__name__)

try:
    import aiobotocore.session
    from botocore.config import Config
    from pipecat.services.aws.llm import AWSBedrockLLMService
except ImportError as exc:  # pipecat raises its own error naming the missing extra
    _IMPORT_ERROR: Exception | None = exc
    AWSBedrockLLMService = object  # type: ignore[assignment,misc]
else:
    _IMPORT_ERROR = None

_SESSION = None


def _shared_session():
    """One aiobotocore session per process: it caches the service model (~0.2 s to load)."""
    global _SESSION
    if _SESSION is None:
        _SESSION = aiobotocore.session.get_session()
    return _SESSION


class BedrockLLMService(AWSBedrockLLMService):
    """pipecat's Bedrock LLM service: no botocore retries, bounded timeouts, optional endpoint."""

    def __init__(self, *, timeout_s: float = 8.0, endpoint_url: str | None = None, **kwargs):
        config = Config(
            connect_timeout=min(timeout_s, 3.0),
            read_timeout=timeout_s,
            retries={"mode": "standard", "total_max_attempts": 1},
        )
        super().__init__(client_config=config, **kwargs)
        # pipecat opens a client per request; a session per call would reload the service
        # model on every call's first turn
        self._aws_session = _shared_session()
        if endpoint_url:
            # pipecat passes these keyword arguments to every create_client call
            self._aws_params["endpoint_url"] = endpoint_url


def make_bedrock_llm(spec: LLMSpec, *, system_prompt: str, aws_access_key: str | None = None,
                     aws_secret_key: str | None = None,
                     aws_session_token: str | None = None) -> BedrockLLMService:
    """A Bedrock LLM service configured from the spec's ``llm:`` section."""
    if _IMPORT_ERROR is not None:
        raise LLMError(f"the bedrock backend needs aiobotocore (pip install 'pipecat-ai[aws]'): "
                       f"{_IMPORT_ERROR}") from _IMPORT_ERROR
    if not spec.model:
        raise LLMError("llm.model (a Bedrock model or inference profile id) is required for "
                       "the bedrock backend")
    log.info("bedrock LLM: model %s in %s", spec.model, spec.region or "the default region")
    return BedrockLLMService(
        aws_access_key=aws_access_key,
        aws_secret_key=aws_secret_key,
        aws_session_token=aws_session_token,
        aws_region=spec.region,
        endpoint_url=spec.base_url,
        timeout_s=spec.timeout_s,
        settings=AWSBedrockLLMService.Settings(
            model=spec.model,
            system_instruction=system_prompt,
            temperature=spec.temperature,
            max_tokens=spec.max_tokens,
        ),
    )
