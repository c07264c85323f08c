"""RunnerProcess: a real BatchRunner in a real child process, against one in this process.

Every child loads the pure SSM recognizer (``models/stt-ssm`` through ``load_stt``: these tests
are about the runner, and its frames may come in any count; the default recogniser on Whisper's
encoder takes whole hops, ``test_whisper_stream``); a start costs
~1.3 s (importing torch), so the tests that neither kill nor stop a child share ``runner``, the
child of an ``SSMSTTEngine(runner="process")`` (the last test, a pipecat call, kills it), and
every other runner a test makes is stopped in a ``finally``. ``local`` is an in-process
``BatchRunner`` over the same checkpoint: what the child's outputs must equal.

Tolerance: the frames cross the socket as float32, bit for bit, so the only differences come
from how each runner happened to group the chunks it had queued (one stream's chunks are joined
into one run; 8 frames or more take the parallel ``prefill`` scan instead of ``step``): the same
float32 sums in another order. Stepping against the prefill scan differs by at most 2e-5 on
these log-probs (which run down to -23), so ``atol=rtol=1e-4`` (as ``test_stt_model`` uses)
passes them and fails a lossy wire: float16 frames move the log-probs by ~1e-2.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest
import torch
from pipecat.frames.frames import (
    ErrorFrame,
    Frame,
    InputAudioRawFrame,
    SystemFrame,
    TranscriptionFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.tests.utils import SleepFrame, run_test

from pipeline.engines import child as child_client
from pipeline.engines import runner_procs
from pipeline.engines.runner_procs import RunnerProcess
from tests.pipeline.child_procs import record_spawns, wait_until
from pipeline.engines.ssm_recognizer import DEFAULT_MODEL_DIR, SSMSTTEngine
from pipeline.services.ssm_stt import SSMSTTService
from ssm_engine import BatchRunner
from ssm_engine.errors import (
    RunnerClosedError,
    SSMEngineError,
    StateError,
    StreamError,
    UnknownStreamError,
)
from ssm_engine.stt.decode import cer
from ssm_engine.stt.model import load_stt
from ssm_engine.stt.text import VOCAB

LOADER = "ssm_engine.stt.model:load_stt"
PURE_MODEL_DIR = DEFAULT_MODEL_DIR.parent / "stt-ssm"
MODEL = str(PURE_MODEL_DIR)
STEP = 160  # samples per frame: the model's d_in
PHONE = 8000
TOL = {"atol": 1e-4, "rtol": 1e-4}  # see the module docstring


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread() -> Iterator[None]:
    """As the child runs (it sets one thread itself)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def process_engine() -> Iterator[SSMSTTEngine]:
    """The recognizer on a process runner; its child serves every test that leaves it running
    (the service test kills it last)."""
    engine = SSMSTTEngine(PURE_MODEL_DIR, runner="process")
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def runner(process_engine) -> RunnerProcess:
    assert isinstance(process_engine.runner, RunnerProcess)
    return process_engine.runner


@pytest.fixture(scope="module")
def local() -> Iterator[BatchRunner]:
    """The same checkpoint stepped in this process: the reference."""
    here = BatchRunner(load_stt(MODEL), name="rp-reference")
    here.start()
    yield here
    here.stop()


@pytest.fixture
def spawned(monkeypatch) -> list[subprocess.Popen]:
    """Every child the runners of a test start (replacements too), in order."""
    return record_spawns(monkeypatch, runner_procs)


def noise(n: int, seed: int) -> torch.Tensor:
    """n frames of quiet noise: (n, 160) float32."""
    return torch.randn(n, STEP, generator=torch.Generator().manual_seed(seed)) * 0.1


def freeze(pid: int) -> None:
    """SIGSTOP ``pid`` and wait until it is stopped: nothing sent to it from now on is answered."""
    os.kill(pid, signal.SIGSTOP)

    def state() -> str:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]

    wait_until(lambda: state() == "T", f"pid {pid} to stop", 10)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


# ---- outputs and order ----------------------------------------------------------------------


def test_outputs_equal_an_in_process_runner_over_interleaved_streams(runner, local):
    """Three streams, chunks of 1, 3 and 25 frames: the first round one at a time (so ``step``
    and ``prefill`` both run in the child), then three rounds submitted without waiting."""
    sids = [runner.open_stream() for _ in range(3)]
    refs = [local.open_stream() for _ in range(3)]
    assert runner.open_streams >= frozenset(sids)
    sizes = (1, 3, 25)
    got, want = [], []
    for rnd in range(4):
        for i in range(3):
            x = noise(sizes[(rnd + i) % 3], seed=100 * rnd + i)
            fut = runner.submit(sids[i], x)
            got.append(fut.result(30) if rnd == 0 else fut)
            want.append(local.submit(refs[i], x))
    for fut_or_y, ref in zip(got, want):
        y = fut_or_y if isinstance(fut_or_y, torch.Tensor) else fut_or_y.result(30)
        expected = ref.result(30)
        assert y.dtype == torch.float32 and y.shape == expected.shape
        torch.testing.assert_close(y, expected, **TOL)
    # log-probs of one frame: the characters', then (the shipped model has a phone head) the
    # phones', each summing to one
    chars = len(VOCAB)
    assert float(got[0][..., :chars].exp().sum()) == pytest.approx(1.0, abs=1e-4)
    assert float(got[0][..., chars:].exp().sum()) == pytest.approx(1.0, abs=1e-4)
    for sid, ref in zip(sids, refs):
        assert runner.close_stream(sid).result(30) is None
        local.close_stream(ref).result(30)
    assert not runner.open_streams & frozenset(sids)


def test_per_stream_order_holds_and_export_sees_every_chunk(runner, local):
    sid, ref = runner.open_stream(), local.open_stream()
    chunks = [noise((1, 2, 3, 25, 5)[k % 5], seed=1000 + k) for k in range(30)]
    done: list[int] = []
    futures = []
    for k, x in enumerate(chunks):  # none waited for
        fut = runner.submit(sid, x)
        fut.add_done_callback(lambda _, k=k: done.append(k))
        futures.append(fut)
    exported = runner.export_state(sid)  # queued behind all of them
    expected = [local.submit(ref, x).result(30) for x in chunks]
    for fut, y in zip(futures, expected):
        torch.testing.assert_close(fut.result(30), y, **TOL)
    state = exported.result(30)
    assert isinstance(state, bytes) and state
    assert done == list(range(len(chunks)))

    resumed = runner.open_stream(state)  # in the child again
    moved = local.open_stream(state)  # and in another runner: the bytes travel
    more = noise(12, seed=2000)
    want = local.submit(ref, more).result(30)
    for fut in (runner.submit(sid, more), runner.submit(resumed, more),
                local.submit(moved, more)):
        torch.testing.assert_close(fut.result(30), want, **TOL)
    for s in (sid, resumed):
        runner.close_stream(s).result(30)
    for s in (ref, moved):
        local.close_stream(s).result(30)


# ---- errors ---------------------------------------------------------------------------------


def test_misuse_is_refused_here_without_a_round_trip(runner, monkeypatch):
    sid, live = runner.open_stream(), runner.open_stream()
    runner.close_stream(sid).result(30)
    with monkeypatch.context() as patch:

        def no_round_trip(sock, body: bytes) -> None:
            raise AssertionError(f"a refused request reached the child: {bytes(body[:40])!r}")

        patch.setattr(child_client, "send_frame", no_round_trip)  # where every request leaves
        for stream_id in (sid, 10**6):
            with pytest.raises(UnknownStreamError, match=f"stream {stream_id} is not open"):
                runner.submit(stream_id, noise(1, 0))
            with pytest.raises(UnknownStreamError):
                runner.export_state(stream_id)
            with pytest.raises(UnknownStreamError):
                runner.close_stream(stream_id)
        with pytest.raises(StreamError, match=re.escape("(n, d_in)")) as raised:
            runner.submit(live, torch.zeros(STEP))
        assert type(raised.value) is StreamError
        with pytest.raises(StreamError, match=re.escape("(n, d_in)")):
            runner.submit(live, [[0.0] * STEP])  # type: ignore[arg-type]
    assert live in runner.open_streams
    runner.close_stream(live).result(30)


def test_bad_state_bytes_and_bad_frames_fail_in_the_child_which_goes_on(runner, local):
    pid, restarts = runner.pid, runner.restarts
    before = runner.open_streams
    for garbage in (b"", b"not a state", bytes(64)):
        with pytest.raises(StateError):
            runner.open_stream(garbage)
        assert runner.open_streams == before  # nothing left open, here or there

    good, bad, ref = runner.open_stream(), runner.open_stream(), local.open_stream()
    x = noise(4, seed=7)
    torch.testing.assert_close(runner.submit(good, x).result(30),
                               local.submit(ref, x).result(30), **TOL)
    wrong = runner.submit(bad, torch.zeros(2, STEP - 60))  # the model takes 160 samples
    exc = wrong.exception(30)
    assert isinstance(exc, SSMEngineError) and "160" in str(exc), exc
    assert runner.close_stream(bad).result(30) is None

    y = noise(25, seed=8)  # the other stream carries on where it was
    torch.testing.assert_close(runner.submit(good, y).result(30),
                               local.submit(ref, y).result(30), **TOL)
    runner.close_stream(good).result(30)
    local.close_stream(ref).result(30)
    assert (runner.pid, runner.restarts) == (pid, restarts)


def test_a_loader_that_fails_stops_start_and_leaves_no_child(spawned, tmp_path):
    cases = [
        ("no_such_module_xyz:load", [], "No module named 'no_such_module_xyz'"),
        (LOADER, [str(tmp_path)], f"{tmp_path}/config.json: no such file"),
    ]
    for loader, args, reason in cases:
        failing = RunnerProcess(loader, args, name="rp-bad")
        with pytest.raises(RunnerClosedError, match=re.escape(reason)):
            failing.start()
        child = spawned[-1]
        assert child.returncode == 1  # it said why, exited, and was reaped
        assert failing.pid is None
        with pytest.raises(RunnerClosedError, match="not started"):
            failing.open_stream()
        failing.stop()
    assert len(spawned) == len(cases)


# ---- a dying child, and stop() ----------------------------------------------------------------


def test_a_killed_child_fails_its_work_forgets_its_streams_and_is_replaced(spawned, local,
                                                                           monkeypatch):
    """Also guards against a replacement outliving a stop() made while it loads (the second
    crash below): it held the model until this process exited."""
    gate = threading.Event()
    gate.set()  # open until the second crash
    recording = runner_procs.spawn_child

    def spawn_gated(module: str, args: list[str]):
        out = recording(module, args)
        gate.wait(30)
        return out

    monkeypatch.setattr(runner_procs, "spawn_child", spawn_gated)
    killed = RunnerProcess(LOADER, [MODEL], name="rp-killed")
    killed.start()
    try:
        sid = killed.open_stream()
        killed.submit(sid, noise(3, seed=1)).result(30)
        old = killed.pid
        freeze(old)  # it cannot answer: the next chunk stays pending
        pending = killed.submit(sid, noise(3, seed=2))
        os.kill(old, signal.SIGKILL)
        with pytest.raises(RunnerClosedError, match=rf"\(pid {old}\) exited with code -9"):
            pending.result(30)
        with pytest.raises((UnknownStreamError, RunnerClosedError)):
            killed.submit(sid, noise(1, seed=3))

        wait_until(lambda: killed.restarts == 1, "the replacement child")
        assert killed.pid != old and alive(killed.pid) and not alive(old)
        assert [p.pid for p in spawned] == [old, killed.pid]
        assert killed.open_streams == frozenset()
        with pytest.raises(UnknownStreamError):  # forgotten: the new child never had it
            killed.submit(sid, noise(1, seed=3))

        fresh, ref = killed.open_stream(), local.open_stream()
        for x in (noise(1, seed=4), noise(25, seed=5)):
            torch.testing.assert_close(killed.submit(fresh, x).result(30),
                                       local.submit(ref, x).result(30), **TOL)
        local.close_stream(ref).result(30)

        gate.clear()  # the next replacement waits to load until the runner is stopped
        os.kill(killed.pid, signal.SIGKILL)
        wait_until(lambda: len(spawned) == 3, "the second replacement to be spawned")
        killed.stop()
        gate.set()
        spawned[2].wait(30)  # TimeoutExpired if the replacement outlives stop()
        assert spawned[2].returncode == 0 and killed.restarts == 1
        with pytest.raises(RunnerClosedError, match="stopped"):
            killed.open_stream()
    finally:
        gate.set()
        killed.stop()
        for child in spawned:
            if child.poll() is None:
                child.kill()
                child.wait()


def test_stop_ends_the_child_drops_queued_work_and_refuses_more(spawned):
    stopped = RunnerProcess(LOADER, [MODEL], name="rp-stopped")
    stopped.start()
    (child,) = spawned
    try:
        sid = stopped.open_stream()
        state = stopped.export_state(sid).result(30)
        stopper = threading.Thread(target=stopped.stop, name="rp-stopper")
        try:
            freeze(child.pid)  # the chunk below waits in the socket
            queued = stopped.submit(sid, noise(3, seed=1))
            stopper.start()
            wait_until(queued.done, "stop() to drop the queued chunk", 30)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child.pid, signal.SIGCONT)
        stopper.join(30)
        assert not stopper.is_alive()
    finally:
        stopped.stop()
    assert queued.cancelled()
    assert child.returncode == 0  # it read EOF and exited: stop() did not have to kill it
    for call in (stopped.open_stream, lambda: stopped.open_stream(state),
                 lambda: stopped.submit(sid, noise(1, seed=2)),
                 lambda: stopped.export_state(sid), lambda: stopped.close_stream(sid)):
        with pytest.raises(RunnerClosedError, match="stopped"):
            call()
    stopped.stop()  # twice is harmless


# ---- the recognizer on a process runner ---------------------------------------------------------


def test_process_engine_transcribes_as_the_thread_engine(process_engine, flite_speech):
    text = "my account number is four four one seven"
    pcm = flite_speech(text, PHONE, voice="rms")
    thread_engine = SSMSTTEngine(PURE_MODEL_DIR)
    try:
        expected = thread_engine.transcribe(pcm, PHONE)
    finally:
        thread_engine.close()
    assert isinstance(process_engine.runner, RunnerProcess) and process_engine.runner.pid
    assert cer([text], [expected]) < 0.3, expected
    assert process_engine.transcribe(pcm, PHONE) == expected


def test_the_default_recogniser_on_whispers_encoder_runs_in_a_process_as_in_a_thread(flite_speech):
    """The child builds its runner with the model's prefill_min: whole hops go through prefill."""
    text = "my account number is four four one seven"
    pcm = flite_speech(text, PHONE, voice="rms")
    engines = [SSMSTTEngine(DEFAULT_MODEL_DIR), SSMSTTEngine(DEFAULT_MODEL_DIR, runner="process")]
    try:
        heard = [e.transcribe(pcm, PHONE) for e in engines]
        assert engines[0].stride % engines[0].model.config.hop_frames == 0
    finally:
        for e in engines:
            e.close()
    assert heard[0] == heard[1]
    assert cer([text], [heard[0]]) < 0.5, heard[0]


def audio_frames(pcm: np.ndarray) -> list[InputAudioRawFrame]:
    step = PHONE // 50
    return [InputAudioRawFrame(audio=pcm[i:i + step].tobytes(), sample_rate=PHONE, num_channels=1)
            for i in range(0, len(pcm), step)]


class KillFrame(SystemFrame):
    """Where ``Killer`` SIGKILLs the runner's child."""


class RestartedFrame(SystemFrame):
    """Where ``Killer`` holds the frames until the runner has a new child."""


class Killer(FrameProcessor):
    """Upstream of the STT: kills the child at a ``KillFrame``, waits out the restart at a
    ``RestartedFrame``."""

    def __init__(self, runner: RunnerProcess) -> None:
        super().__init__()
        self._runner = runner
        self.killed: list[int] = []

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, KillFrame):
            self.killed.append(self._runner.pid)
            os.kill(self._runner.pid, signal.SIGKILL)
            return
        if isinstance(frame, RestartedFrame):
            deadline = time.monotonic() + 60
            while self._runner.restarts < len(self.killed):
                assert time.monotonic() < deadline, "no new child within 60 s"
                await asyncio.sleep(0.02)
            return
        await self.push_frame(frame, direction)


async def _through_a_killer(engine: SSMSTTEngine, frames: list[Frame]) -> tuple[Killer, list, list]:
    """``frames`` through [Killer, SSMSTTService] on the process engine -> (killer, down, up)."""
    killer = Killer(engine.runner)
    down, up = await run_test(Pipeline([killer, SSMSTTService(engine=engine)]), frames_to_send=frames,
                              pipeline_params=PipelineParams(audio_in_sample_rate=PHONE))
    return killer, down, up


async def test_an_utterance_whose_child_is_killed_is_replayed_into_the_replacement(
        process_engine, flite_speech, caplog):
    """The recogniser's process is SIGKILLed halfway through an utterance: the service waits for
    the replacement, replays the utterance so far into it and goes on, so the caller's words are
    heard whole (no error frame, one line in the log); the next utterance is heard too."""
    first_text = "i would like to pay my bill"
    first = flite_speech(first_text, PHONE, voice="rms")
    second_text = "my account number is four four one seven"
    second = flite_speech(second_text, PHONE, voice="rms")
    silence = np.zeros(PHONE // 2, np.int16)
    half = len(first) // 2
    runner = process_engine.runner
    restarts = runner.restarts
    killer, down, up = await _through_a_killer(
        process_engine, [
            *audio_frames(silence), VADUserStartedSpeakingFrame(start_secs=0.2),
            *audio_frames(first[:half]), SleepFrame(0.3), KillFrame(),
            *audio_frames(first[half:]), *audio_frames(silence), SleepFrame(0.3),
            VADUserStoppedSpeakingFrame(stop_secs=0.2), SleepFrame(0.3),
            RestartedFrame(), SleepFrame(1.0),
            *audio_frames(silence), VADUserStartedSpeakingFrame(start_secs=0.2),
            *audio_frames(second), *audio_frames(silence), SleepFrame(1.0),
            VADUserStoppedSpeakingFrame(stop_secs=0.2), SleepFrame(0.5),
        ])
    (pid,) = killer.killed
    assert [f.error for f in up if isinstance(f, ErrorFrame)] == []
    finals = [f.text for f in down if isinstance(f, TranscriptionFrame)]
    assert len(finals) == 2, finals
    assert cer([first_text], finals[:1]) < 0.3 and cer([second_text], finals[1:]) < 0.3, finals
    assert sum("was replayed into it" in r.getMessage() for r in caplog.records) == 1
    assert runner.restarts == restarts + 1 and runner.pid != pid and alive(runner.pid)
    assert runner.open_streams == frozenset()  # both utterances' streams were closed


async def test_an_utterance_that_starts_while_the_child_restarts_is_heard_once_it_is_back(
        process_engine, flite_speech, caplog):
    """The child is killed just before the caller speaks: the utterance opens with no stream,
    keeps its audio, and is heard whole once the replacement takes streams (no error frame)."""
    text = "i would like to pay my bill"
    speech = flite_speech(text, PHONE, voice="rms")
    silence = np.zeros(PHONE // 2, np.int16)
    runner = process_engine.runner
    restarts = runner.restarts
    _, down, up = await _through_a_killer(
        process_engine, [
            KillFrame(), SleepFrame(0.3),       # the runner has seen its child die: no stream opens
            *audio_frames(silence), VADUserStartedSpeakingFrame(start_secs=0.2),
            *audio_frames(speech), *audio_frames(silence),
            VADUserStoppedSpeakingFrame(stop_secs=0.2), SleepFrame(0.3), RestartedFrame(), SleepFrame(1.5),
        ])
    assert [f.error for f in up if isinstance(f, ErrorFrame)] == []
    finals = [f.text for f in down if isinstance(f, TranscriptionFrame)]
    assert len(finals) == 1 and cer([text], finals) < 0.3, finals
    assert runner.restarts == restarts + 1 and runner.open_streams == frozenset()
    said = [r.getMessage() for r in caplog.records if r.name in ("pipeline.services.ssm_stt", "pipeline.engines.ssm_recognizer")]
    assert any("heard while it restarted go into a new stream" in m or "was replayed into it" in m
               for m in said), said     # one or the other, as the restart's timing falls


def test_a_child_error_comes_back_as_its_own_class_and_message():
    from pipeline.engines.runner_procs import _remote_error

    err = _remote_error("UnknownStreamError", "stream 7 is not open")
    assert type(err) is UnknownStreamError and err.stream_id == 7
    assert str(err) == "stream 7 is not open"                 # not "stream stream 7 ... is not open"
    odd = _remote_error("UnknownStreamError", "something else")
    assert type(odd) is SSMEngineError and str(odd) == "UnknownStreamError: something else"
    assert str(_remote_error("StreamError", "bad frames")) == "bad frames"
    assert type(_remote_error("NoSuchError", "x")) is SSMEngineError
