"""Which decoder should make the recogniser's final transcripts, and what does each cost?

Question: a model with a phone head (``parley train stt --phones``) can finish an utterance four
ways: greedy CTC over characters, the character beam search with the word LM (``char-beam``, the
decoder of every model before it), the phone beam search into lexicon words (``phone-beam``), or
both searches' n-best lists rescored together with full CTC scores of both heads and the LM
(``beam``, ``ssm_engine/stt/joint.py``; and again with the character search, which only
proposes candidates, at half the beam, ``joint, char beam 32``). On the same log-probs
(the model runs once a clip, at 8 kHz through mu-law as ``parley eval stt``), how do their WER
and CER compare, and what does each cost: decoding time per frame as frames arrive, and at the
end of speech (``finalize``, what the caller waits for)? Also split by the data set's sentence
kinds (callers' sentences, filler) when the manifest comes from ``parley data stt``.

    .venv/bin/python benchmarks/bench_stt_decoders.py --model models/stt-ssm \\
        --manifest data/stt/v1/heldout.tsv

Prints one JSON line: per decoder WER, CER, per-kind WER/CER, ms per frame and finalize ms at
p50/p95/p99, and the ratio of each to the character beam search.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from common import git_sha  # noqa: E402

from ssm_engine.stt.beam import BeamConfig, CTCBeamSearch  # noqa: E402
from ssm_engine.stt.decode import StreamingGreedyDecoder, cer, wer  # noqa: E402
from ssm_engine.stt.joint import JointConfig, JointSearch  # noqa: E402
from ssm_engine.stt.lm import NGramLM  # noqa: E402
from ssm_engine.stt.model import load_stt  # noqa: E402
from ssm_engine.stt.phone_beam import PhoneBeamSearch  # noqa: E402
from ssm_engine.stt.phones import Pronouncer  # noqa: E402
from ssm_engine.stt.train import load_clips  # noqa: E402

CHUNK = 5          # frames per push, as the service feeds the decoder (every 100 ms)


def _pct(values: list[float]) -> dict[str, float]:
    a = np.asarray(values, dtype=np.float64)
    return {f"p{q}": round(float(np.percentile(a, q)), 3) for q in (50, 95, 99)}


def _kinds(manifest: Path) -> dict[str, str] | None:
    """Sentence -> kind, when the manifest's folder is a ``parley data stt`` data set."""
    data = manifest.parent
    if not (data / "summary.json").exists():
        return None
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_stt_errors import sentence_kinds

    try:
        return sentence_kinds(data)
    except SystemExit:
        return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--model", default=str(ROOT / "models" / "stt-ssm"),
                    help="model folder with lm.arpa.gz and, for the phone decoders, "
                    "lexicon.dict.gz (default models/stt-ssm)")
    ap.add_argument("--manifest", default=str(ROOT / "data" / "stt" / "v1" / "heldout.tsv"))
    ap.add_argument("--limit", type=int, default=None, help="evenly spread subset of N clips")
    args = ap.parse_args()
    torch.set_num_threads(1)
    model_dir, manifest = Path(args.model), Path(args.manifest)
    model = load_stt(model_dir)
    lm = NGramLM.load(model_dir / "lm.arpa.gz")
    v = model.config.vocab_size
    decoders: dict[str, object] = {"greedy": None, "char-beam": CTCBeamSearch(lm, BeamConfig())}
    if model.config.phone_vocab_size:
        lexicon = Pronouncer.load(model_dir / "lexicon.dict.gz", words=lm.vocab)
        decoders["phone-beam"] = PhoneBeamSearch(lm, lexicon, BeamConfig())
        decoders["beam (joint)"] = JointSearch(lm, lexicon, BeamConfig())
        # the character search only proposes: does a narrower beam for it lose anything?
        decoders["joint, char beam 32"] = JointSearch(lm, lexicon, BeamConfig(),
                                                      JointConfig(char_beam_size=32))
    clips = load_clips(manifest, model.config.sample_rate_hz, phone=True, limit=args.limit)
    kinds = _kinds(manifest)
    refs: list[str] = []
    hyps: dict[str, list[str]] = {k: [] for k in decoders}
    frame_ms: dict[str, list[float]] = {k: [] for k in decoders}
    final_ms: dict[str, list[float]] = {k: [] for k in decoders}
    for x, text in clips:
        pad = (-x.size) % model.config.step_samples
        audio = torch.from_numpy(np.concatenate([x, np.zeros(pad, np.float32)]))[None]
        with torch.no_grad():
            chars, phones = model.forward_heads(audio)
        rows = torch.log_softmax(chars[0], dim=-1)
        if phones is not None:
            rows = torch.cat([rows, torch.log_softmax(phones[0], dim=-1)], dim=-1)
        refs.append(text)
        for name, search in decoders.items():
            cols = (rows[:, :v] if name in ("greedy", "char-beam")
                    else rows[:, v:] if name == "phone-beam" else rows)
            dec = StreamingGreedyDecoder() if search is None else search.stream()
            t0 = time.perf_counter_ns()
            for i in range(0, cols.shape[0], CHUNK):
                dec.push(cols[i:i + CHUNK])
            t1 = time.perf_counter_ns()
            out = dec.text if search is None else dec.finalize()
            t2 = time.perf_counter_ns()
            hyps[name].append(out)
            frame_ms[name].append((t1 - t0) / 1e6 / max(1, cols.shape[0]))
            final_ms[name].append((t2 - t1) / 1e6)
    base = wer(refs, hyps["char-beam"])
    results = {}
    for name in decoders:
        row = {"wer": round(wer(refs, hyps[name]), 4), "cer": round(cer(refs, hyps[name]), 4),
               "wer_ratio_to_char_beam": round(wer(refs, hyps[name]) / base, 3) if base else None,
               "decode_ms_per_frame": _pct(frame_ms[name]), "finalize_ms": _pct(final_ms[name])}
        if kinds:
            for kind in ("caller", "filler"):
                idx = [i for i, r in enumerate(refs) if kinds.get(r) == kind]
                if idx:
                    r, h = [refs[i] for i in idx], [hyps[name][i] for i in idx]
                    row[kind] = {"n": len(idx), "wer": round(wer(r, h), 4),
                                 "cer": round(cer(r, h), 4)}
        results[name] = row
    sha = git_sha()
    print(json.dumps({"bench": "stt_decoders", "git": sha, "model": str(model_dir),
                      "manifest": str(manifest), "n": len(refs), "push_frames": CHUNK,
                      "results": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
