"""VoiceProcess: the SSM voice in a child process, on real children and a real (random) voice.

The voice is test_ssm_tts's untrained one. The module shares one ``VoiceProcess`` (``vp``) and
one in-process ``SSMVoiceEngine`` (``local``) on the same folder; the tests that kill its child
check that it is replaced, and later tests run on the replacement. The tests that close or
instrument a VoiceProcess start their own (``started``), and every one is closed. A child start
costs ~1.3 s (importing torch), so there are few.

Threads: the child runs one torch thread. With two threads here the in-process engine's samples
differed from the child's by up to 53 LSB (intra-op reductions split across threads round
differently, and this untrained vocoder amplifies that); with one thread in both they are
identical, so this module runs one thread too (as test_ssm_tts does) and compares exactly.

``python -m tests.pipeline.test_voice_procs FD ...`` is the probe child of the cancellation
test: the real child, logging which utterances its engine steps (see ``_probe_child``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from pipecat.frames.frames import (
    ErrorFrame,
    Frame,
    TTSAudioRawFrame,
    TTSSpeakFrame,
    TTSTextFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.tests.utils import SleepFrame, run_test

from pipeline.engines import voice_procs
from pipeline.engines.ssm_voice import SpeechChunk, SSMVoiceEngine
from pipeline.engines.voice_procs import VoiceProcess
from pipeline.errors import ConfigError, EngineUnavailableError
from pipeline.services.ssm_tts import SSMTTSService
from ssm_engine.tts.synth import TTSVoice

from .child_procs import record_spawns
from .test_services import of
from .test_ssm_tts import assert_same_speech, random_voice_dir

TEXT = "Your order ships on Tuesday, the third of May."
# one sentence (one utterance even through the service's aggregator), ~50 s of speech: still
# being spoken whenever a test stops or kills it
LONG = "This sentence goes on " + "and on " * 150 + "so that it takes a while to speak."
PROBE_LOG = "PARLEY_TEST_VOICE_PROBE_LOG"


@pytest.fixture(scope="module")
def voice_dir(tmp_path_factory) -> Path:
    torch.set_num_threads(1)  # as the child does: see the module docstring
    return random_voice_dir(tmp_path_factory.mktemp("ssm-voice"))


@pytest.fixture(scope="module")
def local(voice_dir) -> Iterator[SSMVoiceEngine]:
    """The in-process engine: what the child must match."""
    engine = SSMVoiceEngine(TTSVoice.load(voice_dir))
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def vp(voice_dir) -> Iterator[VoiceProcess]:
    voice = VoiceProcess(voice_dir)
    yield voice
    voice.close()


@pytest.fixture
def children(monkeypatch) -> list:
    """Every child process the test's VoiceProcesses start (the ``Popen``s); any still running
    at the end is killed, so a leak fails its test and not the next ones."""
    procs = record_spawns(monkeypatch, voice_procs)
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.fixture
def started(children) -> Iterator[Callable[..., VoiceProcess]]:
    """``started(model_dir)``: a VoiceProcess of the test's own, closed after it."""
    made: list[VoiceProcess] = []

    def start(model_dir: Path, **kwargs) -> VoiceProcess:
        made.append(VoiceProcess(model_dir, **kwargs))
        return made[-1]

    yield start
    for voice in made:
        voice.close()


async def say(engine, text: str, rate_hz: int) -> list[SpeechChunk]:
    async with asyncio.timeout(60):
        return [chunk async for chunk in engine.open(rate_hz).speak(text)]


def pcm_of(chunks: list[SpeechChunk]) -> np.ndarray:
    return np.concatenate([c.pcm for c in chunks])


async def until(cond: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    """Poll ``cond`` until it holds (a deadline, not a timing claim)."""
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"never happened: {what}"
        await asyncio.sleep(0.01)


def hold_restart(voice: VoiceProcess, monkeypatch) -> threading.Event:
    """Make ``voice``'s next restart wait (in its reader thread) until the event is set."""
    go = threading.Event()
    real = voice._start

    def held() -> None:
        go.wait(60)
        real()

    monkeypatch.setattr(voice, "_start", held)
    return go


def exited(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True  # gone and reaped: not even a zombie
    return False


# ---- the same voice as in-process ------------------------------------------------------------


@pytest.mark.parametrize("rate_hz", [16000, 8000])
async def test_the_child_speaks_the_in_process_samples_and_word_times(vp, local, rate_hz):
    remote, here = await say(vp, TEXT, rate_hz), await say(local, TEXT, rate_hz)
    assert np.array_equal(pcm_of(remote), pcm_of(here))
    words = [w for c in remote for w in c.words]
    assert words == [w for c in here for w in c.words]
    assert [w for w, _ in words[:3]] == ["your", "order", "ships"]
    # the pieces (whole 20 ms chunks, as many as each answer held: timing decides) tile the
    # utterance, and each word sits in the piece where it starts
    step = rate_hz // 50
    for chunks in (remote, here):
        assert all(len(c.pcm) % step == 0 for c in chunks)
        assert [c.start_s for c in chunks] == pytest.approx(
            list(np.cumsum([0] + [len(c.pcm) / rate_hz for c in chunks[:-1]])))
        assert all(c.start_s <= t < c.start_s + len(c.pcm) / rate_hz for c in chunks for _, t in c.words)
    assert vp.sample_rate_hz == local.sample_rate_hz


async def test_utterances_at_once_each_get_their_own_audio(vp, local):
    texts = [TEXT, "Good morning, how can I help?", "Please hold the line.",
             "Your package arrives tomorrow afternoon, after three."]
    together = await asyncio.gather(*(say(vp, t, 8000) for t in texts))
    for text, chunks in zip(texts, together, strict=True):
        # steps shared with the others round differently: test_ssm_tts's allowance, which this
        # untrained voice needs (measured: 0.03-0.16 % of samples off by more than 1 LSB, in
        # the child and in-process alike); another utterance's audio fails it
        assert_same_speech(pcm_of(chunks), pcm_of(await say(local, text, 8000)))
    assert not vp._pending


# ---- cancellation reaches the child ----------------------------------------------------------


def _probe_child() -> int:
    """The child of the cancellation test: ``_child_main`` as it is, logging to the file named
    by $PARLEY_TEST_VOICE_PROBE_LOG one line per engine step: ``step 1 2;live 1 2`` (the
    utterances stepped, and those the engine keeps live, numbered as their streams opened)."""
    log = open(os.environ[PROBE_LOG], "a", buffering=1)  # noqa: SIM115 - open for the child's life
    opened = itertools.count(1)
    real_open, real_pull = TTSVoice.open_stream, SSMVoiceEngine._pull

    def number(utts) -> str:
        return " ".join(str(getattr(u._stream, "probe_n", 0)) for u in list(utts))

    def open_stream(self, **kwargs):
        stream = real_open(self, **kwargs)
        stream.probe_n = next(opened)
        return stream

    def pull(self, group):
        log.write(f"step {number(group)};live {number(self._live)}\n")
        return real_pull(self, group)

    TTSVoice.open_stream, SSMVoiceEngine._pull = open_stream, pull
    return voice_procs._child_main(int(sys.argv[1]), sys.argv[2], int(sys.argv[3]),
                                   int(sys.argv[4]), sys.argv[5] == "1")


def probe_steps(log: Path) -> list[tuple[list[int], list[int]]]:
    steps = []
    for line in log.read_text().splitlines():
        stepped, live = line.removeprefix("step ").split(";live ")
        steps.append(([int(n) for n in stepped.split()], [int(n) for n in live.split()]))
    return steps


async def test_a_cancelled_utterance_stops_in_the_child(voice_dir, local, started, tmp_path,
                                                        monkeypatch):
    log = tmp_path / "steps.log"
    monkeypatch.setenv(PROBE_LOG, str(log))
    recording = voice_procs.spawn_child  # ``children``'s: the probe child is killed if leaked
    monkeypatch.setattr(voice_procs, "spawn_child", lambda _module, args: recording(__name__, args))
    voice = started(voice_dir)
    utt = voice.open(8000)
    heard = 0
    async with asyncio.timeout(60), contextlib.aclosing(utt.speak(LONG)) as chunks:
        async for _ in chunks:
            heard += 1
            if heard == 3:
                break                                  # the caller barged in
    assert utt.cancelled
    # the cancel went over the socket before this request: the child has forgotten utterance 1
    async with asyncio.timeout(60):
        assert await asyncio.wrap_future(voice.request(utt, 0.0)) is None
    before = probe_steps(log)
    assert sum(1 in stepped for stepped, _ in before) >= 3   # it was being spoken in the child
    # another utterance still speaks, exactly, and the child's engine never steps the first again
    assert np.array_equal(pcm_of(await say(voice, TEXT, 8000)),
                          pcm_of(await say(local, TEXT, 8000)))
    after = probe_steps(log)[len(before):]
    assert after and all(stepped == [2] and live in ([], [2]) for stepped, live in after)
    assert not voice._pending  # every request was answered (the cancelled ones to no one)


# ---- a voice that cannot start ---------------------------------------------------------------


def test_a_missing_voice_is_named_and_starts_no_child(tmp_path, children):
    with pytest.raises(EngineUnavailableError,
                       match=r"no SSM voice at .*: config\.json, model\.safetensors missing"):
        VoiceProcess(tmp_path / "nothing")
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(EngineUnavailableError, match=r": model\.safetensors missing"):
        VoiceProcess(tmp_path)
    assert children == []


def test_a_corrupt_model_gives_the_childs_reason_and_leaves_no_child(voice_dir, tmp_path,
                                                                     children):
    shutil.copy(voice_dir / "config.json", tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"\x07not a model" * 100)
    with pytest.raises(EngineUnavailableError, match=r"the SSM voice process failed: .*"
                       r"model\.safetensors: corrupt or unreadable safetensors"):
        VoiceProcess(tmp_path)
    (proc,) = children
    assert proc.returncode == 1 and exited(proc.pid)


def test_bad_arguments_and_a_child_given_up_on_leave_no_child(voice_dir, children, monkeypatch):
    """Regression guard: bad arguments reached the child, which died of them before it was
    ready, and a child given up on (it never said ready, or died first) was killed but never
    reaped: a zombie, and an error saying "exit code None"."""
    for kwargs in ({"lead_chunks": 0}, {"max_batch": 0}):
        with pytest.raises(ConfigError, match="must be >= 1"):
            VoiceProcess(voice_dir, **kwargs)
    assert children == []
    monkeypatch.setattr(voice_procs, "_LOAD_TIMEOUT_S", 0.01)  # importing torch takes ~1 s
    with pytest.raises(EngineUnavailableError,
                       match=r"did not start \(timed out; exit code -?\d+\)"):
        VoiceProcess(voice_dir)
    (proc,) = children
    assert exited(proc.pid)


# ---- a child that dies -----------------------------------------------------------------------


async def test_a_killed_child_fails_its_utterances_and_a_new_one_takes_over(
        vp, local, monkeypatch):
    voice, before = vp, vp.restarts
    old = voice.pid
    restarted = hold_restart(voice, monkeypatch)
    utt = voice.open(16000)
    heard = 0
    with pytest.raises(EngineUnavailableError, match="SSM voice process"):
        async with asyncio.timeout(60), contextlib.aclosing(utt.speak(LONG)) as chunks:
            async for _ in chunks:
                heard += 1
                if heard == 1:
                    os.kill(old, signal.SIGKILL)
    assert not voice._pending
    # while the new child starts, a new utterance fails at once
    await until(lambda: voice._sock is None, "the reader saw the child die")
    with pytest.raises(EngineUnavailableError, match="died and is restarting"):
        await say(voice, TEXT, 16000)
    assert voice.restarts == before
    restarted.set()
    await until(lambda: voice.restarts == before + 1, "a new child")
    assert exited(old)  # reaped before the new one started
    assert voice.pid != old
    assert np.array_equal(pcm_of(await say(voice, TEXT, 16000)),
                          pcm_of(await say(local, TEXT, 16000)))


# ---- the pipecat service over a VoiceProcess -------------------------------------------------


async def test_the_service_speaks_through_the_child(vp, local):
    down, _ = await run_test(SSMTTSService(engine=vp, sample_rate=8000),
                             frames_to_send=[TTSSpeakFrame(TEXT), SleepFrame()])
    audio = of(down, TTSAudioRawFrame)
    assert audio and all(f.sample_rate == 8000 for f in audio)
    got = np.concatenate([np.frombuffer(f.audio, np.int16) for f in audio])
    assert np.array_equal(got, pcm_of(await say(local, TEXT, 8000)))
    assert [w.text for w in of(down, TTSTextFrame)] == TEXT.split()


class KillOnFirstAudio(FrameProcessor):
    """After the TTS: kills the voice's child as the first audio of the call comes by."""

    def __init__(self, voice: VoiceProcess):
        super().__init__()
        self.voice = voice
        self.killed: list[int] = []

    async def process_frame(self, frame: Frame, direction: FrameDirection):
        await super().process_frame(frame, direction)
        if isinstance(frame, TTSAudioRawFrame) and not self.killed:
            self.killed.append(self.voice.pid)
            os.kill(self.voice.pid, signal.SIGKILL)
        await self.push_frame(frame, direction)


class HoldUntilRestarted(FrameProcessor):
    """Before the TTS: holds a ``TTSSpeakFrame`` of ``text`` until the voice's child is back."""

    def __init__(self, voice: VoiceProcess, text: str):
        super().__init__()
        self.voice, self.text = voice, text
        self.restarts = voice.restarts

    async def process_frame(self, frame: Frame, direction: FrameDirection):
        await super().process_frame(frame, direction)
        if isinstance(frame, TTSSpeakFrame) and frame.text == self.text:
            await until(lambda: self.voice.restarts == self.restarts + 1, "a new child")
        await self.push_frame(frame, direction)


async def test_the_service_reports_a_dead_child_and_the_call_goes_on(vp, local):
    voice, before = vp, vp.restarts
    after = "Thank you for waiting."
    killer = KillOnFirstAudio(voice)
    tts = SSMTTSService(engine=voice, sample_rate=8000)
    down, up = await run_test(
        Pipeline([HoldUntilRestarted(voice, after), tts, killer]),
        frames_to_send=[TTSSpeakFrame(LONG), TTSSpeakFrame(after), SleepFrame()],
    )
    (error,) = of(down + up, ErrorFrame)
    assert isinstance(error.exception, EngineUnavailableError) and "SSM voice failed" in error.error
    assert killer.killed and voice.restarts == before + 1 and tts.is_usable
    audio = of(down, TTSAudioRawFrame)
    contexts = list(dict.fromkeys(f.context_id for f in audio))
    assert len(contexts) == 2  # the long text, cut short, then the next one whole
    spoken = np.concatenate([np.frombuffer(f.audio, np.int16) for f in audio
                             if f.context_id == contexts[1]])
    assert np.array_equal(spoken, pcm_of(await say(local, after, 8000)))


# ---- close -----------------------------------------------------------------------------------


async def test_close_ends_the_child_and_later_requests_fail(voice_dir, local, started):
    """Regression guard: close() closed its socket while the reader thread sat in recv() on
    it, so the child never saw EOF and was killed after 5 s (exit code -9)."""
    voice = started(voice_dir)
    pid = voice.pid
    os.kill(pid, signal.SIGTERM)  # ignored: the server decides when its voice stops
    os.kill(pid, signal.SIGINT)
    assert np.array_equal(pcm_of(await say(voice, TEXT, 8000)),
                          pcm_of(await say(local, TEXT, 8000)))
    assert voice.pid == pid and voice.restarts == 0
    voice.close()
    assert voice._proc.returncode == 0 and exited(pid)  # it left on EOF, not killed
    with pytest.raises(EngineUnavailableError, match="closed"):
        voice.request(voice.open(8000), 0.0, TEXT)
    with pytest.raises(EngineUnavailableError, match="closed"):
        await say(voice, TEXT, 8000)
    voice.close()  # twice is harmless
    assert voice.restarts == 0


async def test_close_while_a_new_child_starts_leaves_no_child(voice_dir, started, children,
                                                            monkeypatch):
    """Regression guard: a restart that finished after close() kept its new child running."""
    voice = started(voice_dir)
    go = hold_restart(voice, monkeypatch)
    reader = voice._reader
    os.kill(voice.pid, signal.SIGKILL)
    await until(lambda: voice._sock is None, "the reader saw the child die")
    closing = asyncio.create_task(asyncio.to_thread(voice.close))
    await until(lambda: voice._closed, "close() began")
    go.set()                                   # the new child starts now, after close()
    await closing
    await until(lambda: not reader.is_alive(), "the restart ended")
    assert children and all(proc.poll() is not None for proc in children)
    with pytest.raises(EngineUnavailableError, match="closed"):
        await say(voice, TEXT, 8000)


if __name__ == "__main__":
    raise SystemExit(_probe_child())


async def test_a_child_asked_to_compile_speaks_the_in_process_samples(voice_dir, local, started):
    """``VoiceProcess(compile=True)``: the child compiles a lone utterance's steps before it is
    ready (``TTSVoice.compile_steps``) and speaks what the eager voice in this process speaks,
    float rounding aside (the compiled graph adds in another order, which this untrained
    voice's vocoder amplifies late in an utterance: ``assert_same_speech``)."""
    from .test_ssm_tts import assert_same_speech

    voice = started(voice_dir, compile=True)
    remote, here = await say(voice, TEXT, 8000), await say(local, TEXT, 8000)
    assert_same_speech(pcm_of(remote), pcm_of(here))
    assert [w for c in remote for w in c.words] == [w for c in here for w in c.words]
