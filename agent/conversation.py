"""The embedded agent's brain: a pure, synchronous state machine driven by an agent spec.

    conv = Conversation(spec)
    conv.start()                     # -> [Say(greeting)]
    conv.hear("what are your hours") # -> [Say("We are open ... Is there anything else ...?")]
    conv.dtmf("0")                   # -> [Say(transfer message), Transfer(handoff)]
    conv.silence()                   # the caller said nothing for limits.silence_prompt_s
    conv.tool_result("lookup_order", {...})   # after a CallTool action was carried out

Every input returns the list of :data:`Action` s to carry out, in order; nothing here does I/O,
so every path is unit-testable with scripted transcripts. ``EmbeddedAgentProcessor``
(agent/embedded.py) turns the actions into pipecat frames.

States (:class:`State`): IDLE (an open question: answer from knowledge or start a task),
COLLECTING (asking for a slot), CONFIRMING (reading a slot back, waiting for yes/no),
WAITING_TOOL (a tool call is out), OFFERED_TRANSFER (asked "shall I put you through?"), ENDED.
In any state but ENDED the caller may say "repeat that", ask for a person, or say goodbye.

What the recogniser should listen for next (``expectation()``: a yes/no after a read-back,
digits for a number, the agent's key phrases otherwise) goes to it as hints, and what it heard
may come with its confidence (``hear(text, heard)``): a yes or no the recogniser is unsure of
is never taken as an answer; the caller is asked again and offered the keypad (1 yes, 2 no).
A number asked again (not heard whole, or read back wrong) offers the keypad too (the digits,
then #); a name asked again is asked spelled, letter by letter, and the recogniser listens for
letters.

``checkpoint()`` and ``rollback(cp)`` save and restore the dialogue's state (not the spec): the
agent takes back a turn whose answer the caller never heard because they were still talking, and
hears the two utterances as one (``EmbeddedAgentProcessor``).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any


from agent.actions import Action, CallTool, EndCall, Say, SlotFilled, State, Transfer
from agent.phrases import FRAME, GENERIC, HUMAN_STRONG, KEY_PHRASES, QUESTION_WORDS, REPEAT, REQUESTS, THANKS
from agent.phrases import has_any, request_end, says_goodbye, wants_human
from agent.knowledge import KnowledgeMatcher
from agent.retrieval import STOPWORDS, stem, words
from agent.slots import PHONE_DIGITS_USUAL, digits_in, extract, spoken_digits, yes_or_no
from agent.spec import AgentSpec, DtmfOption, SlotSpec, TaskSpec
from pipeline.frames import Hints, HintKind, Recognition

if TYPE_CHECKING:
    from agent.semantic import SentenceEncoder

__all__ = ["Action", "CallTool", "Checkpoint", "Conversation", "EndCall", "Say", "SlotFilled",
           "State", "Transfer"]


_INTRODUCTIONS = ("my name is", "my name's", "this is")
"""What a caller says before their name when they start with it (a task with one of these among
its triggers is started, its name slot filled, by "my name is ...")."""
_INTRODUCTION = re.compile(r"\b(?:" + "|".join(map(re.escape, _INTRODUCTIONS)) + r")\s+(.+)$",
                           re.IGNORECASE)
_MAX_SLOT_ATTEMPTS = 3
_MAX_MISSES_BEFORE_OFFER = 2
YES_NO_MIN_CONFIDENCE = 0.6
"""A yes or no heard with less (the posterior of all the readings that mean it) is asked again.
On the held-out voices under a yes/no hint, 2 of the 3 wrong readings (0.49, 0.36) fall under it
and one (0.71) does not; over yes/no and digit answers together 4 of 41 right ones fall under it
(benchmarks/bench_stt_hints.py: the top reading's posterior, a little below the summed one)."""
SPOTTED_MIN_SCORE = -1.0
"""A keyword the recogniser spotted (``Recognition.spotted``: nats a phone against the free best
path, at most 0) counts from this score up. On the agents' own keywords, spoken by the voices
the recogniser never trained on, -1.0 finds 0.75 of the keywords said against the transcript's
0.60, with a false alarm per clip for every ~200 keywords (benchmarks/bench_stt_spotting.py), so
it is used only where the words gave nothing."""
SPOTTED_MARGIN = 0.25
"""Two questions spotted within this many nats a phone of each other: neither is taken."""
_KEYPAD_YES_NO = "You can also press 1 for yes, or 2 for no."
_KEYPAD_DIGITS = "You can also type it on your keypad, then press pound."
"""Said with a number asked again (not heard whole, or a read-back the caller said no to): the
keys are sure where a voice the recogniser hears badly says the same digits the same way again
(bench_conversations' listening caller: flite's slt lost the "oh" of "three oh nine" three
times over)."""
_SPELL_NAME = "Could you spell your name for me, letter by letter?"
"""Said with a name asked again (not heard, or read back wrong): a name said again is heard the
same wrong way again (bench_conversations' listening caller: mbrola's "david miller" heard
"emma miller" three times); its letters are many short words few names share, and the
recogniser listens for them (the ``spelling`` hint)."""
_HANDOFF = "\x00handoff"     # a spotted keyword's target: a person (no task has this name)
# what the recogniser listens for when a slot of each kind is asked (a text slot: anything)
_SLOT_HINTS: dict[str, HintKind] = {"phone": "digits", "number": "digits", "name": "name",
                                    "yes_no": "yes_no"}


_NAME_ENDS = re.compile(r"\s*(?:[,.;!?]|\band\b|\bmy\b|\bi\b|\bi'd\b|\bi'm\b|\bplease\b|"
                        r"\bcalling\b|\bphone\b|\bnumber\b|\bat\b|\bon\b|\bfrom\b|\d)",
                        re.IGNORECASE)
_DATE = re.compile(
    r"\b(?:(?:on|for|next|this)\s+)?(?:today|tomorrow|(?:mon|tues|wednes|thurs|fri|satur|sun)day|"
    r"(?:january|february|march|april|may|june|july|august|september|october|november|december)"
    r"\s+\w+)\b", re.IGNORECASE)


def name_in(text: str, *, introduced: bool = True) -> str | None:
    """The caller's name in a turn that says more than it ("this is Sara Khan, please call me
    back ..."): the words after an introduction (``introduced``; else from the start) up to
    the next clause ("and", "my", a comma, a digit), if they read as a name."""
    if introduced:
        m = _INTRODUCTION.search(text)
        if m is None:
            return None
        text = m.group(1)
    end = _NAME_ENDS.search(text)
    head = text[:end.start()] if end is not None else text
    return extract("name", head) if head.strip() else None


def _min_digits(slot_kind: str) -> int:
    """The digits a whole answer for a slot of this kind usually has (the end of turn holds a
    caller who stopped short of it: "five five five, three oh nine, ...")."""
    return PHONE_DIGITS_USUAL if slot_kind == "phone" else 0


class _Fill(dict):
    def __missing__(self, key: str) -> str:
        raise KeyError(key)


_DIALOGUE_STATE = ("state", "values", "last_said", "_task", "_slot", "_pending_value", "_prefilled",
                   "_attempts",
                   "_misses", "_silences", "_keypad", "_asked_anything_else", "_heard",
                   "_offered_task", "_request")
"""Every attribute an input may change; the rest is built from the spec once."""


class Checkpoint:
    """The dialogue's state at one moment (``Conversation.checkpoint``); opaque."""

    __slots__ = ("_saved",)

    def __init__(self, saved: dict[str, Any]) -> None:
        self._saved = saved


class Conversation:
    """One call's dialogue with the caller, following ``spec`` deterministically."""

    def __init__(self, spec: AgentSpec, encoder: SentenceEncoder | None = None):
        """``encoder``: sentence embeddings for matching questions by meaning (``semantic.py``);
        None matches by words alone (BM25)."""
        self.spec = spec
        self.state = State.IDLE
        self.values: dict[str, str] = {}
        self.last_said = ""
        self._knowledge = KnowledgeMatcher(spec.knowledge, encoder, name=spec.name)
        self._task: TaskSpec | None = None
        self._slot: SlotSpec | None = None
        self._pending_value: str | None = None
        self._prefilled: dict[str, str] = {}     # slot values said before they were asked
        self._attempts = 0
        self._misses = 0
        self._silences = 0
        self._keypad = ""
        self._asked_anything_else = False
        self._heard: Recognition | None = None
        self._offered_task: TaskSpec | None = None
        self._request = ""                       # the caller's first words: what they called about
        self._trigger_words = {stem(w) for t in spec.tasks for p in t.triggers for w in words(p)}
        self._known_words = self._trigger_words | {
            stem(w) for k in spec.knowledge for w in words(" ".join((k.question, *k.keywords)))}
        self._phrases = tuple(dict.fromkeys(
            [k.question for k in spec.knowledge]
            + [t for task in spec.tasks for t in task.triggers if " " in t]
            + list(KEY_PHRASES)))
        # what each keyword the recogniser may spot stands for: a knowledge item or a task
        self._keyword_targets: dict[str, list[int | str]] = {}
        for i, item in enumerate(spec.knowledge):
            for k in item.keywords:
                self._keyword_targets.setdefault(" ".join(words(k)), []).append(i)
        for task in spec.tasks:
            for k in task.triggers:
                self._keyword_targets.setdefault(" ".join(words(k)), []).append(task.name)
        if spec.handoffs:                  # "person", "operator": offered a person, not put through
            for k in HUMAN_STRONG:
                self._keyword_targets.setdefault(k, []).append(_HANDOFF)
        self._keywords = tuple(k for k, targets in self._keyword_targets.items()
                               if k and len(set(targets)) == 1)
        # built once (each normalises its phrases): after an answer, also a yes/no; digits too
        # where a number said at once starts a task ("What is your order number?"), a name
        # where an introduction does ("my name is ..." starts a message)
        idle_kinds: set[HintKind] = set()
        if self._number_first_task() is not None:
            idle_kinds.add("digits")
        if self._introduction_task() is not None:
            idle_kinds.add("name")
        idle = frozenset(idle_kinds)
        self._idle_hints = {False: Hints(expect=idle, phrases=self._phrases,
                                         keywords=self._keywords),
                            True: Hints(expect=idle | {"yes_no"}, phrases=self._phrases,
                                        keywords=self._keywords)}

    @property
    def task(self) -> str | None:
        """The name of the task under way (its slots asked, its tool out), or None."""
        return self._task.name if self._task is not None else None

    @property
    def slot(self) -> str | None:
        """The name of the slot being asked for or read back, or None."""
        return self._slot.name if self._slot is not None else None

    def checkpoint(self) -> Checkpoint:
        """The dialogue's state now (where it is, the slots so far, its counters), for
        ``rollback``."""
        return Checkpoint({name: dict(v) if isinstance(v := getattr(self, name), dict) else v
                           for name in _DIALOGUE_STATE})

    def rollback(self, cp: Checkpoint) -> None:
        """Back to ``cp``: the inputs since are forgotten (their actions are not undone: take
        back only turns whose actions were all ``Say``)."""
        for name, value in cp._saved.items():
            setattr(self, name, dict(value) if isinstance(value, dict) else value)

    # --- inputs ---------------------------------------------------------------------------

    def start(self) -> list[Action]:
        return [self._say(self.spec.greeting)]

    def expectation(self) -> Hints:
        """What the caller's next words will likely be, for the recogniser's hints."""
        if self.state in (State.CONFIRMING, State.OFFERED_TRANSFER):
            return Hints(expect=frozenset({"yes_no"}))
        if self.state is State.COLLECTING and self._slot is not None:
            if self._spelling:         # spelled, or said whole again
                return Hints(expect=frozenset({"spelling", "name"}))
            kind = _SLOT_HINTS.get(self._slot.kind)
            return (Hints(expect=frozenset({kind}), min_digits=_min_digits(self._slot.kind))
                    if kind is not None else Hints())
        if self.state is State.IDLE:
            if self._offered_task is not None:
                # "Would you like to leave a message?": a yes or a no, or straight to the
                # task's first answer ("my name is ...")
                return self._offered_hints(self._offered_task)
            return self._idle_hints[self._asked_anything_else]
        return Hints()

    def _offered_hints(self, task: TaskSpec) -> Hints:
        expect = {"yes_no"}
        min_digits = 0
        if task.slots:
            slot_kind = self.spec.slot(task.slots[0]).kind
            kind = _SLOT_HINTS.get(slot_kind)
            if kind is not None:
                expect.add(kind)
                min_digits = _min_digits(slot_kind)
        return Hints(expect=frozenset(expect), phrases=self._phrases, keywords=self._keywords,
                     min_digits=min_digits)

    def hear(self, text: str, heard: Recognition | None = None) -> list[Action]:
        """A caller turn as the recognizer heard it; ``heard``, when the recogniser gives it,
        the final's confidence and alternatives (``pipeline.frames.RecognitionFrame``)."""
        if self.state is State.ENDED:
            return []
        self._silences = 0
        self._heard = heard
        ws = words(text)
        if not ws:
            return [self._say(self.spec.messages.repeat_prompt)]
        self._request = self._request or " ".join(text.split())[:200]
        free_text = (self.state is State.COLLECTING and self._slot is not None
                     and self._slot.kind == "text" and len(ws) > 4)
        if not free_text:
            if has_any(ws, REPEAT):
                return [Say(self.last_said or self.spec.greeting)]
            if wants_human(ws):
                return self._transfer(None, "caller asked for a person")
            if says_goodbye(ws):
                return self._end("caller said goodbye")
        if self.state is State.COLLECTING:
            return self._collect(text)
        if self.state is State.CONFIRMING:
            return self._confirm(text)
        if self.state is State.OFFERED_TRANSFER:
            answer = self._yes_no(text)
            if answer is True:
                return self._transfer(None, "caller accepted a transfer")
            self.state = State.IDLE
            if answer is False:
                self._misses = 0
                return [self._say(self.spec.messages.anything_else)]
        if self.state is State.WAITING_TOOL:
            return [self._say(self.spec.messages.filler)]
        return self._idle(text, ws)

    def dtmf(self, key: str) -> list[Action]:
        """A keypress: digits for a number slot (ended by #), 1/2 for yes/no, else the menu."""
        if self.state is State.ENDED:
            return []
        self._silences = 0
        self._heard = None                 # a keypress is sure: no recogniser doubt applies
        if self.state is State.COLLECTING and self._slot and self._slot.kind in ("phone", "number"):
            if key.isdigit():
                self._keypad += key
                return []
            if key == "*":
                self._keypad = ""
                return []
            if key == "#" and self._keypad:
                value, self._keypad = self._keypad, ""
                return self._accept(value)
        if self.state is State.CONFIRMING and key in ("1", "2"):
            return self._confirm("yes" if key == "1" else "no")
        option = next((o for o in self.spec.dtmf_menu if o.key == key), None)
        if option is None:
            return [self._say(self.spec.messages.not_understood)]
        return self._menu(option)

    def silence(self) -> list[Action]:
        """The caller said nothing for ``limits.silence_prompt_s`` after the agent spoke."""
        if self.state is State.ENDED:
            return []
        self._silences += 1
        if self._silences > self.spec.limits.max_silence_prompts:
            return self._end("caller silent")
        text = self.spec.messages.silence_prompt
        if self.state is State.COLLECTING and self._slot is not None:
            text = f"{text} {_SPELL_NAME if self._spelling else self._slot.prompt}"
        elif self.state is State.CONFIRMING:
            text = f"{text} {self._confirm_text()}"
        return [self._say(text)]

    def timeout(self) -> list[Action]:
        """The call reached ``limits.max_call_s``."""
        if self.state is State.ENDED:
            return []
        return self._end("max call length")

    def tool_result(self, name: str, result: dict[str, Any]) -> list[Action]:
        if self.state is State.ENDED:
            return []
        tool = self.spec.tool(name)
        template = (tool.say_result if tool else None) or (self._task.done if self._task else "")
        self._task = None
        self.state = State.IDLE
        if isinstance(result.get("say"), str) and result["say"].strip():
            text = result["say"].strip()
        elif template:
            text = self._fill(template, result) or self._describe(result)
        else:
            text = self._describe(result)
        return self._answer(text)

    def tool_failed(self, name: str, error: str) -> list[Action]:
        if self.state is State.ENDED:
            return []
        self._task = None
        return self._offer_help(self.spec.messages.fallback)

    # --- states ---------------------------------------------------------------------------

    def _asks_beyond_tasks(self, ws: list[str]) -> bool:
        """A question with words no task's triggers explain ("can I bring my dog to the
        appointment"): a trigger word in it is not a request to start that task. A request form
        ("I would like to ...") makes it a request, whatever came first ("who low" is "hello")."""
        if not ws or ws[0] not in QUESTION_WORDS or has_any(ws, REQUESTS):
            return False
        content = [stem(w) for w in ws if w not in STOPWORDS and w not in GENERIC
                   and w not in QUESTION_WORDS and w not in FRAME and stem(w) not in FRAME
                   and not digits_in(w) and w not in ("oh", "double", "triple")]
        return any(w not in self._trigger_words for w in content)

    def _idle(self, text: str, ws: list[str]) -> list[Action]:
        kb = self._knowledge.match(text)
        task = next((t for t in self.spec.tasks if has_any(ws, t.triggers)), None)
        number_task = self._number_task(text)
        offered, self._offered_task = self._offered_task, None
        if offered is not None and task is None and kb is None:
            answer = self._yes_no(text)            # "Would you like to leave a message?"
            if answer is True:
                return self._start_task(offered, "")
            if answer is False:
                return [self._say(self.spec.messages.anything_else)]
        question = bool(ws) and ws[0] in QUESTION_WORDS and len(ws) >= 3
        # nothing in the words (no question or task, no answer to a yes/no question just asked):
        # a keyword the recogniser spotted in the sound may still say what the caller asked for
        # ("do day city answer", and "insurance" spotted)
        answers_yes_no = ((offered is not None or self._asked_anything_else)
                          and yes_or_no(text) is not None)
        spotted = (self._spotted_target() if kb is None and task is None and number_task is None
                   and not answers_yes_no else None)
        if kb is None and number_task is None and (
                (task is not None and self._asks_beyond_tasks(ws))
                or (task is None and question and spotted is None)):
            return self._cannot_answer()
        if kb is None and number_task is None and task is None and spotted is None \
                and self._asks_for_more(ws):
            return self._cannot_answer(self.spec.messages.cannot_do)
        if self._asked_anything_else and task is None and number_task is None and kb is None:
            answer = self._yes_no(text)
            if answer is False or ws == ["nothing"] or set(ws) <= THANKS:
                return self._end("caller is done")
            if answer is True:
                self._asked_anything_else = False
                return [self._say("Sure. What can I help you with?")]
        if spotted is not None:
            self._misses = 0
            keyword, target = spotted
            if isinstance(target, int):
                item = self.spec.knowledge[target]
                return self._answer(f"I think you asked about {keyword}. {item.answer}")
            if target == _HANDOFF:
                self.state = State.OFFERED_TRANSFER
                return [self._say(self.spec.messages.offer_transfer)]
            return self._start_task(next(t for t in self.spec.tasks if t.name == target), "")
        strong = self._knowledge.questions.search(text, min_coverage=0.75)
        if kb is not None and (strong is not None or task is None or self._explained_by(task, ws, kb)
                               or (question and self._asks_beyond(task, text, kb))) \
                and number_task is None:
            self._misses = 0
            return self._answer(self.spec.knowledge[kb].answer)
        chosen = task if task is not None else number_task
        if chosen is not None:
            self._misses = 0
            return self._start_task(chosen, text)
        self._misses += 1
        if self._misses >= _MAX_MISSES_BEFORE_OFFER and self.spec.handoffs:
            self._misses = 0
            self.state = State.OFFERED_TRANSFER
            return [self._say(f"{self.spec.messages.not_understood} "
                              f"{self.spec.messages.offer_transfer}")]
        return [self._say(self.spec.messages.not_understood)]

    def _spotted_target(self) -> tuple[str, int | str] | None:
        """What the keywords spotted in this turn point to (a knowledge item's index or a task's
        name), with the keyword that scored best for it; None when nothing was spotted from
        ``SPOTTED_MIN_SCORE`` up, or two things were spotted about equally (then the caller is
        asked again, not answered at a guess)."""
        heard = self._heard
        if heard is None or not heard.spotted:
            return None
        best: dict[int | str, tuple[float, str]] = {}
        for keyword, score in heard.spotted:
            targets = set(self._keyword_targets.get(" ".join(words(keyword)), ()))
            if score < SPOTTED_MIN_SCORE or len(targets) != 1:
                continue
            target = targets.pop()
            if target not in best or score > best[target][0]:
                best[target] = (score, keyword)
        ranked = sorted(best.items(), key=lambda kv: kv[1][0], reverse=True)
        if not ranked or (len(ranked) > 1 and ranked[0][1][0] - ranked[1][1][0] < SPOTTED_MARGIN):
            return None
        target, (_, keyword) = ranked[0]
        return keyword, target

    def _explained_by(self, task: TaskSpec, ws: list[str], kb: int) -> bool:
        """Whether every trigger of ``task`` heard in ``ws`` is one of knowledge item ``kb``'s
        own keywords: "(how long does) shipping take" asks the shipping question, although
        "shipping" is also the order task's "shipped"."""
        keywords = {stem(w) for k in self.spec.knowledge[kb].keywords for w in words(k)}
        heard = [p for p in task.triggers if has_any(ws, (p,))]
        return bool(heard) and all(stem(w) in keywords for p in heard for w in words(p))

    def _asks_beyond(self, task: TaskSpec, text: str, kb: int) -> bool:
        """Whether a question that names ``task``'s trigger asks about knowledge item ``kb``
        with a word of the item's own that no trigger is: "how long until an order arrives"
        (arrive) asks the shipping question; "when will my order be delivered" (delivered, a
        trigger) is the order task."""
        _, own = self._knowledge.uncovered(text, kb)
        return any(w not in FRAME and not has_any([w], task.triggers) for w in own)

    def _asks_for_more(self, ws: list[str]) -> bool:
        """A request ("I would like to check my order") with words of its own after the request
        form: a thing the caller wants that no task or answer covers, heard clearly enough to
        say so rather than "Sorry, I didn't catch that"."""
        end = request_end(ws)
        if end is None:
            return False
        wanted = {stem(w) for w in ws[end:] if w not in STOPWORDS and w not in GENERIC
                  and w not in ("like", "to")}
        # a word the agent knows ("I need directions": the address's keyword) is a question it
        # failed to place, not a thing it cannot do
        return bool(wanted) and not wanted & self._known_words

    def _cannot_answer(self, text: str | None = None) -> list[Action]:
        """An honest answer to a question the knowledge does not hold (or ``text``: a request no
        task covers), and the offer of a message (the first task triggered by "message") or of
        a person."""
        self._misses = 0
        text = text or self.spec.messages.cannot_answer
        self._offered_task = next((t for t in self.spec.tasks
                                   if any("message" in p for p in t.triggers)), None)
        if self._offered_task is not None:
            self.state = State.IDLE
            self._asked_anything_else = False
            return [self._say(f"{text} {self.spec.messages.offer_message}")]
        return self._offer_help(text)

    def _number_task(self, text: str) -> TaskSpec | None:
        """A task whose first slot is a number the caller already said (3 digits or more)."""
        if len(digits_in(text)) < 3:
            return None
        return self._number_first_task()

    def _number_first_task(self) -> TaskSpec | None:
        """The first task whose first slot is a number or a phone number, if any."""
        return next((t for t in self.spec.tasks
                     if t.slots and self.spec.slot(t.slots[0]).kind in ("number", "phone")), None)

    def _introduction_task(self) -> TaskSpec | None:
        """The first task that a caller's introduction starts ("my name is ..." among its
        triggers) and whose first slot is that name, if any."""
        return next((t for t in self.spec.tasks
                     if t.slots and self.spec.slot(t.slots[0]).kind == "name"
                     and any(p.lower() in _INTRODUCTIONS for p in t.triggers)), None)

    def _start_task(self, task: TaskSpec, text: str) -> list[Action]:
        """Start ``task``; the slot values the request already holds ("... my name is Maria
        Lopez and my number is 415 555 0199") are taken, each read back as usual, and only
        the missing ones asked."""
        self._task = task
        self._asked_anything_else = False
        for name in task.slots:
            self.values.pop(name, None)
        self._prefilled = self._values_in(task, text, first=True)
        actions = self._next()
        if task.intro and self.state is State.COLLECTING \
                and actions and isinstance(actions[0], Say):   # a read-back needs no intro
            actions[0] = self._say(f"{task.intro} {actions[0].text}")
        return actions

    def _values_in(self, task: TaskSpec, text: str, *, first: bool = False,
                   skip: str | None = None) -> dict[str, str]:
        """The values of ``task``'s empty slots (but ``skip``) that ``text`` holds. A number
        slot takes digits only when it is the task's first (``first``: the request itself,
        "order 12345"): elsewhere they are a phone number's. Free text is never taken: what a
        caller says while asking is not their message."""
        found: dict[str, str] = {}
        for i, name in enumerate(task.slots):
            if name in self.values or name == skip or not text.strip():
                continue
            slot = self.spec.slot(name)
            value = (self._prefill(slot, text) if slot.kind != "number" or (i == 0 and first)
                     else None)
            if value is not None:
                found[name] = value
        return found

    @staticmethod
    def _prefill(slot: SlotSpec, text: str) -> str | None:
        """A slot's value when a turn already holds it: a number of 3 digits or more ("order
        12345"), a phone number, a name after an introduction ("my name is ..."), a date."""
        if slot.kind == "number":
            value = extract(slot.kind, text)
            return value if value is not None and len(value) >= 3 else None
        if slot.kind == "phone":
            return extract("phone", text)
        if slot.kind == "name":
            return name_in(text)
        if slot.kind == "date":
            m = _DATE.search(text)
            return m.group(0) if m else None
        return None

    def _next(self) -> list[Action]:
        """Ask for the next empty slot of the task (or read back its value, when the caller
        said it already), or finish the task."""
        assert self._task is not None
        for name in self._task.slots:
            if name not in self.values:
                self._slot = self.spec.slot(name)
                self._attempts = 0
                self._keypad = ""
                if name in self._prefilled:
                    return self._accept(self._prefilled.pop(name))
                self.state = State.COLLECTING
                return [self._say(self._slot.prompt)]
        self._prefilled = {}
        self._slot = None
        task = self._task
        if task.tool is not None:
            tool = self.spec.tool(task.tool)
            assert tool is not None
            props = tool.input_schema.get("properties", {})
            args: dict[str, Any] = {}
            for name in task.slots:
                if props and name not in props:
                    continue
                value: Any = self.values[name]
                if props.get(name, {}).get("type") == "integer" and value.isdigit():
                    value = int(value)
                args[name] = value
            self.state = State.WAITING_TOOL
            return [self._say(self.spec.messages.filler), CallTool(tool.name, args)]
        self._task = None
        self.state = State.IDLE
        return self._answer(self._fill(task.done, {}) or "Thank you, I have noted that.")

    def _collect(self, text: str) -> list[Action]:
        assert self._slot is not None
        if self._task is not None:         # "Maria Lopez, and my number is ...": both taken
            self._prefilled.update(self._values_in(self._task, text, skip=self._slot.name))
        value = extract(self._slot.kind, text)
        if value is None and self._slot.kind == "name":
            value = name_in(text, introduced=False)
        if self._slot.kind == "number" and value is not None and len(value) < 3:
            value = None
        if value is None:
            return self._retry()
        return self._accept(value)

    def _retry(self) -> list[Action]:
        assert self._slot is not None
        self._attempts += 1
        if self._attempts >= _MAX_SLOT_ATTEMPTS:
            self._task, self._slot = None, None
            return self._offer_help("Sorry, I'm having trouble understanding.")
        if self._slot.kind == "phone":
            return [self._say(f"Sorry, I didn't get the whole number. {self._slot.prompt}"
                              f"{self._keypad_offer()}")]
        return [self._say(f"Sorry, I didn't get that. {self._ask_again()}")]

    def _ask_again(self) -> str:
        """The slot's question asked again: a name is asked spelled (``_SPELL_NAME``), a number
        with the keypad offered."""
        assert self._slot is not None
        if self._slot.kind == "name":
            return _SPELL_NAME
        return f"{self._slot.prompt}{self._keypad_offer()}"

    @property
    def _spelling(self) -> bool:
        """A name slot asked again, so asked spelled (``_ask_again``)."""
        return self._slot is not None and self._slot.kind == "name" and self._attempts > 0

    def _keypad_offer(self) -> str:
        """The keypad offer (" You can also type it ...") where the slot asked again takes keys
        (a number), else nothing."""
        assert self._slot is not None
        return f" {_KEYPAD_DIGITS}" if self._slot.kind in ("phone", "number") else ""

    def _accept(self, value: str) -> list[Action]:
        """A value heard for the current slot: read it back, or keep it and move on."""
        assert self._slot is not None
        if self._slot.confirm:
            self._pending_value = value
            self.state = State.CONFIRMING
            return [self._say(self._confirm_text())]
        return self._keep(value)

    def _keep(self, value: str) -> list[Action]:
        assert self._slot is not None
        self.values[self._slot.name] = value
        filled = SlotFilled(self._slot.name, value)
        self._pending_value = None
        return [filled, *self._next()]

    def _confirm_text(self) -> str:
        assert self._slot is not None and self._pending_value is not None
        value = self._pending_value
        spoken = spoken_digits(value) if self._slot.kind in ("phone", "number") else value
        template = self._slot.confirm_prompt or {
            "phone": "I have your number as {spoken}. Is that right?",
            "name": "I have your name as {value}. Is that right?",
            "number": "I have {spoken}. Is that right?",
        }.get(self._slot.kind, "I have {value}. Is that right?")
        return template.replace("{spoken}", spoken).replace("{value}", value)

    def _yes_no(self, text: str) -> bool | None:
        """``yes_or_no`` of what was heard, or None when the recogniser was not sure of it: the
        posteriors of its readings that mean the same answer add up to less than
        ``YES_NO_MIN_CONFIDENCE``."""
        answer = yes_or_no(text)
        heard = self._heard
        if answer is None or heard is None or heard.confidence is None:
            return answer
        if " ".join(words(heard.text)) != " ".join(words(text)):
            return answer                  # a turn of several utterances: no one posterior
        same = sum(p for alt, p in heard.alternatives if yes_or_no(alt) is answer)
        return answer if same >= YES_NO_MIN_CONFIDENCE else None

    def _confirm(self, text: str) -> list[Action]:
        assert self._slot is not None
        correction = self._correction(text)
        if correction is not None and correction != self._pending_value:
            return self._accept(correction)
        answer = self._yes_no(text)
        if answer is True:
            return self._keep(self._pending_value or "")
        if answer is False:
            self._pending_value = None
            self.state = State.COLLECTING
            return self._retry_after_no()
        return [self._say(f"{self.spec.messages.yes_or_no} {self._confirm_text()} "
                          f"{_KEYPAD_YES_NO}")]

    def _retry_after_no(self) -> list[Action]:
        assert self._slot is not None
        self._attempts += 1
        if self._attempts >= _MAX_SLOT_ATTEMPTS:
            self._task, self._slot = None, None
            return self._offer_help("Sorry, I'm having trouble getting that right.")
        return [self._say(f"Sorry about that. {self._ask_again()}")]

    def _correction(self, text: str) -> str | None:
        """A new value said while confirming ("no, it's 5 5 5 0 1 2 4")."""
        assert self._slot is not None
        kind = self._slot.kind
        if kind in ("phone", "number"):
            value = extract(kind, text)
            return value if value is not None and len(value) >= 3 else None
        if kind == "name":
            m = re.search(r"\b(?:it's|it is|my name is|i said|name's)\s+(.+)$", text, re.I)
            return extract("name", m.group(1)) if m else None
        return None

    # --- shared endings -------------------------------------------------------------------

    def _menu(self, option: DtmfOption) -> list[Action]:
        if option.action == "say":
            return self._answer(option.value)
        if option.action == "transfer":
            return self._transfer(option.value or None, f"caller pressed {option.key}")
        if option.action == "end_call":
            return self._end(f"caller pressed {option.key}")
        tool = self.spec.tool(option.value)
        if tool is not None and tool.kind == "end_call":
            return self._end(f"caller pressed {option.key}")
        if tool is not None and tool.kind == "transfer":
            return self._transfer(None, f"caller pressed {option.key}")
        self.state = State.WAITING_TOOL
        return [self._say(self.spec.messages.filler), CallTool(option.value, {})]

    def _answer(self, text: str) -> list[Action]:
        self.state = State.IDLE
        self._asked_anything_else = True
        return [self._say(f"{text} {self.spec.messages.anything_else}")]

    def _offer_help(self, text: str) -> list[Action]:
        if self.spec.handoffs:
            self.state = State.OFFERED_TRANSFER
            return [self._say(f"{text} {self.spec.messages.offer_transfer}")]
        return self._answer(text)

    def _transfer(self, handoff_name: str | None, reason: str) -> list[Action]:
        handoff = self.spec.handoff(handoff_name)
        if handoff is None:
            self.state = State.IDLE
            return self._answer(self.spec.messages.no_handoff)
        self.state = State.ENDED
        return [self._say(self.spec.messages.transfer), Transfer(handoff, reason)]

    def transfer_summary(self) -> str:
        """What the person hears before a warm transfer joins them to the caller: who is calling,
        what they asked, and the slots filled so far (sensitive ones left out)."""
        parts = [f"Hello, this is {self.spec.name}. I have a caller on the line."]
        if self._request:
            parts.append(f"They said: {self._request.rstrip('.?!')}.")
        said = [f"{name.replace('_', ' ')}: {value}" for name, value in self.values.items()
                if not next((s.sensitive for s in self.spec.slots if s.name == name), False)]
        if said:
            parts.append("Their " + ", ".join(said) + ".")
        parts.append("Connecting you now.")
        return " ".join(parts)

    def transfer_outcome(self, outcome: str) -> list[Action]:
        """How a warm transfer ended: joined, the agent's part is over; nobody answered or it
        failed, the caller is back and is offered a message (or anything else)."""
        if outcome == "joined":
            self.state = State.ENDED
            return []
        self.state = State.IDLE
        self._offered_task = next((t for t in self.spec.tasks
                                   if any("message" in p for p in t.triggers)), None)
        follow = self.spec.messages.offer_message if self._offered_task is not None \
            else self.spec.messages.anything_else
        self._asked_anything_else = self._offered_task is None
        return [self._say(f"{self.spec.messages.no_handoff} {follow}")]

    def _end(self, reason: str) -> list[Action]:
        self.state = State.ENDED
        return [self._say(self.spec.messages.goodbye), EndCall(reason)]

    def _say(self, text: str) -> Say:
        self.last_said = text
        return Say(text)

    def _fill(self, template: str, result: dict[str, Any]) -> str | None:
        values = _Fill()
        for name, value in self.values.items():
            values[name] = value
            values[f"{name}_spoken"] = spoken_digits(value) if value.isdigit() else value
        for key, value in result.items():
            if isinstance(value, (str, int, float)) and not isinstance(value, bool):
                values[str(key)] = str(value)
        try:
            return " ".join(template.format_map(values).split())
        except (KeyError, IndexError, ValueError):
            return None

    @staticmethod
    def _describe(result: dict[str, Any]) -> str:
        parts = [f"{k.replace('_', ' ')} {v}" for k, v in result.items()
                 if isinstance(v, (str, int, float)) and not isinstance(v, bool)]
        return ("Here is what I found: " + ", ".join(parts) + ".") if parts else "Done."
