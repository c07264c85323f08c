"""Do the example agents' scenario tests pass by voice, as they pass in text?

    .venv/bin/python benchmarks/bench_scenarios_voice.py [--voices flite:slt espeak:en-us+f3]
        [--stt ssm] [--scenarios agent/examples/*.scenarios.yaml] [--only NAME ...]

``parley test`` plays an agent's scenarios in text: the caller's turns reach the agent as typed.
Here each scenario is a real call instead: its turns spoken by a held-out synthetic voice (flite's
slt as the Twilio test caller speaks it, espeak-ng's en-us+f3 as WAV files; voices the recogniser
never trained on), keys (``#...`` turns) pressed as DTMF, over Twilio's Media Streams protocol to a
real ``parley serve`` on loopback (the order line's tool answered by the example order service,
``agent.examples.order_api``, not the file's canned reply). The scenario's expectations are judged
(``agent.scenarios.judge``, as in text) from the server's call record (``GET /calls/{sid}``): the
slots, the tool calls, the transfer, the agent's words, whether the agent ended the call, the
caller turns by the goal. The text run of the same files is the baseline, in the same run.

Recorded people cannot say a scenario's free text, so they are not among the voices here
(``bench_stt_human.py`` and ``bench_answering.py`` hear them). Prints one JSON line: per voice
and recogniser, scenarios passed, each failure's reasons, and v2v p50/p95/p99 over the turns.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from common import git_sha  # noqa: E402

import numpy as np  # noqa: E402
import yaml  # noqa: E402

from agent.scenarios import Scenario, Suite, goal_met, has_goal, judge, load_scenarios, run_suite  # noqa: E402
from benchmarks.bench_conversations import TOKEN, Server, _record, _wav_steps, order_api  # noqa: E402
from harness.callers.twilio import CallerConfig, CallerUtterance, run_call  # noqa: E402

DEFAULT_FILES = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "agent" / "examples").glob("*.scenarios.yaml"))


def agent_of(suite: Suite) -> str:
    """The agent spec a scenario file names (``agent:``, relative to the file)."""
    return str(suite.path.parent / yaml.safe_load(suite.path.read_text(encoding="utf-8"))["agent"])


def caller_steps(scenario: Scenario, voice_name: str, folder: Path, seed: int) -> tuple[CallerUtterance, ...]:
    """The scenario's turns as the caller's steps: speech in the voice, ``#`` turns as keys."""
    speech = [t for t in scenario.turns if not t.startswith("#")]
    spoken = (iter([CallerUtterance(text=t) for t in speech]) if voice_name.startswith("flite:")
              else iter(_wav_steps(speech, voice_name, folder, seed)))
    steps: list[CallerUtterance] = []
    for turn in scenario.turns:
        if turn.startswith("#"):
            steps += [CallerUtterance(dtmf=k) for k in turn[1:]]
        else:
            steps.append(next(spoken))
    return tuple(steps)


def from_record(scenario: Scenario, record: dict[str, Any]) -> dict[str, Any]:
    """What the call did, as ``judge`` takes it, from the server's record."""
    turns = record.get("turns", [])
    said = [record.get("greeting", "")] + [t.get("agent_text", "") for t in turns]
    events: list[dict[str, Any]] = list(record.get("greeting_events", []))  # keys during the greeting
    slots: dict[str, str] = {}
    goal_turn = None
    for i, t in enumerate(turns, 1):
        calls = [{"kind": "tool_call", "data": c} for c in t.get("tool_calls", [])]  # kept apart
        for e in calls + t.get("events", []):
            events.append(e)
            if e.get("kind") == "slot":
                slots[e["data"]["name"]] = e["data"]["value"]
        if goal_turn is None and has_goal(scenario.expect) and goal_met(scenario.expect, slots, events):
            goal_turn = i
    ended = any(e.get("kind") in ("hangup", "transfer") for e in events)
    return {"slots": slots, "events": events, "said": said, "ended": ended,
            "turns": goal_turn or len(turns)}


async def place(server: Server, scenario: Scenario, voice_name: str, folder: Path, seed: int) -> dict:
    steps = await asyncio.to_thread(caller_steps, scenario, voice_name, folder, seed)
    flite = voice_name.split(":", 1)[1] if voice_name.startswith("flite:") else "slt"
    report = await run_call(CallerConfig(url=server.url, auth_token=TOKEN, utterances=steps, voice=flite,
                                         timeout_s=60 + 15 * len(steps), reply_timeout_s=25.0,
                                         linger_s=3.0))
    record = await _record(server, report.call_sid)
    did = from_record(scenario, record)
    failures = judge(scenario.expect, **did)
    return {"scenario": scenario.name, "voice": voice_name, "passed": not failures,
            "failures": failures, "heard": [t.get("user_text", "") for t in record.get("turns", [])],
            "v2v_ms": [t.v2v_ms for t in report.turns if t.v2v_ms is not None]}


def _pct(xs: list[float]) -> dict[str, float | None]:
    if not xs:
        return {"p50": None, "p95": None, "p99": None}
    return {f"p{q}": round(float(np.percentile(xs, q)), 1) for q in (50, 95, 99)}


async def main_async(args: argparse.Namespace) -> dict:
    suites: list[Suite] = [load_scenarios(f) for f in args.scenarios]
    text = {str(s.path.name): await run_suite(s) for s in suites}
    log_dir = Path(tempfile.mkdtemp(prefix="parley-bench-scen-"))
    wavs = log_dir / "wav"
    wavs.mkdir()
    api, env = order_api(log_dir)
    servers = {(stt, s.path.name): Server(f"{stt}-{s.path.stem}", ["--stt", stt, "--agent", agent_of(s)],
                                          str(log_dir), env)
               for stt in args.stt for s in suites}
    rows: dict[str, list[dict]] = {}
    try:
        await asyncio.gather(api.wait_ready(), *(s.wait_ready(timeout_s=180) for s in servers.values()))
        seed = 0
        for suite in suites:
            for scenario in suite.scenarios:
                if args.only and scenario.name not in args.only:
                    continue
                seed += 1
                for stt in args.stt:
                    for voice_name in args.voices:
                        row = await place(servers[(stt, suite.path.name)], scenario, voice_name, wavs, seed)
                        rows.setdefault(f"{stt} {voice_name}", []).append(row | {"file": suite.path.name})
                        print(f"{'PASS' if row['passed'] else 'FAIL'} {stt} {voice_name} "
                              f"{suite.path.name}: {scenario.name}  {'; '.join(row['failures'])}",
                              file=sys.stderr, flush=True)
    finally:
        for s in servers.values():
            s.stop()
        api.stop()
        shutil.rmtree(log_dir, ignore_errors=True)
    wanted = [(f, r) for f, rs in text.items() for r in rs if not args.only or r.scenario.name in args.only]
    out: dict[str, Any] = {"bench": "scenarios_voice", "git": git_sha(), "files": args.scenarios,
                           "text": {"passed": sum(r.passed for _, r in wanted), "scenarios": len(wanted),
                                    "failures": [{"file": f, "scenario": r.scenario.name,
                                                  "why": r.failures} for f, r in wanted if not r.passed]}}
    for key, rs in rows.items():
        out[key] = {"passed": sum(r["passed"] for r in rs), "scenarios": len(rs),
                    "v2v_ms": _pct([v for r in rs for v in r["v2v_ms"]]),
                    "failures": [{"file": r["file"], "scenario": r["scenario"], "why": r["failures"],
                                  "heard": r["heard"]} for r in rs if not r["passed"]]}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenarios", nargs="+", default=DEFAULT_FILES, help="scenario files (default: the examples')")
    ap.add_argument("--voices", nargs="+", default=["flite:slt", "espeak:en-us+f3"])
    ap.add_argument("--stt", nargs="+", default=["ssm"], help="recognisers, a server each (ssm, whisper)")
    ap.add_argument("--only", nargs="+", default=None, help="scenario names to run (default: all)")
    args = ap.parse_args(argv)
    print(json.dumps(asyncio.run(main_async(args))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
