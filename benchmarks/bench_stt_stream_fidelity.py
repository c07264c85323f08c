"""How close are the streamed encoder's frames to what Whisper computes for a whole clip?

    .venv/bin/python benchmarks/bench_stt_stream_fidelity.py [--manifest data/stt/human/human.tsv] [--clips 12]

The recogniser's encoder runs on windows (``StreamingWhisperEncoder``); Whisper trained on whole
clips from position 0 followed by silence. For clips evenly spread through a human set, each
frame's cosine to the whole-clip encoding (the baseline), frames aligned by the look-ahead,
p50 and p10, for: the shipped scheme (a sliding window, silence before the speech, cut at its
right edge) at several look-aheads and windows; and windows filled from the utterance's start
(positions from 0), bare or with silence after the speech. One JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import git_sha  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

from ssm_engine.data.audio import read_audio, resample  # noqa: E402
from ssm_engine.data.manifest import read_manifest  # noqa: E402
from ssm_engine.stt.encoder_model import shared_encoder  # noqa: E402
from ssm_engine.stt.whisper_encoder import WhisperLogMel  # noqa: E402
from ssm_engine.stt.whisper_stream import StreamingWhisperEncoder  # noqa: E402


def _cos(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    k = min(len(a), len(b))
    return torch.nn.functional.cosine_similarity(a[:k], b[:k], dim=-1)


@torch.no_grad()
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--manifest", default="data/stt/human/human.tsv")
    ap.add_argument("--clips", type=int, default=12)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    enc, mel = shared_encoder(), WhisperLogMel()
    rows = read_manifest(args.manifest)
    rows = [rows[int(i * len(rows) / args.clips)] for i in range(min(args.clips, len(rows)))]
    clips = []
    for path, _ in rows:
        x, rate = read_audio(path)
        x = resample(x, rate, 8000) if rate != 8000 else x
        xt = torch.from_numpy(np.ascontiguousarray(x, np.float32))[None]
        n = -(-xt.shape[1] // 160)
        raw = mel(torch.cat([torch.zeros(1, WhisperLogMel.context), xt, torch.zeros(1, 160 * 60)], 1))
        full = enc(WhisperLogMel.normalise(raw[:, : 2 * (n + 25)]).transpose(1, 2))[0][:n]
        clips.append((xt, n, raw, full))

    def sliding(w: int, h: int, la: int) -> torch.Tensor:
        se = StreamingWhisperEncoder(enc, window_frames=w, hop_frames=h, lookahead_frames=la)
        return torch.cat([_cos(se.clip_features(xt)[la:], full) for xt, _, _, full in clips])

    def left_aligned(w: int, h: int, la: int, after: int) -> torch.Tensor:
        out = []
        for _, n, raw, full in clips:
            frames = []
            for t in range(h, n + h, h):
                end = t + la
                start = max(0, end - w)
                win = raw[:, 2 * start: 2 * end]
                if after:
                    win = torch.cat([win, torch.full((1, 2 * after, 80), -10.0)], 1)
                e = enc(WhisperLogMel.normalise(win).transpose(1, 2))[0]
                frames.append(e[t - h - start: t - start])
            out.append(_cos(torch.cat(frames)[:n], full))
        return torch.cat(out)

    res = {}
    for name, c in (("sliding_75_10_4", sliding(75, 10, 4)), ("sliding_75_10_10", sliding(75, 10, 10)),
                    ("sliding_75_10_20", sliding(75, 10, 20)), ("sliding_150_10_4", sliding(150, 10, 4)),
                    ("left_75_10_4", left_aligned(75, 10, 4, 0)),
                    ("left_75_10_4_after10", left_aligned(75, 10, 4, 10)),
                    ("left_75_10_10", left_aligned(75, 10, 10, 0)),
                    ("left_150_10_4", left_aligned(150, 10, 4, 0))):
        res[name] = {"p50": round(float(c.median()), 3), "p10": round(float(c.quantile(0.1)), 3)}
    print(json.dumps({"bench": "stt_stream_fidelity", "git": git_sha(), "manifest": args.manifest,
                      "clips": len(clips), "frames": int(sum(n for _, n, _, _ in clips)), "cosine": res}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
