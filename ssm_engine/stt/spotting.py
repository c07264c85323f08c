"""Keyword spotting on the phone head: is a word somewhere in what the caller said?

    spotter = KeywordSpotter(pronouncer, ("parking", "insurance", "opening hours"))
    hits = spotter.spot(phone_log_probs)      # (T, P) log-probs of one utterance
    # -> (("insurance", -0.41), ...): every keyword at or above the threshold, best first

A recogniser that mishears most of a sentence often still hears its one long word: "do you take
cigna insurance" decoded as "do day city answer" may hold a stretch of frames that fits
"insurance" nearly as well as anything else does. The free search cannot find it, because
its lexicon and LM must explain every frame with words; the spotter explains only the keyword's
frames and lets the rest be anything.

Score. Each frame's phone log-probs are taken relative to that frame's best phone
(``a[t, c] = ln p[t, c] - max_c ln p[t, c]``, at most 0). For each keyword a Viterbi search over
its CTC states (blank, phone, blank, ..., the word boundary between two words optional), free to
start and to end at any frame, finds the stretch of frames whose best alignment to the keyword
costs least against the free best path over the same frames. That cost, divided by the keyword's
phone count, is the score: 0 when the greedy reading of those frames is the keyword, about
-1 nat a phone when each of its phones is one of the two or three likeliest. A keyword's
pronunciations (the first two of each word, at most ``MAX_VARIANTS`` per keyword) compete; the
best one counts. Keywords the lexicon cannot pronounce, or shorter than ``min_phones``
phones (short words fit somewhere in almost any utterance), are left out at construction and
named in ``skipped``.

Everything is one numpy pass over the utterance for all keywords at once (states padded to the
longest): 3.5-5.5 ms an utterance for the example agents' 68 keywords
(benchmarks/bench_stt_spotting.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from itertools import product

import numpy as np
import torch

from ..errors import ConfigError
from .phones import PHONE_BLANK, PHONES, WORD_BOUNDARY, Pronouncer
from .text import normalize_text

__all__ = ["KeywordSpotter", "SpotConfig", "MAX_VARIANTS"]

MAX_VARIANTS = 4
"""Pronunciation variants tried per keyword (products of its words' first two)."""
_NEG = -1e9


@dataclass(frozen=True)
class SpotConfig:
    """``threshold``: the least score (nats a phone, at most 0) a keyword is reported at;
    ``min_phones``: shorter keywords are not spotted at all."""

    threshold: float = -1.0
    min_phones: int = 4

    def __post_init__(self) -> None:
        if not self.threshold <= 0:
            raise ConfigError(f"threshold is a log-prob ratio per phone, at most 0: got {self.threshold}")
        if self.min_phones < 1:
            raise ConfigError(f"min_phones must be >= 1, got {self.min_phones}")


class KeywordSpotter:
    """Spots a fixed list of keywords (or phrases) in one utterance's phone log-probs."""

    def __init__(self, pronouncer: Pronouncer, keywords: Iterable[str],
                 config: SpotConfig | None = None) -> None:
        self.config = config or SpotConfig()
        self.keywords: list[str] = []
        self.skipped: list[str] = []
        variants: list[tuple[int, list[int]]] = []      # (keyword index, phone ids)
        for raw in dict.fromkeys(normalize_text(k) for k in keywords):
            if not raw:
                continue
            prons = _variants(pronouncer, raw)
            if not prons or min(map(_phone_count, prons)) < self.config.min_phones:
                self.skipped.append(raw)
                continue
            variants += [(len(self.keywords), p) for p in prons]
            self.keywords.append(raw)
        self._owner = np.array([k for k, _ in variants], dtype=np.int64)
        self._n_phones = np.array([_phone_count(p) for _, p in variants], dtype=np.float64)
        self._build([p for _, p in variants])

    def _build(self, prons: list[list[int]]) -> None:
        """The padded CTC state table: labels (K, S) and which earlier states may lead to each."""
        k = len(prons)
        s_max = 2 * max((len(p) for p in prons), default=0) + 1
        labels = np.full((k, s_max), PHONE_BLANK, dtype=np.int64)
        # allowed[j]: state s may be entered from s - j (j = 1..4); staying (j = 0) always
        allowed = np.zeros((5, k, s_max), dtype=bool)
        ends = np.zeros((k, 2), dtype=np.int64)
        valid = np.zeros((k, s_max), dtype=bool)
        for v, pron in enumerate(prons):
            n = 2 * len(pron) + 1
            labels[v, 1:n:2] = pron
            valid[v, :n] = True
            for s in range(1, n):
                allowed[1, v, s] = True
                lab = labels[v, s]
                if s % 2 == 1 and s >= 3 and lab != labels[v, s - 2]:
                    allowed[2, v, s] = True       # phone to the next phone, no blank between
                # the word boundary between two words may be skipped: the phone before it leads
                # straight to the phone after it, or to the blank after it
                if s % 2 == 1 and s >= 5 and labels[v, s - 2] == WORD_BOUNDARY \
                        and labels[v, s - 4] != lab:
                    allowed[4, v, s] = True
                if s % 2 == 0 and s >= 4 and labels[v, s - 1] == WORD_BOUNDARY:
                    allowed[3, v, s] = True
            ends[v] = (n - 1, n - 2)
        self._labels, self._valid, self._ends = labels, valid, ends
        self._step_bias = [np.where(allowed[j], 0.0, _NEG) for j in range(5)]
        start = np.full((k, s_max), _NEG)
        start[:, :2] = 0.0                                  # a stretch may begin at any frame
        self._start = start

    def scores(self, log_probs: torch.Tensor | np.ndarray) -> dict[str, float]:
        """Every keyword's score (nats a phone, at most 0; -inf for none of it) over the
        utterance's phone log-probs ``(T, P)``."""
        lp = (log_probs.detach().double().cpu().numpy() if isinstance(log_probs, torch.Tensor)
              else np.asarray(log_probs, dtype=np.float64))
        if lp.ndim != 2 or lp.shape[1] != len(PHONES):
            raise ConfigError(f"spotting takes (T, {len(PHONES)}) phone log-probs, got {lp.shape}")
        out = dict.fromkeys(self.keywords, -np.inf)
        if not self.keywords or lp.shape[0] == 0:
            return out
        rel = lp - lp.max(axis=1, keepdims=True)           # (T, P), <= 0
        k, s_max = self._labels.shape
        d = np.full((k, s_max), _NEG)
        best = np.full(k, _NEG)
        rows = np.arange(k)
        bias = self._step_bias
        for t in range(rel.shape[0]):
            emit = rel[t][self._labels]                       # (K, S)
            prev = np.maximum(d, self._start)
            for j in range(1, 5):
                shifted = np.full((k, s_max), _NEG)
                shifted[:, j:] = d[:, :-j]
                prev = np.maximum(prev, shifted + bias[j])
            d = np.where(self._valid, prev + emit, _NEG)
            best = np.maximum(best, np.maximum(d[rows, self._ends[:, 0]], d[rows, self._ends[:, 1]]))
        per_phone = best / self._n_phones
        for v, score in enumerate(per_phone):
            word = self.keywords[self._owner[v]]
            if score > _NEG / 2 and score > out[word]:
                out[word] = float(score)
        return out

    def spot(self, log_probs: torch.Tensor | np.ndarray) -> tuple[tuple[str, float], ...]:
        """The keywords scored at or above the threshold, best first: ((keyword, score), ...)."""
        hits = [(w, s) for w, s in self.scores(log_probs).items() if s >= self.config.threshold]
        return tuple(sorted(hits, key=lambda kv: kv[1], reverse=True))


def _phone_count(ids: list[int]) -> int:
    """Phones in a keyword's id sequence, its word boundaries aside."""
    return sum(i != WORD_BOUNDARY for i in ids)


_INDEX = {p: i for i, p in enumerate(PHONES)}


def _variants(pronouncer: Pronouncer, text: str) -> list[list[int]]:
    """Phone-id sequences for ``text``: each word's first two pronunciations, words joined by the
    boundary, at most MAX_VARIANTS; [] when a word has none."""
    per_word = []
    for word in text.split():
        prons = pronouncer.prons(word) or pronouncer.compound_prons(word)
        if not prons:
            return []
        per_word.append(prons[:2])
    out: list[list[int]] = []
    for combo in product(*per_word):
        ids: list[int] = []
        for pron in combo:
            if ids:
                ids.append(WORD_BOUNDARY)
            ids.extend(_INDEX[p] for p in pron)
        out.append(ids)
        if len(out) >= MAX_VARIANTS:
            break
    return out
