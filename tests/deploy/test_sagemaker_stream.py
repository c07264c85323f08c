"""``sagemaker://ENDPOINT``: the call tier's model streams over SageMaker's bidirectional streaming.

The chain under test is the real one but for AWS itself: parley's remote engines -> the bridge
process (Python 3.12, AWS's ``aws-sdk-sagemaker-runtime-http2`` on awscrt, SigV4) -> a loopback
stand-in for the SageMaker runtime (HTTP/2 over TLS, event streams, signatures checked:
``sagemaker_bidi_runtime.py``) -> real ``parley model-server`` processes, reached as SageMaker's
sidecar reaches a container.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import numpy as np
import pytest

from deploy.errors import BridgeError, ModelUrlError
from deploy.sagemaker_stream.launcher import StreamBridge, aws_python, bridge_for
from deploy.sagemaker_stream.targets import Target
from pipeline.engines.remote_recognizer import RemoteRecognizerEngine
from pipeline.engines.remote_voice import RemoteVoiceEngine
from pipeline.engines.replicas import Replicas
from ssm_engine.stt.decode import wer
from ssm_engine.stt.text import normalize_text
from harness.aws.sagemaker_bidi_runtime import ACCESS_KEY, SECRET_KEY, BidiRuntime, make_certificate
from tests.deploy.test_model_tier import LONG_TEXT

ROOT = Path(__file__).resolve().parents[2]
ENDPOINT = "parley-models"


@pytest.fixture(scope="module")
def model_servers(model_server_pool):
    """Two model servers: the instances behind the stand-in endpoint (never killed here), those
    the model tier's tests left serving and fresh ones; the pool's last user, so it closes it."""
    try:
        yield asyncio.run(model_server_pool.take(2))
    finally:
        model_server_pool.close()


@pytest.fixture(scope="module")
def certificate(tmp_path_factory) -> tuple[Path, Path]:
    return make_certificate(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def aws_env(monkeypatch, certificate):
    """Credentials the stand-in knows, and its certificate trusted (AWS_CA_BUNDLE)."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    monkeypatch.setenv("AWS_CA_BUNDLE", str(certificate[0]))
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@pytest.fixture
async def runtime(model_servers, certificate, aws_env):
    rt = BidiRuntime(endpoints=(ENDPOINT,), upstreams=[f"http://127.0.0.1:{s.port}" for s in model_servers])
    await rt.start(*certificate)
    yield rt
    await rt.stop()


def _target(rt: BidiRuntime, endpoint: str = ENDPOINT) -> Target:
    return Target.parse(f"sagemaker://{endpoint}?region=us-east-1&endpoint_url=https://127.0.0.1:{rt.port}")


@pytest.fixture
async def bridge(runtime):
    b = StreamBridge((_target(runtime),))
    await asyncio.to_thread(b.start)
    yield b
    b.close()


def _signed_and_routed(rt: BidiRuntime, path: str) -> list:
    streams = [s for s in rt.streams if s.headers.get("x-amzn-sagemaker-model-invocation-path") == path]
    assert streams, rt.streams
    for s in streams:
        assert s.endpoint == ENDPOINT and s.upstream
        assert s.bad_signatures == 0 and s.signed_parts >= 1, s   # every event signed, chained to the seed
    return streams


# -- URLs --------------------------------------------------------------------------------------------
def test_sagemaker_urls_are_checked_and_round_trip():
    t = Target.parse("sagemaker://parley-models?region=eu-west-1&variant=Blue")
    assert (t.endpoint, t.region, t.variant, t.endpoint_url) == ("parley-models", "eu-west-1", "Blue", None)
    assert Target.parse(t.url()) == t
    assert Target.parse("SageMaker://a-b-1").region is None
    for bad, says in [("sagemaker://", "not a SageMaker endpoint name"),
                      ("sagemaker://under_score", "not a SageMaker endpoint name"),
                      ("sagemaker://ok?region=moon", "not an AWS Region"),
                      ("sagemaker://ok?regoin=us-east-1", "unknown parameter 'regoin'"),
                      ("sagemaker://ok?endpoint_url=http://10.0.0.1:8443", "must be https://")]:
        with pytest.raises(ModelUrlError, match=says):
            Target.parse(bad)


def test_other_model_urls_pass_through_without_a_bridge():
    assert bridge_for("ws://a:8080, ws://b:8080") == (None, ("ws://a:8080", "ws://b:8080"))


# -- start-up refusals ---------------------------------------------------------------------------------
def _bridge_alone(*targets: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(aws_python()), "-m", "deploy.sagemaker_stream.bridge",
                           *[a for t in targets for a in ("--target", t)]],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)


def test_the_bridge_refuses_to_start_without_a_region_or_credentials(tmp_path):
    bare = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "AWS_EC2_METADATA_DISABLED": "true",
            "AWS_CONFIG_FILE": str(tmp_path / "none"), "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none")}
    r = _bridge_alone("sagemaker://parley-models", env=bare)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().count("\n") == 0 and "add ?region=REGION to the URL or set AWS_REGION" in r.stderr
    r = _bridge_alone("sagemaker://parley-models?region=us-east-1", env=bare)
    assert r.returncode == 2 and "no AWS credentials" in r.stderr and "Traceback" not in r.stderr, r.stderr
    r = _bridge_alone("sagemaker://bad_name", env=bare)
    assert r.returncode == 2 and "not a SageMaker endpoint name" in r.stderr


def test_a_missing_aws_venv_is_named_with_its_fix(monkeypatch, tmp_path):
    monkeypatch.setenv("PARLEY_AWS_PYTHON", str(tmp_path / "no-python"))
    with pytest.raises(BridgeError, match="make install"):
        bridge_for("sagemaker://parley-models?region=us-east-1")


# -- streams -------------------------------------------------------------------------------------------
async def test_the_voice_speaks_through_an_endpoint_word_for_word(runtime, bridge, engines_local):
    """A reply spoken through sagemaker:// is the in-process voice's, word for word, with its
    timestamps; the stream is signed event by event and routed by the invocation path."""
    engine = RemoteVoiceEngine(Replicas(bridge.urls))
    t0 = time.perf_counter()
    first = None
    words: list[tuple[str, float]] = []
    samples = 0
    try:
        async for chunk in engine.open(8000).speak(LONG_TEXT):
            first = first if first is not None else time.perf_counter() - t0
            words += chunk.words
            samples += len(chunk.pcm)
    finally:
        await engine.close()
    local = [w for c in await engines_local.speak_words(LONG_TEXT) for w in c]
    assert [w for w, _ in words] == local
    assert samples / 8000 > 0.9 * engines_local.seconds[LONG_TEXT]
    assert first is not None and first < 2.0
    streams = _signed_and_routed(runtime, "tts/websocket")
    assert streams[0].parts_out > 10


async def test_the_recogniser_hears_through_an_endpoint(runtime, bridge, engines_local, flite_speech):
    rate = 8000
    pcm = np.concatenate([np.zeros(rate // 4, np.int16), flite_speech("i would like to check my order", rate, "kal"),
                          np.zeros(rate // 2, np.int16)])
    whole = engines_local.recogniser.transcribe(pcm, rate)
    engine = RemoteRecognizerEngine(Replicas(bridge.urls))
    utt = engine.open(rate)
    try:
        for i in range(0, len(pcm), 160):
            if (fut := utt.push(pcm[i:i + 160].tobytes())) is not None:
                await utt.take_async(fut)
        for fut in utt.finish():
            await utt.take_async(fut)
    finally:
        await engine.close()
    assert utt.text and wer([normalize_text(whole)], [normalize_text(utt.text)]) <= 0.1, (whole, utt.text)
    streams = _signed_and_routed(runtime, "stt/websocket")
    assert "sample_rate=8000" in streams[0].headers.get("x-amzn-sagemaker-model-query-string", "")


async def test_an_instance_lost_mid_reply_moves_the_reply_to_a_new_stream(runtime, bridge, engines_local, capfd):
    """The runtime ends the stream with InternalStreamFailure after a few parts (the instance died):
    the engine opens a new stream, SageMaker routes it to the other instance, and the reply goes on
    from the word being said; every word once, in order."""
    runtime.fail_stream_after = 8
    engine = RemoteVoiceEngine(Replicas(bridge.urls))
    words: list[str] = []
    try:
        async for chunk in engine.open(8000).speak(LONG_TEXT):
            words += [w for w, _ in chunk.words]
    finally:
        await engine.close()
    assert engine.failovers == 1
    assert words == [w for c in await engines_local.speak_words(LONG_TEXT) for w in c]
    streams = _signed_and_routed(runtime, "tts/websocket")
    assert streams[0].ended_by == "InternalStreamFailure" and len(streams) == 2
    assert streams[0].upstream != streams[1].upstream
    err = capfd.readouterr().err
    assert err.count("InternalStreamFailure") == 1 and "the engine goes on on a new stream" in err, err
    assert "Traceback" not in err


async def test_an_unknown_endpoint_is_one_line_and_a_clear_engine_error(runtime, aws_env, capfd):
    from pipeline.errors import EngineUnavailableError

    b = StreamBridge((_target(runtime, "no-such-endpoint"),))
    await asyncio.to_thread(b.start)
    engine = RemoteVoiceEngine(Replicas(b.urls))
    try:
        with pytest.raises(EngineUnavailableError):
            async for _ in engine.open(8000).speak("Hello."):
                pass
    finally:
        await engine.close()
        b.close()
    err = capfd.readouterr().err
    line = next(x for x in err.splitlines() if "no-such-endpoint" in x and "refused" in x)
    assert "Endpoint no-such-endpoint of account" in line or "ValidationError" in line, line
    assert "Traceback" not in err


async def test_the_bridge_is_started_again_if_it_dies(runtime, bridge, engines_local):
    port = bridge.port
    os.kill(bridge.pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while bridge.restarts == 0 and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert bridge.restarts == 1 and bridge.port == port
    engine = RemoteVoiceEngine(Replicas(bridge.urls))
    try:
        words = [w for c in [c async for c in engine.open(8000).speak("Your order ships on Tuesday.")]
                 for w, _ in c.words]
    finally:
        await engine.close()
    assert words == [w for c in await engines_local.speak_words("Your order ships on Tuesday.") for w in c]
    async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{port}/ping") as r:
        assert (await r.json())["opened"] == 1


# -- a whole call --------------------------------------------------------------------------------------
async def test_a_call_on_a_sagemaker_endpoint_is_heard_and_answered(runtime, tmp_path):
    """`parley serve --stt remote --tts remote --model-url sagemaker://...`: a Twilio call whose
    every turn is heard and answered through the endpoint; the call server's log says where its
    streams go; SIGTERM stops the bridge with the server."""
    from harness.callers.twilio import CallerConfig, CallerUtterance, run_call
    from pipeline.records_sqlite import SQLiteCallStore
    from tests.deploy.test_serve_process import TOKEN, _alive, _serve, _wait_listening

    db = tmp_path / "calls.db"
    url = _target(runtime).url()
    proc = _serve(db, "--stt", "remote", "--tts", "remote", "--model-url", url, "--log-level", "INFO")
    said = ("hello how are you", "i would like to check my order")
    try:
        port = await _wait_listening(proc)
        report = await asyncio.wait_for(run_call(CallerConfig(
            url=f"ws://127.0.0.1:{port}/twilio/stream", auth_token=TOKEN, timeout_s=90,
            utterances=tuple(CallerUtterance(text=t) for t in said))), 120)
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        log = proc.stderr.read().decode()
        proc.stderr.close()
    assert f"streams to {url} through 127.0.0.1:" in log, log[-3000:]
    assert not report.connection_lost and len(report.turns) == len(said)
    assert all(t.agent_audio_bytes > 0 for t in report.turns)
    store = SQLiteCallStore(db)
    try:
        record = store.list()[0]
    finally:
        store.close()
    for turn in record.turns:
        assert turn.user_text and turn.user_text.lower() in turn.agent_text.lower(), (turn.user_text, turn.agent_text)
    _signed_and_routed(runtime, "tts/websocket")
    _signed_and_routed(runtime, "stt/websocket")
    pid = int(log.split("sagemaker:// bridge (pid ", 1)[1].split(")", 1)[0])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _alive(pid):
        await asyncio.sleep(0.1)
    assert not _alive(pid)


def test_serve_refuses_to_start_when_the_endpoint_cannot_be_reached_by_credentials(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(HOME=str(tmp_path), AWS_EC2_METADATA_DISABLED="true", AWS_CONFIG_FILE=str(tmp_path / "none"),
               AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"))
    r = subprocess.run([sys.executable, "-m", "deploy.cli", "serve", "--insecure-dev", "--port", "0", "--stt", "remote",
                        "--tts", "remote", "--model-url", "sagemaker://parley-models?region=us-east-1",
                        "--no-llm-check"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr[-2000:]
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("parley serve: sagemaker://parley-models?region=us-east-1: no AWS credentials"), r.stderr
    assert "Traceback" not in r.stderr and r.stderr.count("no AWS credentials") == 1


def test_the_bridge_turns_nagle_off_on_sockets_awscrt_leaves_it_on():
    """awscrt leaves Nagle on (a reply asked for right after a cancel waited ~40 ms for a delayed
    ACK: benchmarks/RESULTS.md); the bridge sets TCP_NODELAY on its process's TCP sockets."""
    import socket

    from deploy.sagemaker_stream.bridge import no_nagle

    with socket.create_server(("127.0.0.1", 0)) as server, \
            socket.create_connection(server.getsockname()) as client:
        peer, _ = server.accept()
        with peer:
            assert client.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 0
            assert no_nagle() >= 2                       # both ends of the pair
            assert client.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
            assert peer.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
