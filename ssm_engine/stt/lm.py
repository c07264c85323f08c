"""A small word n-gram language model for the CTC beam decoder: built here, stored as ARPA.

    lm = build_lm(sentences, general_words=top_words)      # interpolated Kneser-Ney trigram
    lm.write_arpa("models/stt/lm.arpa.gz")
    lm = NGramLM.load("models/stt/lm.arpa.gz")
    lm.logp("order", ("cancel", "my"))                      # ln P(order | cancel my)
    lm.logp(UNK, ("my",))                                    # any word the lexicon lacks
    "order" in lm                                            # in the vocabulary (the lexicon)?

Scores are natural logs. A query backs off the usual ARPA way: the longest stored n-gram
``h + (w,)`` gives its probability; each shorter step first adds the backoff weight of the
context it leaves. Words outside the vocabulary are scored as ``<unk>``.

How ``build_lm`` estimates (Chen & Goodman's interpolated Kneser-Ney, one discount ``D`` per
order): the highest order uses counts, lower orders use continuation counts (how many distinct
words precede an n-gram), and each order interpolates with the next lower one; n-grams that
start with ``<s>`` keep their plain counts. The unigram level is a mixture::

    P1(w) = (1 - g - u) * P1_KN(w)  +  g * P_general(w)  +  u * [w == <unk>]

where ``P_general`` is a general English unigram distribution (``general_words``: word ->
weight, e.g. the most frequent words of pocketsphinx's en-us model) that gives the lexicon
words the domain text never used, and ``u`` reserves mass for names and other words nobody
listed. Interpolated probabilities are stored as ARPA probabilities and the interpolation
weights as backoff weights, which makes the ARPA file exact, not an approximation.
"""

from __future__ import annotations

import gzip
import math
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path

from .errors import STTError
from ..errors import ConfigError

__all__ = ["NGramLM", "build_lm", "read_unigrams", "BOS", "EOS", "UNK", "LMFormatError"]

BOS, EOS, UNK = "<s>", "</s>", "<unk>"
_LN10 = math.log(10.0)
_NO_PROB = -99.0            # ARPA's log10 "never" (used for <s> as a predicted word)


class LMFormatError(STTError, ValueError):
    """An ARPA file that cannot be read (names the path and line)."""


class NGramLM:
    """A backoff n-gram model: ``probs[ngram]`` and ``bows[context]`` in natural log."""

    def __init__(self, order: int, probs: dict[tuple[str, ...], float],
                 bows: dict[tuple[str, ...], float]) -> None:
        if order < 1:
            raise ConfigError(f"order must be >= 1, got {order}")
        self.order = order
        self.probs = probs
        self.bows = bows
        self.vocab = frozenset(k[0] for k in probs if len(k) == 1) - {BOS, EOS, UNK}
        self._unk = probs.get((UNK,), math.log(1e-7))

    def __contains__(self, word: str) -> bool:
        return word in self.vocab

    def __len__(self) -> int:
        return len(self.vocab)

    def logp(self, word: str, context: tuple[str, ...] = ()) -> float:
        """ln P(word | context); only the last ``order - 1`` context words count."""
        if word not in self.vocab and word != EOS:
            word = UNK
        ctx = context[len(context) - self.order + 1:] if self.order > 1 else ()
        acc = 0.0
        probs, bows = self.probs, self.bows
        for i in range(len(ctx) + 1):
            h = ctx[i:]
            p = probs.get(h + (word,))
            if p is not None:
                return acc + p
            acc += bows.get(h, 0.0)
        return acc + self._unk

    def sentence_logp(self, words: Iterable[str]) -> float:
        """ln P(<s> words </s>)."""
        ctx: tuple[str, ...] = (BOS,)
        total = 0.0
        for w in list(words) + [EOS]:
            total += self.logp(w, ctx)
            ctx = (ctx + (w,))[-(self.order - 1):] if self.order > 1 else ()
        return total

    # ARPA input/output ------------------------------------------------------------------------

    def write_arpa(self, path: str | Path) -> Path:
        """Write ARPA text (gzip when the name ends in .gz); probabilities in log10."""
        path = Path(path)
        by_order: dict[int, list[tuple[str, ...]]] = defaultdict(list)
        for k in self.probs:
            by_order[len(k)].append(k)
        lines = ["\\data\\"]
        lines += [f"ngram {n}={len(by_order[n])}" for n in range(1, self.order + 1)]
        for n in range(1, self.order + 1):
            lines += ["", f"\\{n}-grams:"]
            for k in sorted(by_order[n]):
                p = self.probs[k] / _LN10
                row = f"{p:.4f}\t{' '.join(k)}"
                if n < self.order and k in self.bows:
                    row += f"\t{self.bows[k] / _LN10:.4f}"
                lines.append(row)
        lines += ["", "\\end\\", ""]
        data = "\n".join(lines).encode()
        if path.suffix == ".gz":
            data = gzip.compress(data, compresslevel=9, mtime=0)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return path

    @classmethod
    def load(cls, path: str | Path) -> NGramLM:
        """Read an ARPA file (plain or .gz). Raises ``LMFormatError`` naming the path."""
        path = Path(path)
        try:
            raw = path.read_bytes()
            text = (gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode()
        except (OSError, EOFError, UnicodeDecodeError) as exc:
            raise LMFormatError(f"cannot read language model {path}: {exc}") from exc
        probs: dict[tuple[str, ...], float] = {}
        bows: dict[tuple[str, ...], float] = {}
        order, section = 0, 0
        for lineno, line in enumerate(text.splitlines(), 1):
            if not line or line.startswith("ngram ") or line == "\\data\\":
                continue
            if line == "\\end\\":
                break
            m = re.fullmatch(r"\\(\d+)-grams:", line)
            if m:
                section = int(m.group(1))
                order = max(order, section)
                continue
            parts = line.split("\t")
            if not section or len(parts) not in (2, 3):
                raise LMFormatError(f"{path}:{lineno}: not an ARPA n-gram line: {line[:60]!r}")
            key = tuple(parts[1].split(" "))
            if len(key) != section:
                raise LMFormatError(f"{path}:{lineno}: {section}-gram expected, got {parts[1]!r}")
            probs[key] = float(parts[0]) * _LN10
            if len(parts) == 3:
                bows[key] = float(parts[2]) * _LN10
        if not order or (UNK,) not in probs:
            raise LMFormatError(f"{path}: no n-grams, or no {UNK} unigram")
        return cls(order, probs, bows)


_WORD_RE = re.compile(r"[a-z]+(?:'[a-z]+)?")


def read_unigrams(path: str | Path, top_k: int | None = None) -> dict[str, float]:
    """The 1-gram section of an ARPA file (plain or .gz) -> {word: probability}, keeping only
    words the recogniser can spell (a-z, one inner apostrophe), the ``top_k`` most probable."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    out: dict[str, float] = {}
    try:
        with opener(path, "rt", encoding="utf-8", errors="replace") as f:
            in_uni = False
            for line in f:
                line = line.strip()
                if line == "\\1-grams:":
                    in_uni = True
                elif in_uni and (line.startswith("\\") or not line):
                    if out:
                        break
                elif in_uni:
                    parts = line.split()
                    if len(parts) >= 2 and _WORD_RE.fullmatch(parts[1]):
                        out[parts[1]] = 10.0 ** float(parts[0])
    except (OSError, ValueError) as exc:
        raise LMFormatError(f"cannot read unigrams from {path}: {exc}") from exc
    if not out:
        raise LMFormatError(f"{path}: no 1-grams of spellable words")
    if top_k is not None:
        out = dict(sorted(out.items(), key=lambda kv: -kv[1])[:top_k])
    return out


def _grams(sentences: Iterable[str], order: int) -> Counter[tuple[str, ...]]:
    counts: Counter[tuple[str, ...]] = Counter()
    for s in sentences:
        words = [BOS] + s.split() + [EOS]
        for n in range(1, order + 1):
            for i in range(len(words) - n + 1):
                g = tuple(words[i:i + n])
                if g != (BOS,):
                    counts[g] += 1
    return counts


def build_lm(sentences: Iterable[str], *, order: int = 3, discount: float = 0.75,
             general_words: Mapping[str, float] | None = None, general_weight: float = 0.1,
             unk_weight: float = 0.01, min_count: Mapping[int, int] | None = None) -> NGramLM:
    """Interpolated Kneser-Ney on normalised sentences (see the module docstring).

    min_count: per order, the fewest counts an n-gram needs to be stored (e.g. ``{3: 2}`` drops
    trigrams seen once: a smaller file; their mass goes to the backoff).
    """
    if not 0 < discount < 1:
        raise ConfigError(f"discount must be in (0, 1), got {discount}")
    if general_weight < 0 or unk_weight <= 0 or general_weight + unk_weight >= 1:
        raise ConfigError("need general_weight >= 0, unk_weight > 0 and their sum < 1")
    counts = _grams(sentences, order)
    if not counts:
        raise ConfigError("no sentences to build a language model from")
    # The count each order is estimated from: plain counts at the top order and for n-grams
    # starting with <s>; continuation counts (distinct left neighbours) everywhere else.
    est: dict[tuple[str, ...], int] = {}
    left: Counter[tuple[str, ...]] = Counter()
    for g in counts:
        if len(g) > 1:
            left[g[1:]] += 1
    for g, c in counts.items():
        est[g] = c if len(g) == order or g[0] == BOS else left[g]
    by_ctx_total: Counter[tuple[str, ...]] = Counter()
    by_ctx_types: Counter[tuple[str, ...]] = Counter()
    for g, c in est.items():
        if c > 0:
            by_ctx_total[g[:-1]] += c
            by_ctx_types[g[:-1]] += 1

    # unigram level: KN continuation distribution mixed with the general list and <unk>
    uni_total = by_ctx_total[()]
    # general_weight 0 leaves the general list out (its words would get probability 0)
    gen = {w: float(v) for w, v in (general_words or {}).items()
           if v > 0 and w not in (BOS, EOS)} if general_weight > 0 else {}
    gen_total = sum(gen.values())
    g_w = general_weight if gen_total > 0 else 0.0
    kn_w = 1.0 - g_w - unk_weight
    p1: dict[str, float] = defaultdict(float)
    for g, c in est.items():
        if len(g) == 1:
            p1[g[0]] += kn_w * c / uni_total
    for w, v in gen.items():
        p1[w] += g_w * v / gen_total
    p1[UNK] += unk_weight
    probs: dict[tuple[str, ...], float] = {(w,): math.log(p) for w, p in p1.items()}
    probs[(BOS,)] = _NO_PROB * _LN10
    bows: dict[tuple[str, ...], float] = {}

    lin: dict[tuple[str, ...], float] = {(w,): p for w, p in p1.items()}    # linear, for lower
    min_count = dict(min_count or {})
    for n in range(2, order + 1):
        gamma: dict[tuple[str, ...], float] = {}
        for h, total in by_ctx_total.items():
            if len(h) == n - 1:
                gamma[h] = discount * by_ctx_types[h] / total
        nxt: dict[tuple[str, ...], float] = {}
        for g, c in est.items():
            if len(g) != n or counts[g] < min_count.get(n, 1):
                continue
            h = g[:-1]
            lower = _interp(lin, bows, g[1:])
            nxt[g] = max(c - discount, 0.0) / by_ctx_total[h] + gamma[h] * lower
        for h, gm in gamma.items():
            bows[h] = math.log(gm)
        for g, p in nxt.items():
            probs[g] = math.log(p)
        lin.update(nxt)
    # a context that is never extended needs no backoff weight (its weight would be 1)
    return NGramLM(order, probs, {h: b for h, b in bows.items() if len(h) < order})


def _interp(lin: dict[tuple[str, ...], float], bows: dict[tuple[str, ...], float],
            g: tuple[str, ...]) -> float:
    """Linear P(g[-1] | g[:-1]) from the orders already built (backing off as needed)."""
    p = lin.get(g)
    if p is not None:
        return p
    if len(g) == 1:
        return lin[(UNK,)]
    return math.exp(bows.get(g[:-1], 0.0)) * _interp(lin, bows, g[1:])
