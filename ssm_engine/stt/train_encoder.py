"""Train the recogniser on Whisper's streamed features: extract once, then train the SSM on top.

    extract_stream_features("data/stt/s1/train.tsv", "data/stt/s1-wf", WhisperSTTConfig())
    train_encoder_stt(EncoderTrainConfig(train=["data/stt/s1-wf"], heldout="data/stt/s1h-wf",
                                         run_dir="runs/stt/w1"))
    parley data stream-features --data data/stt/s1 --split train --out data/stt/s1-wf
    parley train stt-whisper --features data/stt/s1-wf data/stt/people1-wf --heldout ... --run runs/stt/w1

The encoder is frozen, so each clip's features are computed once, by the very code a live stream
runs (``StreamingWhisperEncoder.clip_features``: the same windows, hop and look-ahead), and kept
as float16 shards (768 bytes a frame; ``distill.ShardWriter``). Training then runs only the map,
the Mamba-2 stack and the two CTC heads over those frames: a few times faster than the pure SSM
recogniser's training, which computes its front end every step. Augmentation acts on the
features: time masks (spans of frames set to zero) and dropout of feature channels.

The run folder is ``parley train stt``'s: ``last.pt`` (written every ``checkpoint_every_s`` and
at the end; a second run with the same folder resumes), ``best/`` (the lowest held-out greedy
WER so far, a ``save_whisper_stt`` checkpoint), ``train.log`` and ``metrics.jsonl``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import random
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from ..data.audio import read_audio, resample
from ..data.errors import DataError
from ..data.human import check_not_reserved
from ..data.manifest import read_manifest
from ..errors import ConfigError
from ..training import cosine_lr_scale, length_batches, run_log
from .decode import cer, greedy_decode, wer
from .distill import ShardWriter, TeacherFeatures, clip_key
from .encoder_model import WhisperSTTConfig, WhisperSTTModel, save_whisper_stt, shared_encoder
from .phones import PHONE_BLANK, PHONES, Pronouncer
from .text import encode, normalize_text
from .whisper_stream import StreamingWhisperEncoder

__all__ = ["extract_stream_features", "EncoderTrainConfig", "train_encoder_stt", "FEATURES_FORMAT"]

log = logging.getLogger(__name__)

FEATURES_FORMAT = "parley-stream-features-1"
RATE_HZ = 8000


def _encoder_keys(cfg: WhisperSTTConfig) -> dict[str, int | str]:
    return {"window_frames": cfg.window_frames, "hop_frames": cfg.hop_frames,
            "lookahead_frames": cfg.lookahead_frames, "features": cfg.features}


def _summary_keys(summary: dict) -> dict:
    """A features folder's encoder keys (folders made before "features" existed are streams)."""
    return {"features": "stream", **summary["encoder"]}


def _extract_shard(job: tuple[int, list[str], str, dict]) -> dict:
    shard, paths, out, keys = job
    torch.set_num_threads(1)
    keys = dict(keys)
    whole = keys.pop("features") == "utterance"
    enc = StreamingWhisperEncoder(shared_encoder(), **keys)
    writer = ShardWriter(out, shard)
    t0 = time.monotonic()
    for i, path in enumerate(paths):
        x, rate = read_audio(path)
        if rate != RATE_HZ:
            x = resample(x, rate, RATE_HZ)
        audio = torch.from_numpy(np.ascontiguousarray(x, np.float32))[None]
        feats = enc.utterance_features(audio) if whole else enc.clip_features(audio)
        writer.add(path, feats.numpy())
        if shard == 0 and (i + 1) % 500 == 0:
            log.info("stream features: shard 0, %d of %d clips (%.0f s)", i + 1, len(paths),
                     time.monotonic() - t0)
    writer.close()
    return {"shard": shard, "clips": len(writer.rows), "frames": writer.frames,
            "seconds": round(time.monotonic() - t0, 1)}


def extract_stream_features(manifest: str | Path, out: str | Path, config: WhisperSTTConfig, *,
                            workers: int = 2) -> dict:
    """Every clip of ``manifest`` through the encoder -> ``out`` (float16 shards, their index,
    ``summary.json`` naming the manifest and the encoder's window, hop, look-ahead and features:
    a stream's windows, or each clip encoded whole when ``config.features`` is "utterance")."""
    rows = read_manifest(manifest)
    check_not_reserved(p for p, _ in rows)          # the outside test is never heard
    if not rows:
        raise DataError(f"{manifest}: no clips")
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("shard-*"):             # a run before, with other workers
        old.unlink()
    paths = [str(p) for p, _ in rows]
    workers = max(1, min(workers, len(paths)))
    keys = _encoder_keys(config)
    jobs = [(k, paths[k::workers], str(out_dir), keys) for k in range(workers)]
    t0 = time.monotonic()
    log.info("stream features: %d clips of %s, %d workers, encoder %s", len(paths), manifest,
             workers, keys)
    if workers == 1:
        done = [_extract_shard(jobs[0])]
    else:
        with ProcessPoolExecutor(workers) as pool:
            done = list(pool.map(_extract_shard, jobs))
    frames = sum(d["frames"] for d in done)
    summary = {"format": FEATURES_FORMAT, "manifest": str(manifest), "encoder": keys,
               "clips": len(paths), "frames": frames,
               "hours": round(frames / 50 / 3600, 3), "shards": done,
               "seconds": round(time.monotonic() - t0, 1)}
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def _voices(manifest: str | Path) -> dict[str, str]:
    """clip key -> voice label, from the ``<split>_voices.tsv`` beside a manifest ({} if none)."""
    m = Path(manifest)
    path = m.with_name(f"{m.stem}_voices.tsv")
    if not path.exists():
        return {}
    return {clip_key(p): label for p, label in read_manifest(path)}


def _read_features(directory: str | Path, *, manifest: str | None = None,
                   exclude: frozenset[str] = frozenset(), max_per_voice: int | None = None,
                   seed: int = 0) -> tuple[dict, list[tuple[np.ndarray, str]]]:
    """A features folder -> (its summary, [(frames float16 (T, 384), normalised text)]) for the
    clips of ``manifest`` (default: the one they were made from), less those in ``exclude``
    (clip keys), at most ``max_per_voice`` a voice (drawn with ``seed``)."""
    d = Path(directory)
    try:
        summary = json.loads((d / "summary.json").read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{d}: no readable summary.json (make the folder with parley data "
                          f"stream-features)") from exc
    if summary.get("format") != FEATURES_FORMAT:
        raise ConfigError(f"{d}: not stream features ({summary.get('format')!r})")
    feats = TeacherFeatures(d, normalise=False)
    source = manifest or summary["manifest"]
    rows = [(p, t) for p, t in read_manifest(source) if clip_key(p) not in exclude]
    if max_per_voice is not None:
        voices = _voices(source)
        by_voice: dict[str, list[int]] = {}
        for i, (p, _) in enumerate(rows):
            by_voice.setdefault(voices.get(clip_key(p), "?"), []).append(i)
        rng = random.Random(seed)
        keep = sorted(i for idx in by_voice.values()
                      for i in (rng.sample(idx, max_per_voice) if len(idx) > max_per_voice else idx))
        rows = [rows[i] for i in keep]
    out = []
    for path, text in rows:
        f = feats.get(path, np.float16)        # as stored: half the memory of float32
        if f is not None:
            out.append((f, normalize_text(text)))
    return summary, out


@dataclass(frozen=True)
class EncoderTrainConfig:
    train: list[str]                    # stream-feature folders
    heldout: str                        # a stream-feature folder to choose the best check on
    run_dir: str
    heldout_manifest: str | None = None  # its clips (default: all); none of them ever trains
    max_per_voice: int | None = None    # a voice with more clips in a folder keeps this many
    d_model: int = 256
    n_layers: int = 3
    lr: float = 2e-3
    weight_decay: float = 0.01
    warmup_steps: int = 200
    max_steps: int = 100_000
    max_minutes: float = 40.0
    min_lr_frac: float = 0.05
    batch_frames: int = 4000
    eval_every_steps: int = 250
    checkpoint_every_s: float = 300.0
    phones_dict: str | None = None
    phone_weight: float = 0.5
    time_masks_per_s: float = 1.0       # one mask of up to time_mask_frames per second of frames
    time_mask_frames: int = 5
    channel_dropout: float = 0.1
    seed: int = 0
    threads: int = 1
    weights: list[float] = field(default_factory=list)   # copies of each train folder a epoch


def _augment(x: torch.Tensor, lengths: list[int], cfg: EncoderTrainConfig,
             rng: np.random.Generator) -> torch.Tensor:
    x = x.clone()
    for i, n in enumerate(lengths):
        for _ in range(int(rng.poisson(cfg.time_masks_per_s * n / 50))):
            w = int(rng.integers(1, cfg.time_mask_frames + 1))
            s = int(rng.integers(0, max(1, n - w)))
            x[i, s: s + w] = 0.0
    if cfg.channel_dropout > 0:
        x = F.dropout(x, cfg.channel_dropout, training=True)
    return x


@torch.no_grad()
def _evaluate(model: WhisperSTTModel, clips: list[tuple[np.ndarray, str]], batch: int = 32) -> dict:
    model.eval()
    refs, hyps = [], []
    for i in range(0, len(clips), batch):
        part = clips[i: i + batch]
        n = max(f.shape[0] for f, _ in part)
        x = torch.zeros(len(part), n, 384)
        for j, (f, _) in enumerate(part):
            x[j, : f.shape[0]] = torch.from_numpy(f.astype(np.float32))
        logits, _ = model.forward_features(x)
        lp = torch.log_softmax(logits, -1)
        for j, (f, text) in enumerate(part):
            hyps.append(greedy_decode(lp[j, : f.shape[0]]))
            refs.append(text)
    model.train()
    return {"cer": cer(refs, hyps), "wer": wer(refs, hyps), "n": len(refs),
            "examples": [{"ref": r, "hyp": h} for r, h in list(zip(refs, hyps))[:3]]}


def train_encoder_stt(cfg: EncoderTrainConfig) -> dict:
    run = Path(cfg.run_dir)
    run.mkdir(parents=True, exist_ok=True)
    with run_log(run):
        return _train(cfg, run)


def _train(cfg: EncoderTrainConfig, run: Path) -> dict:
    torch.set_num_threads(cfg.threads)
    log.info("config %s", json.dumps(dataclasses.asdict(cfg)))
    clips: list[tuple[np.ndarray, str]] = []
    keys = None
    held_rows = read_manifest(cfg.heldout_manifest) if cfg.heldout_manifest else []
    exclude = frozenset(clip_key(p) for p, _ in held_rows)
    for k, d in enumerate(cfg.train):
        summary, part = _read_features(d, exclude=exclude, max_per_voice=cfg.max_per_voice,
                                       seed=cfg.seed + k)
        if keys is not None and _summary_keys(summary) != keys:
            raise ConfigError(f"{d}: encoder {_summary_keys(summary)}, the other folders {keys}")
        keys = _summary_keys(summary)
        copies = cfg.weights[k] if k < len(cfg.weights) else 1.0
        rng_pick = random.Random(cfg.seed + k)
        whole, frac = int(copies), copies - int(copies)
        part = part * whole + [c for c in part if rng_pick.random() < frac]
        log.info("%s: %d clips (x%.2f)", d, len(part), copies)
        clips += part
    h_summary, heldout = _read_features(cfg.heldout, manifest=cfg.heldout_manifest)
    if _summary_keys(h_summary) != keys:
        raise ConfigError(f"{cfg.heldout}: encoder {_summary_keys(h_summary)}, training {keys}")
    heldout = heldout[:400]
    mcfg = WhisperSTTConfig(**(keys or {}), phone_vocab_size=len(PHONES) if cfg.phones_dict else 0,
                            ssm={**WhisperSTTConfig().ssm, "d_model": cfg.d_model,
                                 "n_layers": cfg.n_layers})
    targets = [torch.tensor(encode(t), dtype=torch.long) for _, t in clips]
    phone_targets: list[torch.Tensor | None] = [None] * len(clips)
    if cfg.phones_dict:
        pron = Pronouncer.load(cfg.phones_dict)
        for i, (_, t) in enumerate(clips):
            ids = pron.encode(t)
            phone_targets[i] = None if ids is None else torch.tensor(ids, dtype=torch.long)
    frames = sum(f.shape[0] for f, _ in clips)
    log.info("%d training clips (%.2f h of frames), %d held out", len(clips), frames / 50 / 3600,
             len(heldout))
    torch.manual_seed(cfg.seed)
    model = WhisperSTTModel(mcfg)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay,
                            betas=(0.9, 0.98))
    step, elapsed_s, best, epoch, pos = 0, 0.0, math.inf, 0, 0
    last = run / "last.pt"
    if last.exists():
        ck = torch.load(last, weights_only=False)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        step, elapsed_s, best, epoch, pos = (ck["step"], ck["elapsed_s"], ck["best"], ck["epoch"],
                                             ck["pos"])
        log.info("resumed from %s at step %d (%.1f min trained)", last, step, elapsed_s / 60)
    log.info("model: %d trained parameters on Whisper's encoder", model.n_params())

    def save_last() -> None:
        tmp = run / "last.pt.tmp"
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step,
                    "elapsed_s": elapsed_s, "best": best, "epoch": epoch, "pos": pos,
                    "config": mcfg.to_dict()}, tmp)
        tmp.replace(last)

    lengths = [f.shape[0] for f, _ in clips]
    rng = np.random.default_rng(cfg.seed + step)
    batches = length_batches(lengths, cfg.batch_frames, random.Random(cfg.seed * 1000 + epoch))
    metrics = open(run / "metrics.jsonl", "a", encoding="utf-8")
    t_start, t_ckpt = time.monotonic() - elapsed_s, time.monotonic()
    res: dict = {}
    try:
        while step < cfg.max_steps and elapsed_s < cfg.max_minutes * 60:
            if pos >= len(batches):
                epoch, pos = epoch + 1, 0
                batches = length_batches(lengths, cfg.batch_frames,
                                         random.Random(cfg.seed * 1000 + epoch))
            idx = batches[pos]
            pos += 1
            n = [lengths[i] for i in idx]
            x = torch.zeros(len(idx), max(n), 384)
            for j, i in enumerate(idx):
                x[j, : n[j]] = torch.from_numpy(clips[i][0].astype(np.float32))
            x = _augment(x, n, cfg, rng)
            for g in opt.param_groups:
                g["lr"] = cfg.lr * cosine_lr_scale(step, elapsed_s, warmup_steps=cfg.warmup_steps,
                                                   max_steps=cfg.max_steps,
                                                   max_minutes=cfg.max_minutes,
                                                   min_frac=cfg.min_lr_frac)
            logits, phone_logits = model.forward_features(x)
            lens = torch.tensor(n)
            lp = torch.log_softmax(logits, -1).transpose(0, 1)
            tg = [targets[i] for i in idx]
            loss = F.ctc_loss(lp, torch.cat(tg), lens, torch.tensor([len(t) for t in tg]),
                              blank=0, reduction="mean", zero_infinity=True)
            if phone_logits is not None:
                keep = [j for j, i in enumerate(idx) if phone_targets[i] is not None
                        and len(phone_targets[i]) > 0]           # type: ignore[arg-type]
                if keep:
                    pt = [phone_targets[idx[j]] for j in keep]
                    plp = torch.log_softmax(phone_logits[keep], -1).transpose(0, 1)
                    loss = loss + cfg.phone_weight * F.ctc_loss(
                        plp, torch.cat(pt), lens[keep],             # type: ignore[arg-type]
                        torch.tensor([len(t) for t in pt]),        # type: ignore[arg-type]
                        blank=PHONE_BLANK, reduction="mean", zero_infinity=True)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            step += 1
            elapsed_s = time.monotonic() - t_start
            if step % 50 == 0:
                log.info("step %d epoch %d loss %.3f lr %.2e (%.1f min)", step, epoch,
                         float(loss.detach()), opt.param_groups[0]["lr"], elapsed_s / 60)
            if step % cfg.eval_every_steps == 0:
                res = _evaluate(model, heldout)
                metrics.write(json.dumps({"step": step, "elapsed_s": round(elapsed_s, 1),
                                          "loss": float(loss.detach()), **{k: v for k, v in res.items()
                                                                  if k != "examples"}}) + "\n")
                metrics.flush()
                log.info("held-out step %d: WER %.3f CER %.3f %s", step, res["wer"], res["cer"],
                         res["examples"][:1])
                if res["wer"] < best:
                    best = res["wer"]
                    save_whisper_stt(model, run / "best")
            if time.monotonic() - t_ckpt > cfg.checkpoint_every_s:
                save_last()
                t_ckpt = time.monotonic()
        res = _evaluate(model, heldout)
        log.info("held-out at the end (step %d): WER %.3f CER %.3f", step, res["wer"], res["cer"])
        if res["wer"] < best:
            best = res["wer"]
            save_whisper_stt(model, run / "best")
        save_whisper_stt(model, run / "final")
        save_last()
    finally:
        metrics.close()
    return {"step": step, "epoch": epoch, "best_wer": best, **res}
