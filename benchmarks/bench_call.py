"""Voice-to-voice latency of a whole call: parley's pipeline beside pipecat's stock one, one run.

Question: from the end of the caller's speech to the first agent audio byte the caller receives
(``v2v_ms``), how fast is parley, and how does it compare with a stock pipecat telephony set-up
(Silero VAD + smart-turn v3 end-of-turn model + sentence aggregation) on the same engines, the
same agent and the same calls?

Both servers run as real ``parley serve`` processes on loopback; the scripted caller speaks to
them over Twilio's protocol with a human-like voice (flite), in real time. Calls alternate
between the two servers so machine noise hits both alike. Then ``--concurrent`` calls at once,
per server. Prints one JSON line.

    .venv/bin/python benchmarks/bench_call.py            # 20 turns at 1 call, 8 concurrent calls
    .venv/bin/python benchmarks/bench_call.py --quick    # a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from common import git_sha, percentiles as pct  # noqa: E402

from benchmarks.serve_process import ServeProcess, free_port  # noqa: E402
from harness.callers.twilio import CallerConfig, CallerUtterance, run_call  # noqa: E402

TOKEN = "bench-token-" + "0" * 20
PHRASES = [
    "hello how are you",
    "i would like to check my account",
    "can you help me please",
    "my name is john smith",
    "i want to change my address",
    "what are your opening hours",
    "i have a question about my bill",
    "yes that is right",
    "no thank you",
    "could you repeat that please",
    "i need to talk to someone",
    "my order has not arrived yet",
]


class Server(ServeProcess):
    def __init__(self, name: str, extra: list[str], log_dir: str):
        port = free_port()
        super().__init__(name, ["-m", "deploy.cli", "serve", "--port", str(port), "--log-level", "WARNING",
                                *extra], port=port, log_path=Path(log_dir) / f"{name}.log",
                         env={"TWILIO_AUTH_TOKEN": TOKEN})

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/twilio/stream"


async def one_call(server: Server, phrases: list[str]) -> list[dict]:
    report = await run_call(CallerConfig(
        url=server.url, auth_token=TOKEN, utterances=tuple(CallerUtterance(text=p) for p in phrases),
        timeout_s=30 + 8 * len(phrases),
    ))
    turns = []
    for t in report.turns:
        d = json.loads(t.to_json_line())
        d["server_v2v_ms"] = t.latency_ms.transport_first_byte  # first byte written, server's clock
        turns.append(d)
    return turns



async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--turns", type=int, default=20, help="turns at one call, per server (default %(default)s)")
    ap.add_argument("--turns-per-call", type=int, default=5)
    ap.add_argument("--concurrent", type=int, default=8, help="calls at once (default %(default)s)")
    ap.add_argument("--concurrent-turns", type=int, default=3, help="turns per concurrent call")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="4 turns, 2 concurrent calls")
    args = ap.parse_args()
    if args.quick:
        args.turns, args.turns_per_call, args.concurrent, args.concurrent_turns = 4, 2, 2, 2
    rng = random.Random(args.seed)

    logs = tempfile.TemporaryDirectory(prefix="parley-bench-call-")
    servers = {"parley": Server("parley", [], logs.name),
               "pipecat": Server("pipecat", ["--stock-pipecat"], logs.name)}
    try:
        await asyncio.gather(*(s.wait_ready() for s in servers.values()))
        await asyncio.gather(*(one_call(s, ["hello"]) for s in servers.values()))  # warm-up
        single: dict[str, list[dict]] = {name: [] for name in servers}
        n_calls = max(1, args.turns // args.turns_per_call)
        for _ in range(n_calls):
            phrases = rng.sample(PHRASES, args.turns_per_call)
            for name, server in servers.items():  # alternate: noise hits both alike
                single[name] += await one_call(server, phrases)
        multi: dict[str, list[dict]] = {}
        for name, server in servers.items():
            batches = await asyncio.gather(*(
                one_call(server, rng.sample(PHRASES, args.concurrent_turns)) for _ in range(args.concurrent)
            ))
            multi[name] = [t for b in batches for t in b]
    finally:
        for s in servers.values():
            s.stop()
        logs.cleanup()

    sha = git_sha()
    out: dict[str, object] = {"bench": "call", "git": sha, "seed": args.seed, "concurrent_calls": args.concurrent,
                              "loadavg_1m": round(os.getloadavg()[0], 2)}
    for name in servers:
        for label, turns in (("", single[name]), (f"_{args.concurrent}calls", multi[name])):
            v2v = pct([t["v2v_ms"] for t in turns])
            for k in ("p50", "p95", "p99"):
                out[f"{name}{label}_v2v_ms_{k}"] = v2v[k]
            out[f"{name}{label}_turns"] = v2v["n"]
            out[f"{name}{label}_server_v2v_ms_p50"] = pct([t["server_v2v_ms"] for t in turns])["p50"]
            out[f"{name}{label}_stt_final_ms_p50"] = pct([t["stt_final_ms"] for t in turns])["p50"]
            out[f"{name}{label}_tts_ttfa_ms_p50"] = pct([t["tts_ttfa_ms"] for t in turns])["p50"]
            out[f"{name}{label}_unanswered_turns"] = sum(1 for t in turns if t["v2v_ms"] is None)
    if out["parley_v2v_ms_p50"] and out["pipecat_v2v_ms_p50"]:
        out["v2v_p50_ratio_parley_vs_pipecat"] = round(out["parley_v2v_ms_p50"] / out["pipecat_v2v_ms_p50"], 3)
    print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main())
