"""How should the distillation teacher hear a clip? Alone, padded to 30 s, or packed with others?

    .venv/bin/python benchmarks/bench_whisper_features.py [--manifest data/stt/h3/train.tsv] [--clips 48]

Whisper tiny.en's encoder trained on 30 s inputs, zero-padded. ``parley data whisper-features``
(``ssm_engine/stt/distill.py``) encodes each clip alone with 0.5 s of silence after it instead.
This measures, on clips evenly spread through a manifest, how far each cheaper way strays from
the padded encoding (the baseline): the cosine between their frames, frame by frame (p50, and
the 5th percentile as ``p5``), and the encoder's time per clip. Packed: clips one after another
in 30 s windows, 0.2 s apart, the first of each window scored apart from the rest (the frames
carry their place in the window). One JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import git_sha, percentiles  # noqa: E402

import numpy as np  # noqa: E402

from ssm_engine.data.audio import read_wav, resample  # noqa: E402
from ssm_engine.data.manifest import read_manifest  # noqa: E402
from ssm_engine.stt.distill import (  # noqa: E402
    FRAME_SAMPLES,
    TAIL_FRAMES,
    TEACHER_RATE_HZ,
    WINDOW_FRAMES,
    _load_teacher,
    teacher_frames,
)

GAP_FRAMES = 10                 # 0.2 s between packed clips


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1) + 1e-9)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--manifest", default="data/stt/h3/train.tsv")
    parser.add_argument("--clips", type=int, default=48)
    args = parser.parse_args()
    rows = read_manifest(args.manifest)
    picks = [rows[int(i * len(rows) / args.clips)][0] for i in range(min(args.clips, len(rows)))]
    model, fe, storage = _load_teacher(1)

    def encode(audio: np.ndarray, mel_frames: int) -> tuple[np.ndarray, float]:
        mel = fe(audio)[:, :mel_frames]
        t0 = time.perf_counter()
        out = np.asarray(model.model.encode(
            storage.from_array(np.ascontiguousarray(mel[None], np.float32)), to_cpu=True))[0]
        return out, time.perf_counter() - t0

    clips = []
    for path in picks:
        x, rate = read_wav(path)
        x = resample(x, rate, TEACHER_RATE_HZ)
        if teacher_frames(x.size) <= WINDOW_FRAMES - GAP_FRAMES:
            clips.append(x)
    full = WINDOW_FRAMES * FRAME_SAMPLES
    padded, alone, t_padded, t_alone = [], [], [], []
    for x in clips:
        n = teacher_frames(x.size)
        enc, dt = encode(np.concatenate([x, np.zeros(full - x.size, np.float32)]),
                         2 * WINDOW_FRAMES)
        padded.append(enc[:n])
        t_padded.append(dt)
        tail = np.zeros(TAIL_FRAMES * FRAME_SAMPLES, np.float32)
        enc, dt = encode(np.concatenate([x, tail]), 2 * (n + TAIL_FRAMES))
        alone.append(enc[:n])
        t_alone.append(dt)
    first, later = [], []
    i = 0
    while i < len(clips):                    # pack windows
        audio = np.zeros(full, np.float32)
        at, members = 0, []
        while i < len(clips) and at + teacher_frames(clips[i].size) <= WINDOW_FRAMES:
            audio[at * FRAME_SAMPLES: at * FRAME_SAMPLES + clips[i].size] = clips[i]
            members.append((i, at))
            at += teacher_frames(clips[i].size) + GAP_FRAMES
            i += 1
        enc, _ = encode(audio, 2 * WINDOW_FRAMES)
        for k, (j, start) in enumerate(members):
            n = teacher_frames(clips[j].size)
            (first if k == 0 else later).append(_cosines(enc[start:start + n], padded[j]))

    def stats(parts: list[np.ndarray]) -> dict:
        v = np.concatenate(parts) if parts else np.zeros(0)
        return {"p50": round(float(np.median(v)), 3) if v.size else None,
                "p5": round(float(np.percentile(v, 5)), 3) if v.size else None,
                "frames": int(v.size)}

    print(json.dumps({
        "bench": "whisper_features", "manifest": args.manifest, "clips": len(clips),
        "cosine_vs_padded": {"alone_with_tail": stats([_cosines(a, p) for a, p in
                                                       zip(alone, padded)]),
                             "packed_first_in_window": stats(first),
                             "packed_later_in_window": stats(later)},
        "encoder_ms_per_clip": {"padded": percentiles([1000 * t for t in t_padded]),
                                "alone_with_tail": percentiles([1000 * t for t in t_alone])},
        "padded_over_alone_time": round(float(np.median(t_padded) / np.median(t_alone)), 1),
        "git": git_sha()}))


if __name__ == "__main__":
    main()
