"""How the TTS benchmarks count a voice's word errors on the phone line and compare two voices.

    from line_scoring import wer_of, sentence_errors, paired_95   # benchmarks/ is on sys.path
    pairs = judge_wer(judge, sentences, clips)[1]         # [{"ref", "hyp"}, ...], whole renderings
    counts = sentence_errors(pairs, len(sentences))       # (n, 2): errors, words per sentence
    paired_95(counts_by_engine, "ssm-joe", "teacher-joe", [("", slice(None))], seed=0)

Whisper tiny.en (the judge) writes some titles short, so references and transcripts are compared
with them written out (``canon``). A ratio of two voices' WERs carries a 95 % interval from a
paired bootstrap over sentences (``ratio_95``): every draw resamples the sentences, all of a
sentence's renderings together, and scores every engine on the same draw. Used by bench_tts,
bench_tts_gap, bench_tts_knobs and bench_tts_pooled.
"""

from __future__ import annotations

import numpy as np

# Whisper writes some titles short; the reference has them as said
CANON = {"dr": "doctor", "mr": "mister", "mrs": "missus", "st": "street"}


def canon(text: str) -> str:
    """``text`` with the judge's abbreviations written out (``CANON``), as the WER counts it."""
    return " ".join(CANON.get(w, w) for w in text.split())


def wer_of(pairs: list[dict[str, str]]) -> float:
    """The WER of judged sentences (``{"ref", "hyp"}`` each), rounded to 4 places."""
    from ssm_engine.stt.decode import wer

    return round(wer([canon(p["ref"]) for p in pairs], [canon(p["hyp"]) for p in pairs]), 4)


def errors_of(pair: dict[str, str]) -> tuple[int, int]:
    """(word errors, reference words) of one judged sentence, as ``wer_of`` counts them."""
    from ssm_engine.stt.decode import edit_distance

    ref = canon(pair["ref"]).split()
    return edit_distance(ref, canon(pair["hyp"]).split()), len(ref)


def sentence_errors(pairs: list[dict[str, str]], n: int) -> np.ndarray:
    """(n, 2): each of ``n`` sentences' word errors and reference words, summed over its
    renderings (``pairs`` holds whole renderings one after another, each in sentence order)."""
    out = np.zeros((n, 2), dtype=np.int64)
    for k, pair in enumerate(pairs):
        out[k % n] += errors_of(pair)
    return out


def capped_wer(counts: np.ndarray) -> float:
    """WER with each sentence's errors (over all renderings) capped at its words: Whisper tiny.en
    now and then loops on a rendering, and one loop can add more errors than the sentence has
    words."""
    return round(float(np.minimum(counts[:, 0], counts[:, 1]).sum() / max(counts[:, 1].sum(), 1)), 4)


def ratio_95(counts: dict[str, np.ndarray], base: str, rng: np.random.Generator,
             draws: int = 2000) -> dict[str, list[float]]:
    """The 95 % interval of each engine's WER over ``base``'s, from a paired bootstrap over
    sentences: every draw resamples the sentences (all of a sentence's renderings together) and
    all engines are scored on the same draw. ``counts``: ``sentence_errors`` of each engine."""
    n = len(counts[base])
    weight = np.stack([np.bincount(d, minlength=n) for d in rng.integers(0, n, size=(draws, n))])
    b = weight @ counts[base]
    base_wer = np.maximum(b[:, 0], 1) / np.maximum(b[:, 1], 1)
    out = {}
    for name, c in counts.items():
        if name != base:
            s = weight @ c
            ratios = s[:, 0] / np.maximum(s[:, 1], 1) / base_wer
            out[name] = [round(float(q), 3) for q in np.percentile(ratios, [2.5, 97.5])]
    return out


def capped_ratio_95(counts: dict[str, np.ndarray], base: str, rng: np.random.Generator,
                    draws: int = 2000) -> dict[str, list[float]]:
    """``ratio_95`` with each sentence's errors capped at its words (``capped_wer``)."""
    capped = {k: np.stack([np.minimum(c[:, 0], c[:, 1]), c[:, 1]], axis=1) for k, c in counts.items()}
    return ratio_95(capped, base, rng, draws)


def paired_95(counts: dict[str, np.ndarray], key: str, base: str,
              parts: list[tuple[str, slice | np.ndarray]], seed: int) -> dict[str, list[float]]:
    """``key``'s WER over ``base``'s, its 95 % interval on each subset of the sentences in
    ``parts`` (``(suffix, rows)``; suffix -> interval), the two engines bootstrapped alone, each
    subset from ``seed``."""
    return {part: ratio_95({base: counts[base][rows], key: counts[key][rows]}, base,
                           np.random.default_rng(seed))[key] for part, rows in parts}
