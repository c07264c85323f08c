"""Which knowledge item answers a caller's question: by meaning (sentence embeddings) beside
words (BM25), with thresholds under which the agent says it has no answer.

    matcher = KnowledgeMatcher(spec.knowledge, SentenceEncoder.default())
    matcher.match("how much is a filling")   # -> the item's index, or None
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from agent.retrieval import BM25Index
from agent.spec import KnowledgeItem

if TYPE_CHECKING:
    from agent.semantic import SentenceEncoder

__all__ = ["BM25_AGREE_COVERAGE", "KnowledgeMatcher", "SEMANTIC_AGREE", "SEMANTIC_SURE"]

SEMANTIC_SURE = 0.5
"""A question this close in meaning (cosine) to a knowledge item's question or answer is
answered from it; between ``SEMANTIC_AGREE`` and this, only when BM25 picks the same item and
explains at least ``BM25_AGREE_COVERAGE`` of the question's words; below, the agent says it has
no answer. Calibrated by hand on the receptionist's questions and paraphrases (tests)."""
SEMANTIC_AGREE = 0.3
BM25_AGREE_COVERAGE = 0.9


class KnowledgeMatcher:
    """The knowledge of one spec, indexed once a call.

    ``encoder``: sentence embeddings (``agent.semantic``); None matches by words alone (BM25).
    ``questions`` is a BM25 index of the questions (and keywords) alone, for callers that want
    to know whether a question's words name an item strongly."""

    def __init__(self, knowledge: Sequence[KnowledgeItem], encoder: SentenceEncoder | None = None):
        self._encoder = encoder
        self._index = BM25Index([
            " ".join((k.question, " ".join(k.keywords), " ".join(k.keywords), k.answer))
            for k in knowledge
        ])
        self.questions = BM25Index([" ".join((k.question, " ".join(k.keywords)))
                                    for k in knowledge])
        self._vectors = (np.stack([encoder.encode([k.question for k in knowledge]),
                                   encoder.encode([k.answer for k in knowledge])])
                         if encoder is not None and knowledge else None)

    def match(self, text: str) -> int | None:
        """The knowledge item that answers ``text``, or None (see ``SEMANTIC_SURE``)."""
        if self._vectors is None or self._encoder is None:
            kb = self._index.search(text)
            return kb.index if kb is not None else None
        v = self._encoder.encode([text])[0]
        sims = (self._vectors @ v).max(axis=0)                 # question or answer, per item
        best = int(sims.argmax())
        if sims[best] >= SEMANTIC_SURE:
            return best
        kb = self._index.search(text, min_coverage=BM25_AGREE_COVERAGE)
        if kb is not None and kb.index == best and sims[best] >= SEMANTIC_AGREE:
            return best
        return None
