"""The agent tier on the model tier: parley's speech services on remote engines (``--stt remote
--tts remote``), and calls that survive a replica's death (SIGKILL) and its drain (SIGTERM).

The model servers here are real ``parley model-server`` processes on loopback."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
import time
from pathlib import Path

import aiohttp
import numpy as np
import pytest

from pipeline.engines.remote_recognizer import RemoteRecognizerEngine
from pipeline.engines.remote_voice import RemoteVoiceEngine
from pipeline.engines.replicas import Replicas
from ssm_engine.stt.decode import wer
from ssm_engine.stt.text import normalize_text
from tests.deploy.model_servers import ModelServerProcess, ServerPool

ROOT = Path(__file__).resolve().parents[2]
LONG_TEXT = ("Thank you for calling the dental office. We are open from eight in the morning until six in "
             "the evening on weekdays, and from nine until one on Saturdays. Parking is free behind the "
             "building, and the entrance is on the side street.")


@pytest.fixture
async def two_servers(model_server_pool: ServerPool) -> list[ModelServerProcess]:
    """Two ready model servers: those earlier tests left serving, topped up with fresh ones."""
    return await model_server_pool.take(2)


def _serving(engine: RemoteVoiceEngine, servers: list[ModelServerProcess]) -> ModelServerProcess:
    live = [url for url, conn in engine._connections.items() if conn.contexts]
    assert len(live) == 1, live
    return next(s for s in servers if s.url == live[0])


async def test_remote_voice_fails_over_mid_utterance_with_every_word_spoken(two_servers, engines_local):
    """SIGKILL the replica speaking a long reply after its first second: the reply goes on on the
    other replica from the word that was being said; every word's start is reported once, in
    order, and the audio covers the whole text."""
    engine = RemoteVoiceEngine(Replicas(tuple(s.url for s in two_servers)))
    utt = engine.open(8000)
    words: list[tuple[str, float]] = []
    samples, gaps, killed = 0, [], None
    last = time.perf_counter()
    try:
        async for chunk in utt.speak(LONG_TEXT):
            now = time.perf_counter()
            gaps.append(now - last)
            last = now
            words += chunk.words
            samples += len(chunk.pcm)
            if killed is None and samples > 8000:
                killed = _serving(engine, two_servers)
                killed.proc.send_signal(signal.SIGKILL)
    finally:
        await engine.close()
    assert killed is not None and engine.failovers == 1
    spoken = [w for w, _ in words]
    local = [w for c in await engines_local.speak_words(LONG_TEXT) for w in c]
    assert spoken == local, (spoken, local)                 # each word once, none lost
    starts = [t for _, t in words]
    assert starts == sorted(starts)
    assert samples / 8000 > 0.9 * engines_local.seconds[LONG_TEXT]   # no stretch of the text missing
    assert max(gaps) < 2.0                                  # a reconnect, not a stall timeout


async def test_remote_recogniser_replays_the_utterance_on_another_replica(two_servers, engines_local, flite_speech):
    """SIGKILL the replica hearing an utterance halfway through it: the final, from the other
    replica, is what one replica hears from the whole utterance."""
    rate = 8000
    pcm = np.concatenate([np.zeros(rate // 4, np.int16), flite_speech("i would like to check my order", rate, "kal"),
                          np.zeros(rate // 2, np.int16)])
    whole = engines_local.recogniser.transcribe(pcm, rate)
    engine = RemoteRecognizerEngine(Replicas(tuple(s.url for s in two_servers)))
    utt = engine.open(rate)
    try:
        for i in range(0, len(pcm), 160):
            fut = utt.push(pcm[i:i + 160].tobytes())
            if fut is not None:
                await utt.take_async(fut)
            if i == len(pcm) // 2 // 160 * 160:
                await asyncio.sleep(0.2)       # the first replica has heard half
                victim = next(s for s in two_servers if s.url == utt.url)
                victim.proc.send_signal(signal.SIGKILL)
            await asyncio.sleep(0.002)
        for fut in utt.finish():
            await utt.take_async(fut)
    finally:
        await engine.close()
    assert engine.failovers >= 1
    assert utt.text and wer([normalize_text(whole)], [normalize_text(utt.text)]) <= 0.2, (whole, utt.text)


async def test_sigterm_drains_a_replica_and_new_utterances_go_to_the_other(two_servers):
    """SIGTERM the replica mid-reply: the reply ends whole there (the drain serves it), the next
    one goes to the other replica, and the drained server exits 0 once its streams have left."""
    engine = RemoteVoiceEngine(Replicas(tuple(s.url for s in two_servers)))
    try:
        utt = engine.open(8000)
        samples, drained = 0, None
        async for chunk in utt.speak(LONG_TEXT):
            samples += len(chunk.pcm)
            if drained is None:
                drained = _serving(engine, two_servers)
                drained.proc.send_signal(signal.SIGTERM)
        assert drained is not None and engine.failovers == 0
        second = engine.open(8000)
        async for _ in second.speak("And one more thing."):
            other = _serving(engine, two_servers)
            assert other is not drained
            break
        second.cancel()
    finally:
        await engine.close()
    assert await asyncio.to_thread(drained.proc.wait, 30) == 0
    log = drained.rest_of_log()
    assert "draining" in log and "model server stopped" in log


async def test_pipeline_services_on_remote_engines_speak_and_hear_like_in_process(two_servers, engines_local,
                                                                                   flite_speech):
    """SSMTTSService and SSMSTTService on the remote engines: the same audio and words as the
    in-process voice, the same final as the in-process recogniser."""
    from pipecat.frames.frames import InputAudioRawFrame, TranscriptionFrame, TTSAudioRawFrame, TTSSpeakFrame, \
        TTSTextFrame, VADUserStartedSpeakingFrame, VADUserStoppedSpeakingFrame
    from pipecat.pipeline.worker import PipelineParams
    from pipecat.tests.utils import SleepFrame, run_test

    from pipeline.services.ssm_stt import SSMSTTService
    from pipeline.services.ssm_tts import SSMTTSService

    urls = tuple(s.url for s in two_servers)
    text = "Your order 4417 ships on Tuesday."
    voice = RemoteVoiceEngine(Replicas(urls))
    tts = SSMTTSService(engine=voice, sample_rate=8000, start_buffer_s=0)
    try:
        down, _ = await run_test(tts, frames_to_send=[TTSSpeakFrame(text), SleepFrame(3.0)],
                                 pipeline_params=PipelineParams(audio_out_sample_rate=8000))
    finally:
        await voice.close()
    remote = np.frombuffer(b"".join(f.audio for f in down if isinstance(f, TTSAudioRawFrame)), np.int16)
    local = await engines_local.audio(text)
    assert abs(len(remote) - len(local)) <= 160
    n = min(len(remote), len(local))
    assert np.corrcoef(remote[:n].astype(float), local[:n].astype(float))[0, 1] > 0.99
    assert "4417" in [f.text for f in down if isinstance(f, TTSTextFrame)]

    rate = 8000
    speech = flite_speech("what are your opening hours", rate, voice="kal")
    silence = np.zeros(rate // 2, np.int16)
    whole = engines_local.recogniser.transcribe(np.concatenate([silence, speech, silence]), rate)

    def audio(pcm):
        return [InputAudioRawFrame(audio=pcm[i:i + 160].tobytes(), sample_rate=rate, num_channels=1)
                for i in range(0, len(pcm), 160)]

    recogniser = RemoteRecognizerEngine(Replicas(urls))
    stt = SSMSTTService(engine=recogniser, sample_rate=rate)
    frames = [*audio(silence), VADUserStartedSpeakingFrame(start_secs=0.1), *audio(speech), *audio(silence),
              VADUserStoppedSpeakingFrame(stop_secs=0.2), SleepFrame(2.0)]
    try:
        down, _ = await run_test(stt, frames_to_send=frames,
                                 pipeline_params=PipelineParams(audio_in_sample_rate=rate))
    finally:
        await recogniser.close()
    finals = [f.text for f in down if isinstance(f, TranscriptionFrame)]
    assert len(finals) == 1 and wer([normalize_text(whole)], [normalize_text(finals[0])]) <= 0.2, (whole, finals)


async def test_every_replica_down_is_one_clear_error():
    """No model server answers: the utterance fails with EngineUnavailableError naming them."""
    from pipeline.errors import EngineUnavailableError

    engine = RemoteVoiceEngine(Replicas(("ws://127.0.0.1:9", "ws://127.0.0.1:1")))
    with pytest.raises(EngineUnavailableError, match="no model server answers"):
        async for _ in engine.open(8000).speak("Hello."):
            pass
    stt = RemoteRecognizerEngine(Replicas(("ws://127.0.0.1:9",)))
    utt = stt.open(8000)
    utt.push(bytes(320))
    with pytest.raises(EngineUnavailableError, match="every model server"):
        for fut in utt.finish():
            await utt.take_async(fut)
    await stt.close()


def test_replica_urls_are_checked_at_start():
    from pipeline.builder import PipelineConfig
    from pipeline.errors import PipelineError

    with pytest.raises(PipelineError, match="--model-url"):
        PipelineConfig(stt="remote")
    with pytest.raises(PipelineError, match="ws://HOST:PORT"):
        PipelineConfig(tts="remote", model_urls=("http://a:8080",))
    assert PipelineConfig(stt="remote", tts="remote", model_urls=("ws://a:8080", "ws://b:8080")).model_urls


async def test_a_call_on_the_model_tier_survives_a_replica_killed_mid_call(two_servers, tmp_path):
    """`parley serve --stt remote --tts remote` with two model servers; one is SIGKILLed once the
    first reply has played: every turn of the call is still heard and answered, whole."""
    from harness.callers.twilio import CallerConfig, CallerUtterance, run_call
    from pipeline.records_sqlite import SQLiteCallStore
    from tests.deploy.test_serve_process import TOKEN, _serve, _wait_listening

    db = tmp_path / "calls.db"
    urls = ",".join(s.url for s in two_servers)
    proc = _serve(db, "--stt", "remote", "--tts", "remote", "--model-url", urls)
    said = ("hello how are you", "i would like to check my order", "thank you very much")
    try:
        port = await _wait_listening(proc)
        call = asyncio.create_task(run_call(CallerConfig(
            url=f"ws://127.0.0.1:{port}/twilio/stream", auth_token=TOKEN, timeout_s=90,
            utterances=tuple(CallerUtterance(text=t) for t in said))))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not call.done():
            await asyncio.sleep(0.1)
            if db.exists():
                store = SQLiteCallStore(db)
                try:
                    calls = store.list()
                finally:
                    store.close()
                if calls and calls[0].turns and calls[0].turns[0].agent_text_heard:
                    break
        two_servers[0].proc.send_signal(signal.SIGKILL)
        report = await asyncio.wait_for(call, 120)
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait(10)
        log = proc.stderr.read().decode()
        proc.stderr.close()
    assert f"model server {two_servers[0].url}" in log and "trying another replica" in log, log[-3000:]
    assert not report.connection_lost
    assert len(report.turns) == len(said) and all(t.agent_audio_bytes > 0 for t in report.turns)
    store = SQLiteCallStore(db)
    try:
        record = store.list()[0]
    finally:
        store.close()
    assert len(record.turns) == len(said)
    for turn in record.turns:
        assert turn.user_text and turn.user_text.lower() in turn.agent_text.lower(), (turn.user_text, turn.agent_text)
        assert turn.agent_text_heard                      # the reply played out


async def test_the_images_serve_entry_point_starts_warms_and_drains_on_sigterm():
    """What SageMaker runs (`serve`, from the image's Dockerfile): /ping 200 once warm, SIGTERM ->
    /ping 503 and a clean exit; the Dockerfile declares bidirectional streaming and a non-root user."""
    image = ROOT / "deploy" / "model_server" / "image"
    dockerfile = (image / "Dockerfile").read_text()
    assert "LABEL com.amazonaws.sagemaker.capabilities.bidirectional-streaming=true" in dockerfile
    assert re.search(r"^USER (?!root)\w+", dockerfile, re.M) and 'CMD ["serve"]' in dockerfile
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    server = ModelServerProcess("--grace-s", "5", command=[str(image / "serve")], env=env)
    proc = server.proc
    try:
        await server.ready()
        async with aiohttp.ClientSession() as s:
            ws = await s.ws_connect(f"http://127.0.0.1:{server.port}/tts/websocket")   # holds the drain open
            proc.send_signal(signal.SIGTERM)
            assert (await ws.receive(timeout=10)).json()["type"] == "goaway"
            async with s.get(f"http://127.0.0.1:{server.port}/ping") as r:
                assert r.status == 503
            await ws.close()
        assert await asyncio.to_thread(proc.wait, 30) == 0
        log = server.rest_of_log()
    finally:
        server.stop()
    assert "SIGTERM: draining" in log and "model server stopped" in log, log[-2000:]
