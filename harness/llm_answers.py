"""Question sets for an LLM-backed agent: does its free text state the right fact, or none?

    judge = ReplyJudge(qs, encoder)                     # encoder None: facts and wording only
    judge.outcome(question, "We're at 42 River Street.")            # -> "location"
    run = await score_llm_answers(qs, spec, encoder=encoder)     # spec: qs.spec with an LLM backend
    run.report.summary(), run.replies                   # the counts of harness.answer_sets, the words

Each question goes to a fresh ``agent.console.AgentConsole`` (the agent a call gets, in text), so
the model gets what a call's first turn sends: the system prompt with the knowledge and the
tasks, the tools, and the question as the user message (the console's requests carry no
greeting: checked against the scripted server). An LLM paraphrases, so a reply is judged by what
it states, not by its wording. The **key facts** of an entry are the numbers in its answer (digits or words:
"ninety five" is 95, "5 5 5, 0 1 9 9" and "555-0199" are 5550199) and its names (capitalised
words inside a sentence: "River Street", "Cigna", "Saturday"); a fact is *its own* when no other
entry of the agent has it. A reply **states an entry** when

1. it contains the entry's answer word for word (case, punctuation and spacing aside), or
2. it contains one of the entry's names, or as many of its numbers as the entry has up to two
   (one of them its own), or
3. (with the sentence encoder, and a reply that does not say it has no answer) the entry's
   answer is the most similar of all answers to the reply or to one of its sentences, at a
   cosine of at least ``SIMILAR_MIN`` (a reply on an entry's subject that says it does not
   know states nothing, however close its words).

The reply's outcome, the first that holds:

- the expected entry is stated: that entry (right, even beside other facts);
- it starts a task: a ``tool_call`` event of the task (or of its tool), its intro or one of its
  slots' prompts, or a question that names one of its slots ("May I have your name?"):
  ``task:<name>``;
- it says it does not know, offers a message or a person (``NO_ANSWER`` phrases, the spec's
  fallback and cannot-answer lines, a transfer): ``none``;
- another entry is stated: that entry (a wrong fact);
- otherwise ``none``.

Then ``AnswerReport.count`` counts it as for the embedded agent: precision is right answers over
entry answers given, recall right answers over answerable questions. Not caught: a fact no entry
holds (an invented price is ``none``, not a wrong fact), and another entry's fact beside "I don't
know" or an offered message (an entry whose answer offers one, like the receptionist's new
patients, is never a wrong fact); read ``replies`` (``--misses``) for those. Read as a fact by
accident: an entry's own name or number said for another reason ("it arrives on Friday" states the
order line's customer-service hours).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agent.spec import AgentSpec
from harness.answer_sets import NONE, AnswerReport, AnswerSet, Question

if TYPE_CHECKING:
    from agent.semantic import SentenceEncoder

__all__ = ["NO_ANSWER", "SIMILAR_MIN", "KeyFacts", "LLMAnswerRun", "ReplyJudge", "key_facts",
           "score_llm_answers"]

SIMILAR_MIN = 0.7
"""The cosine (all-MiniLM-L6-v2) at which a reply states the most similar entry's answer. Checked
on the example agents (2026-12-07): paraphrases of an answer without its numbers or names ("You can
park for free behind the building") 0.73-0.89; replies that state nothing or another subject ("A
checkup costs money", "We sell toothbrushes and floss") at most 0.50. A paraphrase that denies
the answer scores as high as one that states it: the facts of rule 2 are the firmer evidence."""

NO_ANSWER = ("don't know", "do not know", "not sure", "don't have", "do not have",
             "no information", "unable to", "not able to", "can't help", "cannot help",
             "can't answer", "cannot answer", "can't tell", "cannot tell", "i'm afraid",
             "take a message", "leave a message", "pass on a message", "put you through",
             "transfer you", "connect you")
"""Phrases of a reply that says it has no answer, or offers a message or a person instead."""

_UNITS = {w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen".split())}
_TENS = {w: 10 * (i + 2) for i, w in enumerate(
    "twenty thirty forty fifty sixty seventy eighty ninety".split())}
_UNIT = "|".join(sorted(_UNITS, key=len, reverse=True))
_TEN = "|".join(_TENS)
_NUMBER_WORD = rf"(?:{_UNIT}|{_TEN}|hundred)"
_NUMBER_WORDS = re.compile(rf"\b{_NUMBER_WORD}(?:(?:[\s-]+|(?<=hundred)\s+and\s+){_NUMBER_WORD})*\b")
_SPACED_DIGITS = re.compile(r"\b\d(?:[ ,]+\d)+\b")       # "5 5 5, 0 1 9 9"
_GROUPED_DIGITS = re.compile(r"\b\d{3,}(?:[-. ]\d{3,})+\b")  # "555-0199", "555 0199"
_THOUSANDS = re.compile(r"\b(\d{1,3}),(\d{3})\b")
_SENTENCES = re.compile(r"[^.!?]+[.!?]?")
_WORD = re.compile(r"[A-Za-z][A-Za-z'&]*|[^\sA-Za-z]")   # punctuation ends a name


def _words_to_digits(text: str) -> str:
    """ "ninety five" -> "95", "one hundred and twenty" -> "120", "five five five" -> "5 5 5"."""
    def value(m: re.Match) -> str:
        out: list[int] = []
        current: int | None = None
        after_tens = False
        for word in re.findall(r"[a-z]+", m.group()):
            if word == "and":
                continue
            if word == "hundred":
                if current is not None and current < 10:
                    current *= 100
                else:
                    out += [] if current is None else [current]
                    current = 100
                after_tens = False
            elif word in _TENS:
                if current is not None and current >= 100 and current % 100 == 0:
                    current += _TENS[word]
                else:
                    out += [] if current is None else [current]
                    current = _TENS[word]
                after_tens = True
            else:
                unit = _UNITS[word]
                if current is not None and unit < 10 and (after_tens or (current >= 100 and current % 100 == 0)):
                    current += unit
                else:
                    out += [] if current is None else [current]
                    current = unit
                after_tens = False
        out += [] if current is None else [current]
        return " ".join(str(n) for n in out)

    return _NUMBER_WORDS.sub(value, text)


def _plain(text: str) -> str:
    """Lower case, straight apostrophes, single spaces."""
    return " ".join(text.lower().replace("\u2019", "'").split())


def numbers(text: str) -> set[str]:
    """The numbers a text states, as digit strings (words and spoken digit runs included)."""
    t = _words_to_digits(_plain(text))
    t = _THOUSANDS.sub(r"\1\2", t)
    t = _SPACED_DIGITS.sub(lambda m: re.sub(r"\D", "", m.group()), t)
    t = _GROUPED_DIGITS.sub(lambda m: re.sub(r"\D", "", m.group()), t)
    return {d if len(d) > 4 else str(int(d)) for d in re.findall(r"\d+", t)}


def names(text: str) -> set[str]:
    """Capitalised words (runs of them) inside a sentence, lower case: "River Street"."""
    found: set[str] = set()
    for sentence in _SENTENCES.findall(text):
        words = _WORD.findall(sentence)
        run: list[str] = []
        for w in [*words[1:], ""]:
            if w[:1].isupper() and w != "I":
                run.append(w.lower())
            elif run:
                found.add(" ".join(run))
                run = []
    return found


def _has_name(text: str, name: str) -> bool:
    stem = name[:-1] if name.endswith("s") and len(name) > 3 else name
    return re.search(rf"\b{re.escape(stem)}s?\b", text) is not None


@dataclass(frozen=True)
class KeyFacts:
    """What an entry's answer states: its numbers and names, and those no other entry has."""

    numbers: frozenset[str]
    names: frozenset[str]
    own: frozenset[str]

    def stated_in(self, reply: str) -> bool:
        plain = _plain(reply)
        if any(_has_name(plain, n) for n in self.names & self.own):
            return True
        said = numbers(reply) & self.numbers
        return bool(said & self.own) and len(said) >= min(2, len(self.numbers))


def key_facts(answers: list[str]) -> list[KeyFacts]:
    """The key facts of each answer of one agent's knowledge, in order."""
    raw = [(numbers(a), names(a)) for a in answers]
    out = []
    for i, (nums, nams) in enumerate(raw):
        others: set[str] = set()
        for j, (n, m) in enumerate(raw):
            if j != i:
                others |= n | m
        out.append(KeyFacts(frozenset(nums), frozenset(nams), frozenset((nums | nams) - others)))
    return out


class ReplyJudge:
    """Judges an LLM agent's replies to a question set (the rule is the module docstring's)."""

    def __init__(self, qs: AnswerSet, encoder: SentenceEncoder | None = None):
        self.spec = qs.spec
        self.labels = {i: label for label, i in qs.entries.items()}
        self._answers = [k.answer for k in qs.spec.knowledge]
        self._facts = key_facts(self._answers)
        self._encoder = encoder
        self._answer_vecs = encoder.encode(self._answers) if encoder and self._answers else None
        m = qs.spec.messages
        self._no_answer = NO_ANSWER + tuple(_plain(s) for s in (m.fallback, m.cannot_answer, m.cannot_do)
                                            if s.strip())

    def stated(self, reply: str) -> list[str]:
        """The labels of the entries ``reply`` states (rules 1 to 3), knowledge order."""
        plain = re.sub(r"[^\w\s]", "", _plain(reply))
        hits = {i for i, (answer, facts) in enumerate(zip(self._answers, self._facts))
                if re.sub(r"[^\w\s]", "", _plain(answer)) in plain or facts.stated_in(reply)}
        best = None if self.says_no_answer(reply) else self._most_similar(reply)
        if best is not None:
            hits.add(best)
        return [self.labels.get(i, f"entry{i}") for i in sorted(hits)]

    def _most_similar(self, reply: str) -> int | None:
        if self._encoder is None or self._answer_vecs is None:
            return None
        parts = [reply] + [s.strip() for s in _SENTENCES.findall(reply) if len(s.split()) >= 3]
        sims = self._encoder.encode(parts) @ self._answer_vecs.T       # (parts, entries)
        i = int(sims.max(axis=0).argmax())
        return i if float(sims[:, i].max()) >= SIMILAR_MIN else None

    def task(self, reply: str, events: Sequence[dict[str, Any]]) -> str | None:
        """The task the reply (or its events) starts, if any."""
        called = {str(e["data"].get("name")) for e in events if e["kind"] == "tool_call"}
        plain = _plain(reply)
        questions = [_plain(s) for s in _SENTENCES.findall(reply) if s.strip().endswith("?")]
        for task in self.spec.tasks:
            if called & {task.name, task.tool}:
                return f"task:{task.name}"
            if task.intro and _plain(task.intro) in plain:
                return f"task:{task.name}"
            if any(_plain(self.spec.slot(s).prompt) in plain for s in task.slots):
                return f"task:{task.name}"
            slots = [s.replace("_", " ") for s in task.slots]
            if any(re.search(rf"\b{re.escape(s)}\b", q) for q in questions for s in slots):
                return f"task:{task.name}"
        return None

    def says_no_answer(self, reply: str, events: Sequence[dict[str, Any]] = ()) -> bool:
        plain = _plain(reply)
        return any(p in plain for p in self._no_answer) or any(e["kind"] == "transfer" for e in events)

    def outcome(self, q: Question, reply: str, events: Sequence[dict[str, Any]] = ()) -> str:
        """An entry's label, "task:<name>" or "none" (the order is the module docstring's)."""
        stated = self.stated(reply)
        if q.expected in stated:
            return q.expected
        task = self.task(reply, events)
        if task is not None:
            return task
        if self.says_no_answer(reply, events) or not stated:
            return NONE
        return stated[0]


@dataclass
class LLMAnswerRun:
    report: AnswerReport
    replies: dict[str, str] = field(default_factory=dict)      # question -> what the agent said


async def score_llm_answers(qs: AnswerSet, spec: AgentSpec, *, encoder: SentenceEncoder | None = None,
                            env: Mapping[str, str] | None = None,
                            tools: Mapping[str, dict[str, Any]] | None = None,
                            settle_s: float = 0.25, reply_timeout_s: float = 30.0) -> LLMAnswerRun:
    """Ask every question of ``qs`` of a fresh console call to ``spec`` (``qs.spec`` with an LLM
    backend) and count what the replies state. ``env`` holds the API key variable; ``tools``
    canned webhook replies (``MockToolBox``)."""
    from agent.console import AgentConsole

    judge = ReplyJudge(qs, encoder)
    run = LLMAnswerRun(AnswerReport())
    for q in qs.questions:
        async with AgentConsole(spec, tools=tools, env=env, settle_s=settle_s,
                                reply_timeout_s=reply_timeout_s) as console:
            await console.started()
            turn = await console.say(q.text)
        run.replies[q.text] = turn.text
        run.report.count(q, judge.outcome(q, turn.text, turn.events))
    return run
