"""The embedded agent on the example agents' question sets: right, or it says it does not know.

The bar (benchmarks/bench_agent_answers.py prints the figures): at most 1 % of the answers given
state a wrong fact, at least 90 % of the answerable questions answered right, and every request
that carries its slots completed without asking for them again."""

from pathlib import Path

import pytest

from harness.answer_sets import load_answer_set, score_answers, score_mixed_initiative
from harness.errors import AnswerSetError

DATA = Path(__file__).resolve().parent / "data"


@pytest.mark.parametrize("name", ["receptionist", "order_status"])
def test_answers_are_right_or_honest(encoder, name):
    """Guards the wrong facts on perfect text: "how much is a filling" had the cleaning price,
    "what's your phone number" the new-patients answer, "do you accept medicaid" the list."""
    qs = load_answer_set(DATA / f"{name}_questions.yaml")
    assert len(qs.questions) >= 150
    report = score_answers(qs, encoder)
    assert report.wrong_fact_rate <= 0.01, report.wrong
    assert report.recall >= 0.90, report.missed
    assert report.tasks_right == report.tasks


@pytest.mark.parametrize("name", ["receptionist", "order_status"])
def test_requests_that_carry_their_slots_are_not_asked_again(encoder, name):
    qs = load_answer_set(DATA / f"{name}_questions.yaml")
    results = score_mixed_initiative(qs, encoder)
    assert results and [(m.turn.say, m.why) for m in results if not m.ok] == []


def test_a_question_set_naming_an_entry_the_agent_lacks_is_refused(tmp_path):
    path = tmp_path / "q.yaml"
    path.write_text("agent: agent/examples/receptionist.yaml\n"
                    "entries:\n  fillings: How much is a filling?\n")
    with pytest.raises(AnswerSetError, match=r"q.yaml: entries.fillings: no knowledge entry asks"):
        load_answer_set(path)
