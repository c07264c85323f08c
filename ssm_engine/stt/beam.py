"""CTC prefix beam search with a word lexicon and a word n-gram LM (shallow fusion), streaming.

    search = CTCBeamSearch(NGramLM.load("models/stt/lm.arpa.gz"), BeamConfig())
    dec = search.stream()              # one utterance
    dec.push(log_probs)                # (n, V) CTC log-probs of the newest frames, as they come
    text = dec.finalize()              # ends the last word and the sentence -> best transcript
    search.decode(log_probs)           # the same for a whole clip

Hypotheses are prefixes of characters; each keeps ``pb``/``pnb`` (ln probability of the
prefix ending in a blank / in its last character) and ``lm``, the fused language score so far.
A prefix ranks by ``logaddexp(pb, pnb) + lm``. When a space (or the end) closes a word ``w``::

    lm += lm_weight * ln P_LM(w | previous words) + word_bonus

A word spelled outside the lexicon (the LM's vocabulary) is still allowed, the character
fallback for names nobody listed: it is scored as ``<unk>`` and pays ``oov_penalty`` once, as
soon as its spelling leaves every lexicon word (so lexicon spellings win early where the
acoustics are close) or, for a prefix of a lexicon word, when it closes. ``finalize`` adds
``lm_weight * ln P(</s> | ...)``.

Speed: frames whose blank probability is above ``blank_skip`` (most frames of CTC output) only
fold every prefix into its blank state; elsewhere only characters above ``char_min_prob`` (at
most ``max_chars``) extend prefixes, and the beam keeps ``beam_size`` prefixes within
``beam_delta`` of the best. Run ``push`` as frames arrive and little is left for ``finalize``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from .lm import BOS, EOS, NGramLM
from .text import BLANK, VOCAB
from ..errors import ConfigError

__all__ = ["BeamConfig", "CTCBeamSearch", "StreamingBeamDecoder"]

_NEG = -1e30
_SPACE = VOCAB.index(" ")


def _lse(a: float, b: float) -> float:
    if a < b:
        a, b = b, a
    if b <= _NEG:
        return a
    return a + math.log1p(math.exp(b - a))


@dataclass(frozen=True)
class BeamConfig:
    """Search settings (scores in natural log). Defaults were tuned on a development set of
    held-out voices with sentences of their own (see models/stt/TRAINING-NOTES.md)."""

    beam_size: int = 64
    lm_weight: float = 0.8
    word_bonus: float = 4.0
    oov_penalty: float = 10.0
    blank_skip: float = 0.999
    char_min_prob: float = 1e-3
    max_chars: int = 6
    beam_delta: float = 14.0

    def __post_init__(self) -> None:
        if self.beam_size < 1 or self.max_chars < 1:
            raise ConfigError("beam_size and max_chars must be >= 1")
        if not 0 < self.blank_skip <= 1 or not 0 < self.char_min_prob < 1:
            raise ConfigError("blank_skip must be in (0, 1] and char_min_prob in (0, 1)")
        if self.lm_weight < 0 or self.oov_penalty < 0 or self.beam_delta <= 0:
            raise ConfigError("lm_weight and oov_penalty must be >= 0, beam_delta > 0")


class _Hyp:
    """One prefix: its CTC scores, its LM state and the word being spelled."""

    __slots__ = ("text", "pb", "pnb", "lm", "ctx", "word", "oov", "last")

    def __init__(self, text: str, lm: float, ctx: tuple[str, ...], word: str, oov: bool,
                 last: int) -> None:
        self.text, self.lm, self.ctx = text, lm, ctx
        self.word, self.oov, self.last = word, oov, last
        self.pb = self.pnb = _NEG


class CTCBeamSearch:
    """The shared, read-only part: LM, lexicon prefixes, settings. Thread-safe to share."""

    def __init__(self, lm: NGramLM, config: BeamConfig | None = None) -> None:
        self.lm = lm
        self.config = config or BeamConfig()
        self.words = lm.vocab
        self.prefixes = frozenset(w[:i] for w in self.words for i in range(1, len(w) + 1))
        self._ctx_len = max(1, lm.order - 1)

    def stream(self) -> StreamingBeamDecoder:
        return StreamingBeamDecoder(self)

    def decode(self, log_probs: torch.Tensor | np.ndarray) -> str:
        """(T, V) log-probs of one utterance -> best transcript."""
        dec = self.stream()
        dec.push(log_probs)
        return dec.finalize()

    def close_word(self, h: _Hyp) -> tuple[float, tuple[str, ...]]:
        """LM score added when ``h``'s current word ends, and the context after it."""
        cfg = self.config
        w = h.word
        score = cfg.lm_weight * self.lm.logp(w, h.ctx) + cfg.word_bonus
        if not h.oov and w not in self.words:
            score -= cfg.oov_penalty
        return score, (h.ctx + (w,))[-self._ctx_len:]


class StreamingBeamDecoder:
    """Prefix beam search over frames pushed a few at a time (see the module docstring)."""

    def __init__(self, search: CTCBeamSearch) -> None:
        self.search = search
        cfg = search.config
        self._log_skip = math.log(cfg.blank_skip) if cfg.blank_skip < 1 else 0.0
        self._log_min = math.log(cfg.char_min_prob)
        root = _Hyp("", 0.0, (BOS,), "", False, BLANK)
        root.pb = 0.0
        self._beams: list[_Hyp] = [root]
        self.frames = 0
        self.skipped = 0

    @property
    def text(self) -> str:
        """The best prefix so far (no end-of-sentence scoring)."""
        best = max(self._beams, key=lambda h: _lse(h.pb, h.pnb) + h.lm)
        return best.text.strip()

    def push(self, log_probs: torch.Tensor | np.ndarray) -> None:
        """Advance over (n, V) CTC log-probs."""
        lp = log_probs.detach().float().numpy() if isinstance(log_probs, torch.Tensor) \
            else np.asarray(log_probs, dtype=np.float32)
        for row in lp:
            self.frames += 1
            if row[BLANK] >= self._log_skip:
                self.skipped += 1
                lb = float(row[BLANK])
                for h in self._beams:
                    h.pb, h.pnb = _lse(h.pb, h.pnb) + lb, _NEG
                continue
            self._step(row)

    def _step(self, row: np.ndarray) -> None:
        search, cfg = self.search, self.search.config
        cand = np.flatnonzero(row > self._log_min)
        cand = cand[cand != BLANK]
        if cand.size > cfg.max_chars:
            cand = cand[np.argsort(row[cand])[::-1][: cfg.max_chars]]
        scores = row.tolist()
        lb = scores[BLANK]
        prefixes = search.prefixes
        nxt: dict[str, _Hyp] = {}

        def slot(h: _Hyp) -> _Hyp:
            s = nxt.get(h.text)
            if s is None:
                s = nxt[h.text] = _Hyp(h.text, h.lm, h.ctx, h.word, h.oov, h.last)
            return s

        for h in self._beams:
            total = _lse(h.pb, h.pnb)
            same = slot(h)
            same.pb = _lse(same.pb, total + lb)
            if h.last != BLANK and h.last != _SPACE:
                same.pnb = _lse(same.pnb, h.pnb + scores[h.last])
            for c in cand.tolist():
                lc = scores[c]
                if c == _SPACE and not h.word:        # a space between words, or leading
                    same.pb = _lse(same.pb, total + lc)
                    continue
                p = (h.pb if c == h.last else total) + lc
                if c == _SPACE:
                    text = h.text + " "
                    child = nxt.get(text)
                    if child is None:
                        add, ctx = search.close_word(h)
                        child = nxt[text] = _Hyp(text, h.lm + add, ctx, "", False, c)
                else:
                    ch = VOCAB[c]
                    text = h.text + ch
                    child = nxt.get(text)
                    if child is None:
                        word = h.word + ch
                        oov = h.oov or word not in prefixes
                        lm = h.lm - cfg.oov_penalty if oov and not h.oov else h.lm
                        child = nxt[text] = _Hyp(text, lm, h.ctx, word, oov, c)
                child.pnb = _lse(child.pnb, p)
        ranked = sorted(nxt.values(), key=lambda x: _lse(x.pb, x.pnb) + x.lm, reverse=True)
        floor = _lse(ranked[0].pb, ranked[0].pnb) + ranked[0].lm - cfg.beam_delta
        self._beams = [x for x in ranked[: cfg.beam_size] if _lse(x.pb, x.pnb) + x.lm >= floor]

    def finalize(self) -> str:
        """Close the open word and the sentence; -> the best transcript ("" for none)."""
        best = self.nbest(1)
        return best[0][0] if best else ""

    def nbest(self, n: int) -> list[tuple[str, float]]:
        """Close the open word and the sentence of every prefix in the beam -> up to ``n``
        (transcript, total score) pairs, best first (for rescoring)."""
        search, cfg = self.search, self.search.config
        out: dict[str, float] = {}
        for h in self._beams:
            score = _lse(h.pb, h.pnb) + h.lm
            ctx = h.ctx
            if h.word:
                add, ctx = search.close_word(h)
                score += add
            score += cfg.lm_weight * search.lm.logp(EOS, ctx)
            text = " ".join(h.text.split())
            if score > out.get(text, _NEG):
                out[text] = score
        return sorted(out.items(), key=lambda kv: kv[1], reverse=True)[:n]
