"""Sentences sampled from a word trigram language model: English as people say it.

    sampler = NGramSampler(logprob, vocab)      # logprob(word, (older, newer)) -> ln P
    sampler.sentence(random.Random(1))          # -> "i know i'll go home the games lives in denver"

Strings of words drawn evenly from a word list (``SentenceGenerator``'s ``wide``) teach a
recogniser to spell many words, but nobody talks like that: the commonest words come as often as
rare ones and no word leads to the next. Sampled from an n-gram model of conversational English
(pocketsphinx's en-us model, ``parley data stt --natural``), the words come at their real
frequencies in locally grammatical runs ("how about that interesting", "if you go to the gym"),
which is what a caller's speech sounds like between the domain words.

Each context's next-word distribution (over ``vocab`` and the end of the sentence) is computed
once from ``logprob`` and cached (``cache_contexts`` of them, least recently used dropped). A
sentence ends when the model says so, but not before ``min_words`` (until then the next word is
drawn among the words alone) and never after ``max_words``.
"""

from __future__ import annotations

import bisect
import math
import random
from collections import OrderedDict
from collections.abc import Callable, Sequence

from ..errors import ConfigError

__all__ = ["NGramSampler", "BOS", "EOS"]

BOS, EOS = "<s>", "</s>"


class NGramSampler:
    """See the module docstring. ``logprob(word, context)``: ln P(word | context), ``context``
    the two words before it (``(None, BOS)`` at the start); words the model lacks may return any
    very low value (below ``floor`` counts as impossible)."""

    def __init__(self, logprob: Callable[[str, tuple[str | None, str]], float],
                 vocab: Sequence[str], *, min_words: int = 4, max_words: int = 14,
                 cache_contexts: int = 4096, floor: float = -30.0) -> None:
        words = [w for w in dict.fromkeys(vocab) if w not in (BOS, EOS)]
        if not words:
            raise ConfigError("NGramSampler needs a vocabulary")
        if not 1 <= min_words <= max_words:
            raise ConfigError(f"need 1 <= min_words <= max_words, got {min_words}, {max_words}")
        self._logprob = logprob
        self._words = (*words, EOS)
        self.min_words, self.max_words = min_words, max_words
        self._cache: OrderedDict[tuple[str | None, str], tuple[list[float], float]] = OrderedDict()
        self._cache_size = cache_contexts
        self._floor = floor

    def _cumulative(self, ctx: tuple[str | None, str]) -> tuple[list[float], float]:
        """(cumulative probabilities over vocab + EOS, the EOS probability) for ``ctx``."""
        hit = self._cache.get(ctx)
        if hit is not None:
            self._cache.move_to_end(ctx)
            return hit
        lps = [self._logprob(w, ctx) for w in self._words]
        top = max(lps)
        ps = [math.exp(lp - top) if lp > self._floor else 0.0 for lp in lps]
        total, cum = 0.0, []
        for p in ps:
            total += p
            cum.append(total)
        if total <= 0.0:
            raise ConfigError(f"the model gives no word any probability after {ctx}")
        out = ([c / total for c in cum], ps[-1] / total)
        self._cache[ctx] = out
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return out

    def sentence(self, rng: random.Random) -> str:
        """One sentence of ``min_words``..``max_words`` words, drawn with ``rng``."""
        ctx: tuple[str | None, str] = (None, BOS)
        out: list[str] = []
        while len(out) < self.max_words:
            cum, p_end = self._cumulative(ctx)
            last = len(self._words) - 1               # EOS's index
            if len(out) < self.min_words:
                # too short to end: draw among the words only
                if p_end >= 1.0:
                    break
                i = min(bisect.bisect_right(cum, rng.random() * (1.0 - p_end)), last - 1)
            else:
                i = min(bisect.bisect_right(cum, rng.random()), last)
            word = self._words[i]
            if word == EOS:
                break
            out.append(word)
            ctx = (ctx[1], word)
        return " ".join(out)
