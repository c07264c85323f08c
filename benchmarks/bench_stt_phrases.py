"""Recognisers on sentences the text generator never writes: the live bench's phrases, offline.

Question: the held-out set's sentences come from the same templates as the training data and the
beam search's LM, which flatters every model trained here. How do the models do on sentences
written by hand (``bench_stt_live.PHRASES``: ten things a caller says, two surnames outside the
lexicon), spoken by the held-out voices (flite slt, espeak-ng en-us+f3, mbrola us1; never
trained on) and one training voice (flite awb), through the same 8 kHz mu-law channel as
``parley eval stt``? Without a live call (``bench_stt_live.py``), so no VAD, turn cutting or
timing noise, and several models can be compared on identical audio in one run.

    .venv/bin/python benchmarks/bench_stt_phrases.py        # models/stt, pocketsphinx, Whisper
    .venv/bin/python benchmarks/bench_stt_phrases.py --model models/stt --model runs/stt/v10d/best

Each clip is synthesised once (fixed seeds; peak -6 dBFS, 250 ms of silence either side, as the
held-out set), then each model decodes all of them with the beam search (``--decoder``) and the
LM in ``--lm`` (default: each model folder's ``lm.arpa.gz``, else models/stt's), and so do the
baselines (pocketsphinx, and Whisper tiny.en, the accuracy anchor). Prints one JSON line: per
model or engine, WER and CER over all clips and per voice, and per-clip hypotheses with --show.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.bench_stt_live import PHRASES  # noqa: E402
from harness.stt_eval import evaluate  # noqa: E402
from ssm_engine.data.audio import resample, write_wav  # noqa: E402
from ssm_engine.data.manifest import write_manifest  # noqa: E402
from ssm_engine.data.voices import voice  # noqa: E402

VOICES = ("flite:slt", "espeak:en-us+f3", "mbrola:mb-us1", "flite:awb")   # the last one trained
RATE = 16000


def synthesise(folder: Path, voices: tuple[str, ...]) -> Path:
    """Every phrase in every voice -> ``folder``/manifest.tsv (+ manifest_voices.tsv)."""
    rows, voice_rows = [], []
    for v in voices:
        for i, text in enumerate(PHRASES):
            x, rate = voice(v).synthesize(text, np.random.default_rng(100 + i))
            x = resample(x, rate, RATE)
            x = x / (np.abs(x).max() + 1e-9) * 0.5
            pad = np.zeros(RATE // 4, np.float32)
            path = folder / f"{v.replace(':', '_')}_{i:02d}.wav"
            write_wav(path, np.concatenate([pad, x, pad]), RATE)
            rows.append((path, text))
            voice_rows.append((path, v))
    write_manifest(folder / "manifest.tsv", rows)
    write_manifest(folder / "manifest_voices.tsv", voice_rows)
    return folder / "manifest.tsv"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--model", action="append", default=None,
                    help="model folder (repeat to compare; default models/stt)")
    ap.add_argument("--decoder", choices=["beam", "char-beam", "phone-beam", "greedy"],
                    default="beam")
    ap.add_argument("--lm", default=None, help="LM for every model (default: see above)")
    ap.add_argument("--voices", default=",".join(VOICES),
                    help="comma-separated voices (default %(default)s)")
    ap.add_argument("--baselines", default="pocketsphinx,whisper",
                    help="other engines on the same clips, comma-separated (default "
                    "%(default)s; '' for none)")
    ap.add_argument("--show", action="store_true", help="also print each clip's hypothesis")
    args = ap.parse_args()
    models = args.model or ["models/stt"]
    voices = tuple(v for v in args.voices.split(",") if v)
    tmp = Path(tempfile.mkdtemp(prefix="parley-phrases-"))
    out: dict = {"bench": "stt_phrases", "decoder": args.decoder, "voices": list(voices),
                 "phrases": len(PHRASES), "results": {}}
    try:
        manifest = synthesise(tmp, voices)
        runs = [("ssm", m) for m in models] + [(e, "") for e in args.baselines.split(",") if e]
        for engine, model in runs:
            lm = args.lm
            if (engine == "ssm" and lm is None and args.decoder != "greedy"
                    and not (Path(model) / "lm.arpa.gz").exists()):
                lm = str(ROOT / "models" / "stt" / "lm.arpa.gz")
            res = evaluate(engine, manifest, model_dir=model or None, decoder=args.decoder,
                           lm_path=lm)
            row = {"n": res.n, "wer": res.wer, "cer": res.cer,
                   "by_voice": {v: {"wer": d["wer"], "cer": d["cer"]}
                                for v, d in res.by_voice.items()}}
            if args.show:
                row["hyps"] = [[voice_name, ref, hyp] for _, voice_name, ref, hyp in res.utterances]
            out["results"][model or engine] = row
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
