"""An LLM backend on the question sets: the plumbing and the judge, over loopback.

The scripted OpenAI-compatible server (``harness.scripted_llm``) stands in for a model that
answers from what it is sent: it reads the knowledge and the slot prompts out of the system
prompt of each request, and answers the question (the last user message) with the labelled
entry's answer as it found it there, or deliberately with another entry's, or "I don't know".
What a real model scores is for ``benchmarks/bench_agent_answers.py --llm-base-url``.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from harness.answer_sets import NONE, load_answer_set
from harness.llm_answers import ReplyJudge, key_facts, numbers, score_llm_answers
from harness.scripted_llm import ScriptedChatServer, ScriptedReply

DATA = Path(__file__).resolve().parent / "data"
DONT_KNOW = "Sorry, I don't know that. I can take a message for you."


@pytest.fixture(scope="module")
def receptionist():
    return load_answer_set(DATA / "receptionist_questions.yaml")


@pytest.mark.parametrize("text, want", [
    ("five five five, zero one nine nine", {"5550199"}),
    ("call 555-0199 after hours", {"5550199"}),
    ("it costs ninety-five dollars", {"95"}),
    ("$95, or one hundred and twenty with x rays", {"95", "120"}),
    ("from 8:00 am to 6 pm, and nine to one", {"8", "0", "6", "9", "1"}),
    ("1,000 orders", {"1000"}),
])
def test_numbers_are_read_from_digits_and_words(text, want):
    assert numbers(text) == want


def test_key_facts_of_the_receptionist_entries(receptionist):
    facts = dict(zip(receptionist.entries, key_facts([k.answer for k in receptionist.spec.knowledge])))
    assert facts["hours"].names == {"monday", "friday", "saturday", "sundays"}
    assert facts["hours"].numbers == {"8", "6", "9", "1"}
    assert facts["location"].names == {"river street"} and facts["location"].numbers == {"42"}
    assert facts["insurance"].names == {"delta dental", "cigna", "aetna"}
    assert facts["emergency"].numbers == {"5550199"}
    assert facts["cleaning_price"].numbers == {"95"}
    assert not facts["new_patients"].numbers and not facts["new_patients"].names


@pytest.mark.parametrize("question, reply, want", [
    ("where are you", "We're at forty-two River Street, by the library.", "location"),
    ("are you open on saturday", "Yes, on Saturdays we're open from nine to one.", "hours"),
    ("do you take cigna", "Yes, we take Cigna.", "insurance"),
    ("I broke my tooth", "Come in now, or after hours call 555-0199.", "emergency"),
    ("how much is a checkup", "A cleaning and check up is $95 without insurance.", "cleaning_price"),
    ("is there parking", "Yes, park behind the building; the way in is on Mill Lane.", "parking"),
    # the expected entry's facts beside another's: right
    ("when are you open", "We're open Monday to Friday, eight to six, at 42 River Street.", "hours"),
    # another entry's facts, not its own: a wrong fact
    ("is there parking", "We are open Monday to Friday from eight to six.", "hours"),
    ("how much is a filling", "A standard cleaning costs ninety five dollars.", "cleaning_price"),
    # no fact, or says so: no answer
    ("how much is a filling", "Sorry, I don't have the price of a filling.", NONE),
    ("how much is a filling", "I'm not sure about fillings, but a cleaning is $95.", NONE),
    ("do you sell toothbrushes", "Let me put you through to the front desk.", NONE),
    ("do you treat children", "Hmm.", NONE),
    # one number of the hours is not the hours
    ("who is the dentist", "No one by that name works here.", NONE),
    # a task: it asks for the task's slot
    ("can someone call me back", "Of course. May I have your name, please?", "task:take_message"),
])
def test_the_judge_reads_what_a_paraphrase_states(receptionist, question, reply, want):
    q = next(q for q in receptionist.questions if q.text == question)
    assert ReplyJudge(receptionist).outcome(q, reply) == want


def test_a_task_function_call_is_the_task(receptionist):
    q = next(q for q in receptionist.questions if q.expected == "task:take_message")
    events = [{"kind": "tool_call", "data": {"name": "take_message", "arguments": {}}}]
    assert ReplyJudge(receptionist).outcome(q, "Thank you.", events) == "task:take_message"


def _subset(qs):
    """Two questions of each entry, two task requests, four without an answer."""
    picked, seen = [], {}
    for q in qs.questions:
        key = q.expected if q.kind != "near_miss" else "near_miss"
        limit = 4 if q.kind in ("near_miss", "unanswerable") else 2
        if q.kind == "unanswerable":
            continue
        if seen.get(key, 0) < limit:
            seen[key] = seen.get(key, 0) + 1
            picked.append(q)
    return replace(qs, questions=tuple(picked))


def _scripted_model(qs, plan):
    """A model that answers from the request: the knowledge and slot prompts it was sent."""
    by_label = {label: qs.spec.knowledge[i].question for label, i in qs.entries.items()}

    def answer(body: dict) -> ScriptedReply:
        system = body["messages"][0]["content"] if body["messages"][0]["role"] == "system" else ""
        knowledge = dict(re.findall(r"^Q: (.*)\nA: (.*)$", system, re.M))
        slot_prompts = re.findall(r'^- \w+ \(\w+\): ask "(.*)"', system, re.M)
        action = plan[body["messages"][-1]["content"]]
        if action == NONE:
            return ScriptedReply(text=DONT_KNOW)
        if action.startswith("task:"):
            return ScriptedReply(text=(slot_prompts or ["Go on."])[0])
        return ScriptedReply(text=knowledge.get(by_label[action], DONT_KNOW))

    return answer


async def _run_over_loopback(qs, plan, *, tools):
    """Score ``qs`` against the scripted model; check what each request carried."""
    server = ScriptedChatServer(_scripted_model(qs, plan))
    url = await server.start()
    try:
        spec = replace(qs.spec, llm=replace(qs.spec.llm, backend="openai", model="scripted",
                                            base_url=url))
        run = await score_llm_answers(qs, spec, settle_s=0.05, reply_timeout_s=10)
    finally:
        await server.stop()
    assert len(server.requests) == len(qs.questions)      # one completion a question
    for body, q in zip(server.requests, qs.questions):
        system = body["messages"][0]
        assert system["role"] == "system"
        assert all(k.answer in system["content"] for k in qs.spec.knowledge)
        assert {t["function"]["name"] for t in body["tools"]} == tools
        assert [m["role"] for m in body["messages"]] == ["system", "user"]     # a fresh call
        assert body["messages"][-1]["content"] == q.text
    return run


async def test_an_llm_backend_is_scored_on_a_question_set_over_loopback(receptionist):
    """Every request carries the knowledge, the tools and the question; right answers count right,
    another entry's answer counts as a wrong fact, "I don't know" as no answer."""
    qs = _subset(receptionist)
    entry_qs = [q for q in qs.questions if q.kind == "answer"]
    near_misses = [q for q in qs.questions if q.kind == "near_miss"]
    plan = {q.text: q.expected for q in qs.questions}
    wrong = {entry_qs[4].text: "hours", entry_qs[8].text: "location", near_misses[0].text: "cleaning_price"}
    plan.update(wrong)
    plan[entry_qs[10].text] = NONE                       # a miss: it does not know
    assert len(qs.questions) == 20 and len(entry_qs) == 14 and entry_qs[4].expected == "parking"

    run = await _run_over_loopback(qs, plan, tools={"take_message", "end_call", "transfer_call"})
    report = run.report
    assert sorted(report.wrong) == sorted((q, next(x.expected for x in qs.questions if x.text == q), got)
                                          for q, got in wrong.items())
    assert (report.right, report.answered, report.answerable) == (11, 14, 14)
    assert report.precision == pytest.approx(11 / 14) and report.recall == pytest.approx(11 / 14)
    assert (entry_qs[10].text, entry_qs[10].expected, NONE) in report.missed
    assert report.tasks_right == report.tasks == 2
    assert report.by_kind["near_miss"] == 3                 # the "I don't know"s, not the filling
    assert run.replies[entry_qs[0].text] == qs.spec.knowledge[qs.entries["hours"]].answer


@pytest.mark.parametrize("question, reply, want", [
    # no number or name of the entry: only the sentence encoder sees the fact
    ("is parking free", "Yes, parking is free, right behind the building.", "parking"),
    ("can I become a patient", "Yes, we're welcoming new patients at the moment.", "new_patients"),
    # close to an answer's subject, stating nothing
    ("how much is a checkup", "Sorry, I don't know what a checkup costs.", NONE),
    ("do you sell toothbrushes", "We sell toothbrushes and floss at the front desk.", NONE),
])
def test_with_the_encoder_a_paraphrase_without_numbers_or_names_is_read(receptionist, encoder,
                                                                        question, reply, want):
    q = next(q for q in receptionist.questions if q.text == question)
    assert ReplyJudge(receptionist).outcome(q, reply) == NONE       # no fact of rule 1 or 2
    assert ReplyJudge(receptionist, encoder).outcome(q, reply) == want


async def test_a_perfect_model_of_the_order_line_is_all_right_over_loopback():
    """The order line's knowledge and its task function reach the model; a model that answers
    every question from its prompt scores 1.0 and starts every task."""
    qs = _subset(load_answer_set(DATA / "order_status_questions.yaml"))
    assert len(qs.questions) == 12
    run = await _run_over_loopback(qs, {q.text: q.expected for q in qs.questions},
                                   tools={"order_status", "end_call", "transfer_to_agent"})
    report = run.report
    assert (report.right, report.answered, report.wrong) == (6, 6, [])
    assert report.tasks_right == report.tasks == 2 and report.by_kind["near_miss"] == 4
