"""Where should the VAD run: on a thread per call (pipecat's default) or on the event loop?

pipecat's ``VADAnalyzer.analyze_audio`` hands every 20 ms frame to a one-thread executor of its
own; parley's analyzers (``pipeline.vad.InlineAnalysis``) analyze on the event loop. One run,
both ways alternating, ``--calls`` analyzers fed concurrently as a server's calls would be (each
awaits its frame before the next, 8 kHz phone noise at speech level so the model and the volume
gate both work every frame), Silero and webrtcvad:

* ``await_ms_p50/p95/p99``: how long a call's pipeline waits on one frame's analysis;
* ``cpu_us_per_frame``: the process's CPU (all threads) per analyzed frame, median of the reps;
* ``cpu_ratio_thread_vs_inline``: how much more CPU the thread hand-off costs.

    .venv/bin/python benchmarks/bench_vad_dispatch.py [--calls 16] [--frames 250] [--reps 3]

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
from common import git_sha  # noqa: E402

from loguru import logger  # noqa: E402
from pipecat.audio.vad.vad_analyzer import VADAnalyzer  # noqa: E402

from pipeline.vad import make_vad_analyzer  # noqa: E402


def pct(xs: list[float]) -> dict[str, float]:
    a = np.asarray(xs)
    return {k: round(float(np.percentile(a, q)), 3) for k, q in (("p50", 50), ("p95", 95), ("p99", 99))}


async def one_rep(kind: str, threaded: bool, calls: int, frames: int, pcm: np.ndarray):
    analyzers = [make_vad_analyzer(kind, 8000) for _ in range(calls)]
    for a in analyzers:
        a.set_sample_rate(8000)
        if threaded:  # pipecat's own dispatch: a thread per analyzer
            a.analyze_audio = VADAnalyzer.analyze_audio.__get__(a)
    waits: list[float] = []

    async def call(a, offset: int) -> None:
        for i in range(frames):
            chunk = pcm[(offset + i) * 160:(offset + i + 1) * 160].tobytes()
            t = time.perf_counter()
            await a.analyze_audio(chunk)
            waits.append((time.perf_counter() - t) * 1000.0)

    c0 = time.process_time()
    await asyncio.gather(*(call(a, k) for k, a in enumerate(analyzers)))
    cpu_s = time.process_time() - c0
    for a in analyzers:
        await a.cleanup()
    return waits, cpu_s / (calls * frames) * 1e6


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=16)
    ap.add_argument("--frames", type=int, default=250, help="20 ms frames per call per rep")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    logger.remove()  # pipecat logs every analyzer's model load at DEBUG
    rng = np.random.default_rng(args.seed)
    pcm = np.clip(rng.normal(0, 3000, 8000 * (args.frames + args.calls) // 50 + 160), -32768, 32767).astype(np.int16)
    out: dict[str, object] = {"bench": "vad_dispatch", "calls": args.calls, "frames": args.frames,
                              "reps": args.reps, "seed": args.seed}
    for kind in ("silero", "webrtc"):
        res = {"thread": ([], []), "inline": ([], [])}
        for _ in range(args.reps):
            for mode in ("thread", "inline"):  # alternate: machine noise hits both alike
                waits, cpu_us = await one_rep(kind, mode == "thread", args.calls, args.frames, pcm)
                res[mode][0].extend(waits)
                res[mode][1].append(cpu_us)
        for mode, (waits, cpus) in res.items():
            for k, v in pct(waits).items():
                out[f"{kind}_{mode}_await_ms_{k}"] = v
            out[f"{kind}_{mode}_cpu_us_per_frame"] = round(statistics.median(cpus), 1)
        out[f"{kind}_cpu_ratio_thread_vs_inline"] = round(
            out[f"{kind}_thread_cpu_us_per_frame"] / out[f"{kind}_inline_cpu_us_per_frame"], 2)
    out["git"] = git_sha()
    print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main())
