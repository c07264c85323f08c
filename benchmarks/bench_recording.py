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

    python benchmarks/bench_recording.py --live 16 [--rounds 2] [--turns 3]

``--live N`` asks the same of real calls instead: two ``parley serve`` processes with ``make serve``'s
defaults (bench_capacity's, its scripted LLM; no admission cap, so all N are answered), one
recording every call (Ogg/Opus, the default) and one not, take N concurrent Twilio calls of
``--turns`` turns in turn, ``--rounds`` times each, alternating. Per server: the server process's
CPU (``server_cores``: its event loop and the recordings' writer thread; its engine workers apart,
``engine_cores``), CPU seconds per call-minute of audio, the audio frames its records count dropped
(caller frames lost, agent frames underrun) and late, and v2v p50/p95/p99; the ratios of
recording's to not's. The bytes written per call-minute come from the files.
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
sys.path.insert(0, str(Path(__file__).resolve().parent))   # bench_capacity, for --live

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


async def live(calls: int, rounds: int, turns: int, seed: int, work: Path) -> dict:
    """``calls`` concurrent real calls, recorded and not (module docstring): one JSON-able dict."""
    import asyncio
    import random

    from bench_capacity import SPEC, CapacityServer, load, place
    from bench_transports import PHRASES

    from harness.scripted_llm import ScriptedChatServer, ScriptedReply

    rng = random.Random(seed)
    folder = work / "recordings"
    llm = ScriptedChatServer(lambda _req: ScriptedReply(text="Sure, I can help with that. What else?"))
    await asyncio.to_thread((work / "agent.yaml").write_text, SPEC.format(url=await llm.start()))
    common = ["--max-calls", "10000"]
    servers = {"off": CapacityServer("off", work, str(work / "agent.yaml"), common),
               "recorded": CapacityServer("recorded", work, str(work / "agent.yaml"),
                                          [*common, "--recordings", str(folder)])}
    runs: dict[str, list[dict]] = {name: [] for name in servers}
    try:
        await asyncio.gather(*(s.wait_ready(180) for s in servers.values()))
        for s in servers.values():   # warm-up: the first call loads what every later one reuses
            await place(s, PHRASES[:1], 0.0)
        for _ in range(rounds):
            for name, s in servers.items():
                t0 = time.monotonic()
                level = await load(s, calls, turns, 0.15, rng)
                level["wall_s"] = time.monotonic() - t0
                runs[name].append(level)
                await asyncio.sleep(2.0)   # records and recordings close, workers go idle
    finally:
        for s in servers.values():
            s.stop()
        await llm.stop()
    files = sorted(folder.rglob("*.opus"))
    out: dict = {}
    for name, levels in runs.items():
        server = [lv["cpu_cores"].get("server", 0.0) * lv["wall_s"] for lv in levels]
        engines = [sum(c * lv["wall_s"] for role, c in lv["cpu_cores"].items()
                       if role not in ("server", "callers", "machine_busy")) for lv in levels]
        wall = sum(lv["wall_s"] for lv in levels)
        out[name] = {
            "calls_answered": sum(lv["calls_answered"] for lv in levels),
            "server_cores": round(sum(server) / wall, 3),
            "engine_cores": round(sum(engines) / wall, 3),
            "server_cpu_s_per_call_minute": round(sum(server) / (calls * wall / 60.0), 3),
            "frames_dropped": [lv["frames_dropped"] for lv in levels],
            "frames_late": [lv["frames_late"] for lv in levels],
            "v2v_ms": [lv["v2v_ms"] for lv in levels],
            "machine_busy": [lv["cpu_cores"].get("machine_busy") for lv in levels],
        }
    out["server_cpu_ratio"] = round(out["recorded"]["server_cores"] / max(out["off"]["server_cores"], 1e-9), 3)
    out["all_cpu_ratio"] = round((out["recorded"]["server_cores"] + out["recorded"]["engine_cores"])
                                 / max(out["off"]["server_cores"] + out["off"]["engine_cores"], 1e-9), 3)
    out["recordings"] = len(files)
    out["recorded_minutes"] = round(sum(read_seconds(f) for f in files) / 60.0, 2)
    out["bytes_per_call_minute"] = int(sum(f.stat().st_size for f in files) / max(out["recorded_minutes"], 1e-9))
    return out


def read_seconds(path: Path) -> float:
    from pipeline.audio.recordings import read_recording

    pcm, rate = read_recording(path)
    return pcm.shape[0] / rate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=4, help="synthetic calls (default %(default)s)")
    ap.add_argument("--seconds", type=float, default=60.0, help="of audio per synthetic call (default %(default)s)")
    ap.add_argument("--rate", type=int, choices=(8000, 16000), default=8000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--live", type=int, default=0, metavar="N",
                    help="N concurrent real calls to a recording server and a non-recording one instead")
    ap.add_argument("--rounds", type=int, default=2, help="with --live: loads per server, alternating (default %(default)s)")
    ap.add_argument("--turns", type=int, default=3, help="with --live: turns per call (default %(default)s)")
    args = ap.parse_args()
    if args.live:
        import asyncio

        with tempfile.TemporaryDirectory(prefix="bench-recording-") as tmp:
            results = asyncio.run(live(args.live, args.rounds, args.turns, args.seed, Path(tmp)))
        print(json.dumps({"bench": "recording", "mode": "live", "git": git_sha(),
                          "config": {"calls": args.live, "rounds": args.rounds, "turns": args.turns, "seed": args.seed},
                          "results": results}))
        return
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
