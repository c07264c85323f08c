"""CTC prefix beam search over phones, into words of a pronouncing lexicon, with a word n-gram LM.

    search = PhoneBeamSearch(NGramLM.load("models/stt/lm.arpa.gz"), pronouncer, BeamConfig())
    dec = search.stream()
    dec.push(phone_log_probs)       # (n, len(PHONES)) CTC log-probs of the phone head
    text = dec.finalize()
    search.decode(phone_log_probs)  # the same for a whole clip

The phone head hears sounds; the lexicon turns them into words. A hypothesis is a run of words
plus the phones of the word being heard, which must stay a prefix of some pronunciation of a
lexicon word (the LM's vocabulary that the dictionary can pronounce, a word it lacks read as two
it has: "brianchester"). At a word boundary ``|`` the phones close into every word pronounced so
(homophones branch: "to", "two", "too") and each pays ``lm_weight * ln P_LM(w | previous words)
+ word_bonus`` as in ``beam.py``; the LM picks between them from context. Words outside the
lexicon cannot be produced (the character head still spells them in the partials).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from .beam import _NEG, BeamConfig, _lse
from .lm import BOS, EOS, NGramLM
from .phones import PHONE_BLANK, PHONES, WORD_BOUNDARY, Pronouncer
from ..errors import ConfigError

__all__ = ["PhoneBeamSearch", "StreamingPhoneBeamDecoder"]


def _key(ids: tuple[int, ...] | list[int]) -> str:
    """Phone ids -> a compact string key (one character a phone)."""
    return "".join(chr(48 + i) for i in ids)


_PHONE_INDEX = {p: i for i, p in enumerate(PHONES)}


class _Hyp:
    __slots__ = ("words", "phones", "pb", "pnb", "lm", "ctx", "last")

    def __init__(self, words: str, phones: str, lm: float, ctx: tuple[str, ...],
                 last: int) -> None:
        self.words, self.phones, self.lm, self.ctx, self.last = words, phones, lm, ctx, last
        self.pb = self.pnb = _NEG


class PhoneBeamSearch:
    """The shared, read-only part: LM, the pronunciation lexicon, settings."""

    def __init__(self, lm: NGramLM, pronouncer: Pronouncer,
                 config: BeamConfig | None = None) -> None:
        self.lm = lm
        self.pronouncer = pronouncer
        self.config = config or BeamConfig()
        self._ctx_len = max(1, lm.order - 1)
        homophones: dict[str, list[str]] = {}
        for word in lm.vocab:
            for pron in pronouncer.prons(word) or pronouncer.compound_prons(word):
                homophones.setdefault(_key([_PHONE_INDEX[p] for p in pron]), []).append(word)
        if not homophones:
            raise ConfigError("no LM word has a pronunciation in the dictionary")
        self.homophones = {k: tuple(v) for k, v in homophones.items()}
        self.prefixes = frozenset(k[:i] for k in self.homophones for i in range(1, len(k) + 1))

    def stream(self) -> StreamingPhoneBeamDecoder:
        return StreamingPhoneBeamDecoder(self)

    def decode(self, log_probs: torch.Tensor | np.ndarray) -> str:
        dec = self.stream()
        dec.push(log_probs)
        return dec.finalize()

    def close(self, h: _Hyp) -> list[tuple[str, float, tuple[str, ...]]]:
        """The words ``h``'s phones close into -> [(word, LM score added, context after)]."""
        cfg = self.config
        out = []
        for w in self.homophones.get(h.phones, ()):
            score = cfg.lm_weight * self.lm.logp(w, h.ctx) + cfg.word_bonus
            out.append((w, score, (h.ctx + (w,))[-self._ctx_len:]))
        return out


class StreamingPhoneBeamDecoder:
    """Prefix beam search over phone frames pushed a few at a time (module docstring)."""

    def __init__(self, search: PhoneBeamSearch) -> None:
        self.search = search
        cfg = search.config
        self._log_skip = math.log(cfg.blank_skip) if cfg.blank_skip < 1 else 0.0
        self._log_min = math.log(cfg.char_min_prob)
        root = _Hyp("", "", 0.0, (BOS,), PHONE_BLANK)
        root.pb = 0.0
        self._beams: list[_Hyp] = [root]
        self.frames = 0

    @property
    def text(self) -> str:
        best = max(self._beams, key=lambda h: _lse(h.pb, h.pnb) + h.lm)
        return best.words.strip()

    def push(self, log_probs: torch.Tensor | np.ndarray) -> None:
        lp = log_probs.detach().float().numpy() if isinstance(log_probs, torch.Tensor) \
            else np.asarray(log_probs, dtype=np.float32)
        for row in lp:
            self.frames += 1
            if row[PHONE_BLANK] >= self._log_skip:
                lb = float(row[PHONE_BLANK])
                for h in self._beams:
                    h.pb, h.pnb = _lse(h.pb, h.pnb) + lb, _NEG
                continue
            self._step(row)

    def _step(self, row: np.ndarray) -> None:
        search, cfg = self.search, self.search.config
        cand = np.flatnonzero(row > self._log_min)
        cand = cand[cand != PHONE_BLANK]
        if cand.size > cfg.max_chars:
            cand = cand[np.argsort(row[cand])[::-1][: cfg.max_chars]]
        scores = row.tolist()
        lb = scores[PHONE_BLANK]
        prefixes = search.prefixes
        nxt: dict[tuple[str, str], _Hyp] = {}

        def slot(words: str, phones: str, lm: float, ctx: tuple[str, ...], last: int) -> _Hyp:
            s = nxt.get((words, phones))
            if s is None:
                s = nxt[(words, phones)] = _Hyp(words, phones, lm, ctx, last)
            return s

        for h in self._beams:
            total = _lse(h.pb, h.pnb)
            same = slot(h.words, h.phones, h.lm, h.ctx, h.last)
            same.pb = _lse(same.pb, total + lb)
            if h.last != PHONE_BLANK:
                same.pnb = _lse(same.pnb, h.pnb + scores[h.last])
            for c in cand.tolist():
                lc = scores[c]
                p = (h.pb if c == h.last else total) + lc
                if c == WORD_BOUNDARY:
                    if not h.phones:             # between words already, or leading
                        if h.last == WORD_BOUNDARY:
                            continue             # the repeat was counted above
                        same.pb = _lse(same.pb, total + lc)
                        continue
                    for word, add, ctx in search.close(h):
                        words = f"{h.words} {word}" if h.words else word
                        child = nxt.get((words, ""))
                        if child is None:
                            child = nxt[(words, "")] = _Hyp(words, "", h.lm + add, ctx, c)
                        child.pnb = _lse(child.pnb, p)
                    continue
                phones = h.phones + chr(48 + c)
                if phones not in prefixes:
                    continue
                child = nxt.get((h.words, phones))
                if child is None:
                    child = nxt[(h.words, phones)] = _Hyp(h.words, phones, h.lm, h.ctx, c)
                child.pnb = _lse(child.pnb, p)
        ranked = sorted(nxt.values(), key=lambda x: _lse(x.pb, x.pnb) + x.lm, reverse=True)
        floor = _lse(ranked[0].pb, ranked[0].pnb) + ranked[0].lm - cfg.beam_delta
        self._beams = [x for x in ranked[: cfg.beam_size] if _lse(x.pb, x.pnb) + x.lm >= floor]

    def finalize(self) -> str:
        """Close the open word and the sentence -> the best transcript ("" for none)."""
        best = self.nbest(1)
        if best:
            return best[0][0]
        if self._beams:                  # nothing closes into a word: the words so far
            return " ".join(max(self._beams, key=lambda x: _lse(x.pb, x.pnb) + x.lm).words.split())
        return ""

    def nbest(self, n: int) -> list[tuple[str, float]]:
        """Close the open word (into each word it can be) and the sentence of every hypothesis
        -> up to ``n`` (transcript, total score) pairs, best first."""
        search, cfg = self.search, self.search.config
        out: dict[str, float] = {}
        for h in self._beams:
            base = _lse(h.pb, h.pnb) + h.lm
            ends = ([(h.words, base, h.ctx)] if not h.phones else
                    [(f"{h.words} {w}", base + add, ctx) for w, add, ctx in search.close(h)])
            for text, score, ctx in ends:
                score += cfg.lm_weight * search.lm.logp(EOS, ctx)
                text = " ".join(text.split())
                if score > out.get(text, _NEG):
                    out[text] = score
        return sorted(out.items(), key=lambda kv: kv[1], reverse=True)[:n]
