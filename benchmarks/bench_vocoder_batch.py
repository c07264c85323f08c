"""Does vocoding every stream of a step in one vectorised call cost less than a push per frame?

    .venv/bin/python benchmarks/bench_vocoder_batch.py [--streams 1 4 8 16 32] [--steps 300]

The voice worker decodes a step of ``frames_per_step`` (4) frames for every speaking stream,
then vocodes them. The baseline is what it did before: each stream's ``StreamingVocoder.push``
frame by frame (a Python call, an FFT pair and an envelope per frame); the candidate is
``vocode_streams`` (every frame of every stream in one array operation per stage). Both run the
shipped voice's settings (postfilter 0.6 from c4, whole-sample pulses) on the same frames in the
same process, one thread, alternating step by step. Prints one JSON line: per stream count, the
wall time of a step p50/p95/p99 (ms) for each, the ratio of the medians, and the CPU share one
second of speech costs (x real time) for the streams together.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import git_sha, percentiles  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from ssm_engine.tts.vocoder import (  # noqa: E402
    CEP0, HOP_SAMPLES, LF0, N_FEATURES, SAMPLE_RATE_HZ, VUV, StreamingVocoder, vocode_streams)

FRAMES_PER_STEP = 4
SETTINGS = {"postfilter": 0.6, "postfilter_from": 4}


def _frames(rng: np.random.Generator, n: int) -> np.ndarray:
    f = np.zeros((n, N_FEATURES))
    f[:, LF0] = np.log(rng.uniform(90.0, 220.0, n))
    f[:, VUV] = (rng.uniform(0.0, 1.0, n) < 0.7).astype(float)
    f[:, CEP0] = rng.normal(-4.0, 0.5, n)
    f[:, CEP0 + 1:] = rng.normal(0.0, 0.3, (n, N_FEATURES - CEP0 - 1)) / np.arange(1, N_FEATURES - CEP0)
    return f


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--streams", type=int, nargs="+", default=[1, 4, 8, 16, 32])
    ap.add_argument("--steps", type=int, default=300, help="steps timed per stream count")
    args = ap.parse_args(argv)
    try:
        import torch
        torch.set_num_threads(1)
    except ImportError:
        pass
    rng = np.random.default_rng(0)
    res = {}
    for b in args.streams:
        alone = [StreamingVocoder(seed=k, **SETTINGS) for k in range(b)]
        together = [StreamingVocoder(seed=k, **SETTINGS) for k in range(b)]
        t_alone, t_together = [], []
        for _ in range(args.steps):
            frames = [_frames(rng, FRAMES_PER_STEP) for _ in range(b)]
            t0 = time.perf_counter()
            for v, f in zip(alone, frames, strict=True):
                np.concatenate([v.push(row) for row in f])
            t1 = time.perf_counter()
            vocode_streams(together, frames)
            t2 = time.perf_counter()
            t_alone.append((t1 - t0) * 1e3)
            t_together.append((t2 - t1) * 1e3)
        speech_s = FRAMES_PER_STEP * HOP_SAMPLES / SAMPLE_RATE_HZ
        res[str(b)] = {
            "per_stream_ms": percentiles(t_alone, digits=3, count=False),
            "batched_ms": percentiles(t_together, digits=3, count=False),
            "ratio_p50": round(float(np.median(t_alone) / np.median(t_together)), 2),
            "x_realtime_per_stream": round(float(np.median(t_alone)) / 1e3 / speech_s, 3),
            "x_realtime_batched": round(float(np.median(t_together)) / 1e3 / speech_s, 3),
        }
    print(json.dumps({"bench": "vocoder_batch", "git": git_sha(), "steps": args.steps,
                      "frames_per_step": FRAMES_PER_STEP, "settings": SETTINGS, "streams": res}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
