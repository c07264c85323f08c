"""Scenario tests for agents: a scripted caller's turns, and what the agent must have done.

    suite = load_scenarios("agent/examples/receptionist.scenarios.yaml")  # or raises ScenarioError
    results = await run_suite(suite)        # -> [ScenarioResult], each passed or with its failures
    junit_xml(results, suite_name="receptionist")

A scenario file::

    agent: receptionist.yaml             # the agent spec, relative to this file
    tools:                               # canned webhook replies (optional; MockToolBox)
      lookup_order: {found: true, status: has shipped}
    scenarios:
      - name: a message left in one breath
        goal: leave a message for the dentist          # what the caller wants (for the reader)
        turns:                                         # what the caller says, one turn each;
          - my name is Maria Lopez and my number is 415 555 0199, I'd like to leave a message
          - yes                                        # "#0" presses 0 (keys after the #)
        expect:
          slots: {name: Maria Lopez, phone: "4155550199"}   # filled, with these values
          tool: {name: lookup_order, arguments: {order_number: "12345"}}   # called with these
          transfer: front_desk                         # a hand-off's name, or true / false
          ended: true                                  # the call ended (hang-up or transfer)
          said: [passed on your message]               # phrases the agent said (any case)
          never_said: [ninety five dollars]            # phrases it never said
          max_turns: 4                                 # the slots, tool and transfer by turn 4

The agent runs as a call would (``agent.console.AgentConsole``), in text. Every mistake in a file
raises :class:`agent.errors.ScenarioError` whose message starts ``path:line:`` and names the field.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

import yaml

from agent.console import AgentConsole
from agent.errors import AgentError, ScenarioError
from agent.spec import AgentSpec, load_spec

__all__ = ["Expect", "Scenario", "ScenarioResult", "Suite", "goal_met", "has_goal", "judge", "junit_xml",
           "load_scenarios", "run_scenario", "run_suite"]


@dataclass(frozen=True)
class Expect:
    slots: dict[str, str] = field(default_factory=dict)
    tools: tuple[tuple[str, dict[str, Any] | None], ...] = ()   # (name, arguments or None: any)
    transfer: str | bool | None = None     # a hand-off name, True (any), False (none), None
    ended: bool | None = None
    said: tuple[str, ...] = ()
    never_said: tuple[str, ...] = ()
    max_turns: int | None = None


@dataclass(frozen=True)
class Scenario:
    name: str
    turns: tuple[str, ...]
    expect: Expect
    goal: str = ""
    line: int = 0


@dataclass(frozen=True)
class Suite:
    path: Path
    spec: AgentSpec
    scenarios: tuple[Scenario, ...]
    tools: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass
class ScenarioResult:
    scenario: Scenario
    failures: list[str] = field(default_factory=list)
    turns: int = 0                        # caller turns sent
    goal_turn: int | None = None          # the turn by which slots, tools and transfer were met
                                          # (None: not met, or the scenario names none)
    transcript: list[str] = field(default_factory=list)
    duration_s: float = 0.0

    @property
    def passed(self) -> bool:
        return not self.failures


class _Reader:
    """YAML nodes to values; every error names the file, the line and the field."""

    def __init__(self, path: Path):
        self.path = path

    def fail(self, node: yaml.Node | None, what: str, message: str) -> ScenarioError:
        line = node.start_mark.line + 1 if node is not None else 1
        return ScenarioError(f"{self.path}:{line}: {what}: {message}")

    def mapping(self, node: yaml.Node, what: str, allowed: set[str]) -> dict[str, yaml.Node]:
        if not isinstance(node, yaml.MappingNode):
            raise self.fail(node, what, "must be a mapping")
        out: dict[str, yaml.Node] = {}
        for key, value in node.value:
            if not isinstance(key, yaml.ScalarNode) or key.value not in allowed:
                raise self.fail(key, what, f"unknown key {getattr(key, 'value', key)!r} "
                                           f"(expected one of: {', '.join(sorted(allowed))})")
            out[key.value] = value
        return out

    def seq(self, node: yaml.Node, what: str) -> list[yaml.Node]:
        if not isinstance(node, yaml.SequenceNode):
            raise self.fail(node, what, "must be a list")
        return list(node.value)

    def text(self, node: yaml.Node, what: str) -> str:
        if not isinstance(node, yaml.ScalarNode) or node.tag == "tag:yaml.org,2002:null" \
                or not node.value.strip():
            raise self.fail(node, what, "must be a non-empty string")
        return node.value.strip()

    @staticmethod
    def plain(node: yaml.Node) -> Any:
        loader = yaml.SafeLoader("")
        try:
            return loader.construct_object(node, deep=True)
        finally:
            loader.dispose()

    def texts(self, node: yaml.Node, what: str) -> tuple[str, ...]:
        if isinstance(node, yaml.ScalarNode):
            return (self.text(node, what),)
        return tuple(self.text(n, f"{what}[{i}]") for i, n in enumerate(self.seq(node, what)))


def _expect(r: _Reader, node: yaml.Node, what: str, spec: AgentSpec) -> Expect:
    m = r.mapping(node, what, {"slots", "tool", "tools", "transfer", "ended", "said", "never_said",
                               "max_turns"})
    slots: dict[str, str] = {}
    if "slots" in m:
        for key, value in r.mapping(m["slots"], f"{what}.slots",
                                    {s.name for s in spec.slots}).items():
            slots[key] = str(r.plain(value))
    tools: list[tuple[str, dict[str, Any] | None]] = []
    for key in ("tool", "tools"):
        if key not in m:
            continue
        nodes = [m[key]] if isinstance(m[key], yaml.MappingNode) else r.seq(m[key], f"{what}.{key}")
        for i, n in enumerate(nodes):
            where = f"{what}.{key}" + (f"[{i}]" if key == "tools" else "")
            t = r.mapping(n, where, {"name", "arguments"})
            if "name" not in t:
                raise r.fail(n, where, "needs 'name'")
            name = r.text(t["name"], f"{where}.name")
            if spec.tool(name) is None:
                raise r.fail(t["name"], f"{where}.name", f"the agent has no tool {name!r}")
            args = r.plain(t["arguments"]) if "arguments" in t else None
            if args is not None and not isinstance(args, dict):
                raise r.fail(t["arguments"], f"{where}.arguments", "must be a mapping")
            tools.append((name, args))
    transfer: str | bool | None = None
    if "transfer" in m:
        value = r.plain(m["transfer"])
        if isinstance(value, str) and spec.handoff(value) is None:
            raise r.fail(m["transfer"], f"{what}.transfer", f"the agent has no hand-off {value!r}")
        if not isinstance(value, (str, bool)):
            raise r.fail(m["transfer"], f"{what}.transfer", "must be a hand-off's name, or true/false")
        transfer = value
    ended = r.plain(m["ended"]) if "ended" in m else None
    if ended is not None and not isinstance(ended, bool):
        raise r.fail(m["ended"], f"{what}.ended", "must be true or false")
    max_turns = r.plain(m["max_turns"]) if "max_turns" in m else None
    if max_turns is not None and (not isinstance(max_turns, int) or isinstance(max_turns, bool)
                                  or max_turns < 1):
        raise r.fail(m["max_turns"], f"{what}.max_turns", "must be a whole number of turns, 1 or more")
    return Expect(slots=slots, tools=tuple(tools), transfer=transfer, ended=ended,
                  said=r.texts(m["said"], f"{what}.said") if "said" in m else (),
                  never_said=r.texts(m["never_said"], f"{what}.never_said") if "never_said" in m else (),
                  max_turns=max_turns)


def load_scenarios(path: str | os.PathLike, *, agent: str | os.PathLike | None = None,
                   env: Mapping[str, str] | None = None) -> Suite:
    """Read a scenario file; ``agent`` overrides the spec it names (``parley test --agent``)."""
    p = Path(path)
    try:
        root = yaml.compose(p.read_text(encoding="utf-8"), Loader=yaml.SafeLoader)
    except OSError as exc:
        raise ScenarioError(f"{p}:1: cannot read the scenarios: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise ScenarioError(f"{p}:{mark.line + 1 if mark else 1}: not valid YAML: "
                            f"{getattr(exc, 'problem', exc)}") from exc
    r = _Reader(p)
    if root is None:
        raise ScenarioError(f"{p}:1: the file is empty")
    m = r.mapping(root, "the file", {"agent", "tools", "scenarios"})
    if agent is None and "agent" not in m:
        raise r.fail(root, "agent", "missing: name the agent spec (or pass --agent)")
    spec_path = Path(agent) if agent is not None else p.parent / r.text(m["agent"], "agent")
    spec = load_spec(spec_path, env=env)
    tools: dict[str, dict[str, Any]] = {}
    if "tools" in m:
        for name, node in r.mapping(m["tools"], "tools", {t.name for t in spec.tools}).items():
            reply = r.plain(node)
            if not isinstance(reply, dict):
                raise r.fail(node, f"tools.{name}", "a canned reply must be a mapping")
            tools[name] = reply
    if "scenarios" not in m:
        raise r.fail(root, "scenarios", "missing: the file has no scenarios")
    scenarios = []
    for i, node in enumerate(r.seq(m["scenarios"], "scenarios")):
        what = f"scenarios[{i}]"
        s = r.mapping(node, what, {"name", "goal", "turns", "expect"})
        for required in ("name", "turns"):
            if required not in s:
                raise r.fail(node, what, f"needs {required!r}")
        turns = r.texts(s["turns"], f"{what}.turns")
        for j, turn in enumerate(turns):
            if turn.startswith("#") and any(k not in "0123456789*#" for k in turn[1:]):
                raise r.fail(s["turns"], f"{what}.turns[{j}]",
                             f"{turn!r}: a turn starting with # presses keys (0-9, *, #)")
        scenarios.append(Scenario(
            name=r.text(s["name"], f"{what}.name"), turns=turns,
            expect=_expect(r, s["expect"], f"{what}.expect", spec) if "expect" in s else Expect(),
            goal=r.text(s["goal"], f"{what}.goal") if "goal" in s else "",
            line=node.start_mark.line + 1))
    names = [s.name for s in scenarios]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup is not None:
        raise ScenarioError(f"{p}:1: scenarios: the name {dup!r} appears twice")
    return Suite(p, spec, tuple(scenarios), tools)


def has_goal(expect: Expect) -> bool:
    """Whether the scenario names something to get done (slots, tools, a transfer)."""
    return bool(expect.slots or expect.tools or expect.transfer)


def goal_met(expect: Expect, slots: dict[str, str], events: list[dict[str, Any]]) -> bool:
    return not _goal_failures(expect, slots, events)


def _goal_failures(expect: Expect, slots: dict[str, str], events: list[dict[str, Any]]) -> list[str]:
    out = []
    for name, value in expect.slots.items():
        if slots.get(name) != value:
            out.append(f"slot {name}: expected {value!r}, got {slots.get(name)!r}")
    calls = [e["data"] for e in events if e["kind"] == "tool_call"]
    for name, args in expect.tools:
        if not any(c.get("name") == name and (args is None or c.get("arguments") == args)
                   for c in calls):
            seen = [f"{c.get('name')}({c.get('arguments')})" for c in calls] or ["none"]
            out.append(f"tool {name}({args if args is not None else '...'}) not called "
                       f"(called: {', '.join(seen)})")
    transfers = [e["data"] for e in events if e["kind"] == "transfer"]
    if expect.transfer is True and not transfers:
        out.append("expected a transfer; there was none")
    elif expect.transfer is False and transfers:
        out.append(f"expected no transfer; transferred to {transfers[0].get('target')}")
    elif isinstance(expect.transfer, str) and not any(t.get("handoff") == expect.transfer
                                                      for t in transfers):
        out.append(f"expected a transfer to {expect.transfer!r}; got "
                   f"{[t.get('handoff') for t in transfers] or 'none'}")
    return out


def judge(expect: Expect, *, slots: dict[str, str], events: list[dict[str, Any]], said: list[str],
          ended: bool, turns: int) -> list[str]:
    """What a finished call did against what the scenario expects -> the failures (none: passed).
    ``events``: the call's ``tool_call`` and ``transfer`` events (as records hold them); ``said``:
    the agent's words; ``turns``: the caller's turns by the goal (or in all)."""
    failures = _goal_failures(expect, slots, events)
    if expect.ended is not None and ended is not expect.ended:
        failures.append("expected the call to end; it did not" if expect.ended
                        else "expected the call to go on; it ended")
    words = " ".join(" ".join(said).lower().split())
    failures += [f"never said {p!r}" for p in expect.said
                 if " ".join(p.lower().split()) not in words]
    failures += [f"said {p!r}" for p in expect.never_said
                 if " ".join(p.lower().split()) in words]
    if expect.max_turns is not None and turns > expect.max_turns:
        failures.append(f"took {turns} turns; at most {expect.max_turns} allowed")
    return failures


async def run_scenario(suite: Suite, scenario: Scenario, *,
                       env: Mapping[str, str] | None = None) -> ScenarioResult:
    """Play one scenario against a fresh call of the suite's agent."""
    result = ScenarioResult(scenario)
    started = time.perf_counter()
    events: list[dict[str, Any]] = []
    said: list[str] = []
    async with AgentConsole(suite.spec, tools=suite.tools, env=env,
                            call_sid=f"test-{scenario.line}") as console:
        turn = await console.started()
        said += turn.said
        result.transcript += [f"agent: {t}" for t in turn.said]
        for text in scenario.turns:
            if console.ended:
                result.failures.append(f"the call ended before turn {result.turns + 1} "
                                       f"({text!r})")
                break
            result.transcript.append(f"caller: {text}")
            try:
                turn = await (console.press(text[1:]) if text.startswith("#")
                              else console.say(text))
            except AgentError as exc:
                result.failures.append(f"turn {result.turns + 1}: {exc}")
                break
            result.turns += 1
            said += turn.said
            events += turn.events
            result.transcript += [f"agent: {t}" for t in turn.said]
            if result.goal_turn is None and has_goal(scenario.expect) \
                    and goal_met(scenario.expect, console.slots, events):
                result.goal_turn = result.turns
        ended = console.ended
        slots = dict(console.slots)
    result.failures += judge(scenario.expect, slots=slots, events=events, said=said, ended=ended,
                             turns=result.goal_turn or result.turns)
    result.duration_s = time.perf_counter() - started
    return result


async def run_suite(suite: Suite, *, env: Mapping[str, str] | None = None) -> list[ScenarioResult]:
    return [await run_scenario(suite, s, env=env) for s in suite.scenarios]


def junit_xml(suites: list[tuple[Suite, list[ScenarioResult]]]) -> str:
    """JUnit XML (one testsuite a scenario file), for CI test reports."""
    root = ET.Element("testsuites")
    for suite, results in suites:
        ts = ET.SubElement(root, "testsuite", name=str(suite.path), tests=str(len(results)),
                           failures=str(sum(not r.passed for r in results)), errors="0",
                           time=f"{sum(r.duration_s for r in results):.3f}")
        for r in results:
            tc = ET.SubElement(ts, "testcase", classname=suite.path.stem, name=r.scenario.name,
                               time=f"{r.duration_s:.3f}")
            if not r.passed:
                failure = ET.SubElement(tc, "failure", message="; ".join(r.failures))
                failure.text = "\n".join(r.transcript)
    return ET.tostring(root, encoding="unicode", xml_declaration=True)
