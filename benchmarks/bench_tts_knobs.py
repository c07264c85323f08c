"""Does a setting that needs no training make the SSM voice clearer on the phone line?

The shipped voice (joe) is meant to be understood on the line at least as well as its
teacher (Piper's joe fed parley's phones). Before a student is trained again, this tries the
knobs that cost nothing but a setting, each on the shipped weights:

* ``pf=A``: the postfilter's amount (``postfilter`` in a voice's config.json; joe shipped 0.4 until 2026-12-06 (git dbf513b), 0.6 from c4 since);
* ``from=K``: the first cepstral coefficient it scales (``postfilter_from``; 1 as shipped, which
  steepens the tilt too: 0.4 takes 2-4 kHz about 5 dB down against 300-500 Hz, measured on the
  teacher's and the student's long-term spectra; 3 or more leaves the phone band's tilt alone);
* ``pace=P``: the predicted phone durations times P (for the teacher: Piper's length scale);
* ``eq=D``: an experiment no product code has: a high shelf of D dB rising from 1 to 3 kHz on
  the 16 kHz audio before the channel, the phone band's power (0.3-3.4 kHz) kept: is the line's
  mu-law kinder to a brighter voice?

A condition is an engine and its settings: ``ssm`` (the voice as shipped), ``ssm:pf=0.6:from=4``,
``teacher:pace=1.08``, ``teacher:eq=6``. The first condition is the baseline every other is paired
with.

**Tuning sentences, never bench_tts's.** The settings are chosen here and judged in
``bench_tts.py`` (a voice folder whose config.json has them) on its fresh sentences and replies,
which this never says: the voices' 100 held-out sentences and ``--new`` agent sentences drawn from
seed 9191, none of them in a training draw, in bench_tts's first ``--exclude-fresh`` fresh
sentences or its replies. Rendering k of every condition is drawn from seed k.

Per condition: WER; WER with each sentence's errors capped at its words (``wer_capped``: Whisper
tiny.en sometimes loops, and one looped rendering of one sentence here once gave 216 errors, a
sixth of a run's); each rendering's WER; audio seconds; and against the baseline, the ratio of
both WERs with a 95 % interval from a paired bootstrap over sentences.

    .venv/bin/python benchmarks/bench_tts_knobs.py ssm ssm:pf=0.6:from=4 ssm:pace=1.08 teacher

Prints one JSON line. About 1.7 minutes per condition and rendering on one core (220 sentences).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from common import git_sha  # noqa: E402

import torch  # noqa: E402

from bench_tts import _line, fresh_sentences, heldout_sentences  # noqa: E402
from line_scoring import capped_ratio_95, capped_wer, ratio_95, sentence_errors, wer_of  # noqa: E402
from pipeline.voices import voice_dir  # noqa: E402
from ssm_engine.errors import ConfigError  # noqa: E402

TUNING_SEED = 9191
KNOBS = {"pf": float, "from": int, "pace": float, "eq": float}
EQ_BAND_HZ = (300.0, 3400.0)


@dataclasses.dataclass(frozen=True)
class Condition:
    name: str
    engine: str                  # "ssm" or "teacher"
    pf: float | None = None      # None: the voice's own
    first: int | None = None     # postfilter_from; None: the voice's own
    pace: float = 1.0
    eq: float = 0.0


def parse_condition(text: str) -> Condition:
    """``ENGINE[:KNOB=VALUE...]``, e.g. ``ssm:pf=0.6:from=4``; a clear ValueError otherwise."""
    engine, *knobs = text.split(":")
    if engine not in ("ssm", "teacher"):
        raise ValueError(f"{text}: the engine must be ssm or teacher, got {engine!r}")
    values: dict = {}
    for knob in knobs:
        key, sep, raw = knob.partition("=")
        if not sep or key not in KNOBS:
            raise ValueError(f"{text}: {knob!r} is not one of {', '.join(k + '=' for k in KNOBS)}")
        try:
            values[key] = KNOBS[key](raw)
        except ValueError:
            raise ValueError(f"{text}: {key} needs a {KNOBS[key].__name__}, got {raw!r}") from None
    if engine == "teacher" and ({"pf", "from"} & values.keys()):
        raise ValueError(f"{text}: the teacher has no postfilter")
    return Condition(text, engine, values.get("pf"), values.get("from"), values.get("pace", 1.0),
                     values.get("eq", 0.0))


def high_shelf(pcm: np.ndarray, db: float, rate: int = 16000) -> np.ndarray:
    """``pcm`` with ``db`` dB more above 3 kHz than below 1 kHz (a raised-cosine step in log
    frequency between), zero-phase, and scaled so the phone band keeps its power."""
    if db == 0.0:
        return pcm
    x = pcm.astype(np.float64)
    n = 1 << int(np.ceil(np.log2(len(x) + 2048)))
    spec = np.fft.rfft(x, n)
    f = np.fft.rfftfreq(n, 1 / rate)
    t = np.clip(np.log2(np.maximum(f, 1.0) / 1000.0) / np.log2(3.0), 0.0, 1.0)
    gain = 10.0 ** (db * (0.5 - 0.5 * np.cos(np.pi * t)) / 20.0)
    band = (f > EQ_BAND_HZ[0]) & (f < EQ_BAND_HZ[1])
    keep = np.sqrt(np.sum(np.abs(spec[band]) ** 2) / max(np.sum(np.abs(spec[band] * gain[band]) ** 2), 1e-12))
    y = np.fft.irfft(spec * gain, n)[:len(x)] * keep
    if pcm.dtype == np.int16:
        return np.clip(np.round(y), -32768, 32767).astype(np.int16)
    return y.astype(pcm.dtype)


def tuning_sentences(n_heldout: int, n_new: int, exclude_fresh: int) -> list[str]:
    """The voices' first ``n_heldout`` held-out sentences (at most 100), then ``n_new`` agent sentences from ``TUNING_SEED``
    that are in no training draw (``fresh_sentences`` keeps those out), none of bench_tts's first
    ``exclude_fresh`` fresh sentences, none of its replies."""
    held = heldout_sentences(n_heldout) if n_heldout else []
    return held + fresh_sentences(n_new, seed=TUNING_SEED,
                                  exclude=tuple(held + fresh_sentences(exclude_fresh)))


def render(cond: Condition, sentences: list[str], seed: int, voice_folder: str) -> list[np.ndarray]:
    """Each sentence's 8 kHz mu-law line audio under ``cond``, rendering ``seed``."""
    from ssm_engine.tts.phonemes import phonemize
    from ssm_engine.tts.piper_teacher import PiperTeacher
    from ssm_engine.tts.synth import TTSVoice

    if cond.engine == "teacher":
        teacher = PiperTeacher(seed=seed, length_scale=cond.pace)
        return [_line(high_shelf(teacher.say(phonemize(s))[0], cond.eq), 16000) for s in sentences]
    voice = TTSVoice.load(voice_folder)
    if cond.first is not None:
        voice.model.config = dataclasses.replace(voice.model.config, postfilter_from=cond.first)
    return [_line(high_shelf(voice.synthesize(s, seed=seed, pace=cond.pace,
                                              postfilter=cond.pf).pcm, cond.eq), 16000)
            for s in sentences]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Conditions: ssm | teacher, then any of :pf=A :from=K :pace=P :eq=D (pf and from "
               "for ssm only). The first is the baseline, e.g. ssm ssm:pf=0.6:from=4 teacher.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("conditions", nargs="+", help="the first is the baseline")
    parser.add_argument("--voice", default="joe", help="a shipped voice's name or a folder (default joe)")
    parser.add_argument("--renders", type=int, default=2, help="renderings (seeds 0..N-1; default 2)")
    parser.add_argument("--heldout", type=int, default=100,
                        help="the voices' held-out sentences to say, at most 100 (default 100)")
    parser.add_argument("--new", type=int, default=120,
                        help="agent sentences drawn beside the held-out ones (default 120)")
    parser.add_argument("--exclude-fresh", type=int, default=240,
                        help="bench_tts's fresh sentences to keep out (default 240)")
    parser.add_argument("--seed", type=int, default=0, help="the bootstrap's seed")
    args = parser.parse_args()
    try:
        conds = [parse_condition(c) for c in args.conditions]
    except ValueError as exc:
        parser.error(str(exc))
    if not 0 <= args.heldout <= 100 or args.new < 0 or args.heldout + args.new == 0:
        parser.error("--heldout (0..100) and --new (0 or more) must name at least one sentence")
    if args.renders < 1:
        parser.error(f"--renders must be 1 or more, got {args.renders}")
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(1)
    from harness.stt_eval import make_engine
    from harness.tts_eval import judge_wer

    try:
        folder = str(voice_dir(args.voice))
    except ConfigError as exc:
        parser.error(str(exc))
    sentences = tuning_sentences(args.heldout, args.new, args.exclude_fresh)
    judge = make_engine("whisper", 8000)
    t0 = time.time()
    out: dict = {"bench": "tts_knobs", "git": git_sha(), "voice": folder, "sentences": len(sentences),
                 "renders": args.renders, "judge": "whisper tiny.en, 8 kHz mu-law", "conditions": {}}
    counts: dict[str, np.ndarray] = {}
    for cond in conds:
        pairs: list[dict[str, str]] = []
        each, seconds = [], 0.0
        for seed in range(args.renders):
            clips = render(cond, sentences, seed, folder)
            got = judge_wer(judge, sentences, clips)[1]
            each.append(wer_of(got))
            pairs += got
            seconds += sum(len(c) for c in clips) / 8000 / args.renders
        counts[cond.name] = sentence_errors(pairs, len(sentences))
        out["conditions"][cond.name] = {"wer": wer_of(pairs), "wer_capped": capped_wer(counts[cond.name]),
                                        "wer_renders": each, "audio_s": round(seconds, 1)}
        print(f"{cond.name}: WER {wer_of(pairs)}, capped {out['conditions'][cond.name]['wer_capped']}",
              file=sys.stderr, flush=True)
    base = conds[0].name
    plain = ratio_95(counts, base, np.random.default_rng(args.seed))
    capped = capped_ratio_95(counts, base, np.random.default_rng(args.seed))
    for name, row in out["conditions"].items():
        if name == base:
            continue
        b = out["conditions"][base]
        row["vs_base"] = round(row["wer"] / max(b["wer"], 1e-9), 3)
        row["vs_base_95"] = plain[name]
        row["capped_vs_base"] = round(row["wer_capped"] / max(b["wer_capped"], 1e-9), 3)
        row["capped_vs_base_95"] = capped[name]
    out["wall_s"] = round(time.time() - t0, 1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
