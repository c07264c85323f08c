"""How many concurrent calls does one server answer in time, and what happens past its cap?

Two real servers on loopback, side by side in one run: ``parley serve`` with ``make serve``'s
defaults (its admission cap calibrated at start; ``--max-calls`` passes one instead) and stock
pipecat (``parley serve --stock-pipecat``: Silero, smart-turn v3, sentences; the same engines,
agent and cap rule). The agent's LLM is a scripted OpenAI-compatible server on loopback
(``harness.scripted_llm``, a short reply at once), so the figures are the voice pipeline's.
At each load in ``--calls``, per server (one server at a time, the other idle): that many Twilio
calls (``harness.callers.twilio``: the voice webhook, then Media Streams, flite's voice in real
time), started ``--stagger-ms`` apart, ``--turns`` turns each. Per load and server:

* ``v2v_ms``: end of the caller's speech to the first agent audio byte, p50/p95/p99 (turns where
  the caller talked over the agent are left out and counted, ``overlapped_turns``), and
  ``turns_over_600ms``; ``held_turns``: those the end of turn held 450 ms by design (what the
  server heard looks unfinished, ``pipeline.turn_end.looks_unfinished``: "no thank you" may go on
  to a goodbye), and ``v2v_ms_not_held`` over the others, with the three slowest of them
  (``slowest_not_held``: what the caller said, what the server heard);
* ``stages_ms``: where that time goes, each stage's moment after the end of speech as the server
  saw it (the VAD's stop, the final transcript, the agent's first text, the voice's first audio),
  p50/p95/p99;
* ``calls_answered``, ``refused_busy`` (the webhook answered ``<Reject reason="busy">``: the cap),
  ``refused_503`` (an HTTP 503), ``calls_failed`` (anything else), ``unanswered_turns``;
* ``frames_dropped`` / ``frames_late``: the agent and caller audio frames the server counted lost
  or underrun / late, summed from each call's record (as bench_transports and bench_soak read them);
* ``cpu_cores``: CPU used meanwhile, per process of the server (the server, its recogniser,
  final-pass and voice workers), the callers (this process), and ``machine_busy`` (every core, all processes).

``max_calls``: the cap each server said at start ("admitting at most N calls" in its log).
``calls_in_time_p50`` / ``_p95``: the largest load whose v2v p50 / p95 stayed within 600 ms.
A plot of v2v p50 and p95 against calls, both servers, with the 600 ms line, goes to ``--plot``
(PNG through matplotlib when it is installed, else SVG). Prints one JSON line.

    .venv/bin/python benchmarks/bench_capacity.py                 # 4 8 12 16 24 32 calls, 3 turns
    .venv/bin/python benchmarks/bench_capacity.py --calls 4 8 16 --turns 2
    .venv/bin/python benchmarks/bench_capacity.py --max-calls 10000   # no cap: the whole curve
    .venv/bin/python benchmarks/bench_capacity.py --quick         # a smoke run: 2 and 4 calls
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_soak import ROLES, _cmdline  # noqa: E402
from bench_transports import PHRASES, TOKEN, Server, _empty, machine_cpu_seconds, twilio_call  # noqa: E402
from common import git_sha, percentiles  # noqa: E402

from benchmarks.serve_process import ServeProcess, free_port  # noqa: E402
from harness.errors import CallerError  # noqa: E402
from harness.scripted_llm import ScriptedChatServer, ScriptedReply  # noqa: E402
from pipeline.capacity import usable_cores  # noqa: E402
from pipeline.turn_end import looks_unfinished  # noqa: E402
from telephony.loop_lag import LoopLagProbe  # noqa: E402

TARGET_MS = 600.0
SPEC = """
name: Capacity reception
persona: You are a receptionist.
greeting: Hello, how can I help?
llm: {{backend: openai, model: capacity, base_url: "{url}", timeout_s: 10}}
"""
CAP_LINE = re.compile(r"admitting at most (\d+) calls: .*")


class CapacityServer(Server):
    """One ``parley serve`` (``--stock-pipecat`` for the baseline) with make serve's defaults."""

    def __init__(self, name: str, work: Path, agent: str, extra: list[str]) -> None:
        port = free_port()
        ServeProcess.__init__(self, name, ["-m", "deploy.cli", "serve", "--agent", agent, "--port", str(port),
                                           "--db", str(work / f"{name}.db"), "--log-level", "INFO",
                                           "--no-llm-check", *extra],
                              port=port, log_path=work / f"{name}.log", env={"TWILIO_AUTH_TOKEN": TOKEN})
        self.sip_port = 0  # Twilio calls only

    def cap(self) -> tuple[int | None, str | None]:
        """The cap the server said at start, and its line."""
        m = CAP_LINE.search(self.log_tail(10**6))
        return (int(m.group(1)), m.group(0)) if m else (None, None)

    def cpu_by_role(self) -> dict[int, tuple[str, float]]:
        """pid -> (its role, CPU seconds so far) for the server and its engine processes."""
        try:
            import psutil
        except ImportError:
            psutil = None
        out: dict[int, tuple[str, float]] = {}
        if psutil is not None:
            try:
                root = psutil.Process(self.proc.pid)
                procs = [root, *root.children(recursive=True)]
            except psutil.Error:
                return out
            for p in procs:
                try:
                    t = p.cpu_times()
                    out[p.pid] = (self._role(p.pid), t.user + t.system)
                except psutil.Error:
                    continue
            return out
        tick = os.sysconf("SC_CLK_TCK")
        for entry in filter(str.isdigit, os.listdir("/proc")):
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            if int(entry) == self.proc.pid or int(fields[1]) == self.proc.pid:
                out[int(entry)] = (self._role(int(entry)), (int(fields[11]) + int(fields[12])) / tick)
        return out

    def _role(self, pid: int) -> str:
        if pid == self.proc.pid:
            return "server"
        cmd = _cmdline(pid)
        return next((role for needle, role in ROLES if needle in cmd), "other")


class CpuWindow:
    """CPU used between ``start`` and ``stop``: per role of the server's processes, this
    process's (the callers), and how busy the whole machine was."""

    def __init__(self, server: CapacityServer) -> None:
        self.server = server

    def start(self) -> None:
        self.t0, self.own0 = time.monotonic(), time.process_time()
        self.procs0, self.machine0 = self.server.cpu_by_role(), machine_cpu_seconds()

    def stop(self) -> dict[str, float]:
        wall = max(1e-9, time.monotonic() - self.t0)
        procs, machine = self.server.cpu_by_role(), machine_cpu_seconds()
        cores: dict[str, float] = {}
        for pid, (role, seconds) in procs.items():
            cores[role] = cores.get(role, 0.0) + (seconds - self.procs0.get(pid, (role, 0.0))[1]) / wall
        out = {role: round(c, 2) for role, c in sorted(cores.items())}
        out["callers"] = round((time.process_time() - self.own0) / wall, 2)
        out["machine_busy"] = round((machine[0] - self.machine0[0]) / max(1e-9, machine[1] - self.machine0[1]), 3)
        return out


async def place(server: CapacityServer, phrases: list[str], delay_s: float) -> dict:
    """One call after ``delay_s``: its figures (bench_transports' shape) and how it ended."""
    await asyncio.sleep(delay_s)
    out = _empty()
    try:
        await twilio_call(server, phrases, out)
        out["outcome"] = "answered"
    except CallerError as exc:
        text = str(exc)
        out["outcome"] = ("refused_busy" if "rejected the call" in text and "busy" in text
                          else "refused_503" if "HTTP 503" in text else "failed")
        out["errors"].append(text[:200])
    except (OSError, TimeoutError) as exc:
        out["outcome"] = "failed"
        out["errors"].append(f"{type(exc).__name__}: {exc}"[:200])
    return out


async def load(server: CapacityServer, n: int, turns: int, stagger_s: float, rng: random.Random) -> dict:
    """``n`` calls started ``stagger_s`` apart: the figures of this load."""
    window = CpuWindow(server)
    lags: list[float] = []
    probe = asyncio.get_running_loop().create_task(LoopLagProbe(lags.append, interval_s=0.02).run())
    window.start()
    try:
        calls = await asyncio.gather(*(place(server, rng.sample(PHRASES, turns), i * stagger_s) for i in range(n)))
    finally:
        probe.cancel()
    cpu = window.stop()
    v2v = [x for c in calls for x in c["v2v"] if x is not None]
    # the end of turn holds what it heard as unfinished ("no thank you": a goodbye may follow) by
    # design, 450 ms (pipeline.turn_end): those turns apart, and the slowest with what was heard
    timed = [(said, heard, ms, looks_unfinished(heard, first_turn=turn == 1))
             for c in calls for turn, said, heard, ms in c["turns"] if ms is not None]
    prompt = [(said, heard, ms) for said, heard, ms, held in timed if not held]
    stats = [c["server_stats"] for c in calls]
    outcomes = [c["outcome"] for c in calls]
    lag = percentiles(lags)
    return {
        "v2v_ms": percentiles(v2v),
        # where a turn's time goes: each stage's time after the end of speech, as the server saw it
        "stages_ms": {stage: percentiles([x for c in calls for x in c["stages"][stage]])
                      for stage in ("vad_stop", "stt_final", "first_text", "tts_first_audio")},
        "turns_over_600ms": sum(1 for x in v2v if x > TARGET_MS),
        "held_turns": len(timed) - len(prompt),
        "v2v_ms_not_held": percentiles([ms for _, _, ms in prompt]),
        "slowest_not_held": [{"said": said, "heard": heard, "v2v_ms": round(ms)}
                             for said, heard, ms in sorted(prompt, key=lambda t: -t[2])[:3]],
        "overlapped_turns": sum(len(c["v2v_overlapped"]) for c in calls),
        "calls_answered": outcomes.count("answered"), "refused_busy": outcomes.count("refused_busy"),
        "refused_503": outcomes.count("refused_503"), "calls_failed": outcomes.count("failed"),
        "unanswered_turns": sum(c["unanswered"] + sum(1 for x in c["v2v"] + c["v2v_overlapped"] if x is None)
                                for c in calls if c["outcome"] == "answered"),
        "frames_dropped": sum(s.get("frames_in_lost", 0) + s.get("frames_out_underrun", 0) for s in stats),
        "frames_late": sum(s.get("frames_in_late", 0) + s.get("frames_out_late", 0) for s in stats),
        "cpu_cores": cpu,
        "caller_loop_lag_ms_p99": lag["p99"],  # the callers' own clock: trustworthy while small
        "errors": sorted({e for c in calls for e in c["errors"] if c["outcome"] == "failed"})[:3],
    }


def in_time(levels: dict[str, dict], key: str) -> int | None:
    """The largest load whose v2v ``key`` stayed within the target (None: not even the first)."""
    ok = [int(n) for n, lv in levels.items() if lv["v2v_ms"][key] is not None and lv["v2v_ms"][key] <= TARGET_MS]
    return max(ok) if ok else None


def plot(path: Path, servers: dict[str, dict]) -> str:
    """v2v p50 and p95 against calls, per server, and the target: PNG (matplotlib) or SVG."""
    series = {f"{name} {key}": [(int(n), lv["v2v_ms"][key]) for n, lv in s["levels"].items()
                                if lv["v2v_ms"][key] is not None]
              for name, s in servers.items() for key in ("p50", "p95")}
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        path = path.with_suffix(".svg")
        path.write_text(_svg(series))
        return str(path)
    path = path.with_suffix(".png")
    fig, ax = plt.subplots(figsize=(7, 4))
    for label, points in series.items():
        if points:
            ax.plot(*zip(*points), marker="o", linestyle="-" if "p50" in label else "--", label=label)
    ax.axhline(TARGET_MS, color="grey", linewidth=1, label=f"{TARGET_MS:.0f} ms target")
    ax.set_xlabel("concurrent calls")
    ax.set_ylabel("voice to voice, ms")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return str(path)


def _svg(series: dict[str, list[tuple[int, float]]], w: int = 640, h: int = 360, pad: int = 50) -> str:
    """The same plot without matplotlib: lines on linear axes, the target dashed, a legend."""
    xs = [x for pts in series.values() for x, _ in pts] or [1]
    ys = [y for pts in series.values() for _, y in pts] + [TARGET_MS]
    x_max, y_max = max(xs) * 1.05, max(ys) * 1.1

    def px(x: float, y: float) -> str:
        return f"{pad + x / x_max * (w - 2 * pad):.1f},{h - pad - y / y_max * (h - 2 * pad):.1f}"

    colours = ["#1f77b4", "#1f77b4", "#d62728", "#d62728"]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" '
           f'font-size="11"><rect width="{w}" height="{h}" fill="white"/>',
           f'<polyline points="{px(0, y_max)} {px(0, 0)} {px(x_max, 0)}" fill="none" stroke="black"/>',
           f'<polyline points="{px(0, TARGET_MS)} {px(x_max, TARGET_MS)}" stroke="grey" stroke-dasharray="2,3"/>',
           f'<text x="{w // 2 - 50}" y="{h - 12}">concurrent calls</text>',
           f'<text x="4" y="{pad - 20}">voice to voice, ms (dotted: the {TARGET_MS:.0f} ms target)</text>']
    for x in sorted(set(xs)):
        x_px, y_px = px(x, 0).split(",")
        out.append(f'<text x="{x_px}" y="{float(y_px) + 15}" text-anchor="middle">{x}</text>')
    for y in (0.0, TARGET_MS, max(ys)):
        x_px, y_px = px(0, y).split(",")
        out.append(f'<text x="{float(x_px) - 4}" y="{float(y_px) + 4}" text-anchor="end">{y:.0f}</text>')
    for i, (label, points) in enumerate(series.items()):
        colour, dash = colours[i % 4], "" if "p50" in label else ' stroke-dasharray="6,3"'
        if points:
            out.append(f'<polyline points="{" ".join(px(x, y) for x, y in points)}" fill="none" '
                       f'stroke="{colour}"{dash}/>')
        out.append(f'<text x="{pad + 10}" y="{pad + 14 * i}" fill="{colour}">{label}'
                   f'{"" if "p50" in label else " (dashed)"}</text>')
    return "\n".join(out + ["</svg>"]) + "\n"


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, nargs="+", default=[4, 8, 12, 16, 24, 32], metavar="N",
                    help="the loads: concurrent calls (default %(default)s)")
    ap.add_argument("--turns", type=int, default=3, help="turns per call (default %(default)s)")
    ap.add_argument("--stagger-ms", type=float, default=150.0, help="between call starts (default %(default)s)")
    ap.add_argument("--max-calls", type=int, default=None,
                    help="pass --max-calls N to both servers (default: each calibrates its own cap)")
    ap.add_argument("--agent", default=None, metavar="SPEC.yaml",
                    help="the agent both servers answer with (default: a receptionist on a scripted LLM)")
    ap.add_argument("--plot", type=Path, default=ROOT / "benchmarks" / "plots" / "bench_capacity.png")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="2 and 4 calls, 2 turns: a smoke run")
    args = ap.parse_args()
    if args.quick:
        args.calls, args.turns = [2, 4], 2
    rng = random.Random(args.seed)
    t0 = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="bench-capacity-"))
    llm = ScriptedChatServer(lambda _req: ScriptedReply(text="Sure, I can help with that. What else?"))
    agent = args.agent
    if agent is None:
        (work / "agent.yaml").write_text(SPEC.format(url=await llm.start()))
        agent = str(work / "agent.yaml")
    cap = ["--max-calls", str(args.max_calls)] if args.max_calls else []
    servers = {"parley": CapacityServer("parley", work, agent, cap),
               "pipecat": CapacityServer("pipecat", work, agent, ["--stock-pipecat", *cap])}
    report: dict = {"bench": "capacity", "git": git_sha(), "cpus": os.cpu_count(), "usable_cores": usable_cores(),
                    "calls": args.calls, "turns": args.turns, "stagger_ms": args.stagger_ms, "seed": args.seed,
                    "loadavg_1m_start": round(os.getloadavg()[0], 2), "servers": {}}
    try:
        await asyncio.gather(*(s.wait_ready(180) for s in servers.values()))
        for s in servers.values():   # warm-up: the first call loads what every later one reuses
            await place(s, PHRASES[:1], 0.0)
        levels: dict[str, dict[str, dict]] = {name: {} for name in servers}
        for n in args.calls:
            for name, s in servers.items():
                levels[name][str(n)] = await load(s, n, args.turns, args.stagger_ms / 1000, rng)
                await asyncio.sleep(2.0)   # the calls' records close, the workers go idle
        for name, s in servers.items():
            max_calls, line = s.cap()
            report["servers"][name] = {"max_calls": max_calls, "cap_line": line, "levels": levels[name],
                                       "calls_in_time_p50": in_time(levels[name], "p50"),
                                       "calls_in_time_p95": in_time(levels[name], "p95"),
                                       "server_log_warnings": s.warnings()[0]}
    finally:
        for s in servers.values():
            s.stop()
        await llm.stop()
    report["plot"] = plot(args.plot, report["servers"])
    report["loadavg_1m_end"] = round(os.getloadavg()[0], 2)
    report["wall_s"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(report))


if __name__ == "__main__":
    asyncio.run(main())
