"""Question sets for the embedded agent: does it answer right, or say it does not know?

    qs = load_answer_set("tests/agent/data/receptionist_questions.yaml")
    report = score_answers(qs, encoder)        # -> AnswerReport (precision, recall, the misses)
    mixed = score_mixed_initiative(qs, encoder)   # -> [MixedResult]: requests that carry slots

A question set names its agent and labels every question with the right outcome: the knowledge
entry that answers it (``answers``, entries named in ``entries`` by their question), the task it
starts (``tasks``), or no answer (``no_answer``: near misses on a subject next to an entry's, and
questions the knowledge cannot answer). Each question is asked of a fresh ``Conversation`` (the
embedded agent's dialogue, as on a call); the reply that contains an entry's answer is that
entry's answer. Counted:

- a wrong fact: an entry's answer to a question it does not answer (another entry's question, a
  task's request, or one without an answer);
- precision: right answers / all entry answers given (1 - the wrong-fact share);
- recall: right answers / the questions an entry answers.

``mixed_initiative`` turns are requests with slot values in them ("... my name is Maria Lopez and
my number is 415 555 0199"): the values must be taken (each read back as usual, and confirmed
with "yes"), never asked for again, and the first slot asked must be the first missing one
(``asks``; null: none, the task goes on to its tool or its end).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from agent.conversation import Conversation, Say, SlotFilled, State
from agent.spec import AgentSpec, load_spec
from harness.errors import AnswerSetError

if TYPE_CHECKING:
    from agent.semantic import SentenceEncoder

__all__ = ["AnswerReport", "AnswerSet", "MixedResult", "MixedTurn", "Question", "load_answer_set",
           "outcome", "score_answers", "score_mixed_initiative"]

NONE = "none"
ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Question:
    text: str
    expected: str          # an entry's label, "task:<name>", or "none"
    kind: str              # "answer", "task", "near_miss" or "unanswerable"


@dataclass(frozen=True)
class MixedTurn:
    say: str
    task: str
    slots: dict[str, str]
    asks: str | None


@dataclass(frozen=True)
class AnswerSet:
    path: Path
    spec: AgentSpec
    entries: dict[str, int]          # label -> index into spec.knowledge
    questions: tuple[Question, ...]
    mixed: tuple[MixedTurn, ...]


def _fail(path: Path, where: str, message: str) -> AnswerSetError:
    return AnswerSetError(f"{path}: {where}: {message}")


def _strings(path: Path, where: str, value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise _fail(path, where, "must be a list of questions")
    return value


def load_answer_set(path: str | Path) -> AnswerSet:
    """Read a question set; its ``agent`` path is relative to the repository root."""
    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise AnswerSetError(f"{p}: cannot read: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise AnswerSetError(f"{p}:{mark.line + 1 if mark else 1}: not valid YAML: "
                             f"{getattr(exc, 'problem', exc)}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("agent"), str):
        raise _fail(p, "agent", "the set must be a mapping naming its agent's spec")
    spec = load_spec(ROOT / data["agent"], env={})
    by_question = {k.question: i for i, k in enumerate(spec.knowledge)}
    entries: dict[str, int] = {}
    for label, question in (data.get("entries") or {}).items():
        if question not in by_question:
            raise _fail(p, f"entries.{label}", f"no knowledge entry asks {question!r}")
        entries[str(label)] = by_question[question]
    questions: list[Question] = []
    for label, texts in (data.get("answers") or {}).items():
        if label not in entries:
            raise _fail(p, f"answers.{label}", "not an entry named under 'entries'")
        questions += [Question(t, label, "answer") for t in _strings(p, f"answers.{label}", texts)]
    task_names = {t.name for t in spec.tasks}
    for name, texts in (data.get("tasks") or {}).items():
        if name not in task_names:
            raise _fail(p, f"tasks.{name}", f"the agent has no task {name!r}")
        questions += [Question(t, f"task:{name}", "task") for t in _strings(p, f"tasks.{name}", texts)]
    for kind, texts in (data.get("no_answer") or {}).items():
        if kind not in ("near_miss", "unanswerable"):
            raise _fail(p, f"no_answer.{kind}", "must be near_miss or unanswerable")
        questions += [Question(t, NONE, kind) for t in _strings(p, f"no_answer.{kind}", texts)]
    mixed: list[MixedTurn] = []
    for i, turn in enumerate(data.get("mixed_initiative") or []):
        where = f"mixed_initiative[{i}]"
        if not isinstance(turn, dict) or not isinstance(turn.get("say"), str) \
                or turn.get("task") not in task_names:
            raise _fail(p, where, "needs 'say' and a 'task' of the agent")
        slots = turn.get("slots") or {}
        if not isinstance(slots, dict):
            raise _fail(p, f"{where}.slots", "must be a mapping of slot names to values")
        mixed.append(MixedTurn(turn["say"], turn["task"], {str(k): str(v) for k, v in slots.items()},
                               turn.get("asks")))
    return AnswerSet(p, spec, entries, tuple(questions), tuple(mixed))


def outcome(conv: Conversation, actions: list, labels: dict[int, str]) -> str:
    """What a turn's actions did: an entry's label (its answer said), "task:<name>", or "none"."""
    said = " ".join(a.text for a in actions if isinstance(a, Say))
    for i, item in enumerate(conv.spec.knowledge):
        if item.answer in said:
            return labels.get(i, f"entry{i}")
    if conv.task is not None:
        return f"task:{conv.task}"
    return NONE


@dataclass
class AnswerReport:
    questions: int = 0
    answerable: int = 0
    answered: int = 0                 # entry answers given
    right: int = 0
    wrong: list[tuple[str, str, str]] = field(default_factory=list)    # (question, expected, got)
    missed: list[tuple[str, str, str]] = field(default_factory=list)   # answerable, not answered
    tasks_right: int = 0
    tasks: int = 0
    by_kind: Counter = field(default_factory=Counter)     # kind -> questions handled right

    @property
    def precision(self) -> float:
        return self.right / self.answered if self.answered else 1.0

    @property
    def recall(self) -> float:
        return self.right / self.answerable if self.answerable else 1.0

    @property
    def wrong_fact_rate(self) -> float:
        return len(self.wrong) / self.answered if self.answered else 0.0

    def count(self, q: Question, got: str) -> None:
        """Count one question's outcome ``got``: an entry's label, "task:<name>" or "none"."""
        is_entry = got != NONE and not got.startswith("task:")
        self.questions += 1
        if q.kind == "answer":
            self.answerable += 1
        if q.kind == "task":
            self.tasks += 1
            self.tasks_right += got == q.expected
        if is_entry:
            self.answered += 1
            if got == q.expected:
                self.right += 1
            else:
                self.wrong.append((q.text, q.expected, got))
        if q.kind == "answer" and got != q.expected:
            self.missed.append((q.text, q.expected, got))
        self.by_kind[q.kind] += got == q.expected or (q.expected == NONE and not is_entry)

    def summary(self) -> dict[str, Any]:
        return {"questions": self.questions, "answerable": self.answerable,
                "answered": self.answered, "right": self.right, "wrong_facts": len(self.wrong),
                "precision": round(self.precision, 4), "recall": round(self.recall, 4),
                "wrong_fact_rate": round(self.wrong_fact_rate, 4),
                "tasks_right": f"{self.tasks_right}/{self.tasks}",
                "handled_right_by_kind": dict(self.by_kind)}


def score_answers(qs: AnswerSet, encoder: SentenceEncoder | None) -> AnswerReport:
    """Ask every question of a fresh conversation and count right, wrong and missing answers."""
    labels = {i: label for label, i in qs.entries.items()}
    report = AnswerReport()
    for q in qs.questions:
        conv = Conversation(qs.spec, encoder)
        report.count(q, outcome(conv, conv.hear(q.text), labels))
    return report


@dataclass(frozen=True)
class MixedResult:
    turn: MixedTurn
    ok: bool
    filled: dict[str, str]
    asked: tuple[str, ...]            # the slots asked for (not read back), in order
    replies: tuple[str, ...]
    why: str = ""


ANSWERS = {"name": "Jane Doe", "phone": "six one seven five five five zero one nine nine",
           "number": "1 2 3 4 5", "date": "next monday", "yes_no": "yes",
           "text": "please ask the dentist to call me about my crown"}
"""What the scripted caller says when a slot of each kind is asked."""


def score_mixed_initiative(qs: AnswerSet, encoder: SentenceEncoder | None) -> list[MixedResult]:
    """Say each request; then confirm every read-back with "yes" and answer every question
    (``ANSWERS``) until the task is done. A request passes when its values were taken, none of
    its slots was asked for again, and the first slot asked is ``asks``."""
    results = []
    for turn in qs.mixed:
        conv = Conversation(qs.spec, encoder)
        actions = conv.hear(turn.say)
        replies = [" ".join(a.text for a in actions if isinstance(a, Say))]
        filled: dict[str, str] = {}
        asked: list[str] = []
        for _ in range(12):
            filled.update({a.name: a.value for a in actions if isinstance(a, SlotFilled)})
            if conv.state is State.CONFIRMING:
                actions = conv.hear("yes")
            elif conv.state is State.COLLECTING and conv.slot is not None:
                asked.append(conv.slot)
                actions = conv.hear(ANSWERS[qs.spec.slot(conv.slot).kind])
            else:
                break
            replies.append(" ".join(a.text for a in actions if isinstance(a, Say)))
        why = ""
        if not filled and not asked:
            why = "no task started"
        elif any(filled.get(k) != v for k, v in turn.slots.items()):
            why = f"slots {filled}, not {turn.slots}"
        elif set(asked) & set(turn.slots):
            why = f"asked again for {sorted(set(asked) & set(turn.slots))}"
        elif (asked[0] if asked else None) != turn.asks:
            why = f"asked {asked[:1]}, not {turn.asks!r} first"
        results.append(MixedResult(turn, not why, filled, tuple(asked), tuple(replies), why))
    return results
