"""`parley test` and `parley chat`: scenario files, their runs and their errors, the text console."""

import io
import json
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from agent.chat_cli import chat, parse_tool_replies
from agent.errors import AgentError, ScenarioError
from agent.scenarios import junit_xml, load_scenarios, run_suite
from deploy.cli import main

EXAMPLES = Path(__file__).resolve().parents[2] / "agent" / "examples"
SUITES = ["receptionist.scenarios.yaml", "order_status.scenarios.yaml"]


@pytest.mark.parametrize("name", SUITES)
async def test_the_examples_scenarios_pass(name):
    suite = load_scenarios(EXAMPLES / name, env={})
    results = await run_suite(suite, env={})
    assert len(results) >= 7
    assert [(r.scenario.name, r.failures) for r in results if not r.passed] == []


def _suite(tmp_path, body: str, agent: str = "receptionist.yaml") -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(f"agent: {EXAMPLES / agent}\n{body}")
    return path


async def test_a_scenario_whose_expectations_fail_says_which(tmp_path):
    path = _suite(tmp_path, """scenarios:
  - name: wrong on every count
    turns: [my name is Ann Lee, "yes", how much is a cleaning]
    expect:
      slots: {name: Ann Leigh, phone: "5550100"}
      said: [we are open on sundays]
      never_said: [best phone number]
      transfer: true
      max_turns: 1
""")
    [result] = await run_suite(load_scenarios(path, env={}), env={})
    assert not result.passed
    assert result.failures == [
        "slot name: expected 'Ann Leigh', got 'Ann Lee'",
        "slot phone: expected '5550100', got None",
        "expected a transfer; there was none",
        "never said 'we are open on sundays'",
        "said 'best phone number'",
        "took 3 turns; at most 1 allowed",
    ]
    xml = ET.fromstring(junit_xml([(load_scenarios(path, env={}), [result])]))
    case = xml.find("testsuite/testcase")
    assert case.get("name") == "wrong on every count"
    assert "Ann Leigh" in case.find("failure").get("message")
    assert "caller: how much is a cleaning" in case.find("failure").text


async def test_a_tool_call_is_checked_with_its_arguments(tmp_path):
    path = _suite(tmp_path, """tools:
  lookup_order: {status: has shipped, detail: ""}
scenarios:
  - name: right tool, wrong number
    turns: [order 12345, "yes"]
    expect:
      tool: {name: lookup_order, arguments: {order_number: "54321"}}
""", agent="order_status.yaml")
    [result] = await run_suite(load_scenarios(path, env={}), env={})
    assert result.failures == ["tool lookup_order({'order_number': '54321'}) not called "
                               "(called: lookup_order({'order_number': '12345'}))"]
    assert any(t.startswith("agent: Order 1 2 3 4 5 has shipped.") for t in result.transcript)


@pytest.mark.parametrize("body, line, message", [
    ("scenarios:\n  - name: x\n    turns: [hi]\n    expect:\n      slot: {name: Ann}\n", 6,
     "scenarios[0].expect: unknown key 'slot'"),
    ("scenarios:\n  - name: x\n    turns: [hi]\n    expect:\n      slots: {nmae: Ann}\n", 6,
     "scenarios[0].expect.slots: unknown key 'nmae'"),
    ("scenarios:\n  - turns: [hi]\n", 3, "scenarios[0]: needs 'name'"),
    ("scenarios:\n  - name: x\n    turns: [hi, '#1a']\n", 4,
     "scenarios[0].turns[1]: '#1a': a turn starting with # presses keys"),
    ("scenarios:\n  - name: x\n    turns: [hi]\n    expect: {max_turns: 0}\n", 5,
     "scenarios[0].expect.max_turns: must be a whole number"),
    ("scenarios:\n  - name: x\n    turns: [hi]\n    expect: {transfer: billing}\n", 5,
     "scenarios[0].expect.transfer: the agent has no hand-off 'billing'"),
    ("scenarios: [\n", 3, "not valid YAML"),
])
def test_a_malformed_scenario_file_is_one_line_naming_file_line_and_field(tmp_path, body, line,
                                                                          message):
    path = _suite(tmp_path, body)
    with pytest.raises(ScenarioError) as err:
        load_scenarios(path, env={})
    text = str(err.value)
    assert text.startswith(f"{path}:{line}: ") and message in text and "\n" not in text, text


def test_parley_test_exits_2_with_one_line_for_a_bad_file(tmp_path, capsys):
    bad = _suite(tmp_path, "scenarios:\n  - name: x\n")
    assert main(["test", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"parley test: {bad}:3: scenarios[0]: needs 'turns'"]


def test_parley_test_writes_a_table_a_json_line_and_junit(tmp_path, capsys):
    junit = tmp_path / "report.xml"
    path = _suite(tmp_path, """scenarios:
  - name: passes
    turns: [what are your opening hours]
    expect: {said: [Monday to Friday]}
  - name: fails
    turns: [what are your opening hours]
    expect: {never_said: [Monday to Friday]}
""")
    assert main(["test", str(path), "--junit", str(junit)]) == 1
    out = capsys.readouterr().out.strip().splitlines()
    assert out[0].split()[:4] == ["RESULT", "FILE", "SCENARIO", "TURNS"]
    assert out[1].startswith("PASS") and out[2].startswith("FAIL") and "said 'Monday" in out[2]
    report = json.loads(out[-1])
    assert (report["passed"], report["failed"]) == (1, 1)
    suite = ET.parse(junit).getroot().find("testsuite")
    assert (suite.get("tests"), suite.get("failures")) == ("2", "1")


async def test_chat_shows_words_actions_and_slots(monkeypatch):
    """`parley chat` as a new user drives it: piped lines, #0 presses 0."""
    lines = io.StringIO("I would like to leave a message. my name is Maria Lopez and my number "
                        "is 415 555 0199\nyes\n/slots\n#0\nhello?\n")
    out = io.StringIO()
    args = type("Args", (), {"agent": str(EXAMPLES / "receptionist.yaml"), "tool": []})()
    assert await chat(args, lines, out) == 0
    text = out.getvalue()
    assert "agent> I have your name as Maria Lopez. Is that right?" in text
    assert "        · slot name = 'Maria Lopez'\n        slots: name=Maria Lopez\n" in text
    assert "you> #0\nagent> Please hold while I put you through to the front desk.\n" \
           "        · transfer (dial) to +15550100 [caller pressed 0]\n[the call has ended]" in text
    assert "hello?" not in text                 # the call was over: no more turns


def test_tool_replies_on_the_command_line():
    assert parse_tool_replies(['lookup_order={"status": "lost"}']) == {
        "lookup_order": {"status": "lost"}}
    with pytest.raises(AgentError, match="--tool 'lookup_order=lost': the reply is not JSON"):
        parse_tool_replies(["lookup_order=lost"])


LLM_SPEC = """
name: Riverside Dental reception
persona: You are the receptionist of Riverside Dental.
greeting: Thank you for calling Riverside Dental. How can I help?
knowledge:
  - question: What are your opening hours?
    answer: Monday to Friday, eight to six.
tools:
  - {name: transfer_to_desk, kind: transfer, description: Put the caller through.}
handoffs:
  - {name: front_desk, kind: dial, target: "+15550100"}
llm: {backend: openai, model: scripted-model, base_url: "${LLM_URL}", filler_after_s: 5}
"""


async def test_the_console_runs_an_llm_backend_and_its_tool_calls():
    """The same console drives an LLM agent (here the scripted OpenAI-compatible server): its
    answer, and a function call that transfers the caller."""
    from agent.console import AgentConsole
    from agent.spec import parse_spec
    from harness.scripted_llm import ScriptedChatServer, ScriptedReply

    server = ScriptedChatServer([
        ScriptedReply(text="We are open Monday to Friday, eight to six."),
        ScriptedReply(tool_call=("transfer_to_desk", {"reason": "caller asked"})),
    ])
    url = await server.start()
    try:
        spec = parse_spec(LLM_SPEC, env={"LLM_URL": url})
        async with AgentConsole(spec) as console:
            assert (await console.started()).said == [spec.greeting]
            turn = await console.say("when are you open")
            assert turn.said == ["We are open Monday to Friday, eight to six."]
            turn = await console.say("put me through please")
            assert [e["kind"] for e in turn.events] == ["tool_call", "transfer"]
            assert turn.events[1]["data"]["target"] == "+15550100" and turn.ended
        user_turns = [m["content"] for m in server.requests[1]["messages"] if m["role"] == "user"]
        assert user_turns == ["when are you open", "put me through please"]
    finally:
        await server.stop()
