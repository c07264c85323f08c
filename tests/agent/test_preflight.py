"""The start-up check of the agent's LLM backend (agent.preflight) and ``parley serve``
refusing to start, in one line, when the backend cannot serve a call."""

from __future__ import annotations

import socket
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from aiohttp import web

from agent.errors import LLMError
from agent.preflight import check_llm
from agent.spec import load_spec
from harness.scripted_llm import ScriptedChatServer, ScriptedReply

ROOT = Path(__file__).resolve().parents[2]
RECEPTIONIST = ROOT / "agent" / "examples" / "receptionist.yaml"


@pytest.fixture(scope="module")
def receptionist():
    return load_spec(RECEPTIONIST, env={})


def with_llm(spec, **llm):
    return replace(spec, llm=replace(spec.llm, **llm))


async def test_the_embedded_agent_needs_no_check(receptionist):
    await check_llm(receptionist, env={})


async def test_a_running_openai_compatible_server_passes(receptionist):
    async with ScriptedChatServer([ScriptedReply(text="We open at eight.")]) as llm:
        spec = with_llm(receptionist, backend="openai", model="scripted", base_url=llm.base_url)
        await check_llm(spec, env={})   # GET /models is not served there: any answer will do


async def test_a_server_that_is_not_there_is_one_clear_error(receptionist):
    with socket.socket() as bound:        # bound, never listening: connections are refused
        bound.bind(("127.0.0.1", 0))
        base_url = f"http://127.0.0.1:{bound.getsockname()[1]}/v1"
        spec = with_llm(receptionist, backend="openai", model="m", base_url=base_url)
        with pytest.raises(LLMError, match="not reachable.*--no-llm-check"):
            await check_llm(spec, env={}, timeout_s=2.0)
        await check_llm(spec, env={}, probe=False)   # --no-llm-check: built, not asked


async def test_a_refused_key_and_a_missing_key_are_named(receptionist):
    async def models(_request: web.Request) -> web.Response:
        return web.json_response({"error": "bad key"}, status=401)

    app = web.Application()
    app.router.add_get("/v1/models", models)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        port = runner.addresses[0][1]
        spec = with_llm(receptionist, backend="openai", model="m", base_url=f"http://127.0.0.1:{port}/v1",
                        api_key_env="MY_LLM_KEY")
        with pytest.raises(LLMError, match=r"refused the API key \(HTTP 401\).*MY_LLM_KEY"):
            await check_llm(spec, env={"MY_LLM_KEY": "wrong"})
    finally:
        await runner.cleanup()
    hosted = with_llm(receptionist, backend="openai", model="gpt-4o-mini", api_key_env="MY_LLM_KEY")
    with pytest.raises(LLMError, match="MY_LLM_KEY"):
        await check_llm(hosted, env={})   # no base_url and no key: nothing could answer a call


def test_parley_serve_refuses_to_start_without_its_llm(tmp_path):
    """Regression: a spec whose LLM server is down used to start, and every call died at pickup.
    (A child process: ``parley serve`` configures the process's logging.)"""
    with socket.socket() as bound:
        bound.bind(("127.0.0.1", 0))
        text = RECEPTIONIST.read_text().replace("backend: embedded", (
            "backend: openai\n  model: m\n  base_url: http://127.0.0.1:%d/v1" % bound.getsockname()[1]))
        spec = tmp_path / "agent.yaml"
        spec.write_text(text)
        proc = subprocess.run(
            [sys.executable, "-m", "deploy.cli", "serve", "--agent", str(spec), "--tts", "espeak",
             "--stt", "sphinx", "--port", "0", "--insecure-dev", "--db", str(tmp_path / "calls.db"),
             "--log-level", "ERROR"],
            cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("parley serve: the LLM server at http://127.0.0.1:"), proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
