"""What a call's trace costs a turn: the tracing hooks timed with traces off and on (a batch
exporter posting OTLP/HTTP to a collector on loopback), from scripted turns.

    python benchmarks/bench_tracing.py [--calls 400] [--turns 4]

Per call: ``CallTracing.call`` (the root span opens), one ``CallTrace.turn`` per turn (the hook
where a turn gets its first audio), ``CallTrace.end``; the per-turn cost is their sum over the
turns (``per_turn_us``, wall time; ``per_turn_cpu_us``, the calling thread's CPU time, which
leaves out the waits for the GIL while the exporter's thread holds it), the hooks apart
(``turn_hook_us``, ``end_hook_us``). ``cpu_per_turn_us`` is the process's CPU (the batch
exporter's thread included) over the turns; the collector runs in a process of its own.
``under_target``: both CPU figures (the process's mean and the hooks' p99) under 1 ms a turn.
One JSON line out.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import random
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from common import git_sha, percentiles

from pipeline.latency import TurnLatency
from pipeline.records import CallRecord
from pipeline.tracing import CallTracing

TARGET_US = 1000.0


class _Collector(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


def _serve(port: multiprocessing.Queue) -> None:
    """The collector, in its own process as a real one would be (no share of this one's GIL)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    port.put(server.server_address[1])
    server.serve_forever()


def _turns(rng: random.Random, n: int) -> list[TurnLatency]:
    t0 = time.monotonic()
    out = []
    for i in range(1, n + 1):
        t = TurnLatency(turn=i, end_of_speech_s=t0 + 5 * i)
        at = t.end_of_speech_s
        for mark in ("vad_stop", "stt_final", "first_text", "tts_first_audio", "transport_first_byte"):
            at += rng.uniform(0.01, 0.2)
            t.at[mark] = at
        if i % 2 == 0:
            t.events.append({"kind": "tool_call", "data": {"name": "lookup", "arguments": {}, "duration_ms": 8.0}})
            t.event_at_s.append(t.at["first_text"])
        out.append(t)
    return out


class Clock:
    """A hook's wall time and its thread's CPU time (what the hook itself spent, without the
    waits for the GIL while the exporter's thread holds it), in microseconds."""

    def __enter__(self) -> Clock:
        self.w0, self.c0 = time.perf_counter_ns(), time.thread_time_ns()
        return self

    def __exit__(self, *exc) -> None:
        self.wall_us = (time.perf_counter_ns() - self.w0) / 1e3
        self.cpu_us = (time.thread_time_ns() - self.c0) / 1e3


def run(tracing: CallTracing, calls: int, n_turns: int, seed: int) -> dict:
    rng = random.Random(seed)
    per_turn, per_turn_cpu, turn_hook, end_hook = [], [], [], []
    cpu0 = time.process_time_ns()
    for c in range(calls):
        turns = _turns(rng, n_turns)
        record = CallRecord(f"CA{c:08d}", "twilio", params={"From": "+15550100"})
        with Clock() as opened:
            trace = tracing.call(record.call_sid, "twilio")
        wall, cpu = opened.wall_us, opened.cpu_us
        for t in turns:
            record.turn(t.turn)
            with Clock() as hook:
                trace.turn(t, record)
            turn_hook.append(hook.wall_us)
            wall, cpu = wall + hook.wall_us, cpu + hook.cpu_us
        record.end_reason = "caller hung up (stop)"
        with Clock() as ended:
            trace.end(record, turns)
        end_hook.append(ended.wall_us)
        per_turn.append((wall + ended.wall_us) / n_turns)
        per_turn_cpu.append((cpu + ended.cpu_us) / n_turns)
    tracing.force_flush()
    cpu_us = (time.process_time_ns() - cpu0) / 1e3
    return {"per_turn_us": percentiles(per_turn), "per_turn_cpu_us": percentiles(per_turn_cpu, count=False),
            "turn_hook_us": percentiles(turn_hook, count=False), "end_hook_us": percentiles(end_hook, count=False),
            "cpu_per_turn_us": round(cpu_us / (calls * n_turns), 1), "dropped": tracing.dropped}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=400)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    port: multiprocessing.Queue = multiprocessing.Queue()
    collector = multiprocessing.Process(target=_serve, args=(port,), daemon=True)
    collector.start()
    url = f"http://127.0.0.1:{port.get(timeout=30)}/v1/traces"
    on = CallTracing.otlp(url, agent_name="bench", schedule_delay_ms=200)
    off = CallTracing.off()
    try:
        run(off, args.warmup, args.turns, args.seed)
        run(on, args.warmup, args.turns, args.seed)
        result_off = run(off, args.calls, args.turns, args.seed + 1)
        result_on = run(on, args.calls, args.turns, args.seed + 1)
    finally:
        on.shutdown()
        collector.terminate()
        collector.join(5)
    print(json.dumps({"bench": "tracing", "git": git_sha(),
                      "config": {"calls": args.calls, "turns": args.turns, "exporter": "otlp-http batch, loopback",
                                 "seed": args.seed},
                      "off": result_off, "on": result_on,
                      "under_target": bool(result_on["cpu_per_turn_us"] < TARGET_US
                                           and (result_on["per_turn_cpu_us"]["p99"] or 0) < TARGET_US)}))


if __name__ == "__main__":
    main()
