"""Is a backlog of STT frames cheaper as one ``prefill`` pass than as n ``step``s?

``StreamBatcher`` sends a stream's chunk of ``DEFAULT_PREFILL_MIN`` (2) frames or more through
``STTModel.prefill`` (the chunked scan) instead of stepping it frame by frame: a pre-roll (25
frames) and a runner that fell behind both make such chunks. One run, the shipped model
(models/stt-ssm), one thread, batch 1, both ways alternating per repetition, for n frames:

* ``step_n{n}_ms_p50/p95/p99``: n single steps; ``prefill_n{n}_ms_*``: one prefill of n frames;
* ``ratio_step_vs_prefill_n{n}``: p50 of stepping over p50 of prefill (> 1: prefill wins).

    .venv/bin/python benchmarks/bench_stt_prefill.py [--reps 30]

Prints one JSON line.
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

from ssm_engine.batcher import DEFAULT_PREFILL_MIN  # noqa: E402
from ssm_engine.stt.model import load_stt  # noqa: E402


def pct(xs: list[float]) -> dict[str, float]:
    a = np.asarray(xs)
    return {k: round(float(np.percentile(a, q)), 3) for k, q in (("p50", 50), ("p95", 95), ("p99", 99))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=str(ROOT / "models" / "stt-ssm"))
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--sizes", default="2,4,8,16,25,50", help="frames per backlog (comma list)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.set_flush_denormal(True)
    model = load_stt(args.model)
    sizes = [int(n) for n in args.sizes.split(",")]
    gen = torch.Generator().manual_seed(0)
    audio = 0.1 * torch.randn(1, max(sizes) * 160, generator=gen)
    out: dict[str, object] = {"bench": "stt_prefill", "reps": args.reps, "prefill_min": DEFAULT_PREFILL_MIN}
    with torch.no_grad():
        for n in sizes:
            frames = audio[:, : n * 160].reshape(1, n, 160)
            times: dict[str, list[float]] = {"step": [], "prefill": []}
            for rep in range(args.reps + 2):                 # 2 warm-up reps, not counted
                for way in ("step", "prefill"):
                    state = model.init_state(1)
                    model.step(frames[:, 0], state)          # a stream that has already started
                    t = time.perf_counter()
                    if way == "step":
                        for i in range(n):
                            model.step(frames[:, i], state)
                    else:
                        model.prefill(frames, state)
                    if rep >= 2:
                        times[way].append((time.perf_counter() - t) * 1000.0)
            for way, ts in times.items():
                for k, v in pct(ts).items():
                    out[f"{way}_n{n}_ms_{k}"] = v
            out[f"ratio_step_vs_prefill_n{n}"] = round(out[f"step_n{n}_ms_p50"] / out[f"prefill_n{n}_ms_p50"], 2)
    out["git"] = git_sha()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
