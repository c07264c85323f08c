"""Does a keyword spotter on the phone head find the words a transcript loses? People and calls.

    .venv/bin/python benchmarks/bench_stt_spotting.py [--manifest data/stt/human/human.tsv]
        [--model models/stt-ssm] [--thresholds -0.5 -0.75 -1 -1.5] [--no-whisper]
        [--voices flite:slt espeak:en-us+f3 mbrola:mb-us1]

A caller's one long word ("insurance", "parking") is often heard where the sentence around it is
not. ``ssm_engine.stt.spotting`` scores each keyword against the phone head's frames, free of
the lexicon and LM that must explain every word of a transcript. Asked two ways, each beside its
baselines in the same run:

- **people** (the human development set, ``parley data human``): the keywords are every word of
  the set's references with at least four phones, not a stopword; each clip's own keywords are
  its positives, all the others negatives. Baselines: the keyword is a word of the SSM's free
  final (joint finals, no hints), and of Whisper tiny.en's transcript (the upper bound).
- **calls** (the agents' own keywords, ``agent/examples/*.yaml``: knowledge keywords and task
  triggers): the agents' questions and the conversation benchmark's openers, spoken by the voices
  the recogniser never trained on, through the 8 kHz mu-law channel. Baseline: the SSM's free
  final.

Per threshold (nats a phone, see the spotting module): recall (keywords said and found), false
alarms (keywords found that were not said) per clip for every 100 keywords listened for, and
precision; the spotting time per utterance p50/p95/p99. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from common import git_sha  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

from agent.retrieval import STOPWORDS  # noqa: E402
from agent.spec import load_spec  # noqa: E402
from harness.stt_eval import evaluate, phone_channel  # noqa: E402
from pipeline.audio.wav import read_wav  # noqa: E402
from ssm_engine.data.manifest import read_manifest  # noqa: E402
from ssm_engine.stt.beam import BeamConfig  # noqa: E402
from ssm_engine.stt.joint import JointSearch  # noqa: E402
from ssm_engine.stt.lm import NGramLM  # noqa: E402
from ssm_engine.stt.model import load_stt, prepare_audio  # noqa: E402
from ssm_engine.stt.phones import Pronouncer  # noqa: E402
from ssm_engine.stt.spotting import KeywordSpotter, SpotConfig  # noqa: E402
from ssm_engine.stt.text import normalize_text  # noqa: E402

AGENTS = ("agent/examples/receptionist.yaml", "agent/examples/order_status.yaml")
OPENERS = ("what are your opening hours", "where are you located", "is there parking",
           "do you take cigna insurance", "how much is a cleaning", "I would like to leave a message",
           "can you take a message", "how long does shipping take", "I want to return my order",
           "where is my package", "can I talk to a person please", "I need to book an appointment")


def _pct(xs: list[float]) -> dict[str, float]:
    if not xs:
        return {}
    p = np.percentile(xs, [50, 95, 99])
    return {"p50": round(float(p[0]), 2), "p95": round(float(p[1]), 2), "p99": round(float(p[2]), 2)}


def contained(text: str, keywords: set[str]) -> set[str]:
    """The keywords (words or phrases) said in normalised ``text``."""
    padded = f" {text} "
    return {k for k in keywords if f" {k} " in padded}


class Scorer:
    """Counts hits, misses and false alarms of keyword sets against each clip's reference."""

    def __init__(self, keywords: list[str]) -> None:
        self.keywords = set(keywords)
        self.tp = self.fn = self.fp = self.clips = 0

    def add(self, reference: str, found: set[str]) -> None:
        said = contained(reference, self.keywords)
        found = found & self.keywords
        self.tp += len(said & found)
        self.fn += len(said - found)
        self.fp += len(found - said)
        self.clips += 1

    def report(self) -> dict[str, float]:
        said = self.tp + self.fn
        return {"recall": round(self.tp / said, 3) if said else None,
                "false_alarms_per_clip_per_100_keywords":
                    round(100 * self.fp / max(1, self.clips * len(self.keywords)), 3),
                "precision": round(self.tp / (self.tp + self.fp), 3) if self.tp + self.fp else None,
                "said": said}


def _heads(model, x: np.ndarray) -> torch.Tensor:
    """Whole-clip (T, V + P) log-probs: the characters' then the phones', as the decoders take them."""
    with torch.no_grad():
        chars, phones = model.forward_heads(prepare_audio(x, 8000, model.config))
    return torch.cat([torch.log_softmax(chars[0], -1), torch.log_softmax(phones[0], -1)], dim=1)


def run_part(clips: list[tuple[np.ndarray, str]], keywords: list[str], model,
             search: JointSearch, lexicon: Pronouncer, thresholds: list[float],
             extra: dict[str, list[str]] | None = None) -> dict:
    spotter = KeywordSpotter(lexicon, keywords, SpotConfig(threshold=min(thresholds)))
    kws = spotter.keywords
    kw_set = set(kws)
    by_threshold = {t: Scorer(kws) for t in thresholds}
    free = Scorer(kws)
    others = {k: Scorer(kws) for k in (extra or {})}
    spot_ms: list[float] = []
    v = model.config.vocab_size
    for i, (x, ref) in enumerate(clips):
        rows = _heads(model, x)
        dec = search.stream()
        dec.push(rows)
        free.add(ref, contained(dec.result().text, kw_set))
        t0 = time.perf_counter()
        scores = spotter.scores(rows[:, v:])
        spot_ms.append((time.perf_counter() - t0) * 1000)
        for t, scorer in by_threshold.items():
            scorer.add(ref, {w for w, s in scores.items() if s >= t})
        for k, hyps in (extra or {}).items():
            others[k].add(ref, contained(normalize_text(hyps[i]), kw_set))
    return {"clips": len(clips), "keywords": len(kws), "skipped_keywords": len(spotter.skipped),
            "ssm_free_final": free.report(),
            **{f"{k}_transcript": s.report() for k, s in others.items()},
            "spotter": {str(t): s.report() for t, s in by_threshold.items()},
            "spot_ms": _pct(spot_ms)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--manifest", default="data/stt/human/human.tsv")
    ap.add_argument("--model", default="models/stt-ssm")
    ap.add_argument("--thresholds", nargs="+", type=float, default=[-0.5, -0.75, -1.0, -1.5])
    ap.add_argument("--no-whisper", action="store_true", help="leave Whisper tiny.en out")
    ap.add_argument("--voices", nargs="*", default=["flite:slt", "espeak:en-us+f3", "mbrola:mb-us1"],
                    help="held-out voices for the calls part (none: leave it out)")
    args = ap.parse_args(argv)
    if not Path(args.manifest).exists():
        ap.error(f"{args.manifest} is missing: run scripts/install-human-speech, then parley data human")
    torch.set_num_threads(1)
    model = load_stt(args.model)
    model.eval()
    lm = NGramLM.load(Path(args.model) / "lm.arpa.gz")
    lexicon = Pronouncer.load(Path(args.model) / "lexicon.dict.gz", words=lm.vocab)
    search = JointSearch(lm, lexicon, BeamConfig())
    report: dict = {"bench": "stt_spotting", "git": git_sha(), "model": args.model,
                    "thresholds": args.thresholds}

    rows = read_manifest(args.manifest)
    people = []
    for path, text in rows:
        pcm, rate = read_wav(path)
        people.append((phone_channel(pcm, rate, 8000, "mulaw").astype(np.float32) / 32768.0,
                       normalize_text(text)))
    words = sorted({w for _, ref in people for w in ref.split() if w not in STOPWORDS})
    extra = {}
    if not args.no_whisper:
        result = evaluate("whisper", args.manifest)
        extra["whisper"] = [hyp for _, _, _, hyp in result.utterances]
    report["people"] = run_part(people, words, model, search, lexicon, args.thresholds,
                                extra)

    if args.voices:
        from ssm_engine.data.voices import voice

        keywords: list[str] = []
        sentences = list(OPENERS)
        for path in AGENTS:
            spec = load_spec(ROOT / path)
            keywords += [k for item in spec.knowledge for k in item.keywords]
            keywords += [t for task in spec.tasks for t in task.triggers]
            sentences += [item.question for item in spec.knowledge]
        calls = []
        for name in args.voices:
            v = voice(name)
            rng = np.random.default_rng(7)
            for s in dict.fromkeys(sentences):
                x, rate = v.synthesize(normalize_text(s), rng)
                pcm = (np.clip(x, -1, 1) * 32767).astype(np.int16)
                y = phone_channel(pcm, rate, 8000, "mulaw").astype(np.float32) / 32768.0
                calls.append((np.concatenate([np.zeros(1600, np.float32), y,
                                              np.zeros(2400, np.float32)]), normalize_text(s)))
        report["calls"] = run_part(calls, list(dict.fromkeys(keywords)), model, search,
                                   lexicon, args.thresholds)
        report["calls"]["voices"] = args.voices
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
