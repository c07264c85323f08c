"""Does batching every call's Silero VAD into one ONNX run per loop tick pay, and where should it run?

N simulated calls on one asyncio loop, each feeding 8 kHz 20 ms frames to its own analyzer (phone
noise at speech level: the model and the volume gate work every frame), four ways in one run:

* ``inline``: one model run per call per window on the event loop (the baseline);
* ``loop``: ``BatchedSileroVADAnalyzer``, the tick's windows in one run on the event loop;
* ``thread``: the same batch, run on the process's one Silero thread (one hand-off per batch);
* ``gather10``: ``loop`` with the batch held open 10 ms for late windows;
* ``none``: no analysis at all (an ``analyze_audio`` that returns at once): the harness's own cost.

Two feeding patterns: ``burst`` (every call's frame arrives in the same loop iteration, as when a
busy loop has let them pile up; as fast as possible) and ``paced`` (real time, each call at its own
random phase within the 20 ms, against an absolute clock: the loop's idle case). Per N and way:

* ``cpu_ms_per_call_s``: process CPU (all threads) per second of one call's audio, and
  ``vad_cpu_ms_per_call_s``: the same less ``none``'s (the VAD's own share);
* ``loop_ms_per_tick``: the event-loop thread's CPU per 20 ms tick, p50/p95/p99;
* ``frame_ms``: how long a call waits on ``analyze_audio`` for a frame, p50/p95/p99;
* ``windows_per_run``: mean batch size; ``vad_cpu_ratio_inline_vs_<way>``: the baseline's VAD CPU
  over the way's.

    .venv/bin/python benchmarks/bench_vad_batch.py [--calls 1,4,8,16,32] [--burst-frames 250]
        [--paced-frames 100] [--reps 2] [--seed 0]

Prints one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from common import git_sha, percentiles  # noqa: E402

from loguru import logger  # noqa: E402
from pipecat.audio.vad.vad_analyzer import VADState  # noqa: E402

from pipeline.vad import make_vad_analyzer  # noqa: E402

RATE_HZ = 8000
FRAME = RATE_HZ // 50
TICK_S = 0.02
WAYS = {"none": ("", 0.0), "inline": ("inline", 0.0), "loop": ("loop", 0.0), "thread": ("thread", 0.0),
        "gather10": ("loop", 10.0)}


class NoAnalysis:
    async def analyze_audio(self, buffer: bytes) -> VADState:
        return VADState.QUIET


def analyzers(way: str, calls: int) -> list:
    dispatch, gather_ms = WAYS[way]
    if not dispatch:
        return [NoAnalysis() for _ in range(calls)]
    out = [make_vad_analyzer("silero", RATE_HZ, silero_dispatch=dispatch, silero_gather_ms=gather_ms)  # type: ignore[arg-type]
           for _ in range(calls)]
    for a in out:
        a.set_sample_rate(RATE_HZ)
    return out


def batch_counts(vads: list) -> tuple[int, int]:
    b = getattr(vads[0], "_batcher", None)
    return (b.batches, b.windows) if b is not None else (0, 0)


async def burst(way: str, calls: int, frames: int, pcm: np.ndarray):
    vads = analyzers(way, calls)
    for k in range(10):  # warm up: the batcher, the thread, the allocator
        await asyncio.gather(*(a.analyze_audio(pcm[k * FRAME:(k + 1) * FRAME].tobytes()) for a in vads))
    runs0 = batch_counts(vads)
    loop_ms, frame_ms = [], []

    async def one(a, chunk: bytes) -> None:
        t = time.perf_counter_ns()
        await a.analyze_audio(chunk)
        frame_ms.append((time.perf_counter_ns() - t) / 1e6)

    c0 = time.process_time()
    for k in range(frames):
        t0 = time.thread_time()
        await asyncio.gather(*(one(a, pcm[(k + j) * FRAME:(k + j + 1) * FRAME].tobytes()) for j, a in enumerate(vads)))
        loop_ms.append((time.thread_time() - t0) * 1e3)
    cpu_s = time.process_time() - c0
    return cpu_s, loop_ms, frame_ms, runs0, batch_counts(vads)


async def paced(way: str, calls: int, frames: int, pcm: np.ndarray, rng: np.random.Generator):
    vads = analyzers(way, calls)
    for k in range(10):
        await asyncio.gather(*(a.analyze_audio(pcm[k * FRAME:(k + 1) * FRAME].tobytes()) for a in vads))
    runs0 = batch_counts(vads)
    phases = rng.uniform(0, TICK_S, calls)
    loop_ms, frame_ms = [], []
    start = time.perf_counter() + 0.05

    async def call(a, j: int) -> None:
        for k in range(frames):
            await asyncio.sleep(max(0.0, start + phases[j] + k * TICK_S - time.perf_counter()))
            t = time.perf_counter_ns()
            await a.analyze_audio(pcm[(k + j) * FRAME:(k + j + 1) * FRAME].tobytes())
            frame_ms.append((time.perf_counter_ns() - t) / 1e6)

    async def ticker() -> None:  # the loop thread's CPU in each 20 ms of wall clock
        await asyncio.sleep(max(0.0, start - time.perf_counter()))
        last = time.thread_time()
        for k in range(1, frames + 1):
            await asyncio.sleep(max(0.0, start + k * TICK_S - time.perf_counter()))
            now = time.thread_time()
            loop_ms.append((now - last) * 1e3)
            last = now

    c0 = time.process_time()
    await asyncio.gather(ticker(), *(call(a, j) for j, a in enumerate(vads)))
    cpu_s = time.process_time() - c0
    return cpu_s, loop_ms, frame_ms, runs0, batch_counts(vads)


def summary(reps: list, calls: int, frames: int) -> dict:
    cpu = [r[0] for r in reps]
    runs = sum(r[4][0] - r[3][0] for r in reps)
    windows = sum(r[4][1] - r[3][1] for r in reps)
    return {
        "cpu_ms_per_call_s": round(statistics.median(cpu) * 1e3 / (calls * frames * TICK_S), 2),
        "loop_ms_per_tick": percentiles([x for r in reps for x in r[1]], digits=3),
        "frame_ms": percentiles([x for r in reps for x in r[2]], digits=3, count=False),
        "windows_per_run": round(windows / runs, 2) if runs else 1.0,
    }


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", default="1,4,8,16,32")
    ap.add_argument("--burst-frames", type=int, default=250, help="20 ms frames per call per rep, burst")
    ap.add_argument("--paced-frames", type=int, default=100, help="20 ms frames per call per rep, paced")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    logger.remove()  # pipecat logs every analyzer's model load at DEBUG
    counts = [int(c) for c in args.calls.split(",")]
    rng = np.random.default_rng(args.seed)
    longest = max(args.burst_frames, args.paced_frames) + max(counts) + 10
    pcm = np.clip(rng.normal(0, 3000, longest * FRAME), -32768, 32767).astype(np.int16)
    out: dict[str, object] = {"bench": "vad_batch", "rate_hz": RATE_HZ, "calls": counts, "reps": args.reps,
                              "burst_frames": args.burst_frames, "paced_frames": args.paced_frames,
                              "seed": args.seed}
    for pattern, frames in (("burst", args.burst_frames), ("paced", args.paced_frames)):
        table: dict[str, dict] = {}
        for calls in counts:
            reps: dict[str, list] = {way: [] for way in WAYS}
            for _ in range(args.reps):
                for way in WAYS:  # alternate: machine noise hits every way alike
                    if pattern == "burst":
                        reps[way].append(await burst(way, calls, frames, pcm))
                    else:
                        reps[way].append(await paced(way, calls, frames, pcm, rng))
            row = {way: summary(r, calls, frames) for way, r in reps.items()}
            floor = row["none"]["cpu_ms_per_call_s"]
            for way in WAYS:
                if way != "none":
                    row[way]["vad_cpu_ms_per_call_s"] = round(row[way]["cpu_ms_per_call_s"] - floor, 2)
            for way in WAYS:
                if way not in ("none", "inline"):
                    row[f"vad_cpu_ratio_inline_vs_{way}"] = round(
                        row["inline"]["vad_cpu_ms_per_call_s"] / max(row[way]["vad_cpu_ms_per_call_s"], 0.01), 2)
            table[str(calls)] = row
        out[pattern] = table
    out["git"] = git_sha()
    print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main())
