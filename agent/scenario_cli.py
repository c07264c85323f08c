"""``parley test``: run an agent's scenario tests, in text.

    parley test agent/examples/receptionist.scenarios.yaml
    parley test SCENARIOS.yaml --agent my_agent.yaml --junit report.xml

Prints a table (one scenario a line: PASS/FAIL, the turns it took, why it failed), then one
JSON line (``{"passed": n, "failed": m, "scenarios": [...]}``); ``--junit FILE`` writes JUnit XML
for CI. The exit code is 0 when every scenario passed, 1 when one failed, 2 when a file could not
be read (one line naming the file, the line and the field). The scenario format:
:mod:`agent.scenarios`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any, TextIO

from agent.scenarios import ScenarioResult, Suite, junit_xml, load_scenarios, run_suite

__all__ = ["format_table", "register_cli"]


def format_table(suites: list[tuple[Suite, list[ScenarioResult]]]) -> str:
    rows = [("RESULT", "FILE", "SCENARIO", "TURNS", "WHY")]
    for suite, results in suites:
        for r in results:
            rows.append(("PASS" if r.passed else "FAIL", suite.path.name, r.scenario.name,
                         str(r.turns), "; ".join(r.failures)))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    return "\n".join("  ".join([*(c.ljust(w) for c, w in zip(row[:4], widths)), row[4]]).rstrip()
                     for row in rows)


def summary(suites: list[tuple[Suite, list[ScenarioResult]]]) -> dict[str, Any]:
    results = [(s, r) for s, rs in suites for r in rs]
    return {"passed": sum(r.passed for _, r in results),
            "failed": sum(not r.passed for _, r in results),
            "scenarios": [{"file": str(s.path), "name": r.scenario.name, "passed": r.passed,
                           "turns": r.turns, "goal_turn": r.goal_turn, "failures": r.failures}
                          for s, r in results]}


async def _play(suites: list[Suite]) -> list[tuple[Suite, list[ScenarioResult]]]:
    return [(suite, await run_suite(suite, env=os.environ)) for suite in suites]


def run(args: argparse.Namespace, out: TextIO) -> int:
    """Load every file first (a bad one stops the run before any call), play them, report."""
    suites = [load_scenarios(path, agent=args.agent, env=os.environ) for path in args.scenarios]
    ran = asyncio.run(_play(suites))
    out.write(format_table(ran) + "\n")
    if args.verbose:
        for _, results in ran:
            for r in results:
                if not r.passed:
                    out.write(f"\n--- {r.scenario.name}\n" + "\n".join(r.transcript) + "\n")
    report = summary(ran)
    out.write(json.dumps(report) + "\n")
    if args.junit:
        Path(args.junit).write_text(junit_xml(ran), encoding="utf-8")
    return 0 if report["failed"] == 0 else 1


def _run(args: argparse.Namespace) -> int:
    return run(args, sys.stdout)


def register_cli(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``parley test``; it sets ``func`` to an ``(args) -> exit code``."""
    p = subparsers.add_parser(
        "test", help="run an agent's scenario tests (text, no phone)",
        description="Play scripted callers against an agent, as calls would run it, and check "
                    "what it did: slots, tool calls, transfers, what it said, how many turns.")
    p.add_argument("scenarios", nargs="+", metavar="SCENARIOS.yaml", help="scenario files")
    p.add_argument("--agent", default=None, metavar="FILE",
                   help="the agent spec to test (default: the one each file names)")
    p.add_argument("--junit", default=None, metavar="FILE", help="also write JUnit XML here")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="print the transcript of each failed scenario")
    p.set_defaults(func=_run)
    return p
