"""Does the recogniser's acoustic model hear people, or only voices like its training voices?

    scripts/install-human-speech && .venv/bin/parley data human     # once: data/stt/human
    .venv/bin/python benchmarks/bench_stt_phones.py [--model models/stt-ssm] [--model /tmp/candidate]

The human development set's sentences, each heard three ways in one run: the recorded person, and
the same text spoken by two voices the model never trained on (flite slt, an HTS voice; espeak-ng
en-us+f3, a formant voice of the family that trains), all through the 8 kHz mu-law channel. Scored
by the phone head's greedy output against CMUdict's pronunciation, word boundaries included (the
phone error rate of ``parley train stt``'s own check, ``ssm_engine.stt.train.evaluate``): no
lexicon, no language model, so the figure is the acoustic model alone.
The same words in three voices separate "cannot hear this speaker" from "does not know these
words". Per model: PER per voice kind and per source; one JSON line.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import git_sha  # noqa: E402

import torch  # noqa: E402

from harness.stt_eval import phone_channel  # noqa: E402
from pipeline.audio.wav import read_wav  # noqa: E402
from ssm_engine.data.manifest import read_manifest  # noqa: E402
from ssm_engine.stt.cli import _phones_dict  # noqa: E402
from ssm_engine.stt.model import load_stt  # noqa: E402
from ssm_engine.stt.phones import Pronouncer  # noqa: E402
from ssm_engine.stt.text import normalize_text  # noqa: E402
from ssm_engine.stt.train import evaluate  # noqa: E402

SYNTHETIC = {"flite:slt": ["flite", "-voice", "slt", "-t", "{text}", "-o", "{out}"],
             "espeak:en-us+f3": ["espeak-ng", "-v", "en-us+f3", "-w", "{out}", "{text}"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--manifest", default="data/stt/human/human.tsv")
    ap.add_argument("--model", action="append", default=None, help="model folder (repeatable; default models/stt-ssm)")
    args = ap.parse_args(argv)
    if not Path(args.manifest).exists():
        ap.error(f"{args.manifest} is missing: run scripts/install-human-speech, then parley data human")
    torch.set_num_threads(1)
    lexicon = Pronouncer.load(_phones_dict("pocketsphinx"))   # the CMUdict the phone head trained on
    # voice -> source -> [(8 kHz mu-law float samples, words)]: the training check's clips
    clips: dict[str, dict[str, list]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i, (path, text) in enumerate(read_manifest(args.manifest)):
            words = normalize_text(text)
            if lexicon.encode(words) is None:
                continue
            heard = {"person": read_wav(path)}
            for voice, cmd in SYNTHETIC.items():
                out = f"{tmp}/{i}-{voice.replace(':', '_')}.wav"
                subprocess.run([c.format(text=words, out=out) for c in cmd], check=True, capture_output=True)
                heard[voice] = read_wav(out)
            for voice, (pcm, rate) in heard.items():
                x = phone_channel(pcm, rate, 8000, "mulaw").astype("float32") / 32768.0
                for key in (Path(path).parent.name, "all"):
                    clips.setdefault(voice, {}).setdefault(key, []).append((x, words))
    report: dict = {"bench": "stt_phones", "git": git_sha(), "manifest": args.manifest,
                    "clips": len(clips["person"]["all"]), "models": {}}
    for folder in args.model or ["models/stt-ssm"]:
        model = load_stt(folder)
        report["models"][folder] = {voice: {key: round(evaluate(model, part, pronouncer=lexicon)["per"], 3)
                                            for key, part in by.items()}
                                    for voice, by in clips.items()}
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
