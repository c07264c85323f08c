"""build_agent, the system prompt and the functions offered to the LLM, from the example specs."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from pipecat.pipeline.pipeline import Pipeline

from agent.embedded import EmbeddedAgentProcessor
from agent.errors import LLMError
from agent.factory import build_agent
from agent.llm.opening import OpeningProcessor
from agent.llm.openai_compat import OpenAICompatLLMService
from agent.llm.prompt import build_system_prompt
from agent.llm.tool_calls import ToolRunner, fill
from agent.spec import load_spec
from agent.tools import ToolBox

EXAMPLES = Path(__file__).resolve().parents[2] / "agent" / "examples"


@pytest.fixture(scope="module")
def receptionist():
    return load_spec(EXAMPLES / "receptionist.yaml", env={})


@pytest.fixture(scope="module")
def order_status():
    return load_spec(EXAMPLES / "order_status.yaml", env={})


def with_llm(spec, **llm):
    return replace(spec, llm=replace(spec.llm, **llm))


def names(schemas) -> list[str]:
    return [s["function"]["name"] for s in schemas]


def test_the_embedded_backend_is_the_embedded_agent(receptionist):
    agent = build_agent(receptionist, call_sid="CA1", params={})
    assert isinstance(agent, EmbeddedAgentProcessor)


def test_an_openai_backend_is_an_llm_between_guards(receptionist):
    spec = with_llm(receptionist, backend="openai", model="llama-3.1-8b",
                    base_url="http://127.0.0.1:9/v1", temperature=0.2, max_tokens=120)
    agent = build_agent(spec, call_sid="CA1", params={"caller_name": "Ann"}, env={})
    assert isinstance(agent, Pipeline)
    inner = agent.processors[1:-1]  # between the pipeline's own source and sink
    assert isinstance(inner[0], OpeningProcessor)
    assert isinstance(inner[2], OpenAICompatLLMService)
    assert [type(p).__name__ for p in inner[1::2]] == ["_GuardBefore", "_GuardAfter"]
    llm = inner[2]
    settings = llm._settings
    assert (settings.model, settings.temperature, settings.max_tokens) == (
        "llama-3.1-8b", 0.2, 120)
    prompt = settings.system_instruction
    assert receptionist.persona.strip() in prompt
    assert all(item.answer in prompt for item in receptionist.knowledge)
    assert "caller_name: Ann" in prompt
    for name in ("take_message", "end_call", "transfer_call"):
        assert llm.has_function(name), name
    assert llm._client.max_retries == 0
    assert str(llm._client.base_url).startswith("http://127.0.0.1:9/v1")


def test_the_api_key_comes_from_the_named_variable(receptionist):
    spec = with_llm(receptionist, backend="openai", model="gpt-4o-mini", api_key_env="MY_KEY")
    agent = build_agent(spec, call_sid="CA1", params={}, env={"MY_KEY": "sk-test-123"})
    assert agent.processors[3]._client.api_key == "sk-test-123"
    with pytest.raises(LLMError, match="MY_KEY"):
        build_agent(spec, call_sid="CA1", params={}, env={})


def test_a_bedrock_backend_takes_its_region_and_endpoint(receptionist):
    pytest.importorskip("aiobotocore")
    from agent.llm.bedrock import BedrockLLMService

    spec = with_llm(receptionist, backend="bedrock", model="amazon.nova-lite-v1:0",
                    region="eu-west-1", base_url="https://vpce.example.internal")
    llm = build_agent(spec, call_sid="CA1", params={}, env={}).processors[3]
    assert isinstance(llm, BedrockLLMService)
    assert llm._aws_params["region_name"] == "eu-west-1"
    assert llm._aws_params["endpoint_url"] == "https://vpce.example.internal"
    assert llm._aws_params["config"].retries["total_max_attempts"] == 1
    with pytest.raises(LLMError, match="model"):
        build_agent(with_llm(spec, model=None), call_sid="CA1", params={}, env={})


def test_tasks_become_functions_and_builtins_fill_the_gaps(receptionist):
    runner = ToolRunner(receptionist, ToolBox(receptionist))
    schemas = {s["function"]["name"]: s["function"] for s in runner.schemas()}
    assert set(schemas) == {"take_message", "end_call", "transfer_call"}
    params = schemas["take_message"]["parameters"]
    assert params["required"] == ["name", "phone", "message"]
    assert "digit by digit" in params["properties"]["phone"]["description"]
    assert "to" not in schemas["transfer_call"]["parameters"]["properties"]  # one hand-off only


def test_a_spec_that_has_the_tools_gets_no_builtins(order_status):
    runner = ToolRunner(order_status, ToolBox(order_status))
    # lookup_order is reached through its task, which records the slot first
    assert names(runner.schemas()) == ["end_call", "transfer_to_agent", "order_status"]
    prompt = build_system_prompt(order_status, tools=runner.schemas())
    assert "order_number" in prompt and "Then call the order_status function" in prompt
    assert "- transfer_to_agent: Transfer the caller" in prompt


def test_a_spec_without_handoffs_cannot_transfer(receptionist):
    spec = replace(receptionist, handoffs=(), dtmf_menu=())
    assert "transfer_call" not in names(ToolRunner(spec, ToolBox(spec)).schemas())


def test_prompt_sections(receptionist):
    prompt = build_system_prompt(replace(receptionist, language="de-DE", knowledge=()),
                                 params={"b": "2", "a": "1"})
    assert "Speak de-DE." in prompt
    assert "Answer questions only from this knowledge" not in prompt
    assert prompt.endswith("Call details:\n- a: 1\n- b: 2")
    assert "Functions you can call" not in prompt


def test_fill_reads_digits_one_by_one():
    assert fill("Thanks {name}, we call {phone_spoken}. {missing}", {
        "name": "Ann", "phone": "555 0100"}) == "Thanks Ann, we call 5 5 5 0 1 0 0. "
