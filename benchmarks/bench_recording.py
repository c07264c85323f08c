"""What recording a call costs the server: CPU and bytes per call-minute, off, WAV and Ogg/Opus.

    python benchmarks/bench_recording.py [--calls 4] [--seconds 60] [--rate 8000] [--seed 0]

``--calls`` synthetic calls, ``--seconds`` of audio each, go through the recorder's real path
(``CallRecorder`` on the event-loop side, one shared ``DiskWriter`` thread encoding and writing)
as fast as the CPU allows: every 20 ms each call gets one caller frame, and while its agent talks
(half the time, in 4 s turns) one 20 ms agent chunk. Seeded voice-like audio on both sides.

Reported per format: ``cpu_s_per_call_minute`` (the process's CPU, both threads, less the same run
with recording off), ``realtime_x`` (audio seconds recorded per CPU second), ``bytes_per_minute``
(one call's file), ``loop_us_per_frame`` (p50/p95/p99 of what the event loop pays per 20 ms:
``caller`` + ``agent``) and ``writer_us_per_frame`` (p50/p95/p99 of the writer thread's CPU per
20 ms of audio, each batch's ``write`` over the frames in it). Warmed up first. One JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import git_sha, percentiles  # noqa: E402

from pipeline.audio.recordings import RecordingWriter, open_recording  # noqa: E402
from telephony.core.recorder import CallRecorder, DiskWriter  # noqa: E402

FORMATS = ("off", "wav", "opus")


class TimedWriter:
    """A recording file whose writes are timed on the thread that makes them (the DiskWriter's)."""

    def __init__(self, file: RecordingWriter, frame: int, costs: list[float]):
        self.file, self.path, self.sample_rate_hz, self.channels = file, file.path, file.sample_rate_hz, file.channels
        self._frame, self._costs = frame, costs

    def write(self, interleaved: bytes) -> None:
        t = time.thread_time_ns()
        self.file.write(interleaved)
        frames = len(interleaved) / (2 * self.channels * self._frame)
        self._costs.append((time.thread_time_ns() - t) / 1000.0 / frames)

    def close(self) -> None:
        self.file.close()


def voice_like(seconds: float, rate: int, rng: np.random.Generator) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    f0 = rng.uniform(100, 220)
    x = (np.sin(2 * np.pi * f0 * t) + 0.5 * np.sin(2 * np.pi * 3 * f0 * t + 1) + 0.2 * rng.standard_normal(t.size))
    return (x * (0.5 + 0.5 * np.sin(2 * np.pi * 3 * t)) * 5000).astype(np.int16)


def run(fmt: str, *, calls: int, seconds: float, rate: int, seed: int, folder: Path) -> dict:
    frame = rate // 50
    rng = np.random.default_rng(seed)
    said = [voice_like(seconds, rate, rng) for _ in range(calls)]
    spoken = [voice_like(seconds, rate, rng) for _ in range(calls)]
    writer = DiskWriter()
    costs: list[float] = []
    loop_us: list[float] = []
    recs = [] if fmt == "off" else [
        CallRecorder(TimedWriter(open_recording(folder / f"{fmt}-{i}", fmt, sample_rate_hz=rate),
                                 frame, costs), writer)
        for i in range(calls)]
    cpu0 = time.process_time()
    for k in range(int(seconds * 50)):
        agent_talks = (k // 200) % 2 == 1                      # 4 s turns, the agent every other one
        for i in range(calls):
            caller = said[i][k * frame:(k + 1) * frame].tobytes()
            agent = spoken[i][k * frame:(k + 1) * frame].tobytes()
            t = time.perf_counter_ns()
            if recs:
                recs[i].caller(caller, rate)
                if agent_talks:
                    recs[i].agent(agent, rate)
            loop_us.append((time.perf_counter_ns() - t) / 1000.0)
    for done in [r.close() for r in recs]:
        done.wait(600)
    cpu = time.process_time() - cpu0
    out: dict = {"cpu_s": round(cpu, 3), "loop_us_per_frame": percentiles(loop_us, digits=2, count=False)}
    if recs:
        out["writer_us_per_frame"] = percentiles(costs, digits=2, count=False)
        out["bytes_per_minute"] = int(recs[0].path.stat().st_size * 60 / seconds)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--rate", type=int, choices=(8000, 16000), default=8000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for fmt in FORMATS:                                     # warm-up: imports, encoder set-up
            run(fmt, calls=1, seconds=2.0, rate=args.rate, seed=args.seed, folder=Path(tmp) / "warm")
        results = {fmt: run(fmt, calls=args.calls, seconds=args.seconds, rate=args.rate, seed=args.seed,
                            folder=Path(tmp)) for fmt in FORMATS}
    call_minutes = args.calls * args.seconds / 60.0
    for fmt in ("wav", "opus"):
        extra = max(results[fmt]["cpu_s"] - results["off"]["cpu_s"], 1e-9)
        results[fmt]["cpu_s_per_call_minute"] = round(extra / call_minutes, 4)
        results[fmt]["realtime_x"] = round(args.calls * args.seconds / extra, 1)
    print(json.dumps({"bench": "recording", "git": git_sha(),
                      "config": {"calls": args.calls, "seconds": args.seconds, "rate_hz": args.rate, "seed": args.seed},
                      "results": results}))


if __name__ == "__main__":
    main()
