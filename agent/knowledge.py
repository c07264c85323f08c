"""Which knowledge item answers a caller's question: by meaning (sentence embeddings) beside
words (BM25), and only when the item is about what the question asks.

    matcher = KnowledgeMatcher(spec.knowledge, SentenceEncoder.default())
    matcher.match("how much does a cleaning cost")   # -> the item's index
    matcher.match("how much is a filling")           # -> None: no item is about fillings

A sentence can be close in meaning to an item and ask about something else: "how much is a
filling" is near "How much does a cleaning cost?", "are you open on christmas" near the opening
hours. So an item answers a question only when it covers the question's content words: each
word of the question that is not a stop word or a framing word (``agent.phrases.FRAME``:
"really", "today", "office"; question words; the words of the agent's name) must be in the item's question, keywords or answer (as
``retrieval.similar`` hears it: stems, one edit, sound-alikes), or, with the sentence encoder,
be within ``WORD_SIMILAR`` of one of its words as a word ("tooth" and "dental"). And at least
one of the question's words must be the item's, unless the whole question is within
``SEMANTIC_SURE`` of it ("where are you").

Candidates are the items within ``SEMANTIC_AGREE`` of the question (with the encoder; best
first), then the best BM25 match (alone without the encoder). The first that covers the
question answers it, unless another covers it too and the first is not within
``SEMANTIC_SURE`` ("i want to pay": parking's keyword and insurance's); otherwise the agent says
it does not know. Measured on the example agents' question sets:
benchmarks/bench_agent_answers.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from agent.phrases import FRAME, QUESTION_WORDS
from agent.retrieval import STOPWORDS, BM25Index, one_edit, similar, stem, words
from agent.spec import KnowledgeItem

if TYPE_CHECKING:
    from agent.semantic import SentenceEncoder

__all__ = ["KnowledgeMatcher", "SEMANTIC_AGREE", "SEMANTIC_SURE", "WORD_SIMILAR", "content_words"]

SEMANTIC_SURE = 0.5
"""A question this close in meaning (cosine) to an item's question or answer needs none of its
words to be the item's (all must still be covered): "where are you" has no content words."""
SEMANTIC_AGREE = 0.3
"""Items less close than this to the question are not candidates at all."""
WORD_SIMILAR = 0.75
"""Two words this close as words (the encoder's cosine on each alone) are one subject: "teeth"
and "tooth" (0.88), "tooth" and "dental" (0.83). Words of different subjects come close too:
"dentures" and "teeth" 0.72, "braces" and "teeth" 0.65, "house" and "room" 0.63 (each a wrong
fact at 0.6 on the receptionist's questions), so synonyms such as "charge" and "fee" (0.65) are
the spec's keywords' job."""


def content_words(text: str) -> list[str]:
    """The words of ``text`` that may name what it asks about: no stop words, no digits."""
    out = []
    for w in words(text):
        if w in STOPWORDS or stem(w) in STOPWORDS or w.isdigit():
            continue
        out.append(w.removesuffix("'s"))
    return list(dict.fromkeys(out))


class KnowledgeMatcher:
    """The knowledge of one spec, indexed once a call.

    ``encoder``: sentence embeddings (``agent.semantic``); None matches by words alone (BM25).
    ``questions`` is a BM25 index of the questions (and keywords) alone, for callers that want
    to know whether a question's words name an item strongly."""

    def __init__(self, knowledge: Sequence[KnowledgeItem], encoder: SentenceEncoder | None = None,
                 *, name: str = ""):
        """``name``: the agent's name; its words name the business, not a subject ("dental"
        in "Riverside Dental reception": "what does a dental cleaning cost")."""
        self._encoder = encoder
        self._frame = FRAME | QUESTION_WORDS | {stem(w) for w in words(name)}
        self._index = BM25Index([
            " ".join((k.question, " ".join(k.keywords), " ".join(k.keywords), k.answer))
            for k in knowledge
        ])
        self.questions = BM25Index([" ".join((k.question, " ".join(k.keywords)))
                                    for k in knowledge])
        self._vectors = (np.stack([encoder.encode([k.question for k in knowledge]),
                                   encoder.encode([k.answer for k in knowledge])])
                         if encoder is not None and knowledge else None)
        # each item's own words, as said (for the encoder) and stemmed (for similar())
        self._words = [content_words(" ".join((k.question, *k.keywords, k.answer)))
                       for k in knowledge]
        self._stems = [{stem(w) for w in ws} for ws in self._words]
        self._heads = [{stem(w) for w in words(" ".join((k.question, *k.keywords)))}
                       for k in knowledge]
        self._word_vectors: dict[int, np.ndarray] = {}

    def match(self, text: str) -> int | None:
        """The knowledge item that answers ``text``, or None (see the module docstring)."""
        if self._vectors is None or self._encoder is None:
            kb = self._index.search(text)
            return kb.index if kb is not None and self.covers(text, kb.index) else None
        v = self._encoder.encode([text])[0]
        sims = (self._vectors @ v).max(axis=0)                 # question or answer, per item
        candidates = [int(i) for i in np.argsort(-sims) if sims[i] >= SEMANTIC_AGREE]
        kb = self._index.search(text)
        if kb is not None and kb.index not in candidates:      # its words, however it is said
            candidates.append(kb.index)
        best = next((i for i in candidates if self.covers(text, i, sure=bool(sims[i] >= SEMANTIC_SURE))),
                    None)
        if best is None or sims[best] >= SEMANTIC_SURE:
            return best
        if any(self.covers(text, i) for i in range(len(sims)) if i != best):
            return None            # "i want to pay": parking's word and insurance's; not guessed
        return best

    def uncovered(self, text: str, item: int, *, sure: bool = False) -> tuple[list[str], list[str]]:
        """The content words of ``text`` that item ``item`` does not explain (framing words
        aside), and those of its words that are the item's own. A word the recogniser may
        have misheard ("barking" for "parking": ``retrieval.similar``) is the item's only when
        the question's meaning agrees (``sure``) or there is no encoder to ask: "braces" sounds
        like "price". One edit in a long word ("broke", "broken") is always the item's."""
        own = self._stems[item]
        fuzzy = sure or self._encoder is None
        missing: list[str] = []
        matched: list[str] = []
        for w in content_words(text):
            s = stem(w)
            framing = w in self._frame or s in self._frame
            if s in own or any(one_edit(s, o) if not fuzzy else similar(s, o) for o in own):
                # a framing word is the item's only in its question or keywords: "call back"
                # in an answer ("we will call you back") says nothing of what it is about
                if not framing or s in self._heads[item]:
                    matched.append(w)
            elif not framing and not self._near(w, item):
                missing.append(w)
        return missing, matched

    def covers(self, text: str, item: int, *, sure: bool = False) -> bool:
        """Whether item ``item`` is about what ``text`` asks: every content word explained, and
        one of them the item's own (not needed when ``sure``: the whole question is close)."""
        missing, matched = self.uncovered(text, item, sure=sure)
        return not missing and (bool(matched) or sure)

    def _near(self, word: str, item: int) -> bool:
        """Whether ``word`` is within ``WORD_SIMILAR`` of one of the item's words, as words."""
        if self._encoder is None or not self._words[item]:
            return False
        if item not in self._word_vectors:
            self._word_vectors[item] = self._encoder.encode(self._words[item])
        v = self._encoder.encode([word])[0]
        return bool((self._word_vectors[item] @ v).max() >= WORD_SIMILAR)
