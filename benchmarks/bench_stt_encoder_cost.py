"""What does hearing through Whisper's streamed encoder cost a stream, and how many streams fit a core?

    OMP_NUM_THREADS=1 taskset -c 0 .venv/bin/python benchmarks/bench_stt_encoder_cost.py \\
        [--model models/stt] [--baseline PATH] [--batches 1 8 16 32] [--reps 20]

For each encoder setting (the model folder's window/hop/look-ahead, and the alternatives in
``--windows`` x ``--hops``: cost only, they are not trained) and each batch of streams, times one
hop of ``WhisperSTTModel.prefill`` (the encoder's window re-encoded for every stream, the SSM and
heads after it) on one thread: per-hop time p50/p95/p99, CPU per second of audio for one stream
(``core_per_stream``: 1.0 = a whole core) and the streams one core keeps in real time at that
batch; and how far a partial trails the audio (``partial_lag_ms``: the hop and look-ahead
waited, then the hop's compute). The baseline in the same run: the pure SSM recogniser (``--baseline``, a ``save_stt``
folder, e.g. git's earlier models/stt) stepping the same audio as 5-frame prefills, eagerly, at the
same batches. One JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import git_sha, percentiles  # noqa: E402

import torch  # noqa: E402

from ssm_engine.stt.encoder_model import WhisperSTTConfig, WhisperSTTModel  # noqa: E402
from ssm_engine.stt.model import STTModel  # noqa: E402
from ssm_engine.stt.recognizers import load_recognizer  # noqa: E402


def _time(run, reps: int) -> list[float]:
    run()
    run()
    out = []
    for _ in range(reps):
        t0 = time.perf_counter_ns()
        run()
        out.append((time.perf_counter_ns() - t0) / 1e6)
    return out


def _measure(model, frames: int, batches: list[int], reps: int) -> dict:
    rows = {}
    for b in batches:
        state = model.init_state(b)
        x = torch.randn(b, frames, 160) * 0.05
        ms = _time(lambda: model.prefill(x, state), reps)  # noqa: B023
        p = percentiles(ms, digits=2)
        audio_ms = frames * 20.0
        rows[str(b)] = {"hop_ms": p, "core_per_stream": round(p["p50"] / audio_ms / b, 4),
                        "streams_per_core": round(b * audio_ms / p["p50"], 1)}
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="models/stt")
    ap.add_argument("--baseline", default=None, help="a pure SSM recogniser folder")
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8, 16, 32])
    ap.add_argument("--windows", type=int, nargs="*", default=[50, 100])
    ap.add_argument("--hops", type=int, nargs="*", default=[5, 10])
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    out: dict = {"bench": "stt_encoder_cost", "git": git_sha(), "batches": args.batches}
    shipped = load_recognizer(args.model)
    if not isinstance(shipped, WhisperSTTModel):
        ap.error(f"{args.model} is not a recogniser on Whisper's encoder")
    c = shipped.config
    out["shipped"] = {"window": c.window_frames, "hop": c.hop_frames, "lookahead": c.lookahead_frames,
                      **_measure(shipped, c.hop_frames, args.batches, args.reps)}
    # how far a partial trails the audio at one stream: a frame waits for the rest of its hop
    # and the look-ahead, then for the hop's compute (the newest frame of a hop waits least)
    compute = out["shipped"]["1"]["hop_ms"]["p50"]
    out["partial_lag_ms"] = {"newest": round(c.lookahead_frames * 20 + compute, 1),
                             "mean": round((c.hop_frames / 2 + c.lookahead_frames) * 20 + compute, 1),
                             "oldest": round((c.hop_frames + c.lookahead_frames) * 20 + compute, 1)}
    out["alternatives"] = []
    for w in args.windows:
        for h in args.hops:
            if (w, h) == (c.window_frames, c.hop_frames) or h + c.lookahead_frames > w:
                continue
            alt = WhisperSTTModel(WhisperSTTConfig(window_frames=w, hop_frames=h,
                                                   lookahead_frames=c.lookahead_frames,
                                                   phone_vocab_size=c.phone_vocab_size,
                                                   ssm=c.ssm)).eval()
            out["alternatives"].append({"window": w, "hop": h,
                                        **_measure(alt, h, args.batches, args.reps)})
    if args.baseline:
        base = load_recognizer(args.baseline)
        if not isinstance(base, STTModel):
            ap.error(f"{args.baseline} is not a pure SSM recogniser")
        out["baseline_pure_ssm"] = _measure(base.eval(), 5, args.batches, args.reps)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
