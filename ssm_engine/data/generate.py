"""Generate a speech-to-text data set from offline voices (``parley data stt``).

    summary = generate(GenerateConfig(out_dir="data/stt/v1", n_train=5000, n_heldout=300))

Writes ``train.tsv`` (8 kHz clips through the phone-channel augmentation), ``heldout.tsv`` (clean
16 kHz clips of voices never used in training; evaluation applies the phone channel itself) and
``{split}_voices.tsv`` (path<TAB>voice name, for per-voice scores) and
``summary.json`` (hours per voice, the voices, the command's config). Work is spread over
``workers`` processes (2 by default: the build machines are small), with a tqdm progress bar.
Each utterance has its own seed, so a data set is reproducible whatever the worker count.
``merge(out_dir, [a, b])`` joins data sets (manifests and summaries) without copying audio;
``max_per_voice`` caps each training voice's clips.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import logging
import multiprocessing
import os
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .audio import resample, wav_seconds, write_wav
from .augment import PhoneChannel
from .errors import DataError, VoiceUnavailableError
from .manifest import read_manifest, write_manifest
from .texts import FILLER, SentenceGenerator, said
from .voices import HELDOUT_VOICES, TRAIN_VOICES, available, voice

__all__ = ["GenerateConfig", "generate", "merge", "TRAIN_RATE_HZ", "HELDOUT_RATE_HZ",
           "HELDOUT_SEED_OFFSET", "faker_version", "FAKER_VERSION"]

log = logging.getLogger(__name__)

# The Faker the shipped data sets were made with (pinned in the [data] extra): the sentence
# generator draws names, places and filler sentences from it, so another version (or none)
# writes other sentences for the same seed.
FAKER_VERSION = "40.63.0"

TRAIN_RATE_HZ = 8000
HELDOUT_SEED_OFFSET = 7919   # the held-out split draws its sentences and voices from seed + this
HELDOUT_RATE_HZ = 16000


@dataclass(frozen=True)
class GenerateConfig:
    out_dir: str
    n_train: int = 5000
    n_heldout: int = 300
    seed: int = 1
    workers: int = 2
    train_voices: dict[str, float] = field(default_factory=lambda: dict(TRAIN_VOICES))
    heldout_voices: dict[str, float] = field(default_factory=lambda: dict(HELDOUT_VOICES))
    progress: bool = True
    filler: float = FILLER   # share of filler sentences in the training split (held out: FILLER)
    wide: float = 0.0        # share of wide-vocabulary word strings in the training split (held out: 0)
    wide_words: tuple[str, ...] = ()   # the words they are drawn from
    natural: float = 0.0     # share of sentences sampled from natural_sampler (held out: 0)
    natural_sampler: object | None = None   # a texts.NaturalSampler, e.g. natural.NGramSampler
    natural_source: str = ""  # what natural_sampler samples from, for the summary


@dataclass(frozen=True)
class _Job:
    index: int
    split: str
    voice: str
    text: str
    seed: int
    path: str


def _run_job(job: _Job) -> tuple[_Job, float, str | None]:
    """Worker: synthesise, convert, augment, write. -> (job, seconds of audio, error or None)."""
    rng = np.random.default_rng(job.seed)
    try:
        x, rate = voice(job.voice).synthesize(said(job.text), rng)     # the label stays job.text
    except DataError as exc:
        return job, 0.0, str(exc)
    if job.split == "train":
        x = resample(x, rate, TRAIN_RATE_HZ)
        x = PhoneChannel()(x, TRAIN_RATE_HZ, rng)
        out_rate = TRAIN_RATE_HZ
    else:
        x = resample(x, rate, HELDOUT_RATE_HZ)
        x = x / (np.abs(x).max() + 1e-9) * 0.5
        pad = np.zeros(int(0.25 * HELDOUT_RATE_HZ), np.float32)
        x = np.concatenate([pad, x, pad])
        out_rate = HELDOUT_RATE_HZ
    write_wav(job.path, x, out_rate)
    return job, x.size / out_rate, None


def _jobs(cfg: GenerateConfig, split: str, voices: dict[str, float], n: int, seed: int
          ) -> list[_Job]:
    if split == "train":
        gen = SentenceGenerator(seed, filler=cfg.filler, wide=cfg.wide, wide_words=cfg.wide_words,
                                natural=cfg.natural,
                                natural_sampler=cfg.natural_sampler)  # type: ignore[arg-type]
    else:
        gen = SentenceGenerator(seed)
    rng = np.random.default_rng(seed)
    names = sorted(voices)
    p = np.array([voices[v] for v in names], dtype=np.float64)
    p /= p.sum()
    wav_dir = Path(cfg.out_dir) / split
    wav_dir.mkdir(parents=True, exist_ok=True)
    return [_Job(i, split, names[int(rng.choice(len(names), p=p))], gen.sentence(),
                 seed * 1_000_003 + i, str(wav_dir / f"{i:06d}.wav")) for i in range(n)]


def faker_version() -> str | None:
    """The installed Faker's version (the sentences depend on it), or None without Faker."""
    try:
        return importlib.metadata.version("faker")
    except importlib.metadata.PackageNotFoundError:
        return None


def generate(cfg: GenerateConfig) -> dict:
    """Build the data set described by ``cfg``; returns (and writes) its summary."""
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    train_voices = available(cfg.train_voices)
    heldout_voices = available(cfg.heldout_voices)
    if set(train_voices) & set(heldout_voices):
        raise DataError(f"voices in both splits: {sorted(set(train_voices) & set(heldout_voices))}")
    if not train_voices and cfg.n_train:
        raise VoiceUnavailableError(f"none of the training voices is installed: {cfg.train_voices}")
    if not heldout_voices and cfg.n_heldout:
        raise VoiceUnavailableError(f"none of the held-out voices is installed: {cfg.heldout_voices}")
    log.info("training voices %s; held-out voices %s", sorted(train_voices), sorted(heldout_voices))
    missing = {"train": sorted(set(cfg.train_voices) - set(train_voices)),
               "heldout": sorted(set(cfg.heldout_voices) - set(heldout_voices))}
    for split, names in missing.items():
        if names:
            log.warning("%s voices not installed, left out: %s. The %s split is not the one the "
                        "shipped model's card describes%s (scripts/install-data-voices installs "
                        "them)", split, ", ".join(names), split,
                        ": its scores will not reproduce" if split == "heldout" else "")
    faker = faker_version()
    if faker != FAKER_VERSION:
        log.warning("Faker %s, not %s: the sentences differ from those of the shipped model's data "
                    "sets (and its held-out set) for the same seed; pip install -e '.[data]'",
                    faker or "is not installed", FAKER_VERSION)
    jobs = (_jobs(cfg, "train", train_voices, cfg.n_train, cfg.seed)
            + _jobs(cfg, "heldout", heldout_voices, cfg.n_heldout, cfg.seed + HELDOUT_SEED_OFFSET))
    t0 = time.monotonic()
    results: list[tuple[_Job, float, str | None]] = []
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(max(1, cfg.workers)) as pool:
        it = pool.imap_unordered(_run_job, jobs, chunksize=8)
        if cfg.progress:
            from tqdm import tqdm
            it = tqdm(it, total=len(jobs), desc="data stt", unit="utt")
        results.extend(it)
    results.sort(key=lambda r: (r[0].split, r[0].index))
    config = dataclasses.asdict(dataclasses.replace(cfg, wide_words=(), natural_sampler=None))
    config["wide_words"] = len(cfg.wide_words)   # how many; the list itself is the command's
    del config["natural_sampler"]                # natural_source says what it was
    summary: dict = {"config": config, "wall_s": round(time.monotonic() - t0, 1),
                     "faker": faker, "missing_voices": missing, "splits": {}}
    for split, rate in (("train", TRAIN_RATE_HZ), ("heldout", HELDOUT_RATE_HZ)):
        ok = [(j, d) for j, d, err in results if j.split == split and err is None]
        failed = [err for j, d, err in results if j.split == split and err is not None]
        if failed:
            log.warning("%s: %d utterances failed, first: %s", split, len(failed), failed[0])
        write_manifest(out / f"{split}.tsv", [(j.path, j.text) for j, _ in ok])
        write_manifest(out / f"{split}_voices.tsv", [(j.path, j.voice) for j, _ in ok])
        per_voice: dict[str, float] = defaultdict(float)
        for j, d in ok:
            per_voice[j.voice] += d / 3600.0
        summary["splits"][split] = {
            "sample_rate_hz": rate, "utterances": len(ok), "failed": len(failed),
            "hours": round(sum(per_voice.values()), 3),
            "hours_per_voice": {k: round(v, 3) for k, v in sorted(per_voice.items())}}
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def merge(out_dir: str | Path, sources: list[str | Path], max_per_voice: int | None = None,
          seed: int = 0) -> dict:
    """Join data sets made by ``generate`` into ``out_dir`` (manifests only; the audio stays
    where it is, referenced by relative path). Voices must not cross splits. With
    ``max_per_voice``, a training voice with more clips than that in a source (every source)
    keeps that many, drawn at random (``seed``) without replacement, so one prolific speaker (a game's hero, with
    thousands of lines) does not outweigh the rest; its hours are then counted from the clips
    kept. -> summary."""
    if max_per_voice is not None and max_per_voice < 1:
        raise DataError(f"max_per_voice must be at least 1, got {max_per_voice}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    summary: dict = {"merged_from": [str(s) for s in sources], "splits": {}}
    if max_per_voice is not None:
        summary["max_per_voice"] = {"clips": max_per_voice, "seed": seed}
    for split in ("train", "heldout"):
        rows, voice_rows = [], []
        per_voice: dict[str, float] = defaultdict(float)
        for src in map(Path, sources):
            src_rows = read_manifest(src / f"{split}.tsv")
            vfile = src / f"{split}_voices.tsv"
            src_voices = read_manifest(vfile) if vfile.exists() else []
            part = json.loads((src / "summary.json").read_text())["splits"][split]
            capped: set[str] = set()
            if max_per_voice is not None and split == "train":
                src_rows, src_voices, capped = _cap_per_voice(src, src_rows, src_voices,
                                                              max_per_voice, seed)
            rows += src_rows
            voice_rows += src_voices
            for k, v in part["hours_per_voice"].items():
                if k not in capped:
                    per_voice[k] += v
            for path, name in (src_voices if capped else ()):
                if name in capped:                 # the clips kept, not the summary's whole voice
                    per_voice[name] += wav_seconds(path) / 3600.0
        rel = [(os.path.relpath(p, out), t) for p, t in rows]
        write_manifest(out / f"{split}.tsv", rel)
        write_manifest(out / f"{split}_voices.tsv", [(os.path.relpath(p, out), v)
                                                     for p, v in voice_rows])
        summary["splits"][split] = {
            "utterances": len(rows), "hours": round(sum(per_voice.values()), 3),
            "hours_per_voice": {k: round(v, 3) for k, v in sorted(per_voice.items())}}
    both = set(summary["splits"]["train"]["hours_per_voice"]) & set(
        summary["splits"]["heldout"]["hours_per_voice"])
    if both:
        raise DataError(f"voices in both splits after merging: {sorted(both)}")
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def _cap_per_voice(src: Path, rows: list, voices: list, cap: int, seed: int
                   ) -> tuple[list, list, set[str]]:
    """Keep at most ``cap`` rows of each voice (a seeded draw, order kept). -> rows, voice
    rows, the voices that lost rows."""
    if len(voices) != len(rows) or any(a != b for (a, _), (b, _) in zip(rows, voices)):
        raise DataError(f"{src}: train_voices.tsv does not list train.tsv's clips in order; "
                        "cannot cap clips per voice")
    by_voice: dict[str, list[int]] = defaultdict(list)
    for i, (_, name) in enumerate(voices):
        by_voice[name].append(i)
    rng = np.random.default_rng(seed)
    keep: list[int] = []
    capped: set[str] = set()
    for name in sorted(by_voice):
        idx = by_voice[name]
        if len(idx) > cap:
            capped.add(name)
            idx = sorted(rng.choice(idx, size=cap, replace=False).tolist())
        keep += idx
    keep.sort()
    return [rows[i] for i in keep], [voices[i] for i in keep], capped

