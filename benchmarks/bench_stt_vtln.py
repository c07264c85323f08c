"""Would warping the spectrum at test time (VTLN) bring unseen voices closer to the training voices?

Question: the recogniser errs most on held-out voices unlike any it trained on (flite slt and
mbrola us1, both female; espeak-ng f3 is near perfect), and it trained with vocal-tract length
perturbation (``--warp 0.1``: the log-mel spectrum read at frequencies scaled by 1 +- 0.1). Does
reading a voice's spectrum at a scaled frequency at test time (classic vocal-tract length
normalisation, one factor per speaker) or averaging the model's posteriors over several factors
(an ensemble by warping) lower WER/CER with the default decoder (joint,
``ssm_engine/stt/joint.py``)?

The model runs once per clip and factor (8 kHz through mu-law, as ``parley eval stt``; the warp
is ``ssm_engine.stt.train.mel_warp``, the training augmentation), the joint search decodes each.
Per factor: WER/CER over all clips and per voice, and the mean frame confidence (mean max phone
log-prob, what a per-speaker maximum-likelihood choice of factor would pick by). Per ensemble:
posteriors averaged frame by frame over its factors (a K-fold cost). Run it on the development
set of the held-out voices (``data/stt/dev-lm``), not on the scored held-out manifest.

    .venv/bin/python benchmarks/bench_stt_vtln.py --model models/stt-ssm \\
        --manifest data/stt/dev-lm/heldout.tsv

Prints one JSON line; ``best_factor_per_voice`` is each voice's best factor by CER with its
CER beside the unwarped one's, ``ratio_cer_best_vs_none`` over all clips.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ssm_engine.data.manifest import read_manifest  # noqa: E402
from ssm_engine.stt.decode import cer, wer  # noqa: E402
from ssm_engine.stt.joint import JointSearch  # noqa: E402
from ssm_engine.stt.lm import NGramLM  # noqa: E402
from ssm_engine.stt.model import load_stt  # noqa: E402
from ssm_engine.stt.phones import Pronouncer  # noqa: E402
from ssm_engine.stt.train import _pad, load_clips, mel_warp  # noqa: E402

FACTORS = (0.85, 0.9, 0.95, 1.0, 1.05, 1.1, 1.15)
ENSEMBLES = ((0.9, 1.0), (0.95, 1.0, 1.05), (0.85, 0.9, 0.95, 1.0, 1.05))


def _voices(manifest: Path, limit: int | None) -> list[str]:
    """Each clip's voice (by path) from the data set's ``<split>_voices.tsv``, for the clips
    ``load_clips`` keeps with ``limit``, as ``parley eval stt`` reads it ("?" when unknown)."""
    rows = read_manifest(manifest)
    if limit is not None and len(rows) > limit:
        rows = [rows[int(i * len(rows) / limit)] for i in range(limit)]
    side = manifest.with_name(manifest.stem + "_voices.tsv")
    voice_of = dict(read_manifest(side)) if side.exists() else {}
    return [voice_of.get(path, "?") for path, _ in rows]


def _score(refs: list[str], hyps: list[str], voices: list[str]) -> dict:
    out = {"wer": round(wer(refs, hyps), 4), "cer": round(cer(refs, hyps), 4), "by_voice": {}}
    for v in sorted(set(voices)):
        idx = [i for i, x in enumerate(voices) if x == v]
        out["by_voice"][v] = {"wer": round(wer([refs[i] for i in idx], [hyps[i] for i in idx]), 4),
                              "cer": round(cer([refs[i] for i in idx], [hyps[i] for i in idx]), 4)}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=str(ROOT / "models" / "stt-ssm"))
    ap.add_argument("--manifest", default=str(ROOT / "data" / "stt" / "dev-lm" / "heldout.tsv"))
    ap.add_argument("--limit", type=int, default=None, help="evenly spread clips (default all)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    model_dir, manifest = Path(args.model), Path(args.manifest)
    model = load_stt(model_dir).eval()
    if not model.config.phone_vocab_size:
        print("bench_stt_vtln: the model has no phone head (the joint decoder needs one)",
              file=sys.stderr)
        return 2
    lm_path = model_dir / "lm.arpa.gz"
    lm = NGramLM.load(lm_path if lm_path.exists() else ROOT / "models" / "stt-ssm" / "lm.arpa.gz")
    lexicon = Pronouncer.load(model_dir / "lexicon.dict.gz", words=lm.vocab)
    search = JointSearch(lm, lexicon)
    clips = load_clips(manifest, model.config.sample_rate_hz, phone=True, limit=args.limit)
    voices = _voices(manifest, args.limit)
    refs = [text for _, text in clips]
    fe = model.frontend
    centers = fe.mel_centers_hz()
    rows: dict[float, list[torch.Tensor]] = {}
    with torch.no_grad():
        for factor in FACTORS:
            warp = None if factor == 1.0 else functools.partial(
                mel_warp, factors=np.array([factor]), centers_hz=centers, mean=fe.feat_mean,
                std=fe.feat_std)
            out = []
            for x, _ in clips:
                audio, _ = _pad([x], model.config.step_samples)
                chars, phones = model.forward_heads(audio, warp)
                out.append(torch.cat([torch.log_softmax(chars[0], -1),
                                      torch.log_softmax(phones[0], -1)], 1))
            rows[factor] = out
    v = search.vocab_size     # the characters' columns, then the phones'
    result: dict = {"bench": "stt_vtln", "model": str(model_dir), "manifest": str(manifest),
                    "n": len(clips), "factors": {}, "ensembles": {}}
    for factor, out in rows.items():
        hyps = [search.decode(r) for r in out]
        score = _score(refs, hyps, voices)
        conf: dict[str, list[float]] = {}
        for r, voice in zip(out, voices):
            conf.setdefault(voice, []).append(float(r[:, v:].max(1).values.mean()))
        for voice, vals in conf.items():
            score["by_voice"][voice]["confidence"] = round(float(np.mean(vals)), 4)
        result["factors"][str(factor)] = score
    for combo in ENSEMBLES:
        hyps = []
        for i in range(len(clips)):
            stack = torch.stack([rows[f][i] for f in combo])
            mean = torch.logsumexp(stack, 0) - float(np.log(len(combo)))
            hyps.append(search.decode(torch.cat([torch.log_softmax(mean[:, :v], -1),
                                                 torch.log_softmax(mean[:, v:], -1)], 1)))
        result["ensembles"]["+".join(map(str, combo))] = _score(refs, hyps, voices)
    none = result["factors"]["1.0"]
    result["best_factor_per_voice"] = {
        voice: {"factor": float(best), "cer": result["factors"][best]["by_voice"][voice]["cer"],
                "cer_unwarped": none["by_voice"][voice]["cer"]}
        for voice in none["by_voice"]
        for best in [min(result["factors"],
                         key=lambda f: result["factors"][f]["by_voice"][voice]["cer"])]}
    best_all = min(result["factors"].values(), key=lambda s: s["cer"])
    result["ratio_cer_best_vs_none"] = round(best_all["cer"] / max(none["cer"], 1e-9), 3)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
