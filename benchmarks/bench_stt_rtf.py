"""How much CPU does the SSM recogniser take per second of speech, and what do stride and compile buy?

Question: is its real-time factor <= 0.05 on one core, with the final transcript
<= 30 ms after the end of the audio (p50)?

Three engines over the same held-out clips (8 kHz through mu-law, the beam search + LM for finals,
one torch thread), clip by clip in turn so machine noise hits all alike:

* ``step``: the model run every 20 ms frame, one step each (the serving path before; baseline);
* ``stride5``: run every 5 frames (100 ms) as one 5-frame prefill, eager;
* ``stride5_compiled``: the same, the 5-frame prefill compiled with torch.compile (the default).

Per engine: ``rtf`` (busy time / audio time over all clips), per-clip RTF at p50/p95/p99,
``final_ms`` p50/p95/p99 (end of audio -> final transcript: flush frames and the beam's end),
WER and CER (the same for all three up to float rounding: only when frames are computed
changes), and ``compile_s`` (engine start). ``ratio_rtf_step_vs_<engine>``: baseline RTF over
the engine's. One JSON line.

    .venv/bin/python benchmarks/bench_stt_rtf.py                     # 100 held-out clips
    .venv/bin/python benchmarks/bench_stt_rtf.py --limit 20          # a smoke run
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

from pipeline.audio.wav import read_wav  # noqa: E402
from harness.stt_eval import make_engine, phone_channel  # noqa: E402
from ssm_engine.data.manifest import read_manifest  # noqa: E402
from ssm_engine.stt.decode import cer, wer  # noqa: E402
from ssm_engine.stt.text import normalize_text  # noqa: E402

ENGINES = {"step": (1, False), "stride5": (5, False), "stride5_compiled": (5, True)}


def pct(xs: list[float], name: str) -> dict[str, float]:
    a = np.asarray(xs)
    return {f"{name}_p{q}": round(float(np.percentile(a, q)), 4) for q in (50, 95, 99)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--manifest", default=str(ROOT / "data" / "stt" / "v1" / "heldout.tsv"))
    ap.add_argument("--limit", type=int, default=100, help="evenly spread clips (default 100)")
    ap.add_argument("--model", default=None, help="model folder (default models/stt)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    rows = read_manifest(args.manifest)
    if len(rows) > args.limit:
        every = len(rows) / args.limit
        rows = [rows[int(i * every)] for i in range(args.limit)]
    clips = []
    for path, text in rows:
        pcm, rate = read_wav(path)
        clips.append((phone_channel(pcm, rate, 8000, "mulaw"), normalize_text(text)))
    engines, compile_s = {}, {}
    for name, (stride, compiled) in ENGINES.items():
        t0 = time.perf_counter()
        engines[name] = make_engine("ssm", 8000, args.model, "beam", None, stride, compiled)
        compile_s[name] = round(time.perf_counter() - t0, 2)
    busy = {n: [] for n in engines}
    finals = {n: [] for n in engines}
    hyps = {n: [] for n in engines}
    try:
        for eng in engines.values():
            eng.transcribe_timed(clips[0][0][:4000])              # warm-up
        for pcm, _ in clips:
            for name, eng in engines.items():
                t0 = time.perf_counter()
                hyp, final_s = eng.transcribe_timed(pcm)
                busy[name].append(time.perf_counter() - t0)
                finals[name].append(final_s * 1000.0)
                hyps[name].append(normalize_text(hyp))
    finally:
        for eng in engines.values():
            eng.close()
    audio_s = [len(pcm) / 8000 for pcm, _ in clips]
    refs = [ref for _, ref in clips]
    out: dict[str, object] = {"bench": "stt_rtf", "n": len(clips),
                              "audio_s": round(sum(audio_s), 1), "decoder": "beam"}
    for name in engines:
        out[f"{name}_rtf"] = round(sum(busy[name]) / sum(audio_s), 4)
        out.update(pct([b / a for b, a in zip(busy[name], audio_s)], f"{name}_clip_rtf"))
        out.update(pct(finals[name], f"{name}_final_ms"))
        out[f"{name}_wer"] = round(wer(refs, hyps[name]), 4)
        out[f"{name}_cer"] = round(cer(refs, hyps[name]), 4)
        out[f"{name}_start_s"] = compile_s[name]
    for name in list(engines)[1:]:
        out[f"ratio_rtf_step_vs_{name}"] = round(out["step_rtf"] / out[f"{name}_rtf"], 2)
    out["stride5_compiled_meets_rtf_0.05"] = out["stride5_compiled_rtf"] <= 0.05
    out["stride5_compiled_meets_final_30ms_p50"] = out["stride5_compiled_final_ms_p50"] <= 30.0
    out["git"] = git_sha()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
