"""Does one call server hold its calls for minutes on end, through faults, without leaking?

One real ``parley serve`` (SIP, Twilio, Genesys; the SSM models in their worker processes; an
agent whose LLM is a scripted OpenAI-compatible server on loopback) and ``--calls`` scripted
callers, each placing call after call (3 turns each, the transports in turn) for ``--minutes``.
Every minute: the server's RSS (with its engine processes), its open descriptors, live calls.
Faults, on a schedule through the run (each for ``--fault-s`` seconds, apart from the kill):

* ``engine_killed``: the recogniser's worker process SIGKILLed (the server restarts it);
* ``llm_500``: the LLM answers HTTP 500 to every request;
* ``llm_hang``: the LLM stalls 60 s before its first token (the agent's timeout is 10 s);
* ``sip_peer_vanished``: an extra SIP caller disappears mid-call (no BYE, no more RTP): the server
  must end that call itself and keep its record;
* ``sip_bad_network``: the SIP calls placed meanwhile lose 5 % of RTP packets and see 0-60 ms of
  jitter, both ways. (tc netem is the usual tool; this kernel has no ``sch_netem``, so the SIP
  caller impairs its own RTP: ``harness.callers.sip`` ``loss``/``jitter_ms``.)

Per fault, the calls that overlapped it: failed, turns unanswered, voice-to-voice, dropped frames;
and whether the next calls after it went normally. Overall: calls completed, failed, unanswered
turns, voice-to-voice p50/p95/p99 (in calls no fault touched, and in all), dropped and late frames
(the server's count from every call's record; in calls no fault touched, and in all), records
missing or left open, RSS (from the first sample, and from the one-minute sample on: the first
calls load what every later one reuses) and its slope, open descriptors.

    .venv/bin/python benchmarks/bench_soak.py [--minutes 10] [--calls 4] [--fault-s 30] [--stt ssm|sphinx]

Prints one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import collections
import json
import os
import signal
import socket
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_transports import (  # noqa: E402
    GENESYS_KEY, GENESYS_SECRET, PHRASES, TOKEN, Server, Voice, _add_stats, _empty, genesys_call, twilio_call,
)
from common import git_sha, percentiles  # noqa: E402

from benchmarks.serve_process import ServeProcess, free_port  # noqa: E402
from harness.callers.sip import SipCaller, SipCallerConfig  # noqa: E402
from harness.errors import CallerError  # noqa: E402
from harness.scripted_llm import ScriptedChatServer, ScriptedReply  # noqa: E402

KINDS = ("twilio", "sip", "genesys")
SPEC = """
name: Soak reception
persona: You are a receptionist.
greeting: Hello, how can I help?
llm: {{backend: openai, model: soak, base_url: "{url}", filler_after_s: 3, timeout_s: 10}}
"""


class Llm:
    """The scripted LLM: answers each turn with a short reply, or fails as the fault says."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.requests = collections.Counter()
        self.server = ScriptedChatServer(self.reply)

    def reply(self, request: dict) -> ScriptedReply:
        self.requests[self.mode] += 1
        if self.mode == "llm_500":
            return ScriptedReply(status=500)
        if self.mode == "llm_hang":
            return ScriptedReply(text="Sorry for the wait.", stall_s=60.0)
        said = next((m.get("content") for m in reversed(request.get("messages", [])) if m.get("role") == "user"), "")
        return ScriptedReply(text=f"You said {str(said)[:60]}. Anything else?", token_interval_s=0.01)


class SoakServer(Server):
    def __init__(self, work: Path, spec: Path, stt: str, heap_frames: int = 0) -> None:   # noqa: D107
        port, self.sip_port = free_port(), free_port(socket.SOCK_DGRAM)
        ServeProcess.__init__(self, "parley", [
            "-m", "deploy.cli", "serve", "--agent", str(spec), "--port", str(port), "--sip-port", str(self.sip_port),
            "--db", str(work / "calls.db"), "--log-level", "WARNING", "--stt", stt, "--tts", "ssm",
            "--stt-procs", "1", "--tts-procs", "1", "--max-calls", "10000", "--no-llm-check",
            *(["--heap-profile", str(heap_frames)] if heap_frames else [])],
            port=port, log_path=work / "server.log",
            env={"TWILIO_AUTH_TOKEN": TOKEN, "PARLEY_GENESYS_API_KEY": GENESYS_KEY,
                 "PARLEY_GENESYS_CLIENT_SECRET": base64.b64encode(GENESYS_SECRET).decode()})

    def tree(self) -> list[int]:
        """The server's pid and its children's (the engine processes)."""
        pids = [self.proc.pid]
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat") as f:
                        if int(f.read().rsplit(")", 1)[1].split()[1]) == self.proc.pid:
                            pids.append(int(entry))
                except (OSError, ValueError, IndexError):
                    continue
        return pids

    def engine_pid(self, needle: str) -> int | None:
        return next((pid for pid in self.tree()[1:] if needle.encode() in _cmdline(pid)), None)

    def role(self, pid: int) -> str:
        """Which process of the tree: the server, or the engine worker it runs."""
        if pid == self.proc.pid:
            return "server"
        cmd = _cmdline(pid)
        return next((role for needle, role in ROLES if needle in cmd), "other")

    def sample(self) -> dict:
        rss_kb, fds = 0, 0
        by_role: dict[str, float] = {}
        pids = self.tree()
        for pid in pids:
            try:
                with open(f"/proc/{pid}/status") as f:
                    kb = next(int(x.split()[1]) for x in f if x.startswith("VmRSS:"))
                if pid == self.proc.pid:
                    fds = len(os.listdir(f"/proc/{pid}/fd"))
            except (OSError, StopIteration):
                continue
            rss_kb += kb
            role = self.role(pid)
            by_role[role] = round(by_role.get(role, 0.0) + kb / 1024, 1)
        return {"rss_mb": round(rss_kb / 1024, 1), "rss_mb_by_role": by_role, "fds": fds,
                "processes": len(pids)}


def _cmdline(pid: int) -> bytes:
    """A process's command line (NUL-separated), or b"" once it has gone."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


ROLES = ((b"runner_procs", "recogniser worker"), (b"final_procs", "final-pass worker"),
         (b"voice_procs", "voice worker"),
         (b"sphinx_procs", "sphinx worker"))


async def sip_call(server: SoakServer, phrases: list[str], out: dict, voice: Voice, *, loss: float = 0.0,
                   jitter_ms: float = 0.0) -> None:
    caller = SipCaller(SipCallerConfig(host="127.0.0.1", port=server.sip_port,
                                       utterances=tuple(voice.pcm8k[p] for p in phrases), greeting_wait_s=10.0,
                                       timeout_s=40 + 10 * len(phrases), loss=loss, jitter_ms=jitter_ms))
    report = await caller.run()
    for t in report.turns:
        out["v2v_overlapped" if t.overlapped else "v2v"].append(t.v2v_ms)
    out["unanswered"] += len(phrases) - len(report.turns)
    out["rtp"]["lost"] += report.rtp.lost
    out["rtp"]["impaired"] += caller.lost_by_network
    _add_stats(out, await server.record(report.call_id))


async def vanishing_sip_call(server: SoakServer, voice: Voice, after_s: float) -> dict:
    """A SIP caller that disappears ``after_s`` into its call: no BYE, no more RTP. -> what the
    server made of it (its record)."""
    caller = SipCaller(SipCallerConfig(host="127.0.0.1", port=server.sip_port,
                                       utterances=tuple(voice.pcm8k[p] for p in PHRASES[:3]), timeout_s=120))
    task = asyncio.create_task(caller.run())
    await asyncio.sleep(after_s)
    task.cancel()                       # the sockets close, nothing more is sent: the peer is gone
    try:
        await task
    except (asyncio.CancelledError, CallerError):
        pass
    t0 = time.monotonic()
    record: dict = {}
    while time.monotonic() - t0 < 90:
        record = await server.record(caller.call_id)
        if record.get("ended"):
            break
        await asyncio.sleep(1.0)
    return {"ended": bool(record.get("ended")), "end_reason": record.get("end_reason"),
            "ended_after_s": round(time.monotonic() - t0, 1), "turns_kept": len(record.get("turns") or [])}


class Soak:
    def __init__(self, args: argparse.Namespace, server: SoakServer, llm: Llm, voice: Voice) -> None:
        self.args, self.server, self.llm, self.voice = args, server, llm, voice
        self.results = {k: _empty() for k in KINDS}
        self.calls: list[dict] = []          # each call: kind, start/end s, failed, unanswered, v2v, frames
        self.windows: list[tuple[str, float, float]] = []   # each fault: name, start s, end s
        self.impair = False
        self.stop_at = 0.0
        self.t0 = 0.0

    async def caller_loop(self, n: int) -> None:
        k = n
        while time.monotonic() < self.stop_at:
            kind = KINDS[k % len(KINDS)]
            k += 1
            phrases = [PHRASES[(k + i) % len(PHRASES)] for i in range(3)]
            out = _empty()                                # this call's own figures, merged below
            start = time.monotonic() - self.t0
            try:
                if kind == "twilio":
                    await twilio_call(self.server, phrases, out)
                elif kind == "genesys":
                    await genesys_call(self.server, phrases, out)
                else:
                    await sip_call(self.server, phrases, out, self.voice, loss=0.05 if self.impair else 0.0,
                                   jitter_ms=60.0 if self.impair else 0.0)
            except (CallerError, OSError, TimeoutError, aiohttp.ClientError) as exc:
                out["failed_calls"] += 1
                out["errors"].append(f"{kind}: {type(exc).__name__}: {exc}"[:200])
            st = out["server_stats"]
            self.calls.append({"kind": kind, "start": start, "end": time.monotonic() - self.t0,
                               "failed": out["failed_calls"] > 0, "unanswered": out["unanswered"],
                               "v2v": [x for x in out["v2v"] if x is not None],
                               "dropped": st.get("frames_in_lost", 0) + st.get("frames_out_underrun", 0),
                               "late": st.get("frames_in_late", 0) + st.get("frames_out_late", 0)})
            merge(self.results[kind], out)

    async def sampler(self, samples: list[dict]) -> None:
        while time.monotonic() < self.stop_at:
            s = self.server.sample()
            s["t_s"] = round(time.monotonic() - self.t0)
            s["live_calls"] = await self.live_calls()
            samples.append(s)
            if self.args.heap_profile and len(samples) == 2:     # the one-minute sample: the baseline
                os.kill(self.server.proc.pid, signal.SIGUSR1)
            await asyncio.sleep(60.0)

    async def live_calls(self) -> int | None:
        text = await self.server.metrics_text()
        if text is None:
            return None
        return int(sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                       if line.startswith("parley_live_calls{")))

    async def faults(self, report: dict) -> None:
        span = self.args.minutes * 60
        plan = [("engine_killed", 0.15), ("llm_500", 0.3), ("llm_hang", 0.45), ("sip_peer_vanished", 0.6),
                ("sip_bad_network", 0.75)]
        for name, at in plan:
            await asyncio.sleep(max(0.0, self.t0 + at * span - time.monotonic()))
            started = time.monotonic() - self.t0
            entry: dict = {"fault": name, "at_s": round(started)}
            if name == "engine_killed":
                pid = self.server.engine_pid("runner_procs") or self.server.engine_pid("voice_procs")
                entry["killed_pid"] = pid
                if pid is not None:
                    os.kill(pid, signal.SIGKILL)
                await asyncio.sleep(self.args.fault_s)
                entry["engine_back"] = self.server.engine_pid("runner_procs") is not None
            elif name in ("llm_500", "llm_hang"):
                self.llm.mode = name
                await asyncio.sleep(self.args.fault_s)
                self.llm.mode = "ok"
            elif name == "sip_peer_vanished":
                entry.update(await vanishing_sip_call(self.server, self.voice, after_s=8.0))
            else:
                self.impair = True
                await asyncio.sleep(self.args.fault_s * 2)
                self.impair = False
            ended = time.monotonic() - self.t0
            entry["lasted_s"] = round(ended - started)
            self.windows.append((name, started, ended))
            report["faults"].append(entry)

    def overlaps(self, call: dict) -> list[str]:
        return [name for name, a, b in self.windows if call["start"] < b and call["end"] > a]

    def window(self, fault: str) -> dict:
        """The calls that overlapped the fault, and the next calls after it that overlapped none."""
        name, a, b = next(w for w in self.windows if w[0] == fault)
        during = [c for c in self.calls if fault in self.overlaps(c)]
        after = sorted((c for c in self.calls if c["start"] >= b and not self.overlaps(c)),
                       key=lambda c: c["start"])[:6]
        return {"calls": len(during), "failed": sum(c["failed"] for c in during),
                "unanswered_turns": sum(c["unanswered"] for c in during),
                "v2v_ms": percentiles([x for c in during for x in c["v2v"]]),
                "frames_dropped": sum(c["dropped"] for c in during),
                "next_calls": len(after), "next_calls_failed": sum(c["failed"] for c in after),
                "next_calls_unanswered_turns": sum(c["unanswered"] for c in after)}


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--calls", type=int, default=4, help="callers placing calls at once (default %(default)s)")
    ap.add_argument("--fault-s", type=float, default=30.0, help="how long each fault lasts (default %(default)s)")
    ap.add_argument("--stt", choices=("ssm", "sphinx"), default="ssm")
    ap.add_argument("--heap-profile", type=int, default=0, metavar="FRAMES",
                    help="run the server with --heap-profile FRAMES: a baseline at the one-minute sample, "
                         "and the places its heap grew most since then in the report (heap_growth)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-soak-"))
    llm = Llm()
    url = await llm.server.start()
    spec = work / "agent.yaml"
    spec.write_text(SPEC.format(url=url))
    voice = Voice()
    await voice.prepare(PHRASES)
    server = SoakServer(work, spec, args.stt, args.heap_profile)
    report: dict = {"bench": "soak", "git": git_sha(), "cpus": os.cpu_count(), "minutes": args.minutes,
                    "concurrent_calls": args.calls, "stt": args.stt, "faults": []}
    samples: list[dict] = []
    placed = 0
    try:
        await server.wait_ready(120)
        await asyncio.sleep(5.0)                          # the engines warm before the first call
        soak = Soak(args, server, llm, voice)
        soak.t0 = time.monotonic()
        soak.stop_at = soak.t0 + args.minutes * 60
        tasks = [asyncio.create_task(soak.caller_loop(n)) for n in range(args.calls)]
        tasks.append(asyncio.create_task(soak.sampler(samples)))
        tasks.append(asyncio.create_task(soak.faults(report)))
        await asyncio.gather(*tasks)
        samples.append({**server.sample(), "t_s": round(time.monotonic() - soak.t0),
                        "live_calls": await soak.live_calls()})
        report["server_alive"] = server.proc.poll() is None
        if args.heap_profile and report["server_alive"]:
            os.kill(server.proc.pid, signal.SIGUSR1)
            await asyncio.sleep(10.0)                     # a snapshot of a large heap takes seconds
            report["heap_growth"] = [line.split("heap: ", 1)[1] for line in server.log_tail(10**7).splitlines()
                                     if "heap: " in line]
        clean = [x for c in soak.calls if not soak.overlaps(c) for x in c["v2v"]]
        every = [x for c in soak.calls for x in c["v2v"]]
        stats: collections.Counter = collections.Counter()
        for r in soak.results.values():
            stats.update(r["server_stats"])
        report.update({
            "calls_completed": sum(1 for c in soak.calls if not c["failed"]),
            "calls_failed": sum(1 for c in soak.calls if c["failed"]),
            "calls_by_kind": dict(collections.Counter(c["kind"] for c in soak.calls)),
            "unanswered_turns": sum(c["unanswered"] for c in soak.calls),
            "v2v_ms_no_fault": percentiles(clean),
            "v2v_ms_all": percentiles(every),
            "frames_dropped": stats.get("frames_in_lost", 0) + stats.get("frames_out_underrun", 0),
            "frames_late": stats.get("frames_in_late", 0) + stats.get("frames_out_late", 0),
            "frames_dropped_no_fault": sum(c["dropped"] for c in soak.calls if not soak.overlaps(c)),
            "frames_late_no_fault": sum(c["late"] for c in soak.calls if not soak.overlaps(c)),
            "calls_no_fault": sum(1 for c in soak.calls if not soak.overlaps(c)),
            "sip_rtp_lost_by_impairment": soak.results["sip"]["rtp"]["impaired"],
            "errors": [e for r in soak.results.values() for e in r["errors"]][:6],
            "fault_windows": {f["fault"]: soak.window(f["fault"]) for f in report["faults"]},
            "llm_requests": dict(llm.requests),
        })
        first, last = samples[0], samples[-1]
        report["samples"] = samples
        report["rss_growth_pct"] = round(100 * (last["rss_mb"] - first["rss_mb"]) / first["rss_mb"], 1)
        # from the first minute's sample on (the first calls load what every later one reuses)
        warm = samples[1] if len(samples) > 2 else first
        report["rss_growth_after_1min_pct"] = round(100 * (last["rss_mb"] - warm["rss_mb"]) / warm["rss_mb"], 1)
        report["rss_slope_mb_per_min"] = round((last["rss_mb"] - warm["rss_mb"]) / max(1e-9, (last["t_s"] - warm["t_s"]) / 60), 2)
        # per process: a worker restarted by a fault starts small and grows as it warms, which is
        # growth of the tree but no leak; the server's own slope is what a leak would show in
        report["rss_mb_by_role_1min_last"] = {
            role: [warm["rss_mb_by_role"].get(role), mb] for role, mb in last["rss_mb_by_role"].items()}
        report["fds_first_last"] = [first["fds"], last["fds"]]
        report["server_warnings"], kinds = server.warnings()
        report["server_warning_kinds"] = kinds[:8]
        placed = len(soak.calls) + 1                      # and the caller that vanished
    finally:
        server.stop()
        await llm.server.stop()
    report["records"] = records_check(work / "calls.db", placed)
    print(json.dumps(report))


def merge(into: dict, out: dict) -> None:
    """One call's figures (bench_transports' shape) added to its transport's."""
    for key, value in out.items():
        if isinstance(value, list):
            into[key].extend(value)
        elif isinstance(value, collections.Counter):
            into[key].update(value)
        else:
            into[key] += value


def records_check(db: Path, calls_placed: int) -> dict:
    """The server's records after it stopped: how many, how many never ended, how many kept no turn."""
    from pipeline.records_sqlite import SQLiteCallStore

    store = SQLiteCallStore(db)
    try:
        rows = store.list()
    finally:
        store.close()
    return {"records": len(rows), "calls_placed": calls_placed,
            "left_open": sum(1 for r in rows if not r.ended),
            "without_turns": sum(1 for r in rows if not r.turns),
            "end_reasons": dict(collections.Counter((r.end_reason or "")[:40] for r in rows).most_common(6))}


if __name__ == "__main__":
    asyncio.run(main())
