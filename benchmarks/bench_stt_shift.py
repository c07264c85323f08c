"""Does a recogniser hear the same words when they start a few milliseconds later?

    .venv/bin/python benchmarks/bench_stt_shift.py [--engines ssm pocketsphinx] [--shifts 8]
        [--human 40]

In a call, where the caller's words fall within the recogniser's 10 ms feature hops depends on
when they start speaking, which nobody controls: the same sentence said twice is never aligned
alike. This benchmark takes each clip and prepends 200 ms of silence plus 0, 10, 20, ... samples
(``--shifts`` steps of 1.25 ms at 8 kHz, so the last shift is under one hop), and decodes every
copy with each engine (``harness.stt_eval``: the SSM recogniser as the calls run it, streamed 20
ms at a time with its joint finals, and pocketsphinx, the baseline, in the same run). Clips: the
phrases callers say in ``bench_conversations`` (an opener after a comma, a question, a name, a
10-digit number read in groups, a yes/no) spoken by the held-out voices (flite slt, espeak-ng
en-us+f3, and mbrola us1 when installed), 8 kHz mu-law, and the first ``--human`` clips of the
human development set (``data/stt/human``, when made).

Per engine and per clip set: ``changed``, the share of clips whose transcript is not the same at
every shift; ``distinct``, the mean number of different transcripts per clip; ``wer_best`` /
``wer_worst`` / ``wer_mean``, the corpus WER taking each clip's best, worst and every shift. One
JSON line.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import git_sha  # noqa: E402

import torch  # noqa: E402

from harness.stt_eval import make_engine, phone_channel  # noqa: E402
from pipeline.audio.wav import read_wav  # noqa: E402
from ssm_engine.data.manifest import read_manifest  # noqa: E402
from ssm_engine.stt.decode import wer  # noqa: E402
from ssm_engine.stt.text import normalize_text  # noqa: E402

PHRASES = ("hello, I would like to leave a message", "what are your opening hours",
           "do you take cigna insurance", "is there parking", "my name is sarah jones",
           "five five five, three four zero, five nine two eight", "one two three four five",
           "no", "yes", "thank you, goodbye", "can I talk to a person please")
VOICES = {"flite:slt": ["flite", "-voice", "slt", "-t", "{text}", "-o", "{out}"],
          "espeak:en-us+f3": ["espeak-ng", "-v", "en-us+f3", "-w", "{out}", "{text}"],
          "mbrola:mb-us1": ["espeak-ng", "-v", "mb-us1", "-w", "{out}", "{text}"]}
LEAD_SAMPLES = 1600                  # 200 ms of silence before every copy
TAIL_SAMPLES = 2400                  # and 300 ms after, so the final comes by the end of speech


def voice_clips(tmp: Path) -> dict[str, list[tuple[np.ndarray, str]]]:
    """Held-out voice -> [(8 kHz mu-law int16, words)]; voices whose tools are missing are left out."""
    out: dict[str, list[tuple[np.ndarray, str]]] = {}
    for voice, cmd in VOICES.items():
        if shutil.which(cmd[0]) is None:
            continue
        clips = []
        for i, text in enumerate(PHRASES):
            wav = tmp / f"{voice.replace(':', '_')}-{i}.wav"
            done = subprocess.run([c.format(text=text, out=wav) for c in cmd], capture_output=True)
            if done.returncode != 0 or not wav.exists():   # mbrola's voice not installed
                break
            pcm, rate = read_wav(wav)
            clips.append((phone_channel(pcm, rate, 8000, "mulaw"), " ".join(normalize_text(text))))
        if len(clips) == len(PHRASES):
            out[voice] = clips
    return out


def human_clips(manifest: Path, limit: int) -> list[tuple[np.ndarray, str]]:
    clips = []
    for path, text in list(read_manifest(manifest))[:limit]:
        pcm, rate = read_wav(path)
        clips.append((phone_channel(pcm, rate, 8000, "mulaw"), " ".join(normalize_text(text))))
    return clips


def shifted_scores(engine, clips: list[tuple[np.ndarray, str]], shifts: list[int]) -> dict:
    changed, distinct = 0, []
    refs, best, worst, every_ref, every_hyp = [], [], [], [], []
    for pcm, ref in clips:
        hyps = []
        for k in shifts:
            x = np.concatenate([np.zeros(LEAD_SAMPLES + k, np.int16), pcm, np.zeros(TAIL_SAMPLES, np.int16)])
            hyps.append(" ".join(normalize_text(engine.transcribe_timed(x)[0])))
        kinds = sorted(set(hyps))
        changed += len(kinds) > 1
        distinct.append(len(kinds))
        errs = [wer([ref], [h]) for h in hyps]
        refs.append(ref)
        best.append(hyps[int(np.argmin(errs))])
        worst.append(hyps[int(np.argmax(errs))])
        every_ref += [ref] * len(hyps)
        every_hyp += hyps
    return {"clips": len(clips), "changed": round(changed / len(clips), 3),
            "distinct": round(float(np.mean(distinct)), 2), "wer_best": round(wer(refs, best), 3),
            "wer_worst": round(wer(refs, worst), 3), "wer_mean": round(wer(every_ref, every_hyp), 3)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--engines", nargs="+", default=["ssm", "pocketsphinx"])
    ap.add_argument("--shifts", type=int, default=8, help="start offsets, 10 samples (1.25 ms) apart")
    ap.add_argument("--human", type=int, default=40, help="human development set clips (0: none)")
    ap.add_argument("--manifest", type=Path, default=Path("data/stt/human/human.tsv"))
    args = ap.parse_args(argv)
    if not 1 <= args.shifts <= 8:
        ap.error("--shifts must be 1..8 (the last shift stays inside one 10 ms hop)")
    torch.set_num_threads(1)
    shifts = [10 * i for i in range(args.shifts)]
    with tempfile.TemporaryDirectory() as tmp:
        sets = voice_clips(Path(tmp))
    if args.human and args.manifest.exists():
        sets["human"] = human_clips(args.manifest, args.human)
    report: dict = {"bench": "stt_shift", "git": git_sha(), "shifts_samples": shifts,
                    "rate_hz": 8000, "codec": "mulaw", "engines": {}}
    for name in args.engines:
        engine = make_engine(name, 8000, compile=False) if name == "ssm" else make_engine(name, 8000)
        try:
            report["engines"][name] = {key: shifted_scores(engine, clips, shifts)
                                       for key, clips in sets.items()}
        finally:
            engine.close()
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
