"""The spec's ``voicemail:`` section: parsed, its mistakes named by line, and each call's plan with
the message filled from the call's parameters."""

from __future__ import annotations

import logging

import pytest

from agent.errors import SpecError
from agent.spec import VoicemailSpec, parse_spec
from agent.voicemail import answering_plan, fill_message
from pipeline.voicemail import AnsweringPlan

MINIMAL = "name: Test line\ngreeting: Hello.\n"
SECTION = ("voicemail:\n  message: Hi {name}, this is Acme about order {order}. Please call us back.\n"
           "  on_unknown: hang_up\n  max_wait_s: 30\n")


def test_the_section_parses_and_defaults():
    spec = parse_spec(MINIMAL + SECTION, env={})
    assert spec.voicemail == VoicemailSpec(
        message="Hi {name}, this is Acme about order {order}. Please call us back.",
        on_machine="leave_message", on_unknown="hang_up", max_wait_s=30.0)
    assert parse_spec(MINIMAL, env={}).voicemail is None          # calls placed are not screened
    hang_up = parse_spec(MINIMAL + "voicemail:\n  on_machine: hang_up\n", env={}).voicemail
    assert hang_up == VoicemailSpec(message=None, on_machine="hang_up", on_unknown="greet", max_wait_s=20.0)


@pytest.mark.parametrize("section, line, message", [
    ("voicemail:\n  mesage: Hi.\n", 4, r"voicemail: unknown key 'mesage' \(expected one of: max_wait_s, message, "
                                       r"on_machine, on_unknown\)"),
    ("voicemail:\n  on_machine: leave\n  message: Hi.\n", 4,
     "voicemail.on_machine must be one of leave_message, hang_up, not 'leave'"),
    ("voicemail:\n  on_unknown: wait\n  message: Hi.\n", 4, "voicemail.on_unknown must be one of greet, hang_up"),
    ("voicemail:\n  on_unknown: greet\n", 4, "on_machine leave_message needs a 'message'"),
    ("voicemail:\n  message: Hi {name\n", 4, "voicemail.message: .*write {{ for a literal brace"),
    ("voicemail:\n  message: Hi {0}.\n", 4, r"voicemail.message: \{0\} is not a parameter name"),
    ("voicemail:\n  message: Hi {name.upper}.\n", 4, r"\{name.upper\} is not a parameter name"),
    ("voicemail:\n  message: Hi {name!r}.\n", 4, r"\{name\} takes no format or conversion"),
    ("voicemail:\n  message: '{greeting} {name}'\n", 4, "voicemail.message must have some words besides"),
    ("voicemail:\n  message: ''\n", 4, "voicemail.message must not be empty"),
    ("voicemail:\n  message: Hi.\n  max_wait_s: 1\n", 5, "voicemail.max_wait_s must be at least 3"),
    ("voicemail:\n  message: Hi.\n  max_wait_s: 600\n", 5, "voicemail.max_wait_s must be at most 120"),
    ("voicemail: leave a message\n", 3, "voicemail must be a mapping"),
])
def test_mistakes_name_the_file_and_line(section, line, message):
    with pytest.raises(SpecError, match=rf"^agent\.yaml:{line}: (voicemail[:.] |voicemail\.message: )?{message}"):
        parse_spec(MINIMAL + section, source="agent.yaml", env={})


def test_the_message_takes_environment_references_too():
    spec = parse_spec(MINIMAL + "voicemail:\n  message: This is ${COMPANY:-Acme} for {name}.\n", env={})
    assert spec.voicemail is not None and spec.voicemail.message == "This is Acme for {name}."


def test_each_call_gets_its_own_message():
    spec = parse_spec(MINIMAL + SECTION, env={})
    plan = answering_plan(spec, {"name": "Dana", "order": "42", "to": "sip:dana@example.com"})
    assert plan == AnsweringPlan(on_machine="leave_message",
                                 message="Hi Dana, this is Acme about order 42. Please call us back.",
                                 on_unknown="hang_up", detector=plan.detector)
    assert plan.detector.max_wait_s == 30.0
    assert answering_plan(parse_spec(MINIMAL, env={}), {"name": "Dana"}) is None


def test_a_missing_field_is_left_out_and_named_in_the_log_without_values(caplog):
    with caplog.at_level(logging.WARNING, logger="agent.voicemail"):
        text = fill_message("Hi {name}, this is Acme about order {order}. Bye {name}!", {"order": "7"})
    assert text == "Hi, this is Acme about order 7. Bye!"
    assert caplog.messages == ["voicemail message: the call has no name; left out"]
    assert fill_message("Literal {{braces}} stay.", {}) == "Literal {braces} stay."


def test_a_hang_up_plan_needs_no_message():
    spec = parse_spec(MINIMAL + "voicemail:\n  on_machine: hang_up\n  on_unknown: hang_up\n", env={})
    plan = answering_plan(spec, {})
    assert plan is not None and (plan.on_machine, plan.message, plan.on_unknown) == ("hang_up", "", "hang_up")
