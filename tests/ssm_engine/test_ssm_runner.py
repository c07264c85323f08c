"""BatchRunner: a worker thread owns the model; callers get concurrent.futures.Futures."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from concurrent.futures import Future
from pathlib import Path

import pytest
import torch

from ssm_engine import (
    BatchRunner,
    RunnerClosedError,
    StateError,
    StreamError,
    UnknownStreamError,
    save_checkpoint,
)
from tests.ssm_engine.ssm_helpers import make_model

TIMEOUT_S = 10


def solo(model, x):
    y, _ = model(x[None])
    return y[0]


def test_submit_returns_futures_with_the_stream_outputs():
    model = make_model()
    x = torch.randn(9, 16, dtype=torch.float64)
    with BatchRunner(model) as runner:
        sid = runner.open_stream()
        futs = [runner.submit(sid, x[i:i + 3]) for i in range(0, 9, 3)]
        y = torch.cat([f.result(TIMEOUT_S) for f in futs])
        assert all(isinstance(f, Future) for f in futs)
        runner.close_stream(sid).result(TIMEOUT_S)
    assert (y - solo(model, x)).abs().max() < 1e-10


def test_many_threads_share_batched_steps():
    model = make_model()
    n_streams, n_chunks = 8, 6
    xs = [torch.randn(n_chunks * 2, 16, dtype=torch.float64) for _ in range(n_streams)]
    results: dict[int, list[torch.Tensor]] = {}
    start = threading.Barrier(n_streams)
    with BatchRunner(model) as runner:
        def caller(i: int) -> None:
            sid = runner.open_stream()
            start.wait()
            futs = [runner.submit(sid, xs[i][2 * k:2 * k + 2]) for k in range(n_chunks)]
            results[i] = [f.result(TIMEOUT_S) for f in futs]
            runner.close_stream(sid).result(TIMEOUT_S)
        threads = [threading.Thread(target=caller, args=(i,)) for i in range(n_streams)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(TIMEOUT_S)
        batches = runner.batches_run
    for i, x in enumerate(xs):
        assert (torch.cat(results[i]) - solo(model, x)).abs().max() < 1e-10
    assert batches < n_streams * n_chunks     # some submissions were merged into one batch
    assert runner.open_streams == frozenset()


def test_export_then_resume_in_another_runner():
    model = make_model()
    x = torch.randn(8, 16, dtype=torch.float64)
    with BatchRunner(model) as r1, BatchRunner(model) as r2:
        s1 = r1.open_stream()
        first = r1.submit(s1, x[:5])
        data = r1.export_state(s1).result(TIMEOUT_S)   # sees the chunk submitted before it
        r1.close_stream(s1)
        s2 = r2.open_stream(data)
        rest = r2.submit(s2, x[5:]).result(TIMEOUT_S)
    assert (torch.cat([first.result(TIMEOUT_S), rest]) - solo(model, x)).abs().max() < 1e-10


def test_closed_unknown_and_bad_input_fail_in_the_caller():
    with BatchRunner(make_model()) as runner:
        sid = runner.open_stream()
        runner.close_stream(sid)
        with pytest.raises(UnknownStreamError):
            runner.submit(sid, torch.zeros(1, 16, dtype=torch.float64))
        with pytest.raises(UnknownStreamError):
            runner.export_state(12345)
        with pytest.raises(StateError):
            runner.open_stream(b"not a state")
        sid2 = runner.open_stream()
        with pytest.raises(StreamError):
            runner.submit(sid2, torch.zeros(16, dtype=torch.float64))
    with pytest.raises(RunnerClosedError):
        runner.open_stream()
    with pytest.raises(RunnerClosedError):
        BatchRunner(make_model()).open_stream()


def test_model_error_reaches_the_future_and_the_runner_keeps_serving():
    model = make_model()
    with BatchRunner(model) as runner:
        sid = runner.open_stream()
        bad = runner.submit(sid, torch.zeros(2, 7, dtype=torch.float64))   # wrong width
        with pytest.raises(StateError, match="step expects"):
            bad.result(TIMEOUT_S)
        sid2 = runner.open_stream()
        x = torch.randn(3, 16, dtype=torch.float64)
        assert (runner.submit(sid2, x).result(TIMEOUT_S) - solo(model, x)).abs().max() < 1e-10


def test_cancelled_chunk_is_dropped_without_advancing_the_state():
    model = make_model()
    x = torch.randn(4, 16, dtype=torch.float64)
    gate = threading.Event()

    class Gated:
        """Holds the worker inside its first step until the test has cancelled a queued chunk."""

        def init_state(self, batch):
            return model.init_state(batch)

        def step(self, u, state):
            gate.wait(TIMEOUT_S)
            return model.step(u, state)

        def state_from_bytes(self, data):
            return model.state_from_bytes(data)

    with BatchRunner(Gated()) as runner:
        sid = runner.open_stream()
        first = runner.submit(sid, x[:2])
        while not first.running():
            threading.Event().wait(0.001)
        doomed = runner.submit(sid, torch.full((3, 16), 9.0, dtype=torch.float64))
        assert doomed.cancel()
        last = runner.submit(sid, x[2:])
        gate.set()
        y = torch.cat([first.result(TIMEOUT_S), last.result(TIMEOUT_S)])
    assert (y - solo(model, x)).abs().max() < 1e-10


async def test_futures_are_awaitable_from_an_event_loop():
    """The pipeline layer's contract: asyncio.wrap_future around BatchRunner's futures."""
    model = make_model()
    x = torch.randn(4, 16, dtype=torch.float64)
    with BatchRunner(model) as runner:
        sid = runner.open_stream()
        y = await asyncio.wrap_future(runner.submit(sid, x))
        data = await asyncio.wrap_future(runner.export_state(sid))
        await asyncio.wrap_future(runner.close_stream(sid))
    assert (y - solo(model, x)).abs().max() < 1e-10
    assert model.state_from_bytes(data).batch == 1


def test_state_bytes_continue_in_another_process(tmp_path):
    """Failover: checkpoint + state bytes are all another process needs to continue a stream."""
    model = make_model(dtype=torch.float32)
    save_checkpoint(model, tmp_path / "ckpt")
    x = torch.randn(10, 16)
    with BatchRunner(model) as runner:
        sid = runner.open_stream()
        first = runner.submit(sid, x[:6]).result(TIMEOUT_S)
        (tmp_path / "state.bin").write_bytes(runner.export_state(sid).result(TIMEOUT_S))
    torch.save(x[6:], tmp_path / "rest.pt")
    script = (
        "import sys, torch\n"
        "from ssm_engine import BatchRunner, load_checkpoint\n"
        "torch.set_num_threads(1)\n"
        "d = sys.argv[1]\n"
        "model = load_checkpoint(d + '/ckpt')\n"
        "with BatchRunner(model) as r:\n"
        "    sid = r.open_stream(open(d + '/state.bin', 'rb').read())\n"
        "    y = r.submit(sid, torch.load(d + '/rest.pt')).result(30)\n"
        "torch.save(y, d + '/out.pt')\n"
    )
    root = Path(__file__).resolve().parents[2]
    subprocess.run([sys.executable, "-c", script, str(tmp_path)], check=True, timeout=120,
                   env={**os.environ, "PYTHONPATH": str(root)})
    rest = torch.load(tmp_path / "out.pt")
    assert torch.allclose(torch.cat([first, rest]), solo(model, x), atol=1e-5)
