"""End of turn that waits out a comma: a longer hold when what the caller said is unfinished.

    stop = HoldUnfinishedTurnStopStrategy(hold_s=0.45)   # pipecat user-turn stop strategy
    looks_unfinished("hello")                            # True: an opener, more usually follows
    looks_unfinished("i would like to")                  # True: it cannot end there
    looks_unfinished("i would like to check my order")   # False: the turn ends at once

parley ends a turn on a short silence (the VAD's 200 ms) so that it answers as fast as a person.
People pause for 250-500 ms at a comma ("hello, I would like to check my order"), and a turn that
ends there answers the half sentence and then runs one turn behind. Waiting longer on every turn
would slow every answer; instead, when the transcript so far cannot be a whole turn (it ends on
a word a sentence does not end on, it is only an opener such as "hello" or "so", a question's
first two words ("can you", "do you"), a thanks that usually goes on to a goodbye, the first
groups of a phone number's digits, fewer digits than the agent's hints say the answer usually
has (``Hints.min_digits``: ten for a phone number), the call's first turn is one word (an
opener the recogniser misheard: "hello," came out "holt" in bench_conversations), or any turn is
one word that does not answer what the agent's hints expect (``one_word_answers``: a yes or a
no when it asked one, a digit when it asked digits, a goodbye, one of its own one-word phrases;
any word where it asked for a name alone), the turn is
held ``hold_s`` more; if the caller goes on speaking within it, the turn goes on too (the VAD's
start cancels the hold, as it cancels any pending end). A finished-looking transcript ends the
turn as before, so the common case keeps its latency.

A spelling needs no rule here: asked for one, the recogniser's stream keeps the utterance open
over the caller's pauses (``pipeline.engines.transcripts``), so no transcript comes between
letters and the turn cannot end there.

The rules read the final transcript (lower case words), so they work with any recogniser; the
digits rule also reads the agent's ``RecognitionHintsFrame`` on its way upstream to the
recogniser (every frame passes the user aggregator's turn strategies, upstream ones too).
The strategy hooks into ``SpeechTimeoutUserTurnStopStrategy``'s private steps
(``_maybe_trigger_user_turn_stopped``, ``_discard_pending_end_of_turn``, ``_cancel_all_tasks``,
``_reset``) as pipecat 1.14, which the project pins, has them; tests/pipeline/test_turn_end.py
runs it inside pipecat's real user aggregator, so a pipecat that renames them fails there.
"""

from __future__ import annotations

import asyncio
import re

from pipecat.frames.frames import Frame, TranscriptionFrame
from pipecat.turns.types import ProcessFrameResult
from pipecat.turns.user_stop import SpeechTimeoutUserTurnStopStrategy

from pipeline.errors import ConfigError
from pipeline.frames import Hints, RecognitionHintsFrame
from ssm_engine.stt.hints import DIGIT_WORDS, NO_SENTENCES, YES_SENTENCES

__all__ = ["HoldUnfinishedTurnStopStrategy", "looks_unfinished", "one_word_answers", "OPENERS",
           "CLOSERS", "NEVER_LAST", "FAREWELLS"]

# a turn of only these usually goes on ("hello, ...", "so, ...", "um ...")
OPENERS = frozenset({
    "hello", "hi", "hey", "hello there", "hi there", "good morning", "good afternoon",
    "good evening", "so", "well", "um", "uh", "er", "erm", "hmm", "yes so", "okay so", "ok so",
    "right so", "hello hello", "hi hello", "oh hi", "oh hello", "yeah hi", "yes hello",
    "hello yes", "hello hi",
})
# a turn of only these is often the first half of a goodbye ("thank you, goodbye", "no thanks,
# bye"): ending there answered the thanks and then heard the goodbye over the reply (in
# bench_conversations every false turn end but one); holding costs a bare "thank you" 450 ms
CLOSERS = frozenset({
    "thank you", "thanks", "thank you very much", "thanks a lot", "no thanks", "no thank you",
    "okay thank you", "ok thank you", "okay thanks", "ok thanks", "great thank you",
    "great thanks", "perfect thank you", "alright thank you", "all right thank you",
})
# digits said in a phone number's groups of three ("five five five, three four zero ..."): a
# turn of three or six digits alone is held; one digit (a menu choice) or a whole number is not
_REPEATS = {"double": 2, "triple": 3}     # "double five": two digits
_DIGITS = frozenset(DIGIT_WORDS) - _REPEATS.keys()     # the recogniser's digit words, less those
# words a sentence never ends on: articles, conjunctions, prepositions, auxiliaries, fillers
NEVER_LAST = frozenset({
    "a", "an", "the", "and", "or", "but", "so", "because", "if", "than", "that", "to", "of",
    "for", "with", "from", "at", "in", "on", "about", "into", "by", "my", "your", "our", "their",
    "his", "her", "its", "i", "i'd", "i'm", "i'll", "i've", "we", "we're", "you're", "would",
    "could", "should", "can", "will", "shall", "must", "want", "need", "like", "is", "are",
    "was", "were", "am", "be", "have", "has", "um", "uh", "er", "erm", "some", "any", "this",
    "these", "those", "what's", "where's", "when's", "how's", "let", "just", "also", "very",
})
# a turn of only an auxiliary and a pronoun is a question's start ("can you ... take a message");
# in bench_conversations it was also "thank you" misheard as "can you" before ", goodbye"
_QUESTION_AUX = frozenset({"can", "could", "would", "will", "do", "does", "did", "may", "is",
                           "are", "have", "shall"})
_PRONOUNS = frozenset({"you", "i", "we", "he", "she", "they", "it", "there"})
# one word that ends a call whatever the agent asked
FAREWELLS = frozenset({"goodbye", "bye", "byebye", "cheers"})
_WORDS = re.compile(r"[a-z']+")


def one_word_answers(hints: Hints) -> frozenset[str] | None:
    """The one-word turns that answer what ``hints`` expect (None: any word may, where the
    agent asked for a name and nothing else: "Brown"). A one-word turn outside them is most
    likely an opener the recogniser misheard ("hello," heard "holt") and is held
    (``looks_unfinished``). Hints that also carry the agent's own phrases are an open question
    (a name there is a caller introducing themselves, "my name is ..."), not a name asked."""
    if hints.expect == {"name"} and not hints.phrases:
        return None
    answers = set(FAREWELLS)
    if "yes_no" in hints.expect:
        answers.update(s for s in YES_SENTENCES + NO_SENTENCES if " " not in s)
    if "digits" in hints.expect:
        answers.update(DIGIT_WORDS)
    answers.update(p for p in hints.phrases + hints.keywords if p and " " not in p)
    return frozenset(answers)


def looks_unfinished(text: str, *, min_digits: int = 0, first_turn: bool = False,
                     answers: frozenset[str] | None = None) -> bool:
    """True when ``text`` cannot be a whole turn (see the module docstring). ``min_digits``:
    the digits the answer asked for usually has (0: no number asked); ``first_turn``: nothing
    else has been said in the call yet; ``answers``: the one-word turns that answer the agent's
    hints (``one_word_answers``; None: any word does)."""
    ws = _WORDS.findall(text.lower())
    if not ws:
        return False
    phrase = " ".join(ws)
    return (phrase in OPENERS or phrase in CLOSERS or ws[-1] in NEVER_LAST
            or (len(ws) == 2 and ws[0] in _QUESTION_AUX and ws[1] in _PRONOUNS)
            or (len(ws) in (3, 6) and all(w in _DIGITS for w in ws))
            or (ws[-1] in _DIGITS and _count_digits(ws) < min_digits)
            or (len(ws) == 1 and (first_turn or (answers is not None and ws[0] not in answers))))


def _count_digits(ws: list[str]) -> int:
    n = 0
    for prev, w in zip([""] + ws, ws):
        if w in _DIGITS:
            n += _REPEATS.get(prev, 1)
    return n


class HoldUnfinishedTurnStopStrategy(SpeechTimeoutUserTurnStopStrategy):
    """pipecat's speech-timeout strategy (``user_speech_timeout`` after the VAD's stop, the final
    transcript awaited), plus ``hold_s`` more when the transcript ``looks_unfinished``."""

    def __init__(self, *, hold_s: float = 0.45, user_speech_timeout: float = 0.0, **kwargs):
        if not 0.0 <= hold_s <= 3.0:
            raise ConfigError(f"hold_s must be within 0..3 s, got {hold_s}")
        super().__init__(user_speech_timeout=user_speech_timeout, **kwargs)
        self._hold_s = hold_s
        self._hold_task: asyncio.Task | None = None
        self._held = False
        self._finals: list[str] = []      # this turn's final transcripts (pipecat joins them
        #                                   with no space, which would fuse the last words)
        self._min_digits = 0              # from the agent's latest hints
        self._answers: frozenset[str] | None = None   # one-word answers to them (None: no
        #                                   hints yet, or only a name asked: any word)
        self.turns = 0
        """Turns ended so far in this call."""
        self.holds = 0
        """Turns held so far (for tests and logs)."""

    async def process_frame(self, frame: Frame) -> ProcessFrameResult:
        if isinstance(frame, TranscriptionFrame) and frame.text.strip():
            self._finals.append(frame.text)
        elif isinstance(frame, RecognitionHintsFrame):
            hints = frame.hints
            self._min_digits = hints.min_digits if "digits" in hints.expect else 0
            self._answers = one_word_answers(hints)
        return await super().process_frame(frame)

    async def _reset(self, *, clear_vad_user_speaking: bool):
        self._finals = []
        await super()._reset(clear_vad_user_speaking=clear_vad_user_speaking)

    async def _discard_pending_end_of_turn(self):
        self._held = False
        await super()._discard_pending_end_of_turn()

    async def _cancel_all_tasks(self):
        await super()._cancel_all_tasks()
        if self._hold_task is not None:
            await self.task_manager.cancel_task(self._hold_task)
            self._hold_task = None

    async def _maybe_trigger_user_turn_stopped(self):
        if self._vad_user_speaking or (self._wait_for_transcript and not self._text):
            return
        if not (self._user_speech_wait_done and self._stt_wait_done):
            return
        if self._held or self._hold_s == 0 or not looks_unfinished(
                " ".join(self._finals), min_digits=self._min_digits, first_turn=self.turns == 0,
                answers=self._answers):
            self.turns += 1
            await self.trigger_user_turn_stopped()
            return
        if self._hold_task is None:
            self.holds += 1
            self._hold_task = self.task_manager.create_task(self._hold(), f"{self}::_hold")

    async def _hold(self):
        try:
            await asyncio.sleep(self._hold_s)
        finally:
            self._hold_task = None
        self._held = True
        await self._maybe_trigger_user_turn_stopped()
