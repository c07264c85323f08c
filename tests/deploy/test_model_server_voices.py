"""The model tier speaks every shipped voice: a request picks one by Cartesia's
``voice: {"mode": "id", "id"}``, per context, on the streaming API and /invocations; a model
server process loads each voice its model folder holds; the agent tier's remote voice asks for
the voice ``parley serve --voice`` (or the agent spec) names."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

import aiohttp
import pytest

from deploy.model_server import ModelServer, ModelServerConfig
from pipeline.engines.remote_voice import RemoteVoiceEngine
from pipeline.engines.replicas import Replicas
from pipeline.errors import ConfigError, PipelineError
from pipeline.voices import voices_in
from tests.deploy.test_model_server import FMT, _audio, _context_events
from tests.deploy.model_servers import ModelServerProcess
from tests.metrics_text import sample

MODELS = Path(__file__).resolve().parents[2] / "models"


@pytest.fixture(scope="module")
def voices():
    from pipeline.engines.ssm_voice import SSMVoiceEngine

    slt, joe = SSMVoiceEngine(MODELS / "tts"), SSMVoiceEngine(MODELS / "tts-joe")
    yield slt, joe
    slt.close()
    joe.close()


def _say(context_id: str, text: str, voice: str | None, more: bool = False) -> str:
    msg = {"context_id": context_id, "transcript": text, "continue": more, "output_format": FMT}
    if voice is not None:
        msg["voice"] = {"mode": "id", "id": voice}
    return json.dumps(msg)


def test_a_model_folder_lists_its_shipped_voices_default_first(tmp_path):
    assert list(voices_in(MODELS).items()) == [("joe", MODELS / "tts-joe"), ("slt", MODELS / "tts")]
    (tmp_path / "tts-joe").mkdir()
    assert voices_in(tmp_path) == {"joe": tmp_path / "tts-joe"}
    assert voices_in(tmp_path / "missing") == {}


async def test_each_context_speaks_the_voice_it_names_and_unknown_voices_are_refused(voices):
    slt, joe = voices
    server = ModelServer(ModelServerConfig(host="127.0.0.1", port=0), voice=joe, voices={"slt": slt})
    await server.start()
    await server.warm()
    base = f"http://127.0.0.1:{server.port}"
    try:
        async with aiohttp.ClientSession() as s, s.ws_connect(f"{base}/tts/websocket") as ws:
            for cid, voice, speaker in (("a", "slt", slt), ("b", None, joe), ("c", "default", joe)):
                steps = (slt.steps, joe.steps)
                await ws.send_str(_say(cid, "Your order ships on Tuesday.", voice))
                events = await _context_events(ws, cid)
                assert events[-1]["type"] == "done" and len(_audio(events)) > 8000
                other = joe if speaker is slt else slt
                assert speaker.steps > steps[speaker is joe] and other.steps == steps[other is joe], cid
            await ws.send_str(_say("d", "Hello.", "nobody"))
            (error,) = await _context_events(ws, "d")
            assert error["type"] == "error" and error["status_code"] == 400
            assert error["error"] == "voice 'nobody' is not served here: voice ids are default, slt"
            await ws.send_str(_say("e", "One.", "slt", more=True))
            await ws.send_str(_say("e", "Two.", None))
            events = await _context_events(ws, "e")
            assert events[-1]["type"] == "error"
            assert events[-1]["error"] == "the voice cannot change within a context"
            await ws.send_str(json.dumps({"context_id": "e", "cancel": True}))
            await ws.send_str(json.dumps({"context_id": "f", "transcript": "Hi.", "output_format": FMT,
                                          "voice": {"mode": "embedding", "embedding": [0.1]}}))
            (error,) = await _context_events(ws, "f")
            assert "'voice' must be" in error["error"]
        async with aiohttp.ClientSession() as s:
            body = {"transcript": "Thank you for calling.", "output_format": FMT, "voice": {"mode": "id", "id": "slt"}}
            async with s.post(f"{base}/invocations", json=body) as r:
                lines = [json.loads(x) for x in (await r.text()).splitlines()]
                assert r.status == 200 and lines[-1]["type"] == "done"
            body["voice"] = {"mode": "id", "id": "nobody"}
            async with s.post(f"{base}/invocations", json=body) as r:
                assert r.status == 400 and "not served here" in (await r.json())["error"]
            async with s.get(f"{base}/metrics") as r:
                text = await r.text()
        assert sample(text, 'parley_model_steps_total{model="tts-slt"}') > 0
        assert sample(text, 'parley_model_steps_total{model="tts"}') > 0
    finally:
        await server.stop()


async def test_a_model_server_process_serves_both_shipped_voices_to_the_remote_voice():
    server = ModelServerProcess()
    try:
        await server.ready()
        slt = RemoteVoiceEngine(Replicas((server.url,)), voice="slt")
        pcm = [c.pcm async for c in slt.open(8000).speak("Your table is booked for seven.")]
        assert sum(len(p) for p in pcm) > 8000
        nobody = RemoteVoiceEngine(Replicas((server.url,)), voice="nobody")
        with pytest.raises(PipelineError, match="voice 'nobody' is not served here: voice ids are joe, slt, default"):
            async for _ in nobody.open(8000).speak("Hello."):
                pass
        async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{server.port}/metrics") as r:
            assert sample(await r.text(), 'parley_model_steps_total{model="tts-slt"}') > 0
        server.proc.terminate()                       # SIGTERM: drains and exits
        # (waited for off the event loop: the engines' idle sockets leave when told to, not
        # after the 25 s grace a blocked loop left them to)
        assert await asyncio.to_thread(server.proc.wait, 30) == 0
        log = server.rest_of_log()
        assert '"voices": ["joe", "slt"]' in log and "voice slt ready" in log
    finally:
        server.stop()


def test_serve_picks_the_remote_voice_by_name_and_refuses_a_folder():
    from deploy.serve_cli import _remote_voice

    def args(**kw):
        return argparse.Namespace(**{"tts": "remote", "voice": None, "tts_model": None, **kw})

    class Spec:
        voice = "joe"

    assert _remote_voice(args(), None) == ""
    assert _remote_voice(args(), Spec()) == "joe"
    assert _remote_voice(args(voice="slt"), Spec()) == "slt"
    assert _remote_voice(args(tts="ssm", voice="joe"), None) == ""
    with pytest.raises(ConfigError, match="--tts-model names a local voice folder"):
        _remote_voice(args(tts_model=Path("models/tts")), None)
    with pytest.raises(ConfigError, match=r"shipped voices by name \(slt, joe\), not 'models/tts-joe'"):
        _remote_voice(args(voice="models/tts-joe"), None)
