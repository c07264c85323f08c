"""Finals from both heads: the character and phone beam searches' n-best lists, rescored together.

    search = JointSearch(lm, pronouncer)          # a model with a phone head
    dec = search.stream()
    dec.push(rows)                                # (n, V + P): characters' then phones' log-probs
    text = dec.finalize()

The two heads fail differently: the character head spells what it heard (names, words outside
the lexicon) but misspells words it rarely heard; the phone head hears the sounds of any word but
cannot tell "two" from "to" or spell a name. While the caller speaks, both beam searches advance
frame by frame (``beam.py``, ``phone_beam.py``). At the end their ``nbest`` transcripts are pooled
and each is scored afresh over the whole utterance::

    char_weight * ln P_ctc(spelling | character head)
      + phone_weight * ln P_ctc(pronunciation | phone head)
      + lm_weight * ln P_LM(words) + word_bonus * words

(full CTC sums over all alignments, every hypothesis in one batched ``ctc_loss``). A transcript
with a word the lexicon cannot pronounce (a spelled-out name) takes, for its phone score, the
pool's best pronounceable score less ``unpronounced_penalty``: with a ``char_weight`` the
characters can decide that the name was there.

Per-turn hints (``hints.py``): ``stream(hints)`` adds the hinted sentences (yes/no, the agent's
phrases) and the best strings of a grammar's own phone search (digit strings; callers' names,
``names.py``; names spelled letter by letter, ``spelling.py``) to the pool, each scored as
above plus the hint's bonus, a yes/no sentence with the grammar's prior and a grammar's string
with its own LM (and lexicon) in place of the word LM; ``result()`` gives the final with each
reading's posterior, and the hinted keywords spotted on the phone head anywhere in the
utterance (``spotting.py``; they do not touch the transcript).

Defaults were tuned on the development set of held-out voices (``data/stt/dev-lm``, 120 clips),
never on the scored held-out manifest: over LM weight 0.8-1.6, word bonus 2-6, character weight
0-0.5 and penalty 10-40, the phone head with the LM decided best, the character head proposing
candidates only (``char_weight`` 0; 0.2 was within 5 words of 1,030). So finals are lexicon
words: a name the lexicon lacks, which the character beam search used to spell, is lost.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import dataclass
from typing import Literal, get_args

import numpy as np
import torch
import torch.nn.functional as F

from .beam import BeamConfig, CTCBeamSearch
from .hints import NO_HINTS, NO_SENTENCES, YES_SENTENCES, Hints, Recognition, digits_lm
from .lm import BOS, EOS, NGramLM
from .names import NameTable, names_lm
from .phone_beam import PhoneBeamSearch
from .phones import PHONE_BLANK, PHONES, Pronouncer
from .spelling import SpelledNames, letters_pronouncer, spelled_logp, spelling_lm
from .spotting import KeywordSpotter, SpotConfig
from .text import BLANK, VOCAB, encode
from ..errors import ConfigError, SSMEngineError

__all__ = ["JointConfig", "JointSearch", "JointDecoder", "Grammar"]

log = logging.getLogger(__name__)

Grammar = Literal["digits", "name", "spelling"]
"""Hint kinds with a phone search of their own (``JointSearch.grammar``)."""
_GRAMMARS: tuple[Grammar, ...] = get_args(Grammar)


@dataclass(frozen=True)
class JointConfig:
    """Rescoring weights (natural log); see the module docstring."""

    nbest: int = 4                     # from each search (16: twice the time, no gain on dev)
    char_beam_size: int = 64           # the character search's beam, at most BeamConfig's
    #                                    (it only proposes; 32: ~25 % less decoding a frame, the
    #                                    same WER on dev but 14 words more of 2,491 held out)
    char_weight: float = 0.0           # 0: the characters only propose (best on dev, 0.2 close)
    phone_weight: float = 1.0
    lm_weight: float = 0.8
    word_bonus: float = 4.0
    unpronounced_penalty: float = 40.0
    blank_skip: float = 0.999          # frames at least this sure of the blank are not rescored
    posterior_scale: float = 0.5       # posteriors: softmax of this times the joint scores
    #                                    (chosen, not tuned; the agent's 0.6 threshold was set
    #                                    with it, benchmarks/bench_stt_hints.py)

    def __post_init__(self) -> None:
        if self.nbest < 1 or self.char_beam_size < 1:
            raise ConfigError("nbest and char_beam_size must be >= 1")
        if not 0 < self.blank_skip <= 1:
            raise ConfigError("blank_skip must be in (0, 1]")
        if min(self.char_weight, self.phone_weight, self.lm_weight, self.unpronounced_penalty) < 0:
            raise ConfigError("weights and the penalty must be >= 0")
        if self.char_weight == self.phone_weight == 0:
            raise ConfigError("char_weight and phone_weight cannot both be 0")
        if not self.posterior_scale > 0:
            raise ConfigError("posterior_scale must be > 0")


class JointSearch:
    """Shared, read-only: both beam searches, the pronunciations, the settings."""

    def __init__(self, lm: NGramLM, pronouncer: Pronouncer, beam: BeamConfig | None = None,
                 config: JointConfig | None = None, free: JointConfig | None = None) -> None:
        self.lm = lm
        self.config = config or JointConfig()
        self.free_config = free
        """The rescoring weights of an utterance with no hints (None: ``config``'s): a model may
        choose its own for free recognition while hinted turns keep the weights their hints'
        thresholds were set with."""
        beam = beam or BeamConfig()
        self.chars = CTCBeamSearch(lm, dataclasses.replace(
            beam, beam_size=min(beam.beam_size, self.config.char_beam_size)))
        self.phones = PhoneBeamSearch(lm, pronouncer, beam)
        self.pronouncer = pronouncer
        self.vocab_size = len(VOCAB)
        self._ctx_len = max(1, lm.order - 1)
        self._beam_config = beam
        self._grammars: dict[Grammar, PhoneBeamSearch] = {}
        self._names: NameTable | None = None
        self._spelled: SpelledNames | None = None
        self._unavailable: dict[Grammar, str] = {}
        self._prons: dict[tuple[Grammar | None, str], list[int] | None] = {}
        self._spotters: dict[tuple[str, ...], KeywordSpotter] = {}
        self.spot_config = SpotConfig()

    def spotter(self, keywords: tuple[str, ...]) -> KeywordSpotter:
        """The keyword spotter for a hint's keywords (an agent sends the same few lists turn after
        turn: each is built once)."""
        spotter = self._spotters.get(keywords)
        if spotter is None:
            if len(self._spotters) > 64:
                self._spotters.clear()
            spotter = self._spotters[keywords] = KeywordSpotter(self.pronouncer, keywords,
                                                                self.spot_config)
            if spotter.skipped:
                log.debug("keywords not spotted (unknown or under %d phones): %s",
                          self.spot_config.min_phones, ", ".join(spotter.skipped))
        return spotter

    def stream(self, hints: Hints = NO_HINTS) -> JointDecoder:
        """One utterance's decoder; ``hints`` bias its final (``hints.py``)."""
        return JointDecoder(self, hints)

    def has_grammar(self, kind: Grammar) -> bool:
        """Whether the hint kind's grammar can be built here (a small lexicon may lack the digit
        words); a grammar that cannot is logged once and its hint left out."""
        if kind in self._grammars:
            return True
        if kind in self._unavailable:
            return False
        try:
            self.grammar(kind)
        except SSMEngineError as exc:
            self._unavailable[kind] = str(exc)
            log.warning("the %s hint is off for this recogniser: %s", kind, exc)
            return False
        return True

    def grammar(self, kind: Grammar) -> PhoneBeamSearch:
        """The phone beam search of a hint kind with a grammar of its own: the digit words
        (``hints.digits_lm``) or callers' names (``names.py``: its own LM and the names'
        pronunciations beside this lexicon). Built on first use (the names' in ~0.5 s; the
        services build it at start, ``warm_grammars``), then shared."""
        if kind not in self._grammars:
            if kind == "digits":
                self._grammars[kind] = PhoneBeamSearch(digits_lm(), self.pronouncer,
                                                       self._beam_config)
            elif kind == "name":
                table = self._name_table()
                self._grammars[kind] = PhoneBeamSearch(names_lm(table, self.pronouncer),
                                                       table.pronouncer(self.pronouncer),
                                                       self._beam_config)
            elif kind == "spelling":
                self._spelled = SpelledNames(self._name_table())
                self._grammars[kind] = PhoneBeamSearch(spelling_lm(self._name_table()),
                                                       letters_pronouncer(), self._beam_config)
            else:
                raise ConfigError(f"no grammar for hint kind {kind!r} (known: {_GRAMMARS})")
        return self._grammars[kind]

    def _name_table(self) -> NameTable:
        if self._names is None:
            self._names = NameTable.load()
        return self._names

    def grammar_strings(self, kind: Grammar, found: list[str]) -> list[str]:
        """A grammar search's best strings, and for a spelling the names within a letter or two
        of its two best (``spelling.SpelledNames``): its letter model cannot keep the search to
        the names, so a lost or changed letter spells none; the rescoring decides."""
        if kind != "spelling" or self._spelled is None:
            return found
        near = [r for t in found[:2] for r in self._spelled.readings(t)]
        return list(dict.fromkeys(found + near))

    def grammar_logp(self, kind: Grammar, text: str) -> float | None:
        """A grammar string's prior: the digits' LM, the names' exact grammar (``NameTable.
        logp``) or the names a spelling spells (``spelling.spelled_logp``); None for a string
        the names' search found that fits no way of giving a name ("this is it's beltran": its
        trigram allows more than the grammar)."""
        search = self.grammar(kind)
        if kind == "name":
            return self._name_table().logp(text)
        if kind == "spelling":
            return spelled_logp(self._name_table(), text)
        return search.lm.sentence_logp(text.split())

    def warm_grammars(self) -> None:
        """Build every grammar now, so that no caller's turn waits for one."""
        for kind in _GRAMMARS:
            self.has_grammar(kind)

    def pronounce_cached(self, text: str, grammar: Grammar | None = None) -> list[int] | None:
        """``pronounce`` for hinted sentences, which come back turn after turn; a grammar's
        strings with that grammar's lexicon (a name the recogniser's lexicon lacks)."""
        key = (grammar, text)
        if key not in self._prons:
            if len(self._prons) > 4096:
                self._prons.clear()
            self._prons[key] = (self.pronounce(text) if grammar is None
                                else self.grammar(grammar).pronouncer.encode(text, compounds=True))
        return self._prons[key]

    def decode(self, log_probs: torch.Tensor | np.ndarray) -> str:
        """(T, V + P) log-probs of one utterance -> best transcript."""
        dec = self.stream()
        dec.push(log_probs)
        return dec.finalize()

    def pronounce(self, text: str) -> list[int] | None:
        """Phone ids of a transcript (``Pronouncer.encode`` with compounds); None when a word has
        no pronunciation."""
        return self.pronouncer.encode(text, compounds=True)

    def lm_score(self, text: str) -> float:
        """ln P_LM(words, then the sentence end) of a whole transcript."""
        ctx: tuple[str, ...] = (BOS,)
        score = 0.0
        for word in text.split():
            score += self.lm.logp(word, ctx)
            ctx = (ctx + (word,))[-self._ctx_len:]
        return score + self.lm.logp(EOS, ctx)


def _ctc_scores(log_probs: torch.Tensor, targets: list[list[int]], blank: int,
                skip: float) -> list[float]:
    """ln P(target | log_probs (T, C)) for each target, in one batched CTC pass. Frames whose
    blank log-prob is at least ``skip`` (silence, gaps between sounds: about a third of the
    development set's frames with an early checkpoint of the shipped model) are left out, which
    changes a score by next to nothing and shortens the pass as much; at least as many are kept
    as the longest target needs."""
    if not targets:
        return []
    keep = log_probs[:, blank] < skip
    need = max(len(x) + sum(a == b for a, b in zip(x, x[1:])) for x in targets)
    if int(keep.sum()) >= max(need, 1):
        log_probs = log_probs[keep]
    t = log_probs.shape[0]
    n = len(targets)
    lp = log_probs[:, None, :].expand(t, n, log_probs.shape[1])
    lengths = torch.tensor([len(x) for x in targets], dtype=torch.long)
    flat = torch.tensor([i for x in targets for i in x], dtype=torch.long)
    loss = F.ctc_loss(lp, flat, torch.full((n,), t, dtype=torch.long), lengths, blank=blank,
                      reduction="none", zero_infinity=False)
    return [-float(v) if math.isfinite(float(v)) else -math.inf for v in loss]


class JointDecoder:
    """One utterance: both beam searches as frames come, the joint rescoring at the end."""

    def __init__(self, search: JointSearch, hints: Hints = NO_HINTS) -> None:
        self.search = search
        self.hints = hints
        self.config = search.free_config if search.free_config is not None and not hints else search.config
        self._chars = search.chars.stream()
        self._phones = search.phones.stream()
        self._grammars = {k: search.grammar(k).stream() for k in _GRAMMARS
                          if k in hints.expect and search.has_grammar(k)}
        self._rows: list[torch.Tensor] = []
        self._joined: torch.Tensor | None = None     # the rows as one tensor, made once a final
        self.frames = 0

    @property
    def text(self) -> str:
        return self._chars.text

    def push(self, log_probs: torch.Tensor | np.ndarray) -> None:
        rows = (log_probs.detach().float() if isinstance(log_probs, torch.Tensor)
                else torch.from_numpy(np.asarray(log_probs, dtype=np.float32)))
        v = self.search.vocab_size
        if rows.dim() != 2 or rows.shape[1] != v + len(PHONES):
            raise ConfigError(f"joint decoding takes (n, {v + len(PHONES)}) rows (characters then "
                             f"phones), got {tuple(rows.shape)}")
        self._chars.push(rows[:, :v])
        self._phones.push(rows[:, v:])
        for g in self._grammars.values():
            g.push(rows[:, v:])
        self._rows.append(rows)
        self._joined = None                 # a new push: joined again when read
        self.frames += rows.shape[0]

    def nbest(self, n: int) -> list[tuple[str, float]]:
        """The pooled transcripts rescored -> up to ``n`` (transcript, joint score), best first."""
        return [(t, score) for t, score, _ in self._scored()[:n]]

    def result(self, n: int = 5) -> Recognition:
        """The final transcript, its confidence (posterior) and the ``n`` best readings."""
        scored = self._scored()
        if not scored:
            return Recognition("", 0.0)
        scale = self.config.posterior_scale
        top = scored[0][1]
        weights = [math.exp(scale * (s - top)) for _, s, _ in scored]
        total = sum(weights)
        alts = tuple((t, w / total) for (t, _, _), w in zip(scored[:n], weights[:n]))
        return Recognition(scored[0][0], alts[0][1], alts, scored[0][2], self.spotted())

    def spotted(self) -> tuple[tuple[str, float], ...]:
        """The hints' keywords spotted in the utterance so far, best first (``spotting.py``)."""
        if not self.hints.keywords or not self._rows:
            return ()
        v = self.search.vocab_size
        return self.search.spotter(self.hints.keywords).spot(self._all_rows()[:, v:])

    def _all_rows(self) -> torch.Tensor:
        """Every frame pushed so far as one (T, V + P) tensor (the rescoring and the spotting
        both read it: joined once)."""
        if self._joined is None:
            self._joined = torch.cat(self._rows)
        return self._joined

    def _scored(self) -> list[tuple[str, float, bool]]:
        """Every pooled transcript with its joint score and whether it was hinted, best first."""
        search, cfg = self.search, self.config
        free = list(dict.fromkeys(
            [t for t, _ in self._chars.nbest(cfg.nbest)]
            + [t for t, _ in self._phones.nbest(cfg.nbest)]))
        if not any(free):
            return []           # nothing heard: a hint must not put words into silence
        # each grammar string with its grammar (the first that found it) and prior, fixed
        # sentences None
        source: dict[str, Grammar | None] = dict.fromkeys(self.hints.sentences())
        priors: dict[str, float] = {}
        for kind, g in self._grammars.items():
            for t in search.grammar_strings(kind, [t for t, _ in g.nbest(cfg.nbest)]):
                prior = search.grammar_logp(kind, t) if t and t not in source else None
                if prior is not None:
                    source[t], priors[t] = kind, prior
        hinted = [t for t, k in source.items() if search.pronounce_cached(t, k) is not None]
        marked = set(hinted)
        pool = list(dict.fromkeys(free + hinted))
        if not pool:
            return []
        if self.frames == 0:
            return [(t, 0.0, t in marked) for t in free]
        rows = self._all_rows()
        v = search.vocab_size
        skip = math.log(cfg.blank_skip)
        char_scores = _ctc_scores(rows[:, :v], [encode(t) if t else [] for t in pool], BLANK,
                                  skip) \
            if cfg.char_weight else [0.0] * len(pool)
        prons = [search.pronounce_cached(t, source[t]) if t in marked else search.pronounce(t)
                 for t in pool]
        known = [i for i, p in enumerate(prons) if p is not None]
        phone_scores: list[float] = [0.0] * len(pool)
        if cfg.phone_weight and known:
            got = _ctc_scores(rows[:, v:], [p for p in prons if p is not None], PHONE_BLANK, skip)
            for i, s in zip(known, got):
                phone_scores[i] = s
            finite = [s for s in got if s > -math.inf]
            best = max(finite) if finite else -1e6
            for i, pron in enumerate(prons):
                if pron is None:
                    phone_scores[i] = best - cfg.unpronounced_penalty
        # a yes/no sentence's prior is the grammar's (every one alike) and a digit string's or a
        # name's its grammar's prior, not the word LM: it knows "that's right" far better than
        # "that's not right", which must not turn a no into a yes, and "sara jones" better than
        # "sarah jones" by chance. The agent's phrases keep the word LM.
        grammar = set(YES_SENTENCES + NO_SENTENCES) if "yes_no" in self.hints.expect else set()
        prior = -math.log(max(1, len(grammar)))
        out = []
        for t, c, p in zip(pool, char_scores, phone_scores):
            bonus = self.hints.bonus if t in marked else 0.0
            if t in priors and t in marked:
                lm = priors[t]
            elif t in grammar:
                lm = prior
            else:
                lm = search.lm_score(t)
            score = (cfg.char_weight * c + cfg.phone_weight * p + cfg.lm_weight * lm
                     + cfg.word_bonus * len(t.split()) + bonus)
            out.append((t, score, t in marked))
        out.sort(key=lambda kv: kv[1], reverse=True)
        return out

    def finalize(self) -> str:
        best = self.nbest(1)
        return best[0][0] if best else ""
