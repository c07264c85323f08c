"""Does the recogniser's acoustic model hear people, or only voices like its training voices?

    scripts/install-human-speech && .venv/bin/parley data human     # once: data/stt/human
    .venv/bin/python benchmarks/bench_stt_phones.py [--model models/stt] [--model /tmp/candidate]

The human development set's sentences, each heard three ways in one run: the recorded person, and
the same text spoken by two voices the model never trained on (flite slt, an HTS voice; espeak-ng
en-us+f3, a formant voice of the family that trains), all through the 8 kHz mu-law channel. Scored
by the phone head's greedy output against CMUdict's pronunciation (phone error rate, word
boundaries left out): no lexicon, no language model, so the figure is the acoustic model alone.
The same words in three voices separate "cannot hear this speaker" from "does not know these
words". Per model: PER per voice kind and per source; one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
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
from ssm_engine.stt.decode import edit_distance  # noqa: E402
from ssm_engine.stt.model import STTModel, load_stt, prepare_audio  # noqa: E402
from ssm_engine.stt.phones import PHONE_BLANK, PHONES, WORD_BOUNDARY, Pronouncer  # noqa: E402
from ssm_engine.stt.text import normalize_text  # noqa: E402

SYNTHETIC = {"flite:slt": ["flite", "-voice", "slt", "-t", "{text}", "-o", "{out}"],
             "espeak:en-us+f3": ["espeak-ng", "-v", "en-us+f3", "-w", "{out}", "{text}"]}


def phones_heard(model: STTModel, pcm, rate: int) -> list[str]:
    audio = prepare_audio(phone_channel(pcm, rate, 8000, "mulaw"), 8000, model.config)
    with torch.no_grad():
        _, phone_logits = model.forward_heads(audio)
    assert phone_logits is not None, "the model has no phone head"
    best = phone_logits[0].argmax(-1).tolist()
    return [PHONES[p] for k, p in enumerate(best)
            if p not in (PHONE_BLANK, WORD_BOUNDARY) and (k == 0 or p != best[k - 1])]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--manifest", default="data/stt/human/human.tsv")
    ap.add_argument("--model", action="append", default=None, help="model folder (repeatable; default models/stt)")
    args = ap.parse_args(argv)
    if not Path(args.manifest).exists():
        ap.error(f"{args.manifest} is missing: run scripts/install-human-speech, then parley data human")
    torch.set_num_threads(1)
    import pocketsphinx

    lexicon = Pronouncer.load(os.path.join(pocketsphinx.get_model_path(), "en-us", "cmudict-en-us.dict"))
    clips = []                         # (source, reference phones, {voice: (pcm, rate)})
    with tempfile.TemporaryDirectory() as tmp:
        for i, (path, text) in enumerate(read_manifest(args.manifest)):
            words = normalize_text(text)
            ref = lexicon.encode(words)
            if ref is None:
                continue
            heard = {"person": read_wav(path)}
            for voice, cmd in SYNTHETIC.items():
                out = f"{tmp}/{i}-{voice.replace(':', '_')}.wav"
                subprocess.run([c.format(text=words, out=out) for c in cmd], check=True, capture_output=True)
                heard[voice] = read_wav(out)
            clips.append((Path(path).parent.name, [PHONES[p] for p in ref if p != WORD_BOUNDARY], heard))
    report: dict = {"bench": "stt_phones", "git": git_sha(), "manifest": args.manifest, "clips": len(clips),
                    "phones": sum(len(r) for _, r, _ in clips), "models": {}}
    for folder in args.model or ["models/stt"]:
        model = load_stt(folder).eval()
        errors: dict[str, dict[str, list[int]]] = {}
        for source, ref, heard in clips:
            for voice, (pcm, rate) in heard.items():
                e = edit_distance(ref, phones_heard(model, pcm, rate))
                for key in (source, "all"):
                    cell = errors.setdefault(voice, {}).setdefault(key, [0, 0])
                    cell[0] += e
                    cell[1] += len(ref)
        report["models"][folder] = {voice: {k: round(e / n, 3) for k, (e, n) in by.items()}
                                    for voice, by in errors.items()}
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
