"""Train the streaming CTC recogniser (``parley train stt``), resumably, on one CPU thread or a GPU.

    cfg = TrainConfig(train_manifest="data/stt/v1/train.tsv",
                      heldout_manifest="data/stt/v1/heldout.tsv", run_dir="runs/stt/v1")
    train(cfg)

The run directory holds everything: ``last.pt`` (model, optimiser, step, elapsed time, written
every ``checkpoint_every_s`` and at the end; a second run with the same run_dir resumes from it),
``best/`` (an exported checkpoint, ``save_stt`` format, of the lowest held-out CER so far),
``train.log`` and ``metrics.jsonl``. The learning rate warms up, then follows a cosine over
``max(step / max_steps, elapsed / max_minutes)``, so a run cut by its time budget still ends
with a decayed rate. Held-out evaluation uses whole voices never trained on, at 8 kHz through a
mu-law round trip (the phone channel), decoded greedily.

Augmentation on the fly (each epoch hears each clip differently; the data set's own phone-channel
augmentation is fixed per clip): a level change, speed perturbation (``speed``: the clip is
resampled so it plays 1 +- speed times as fast, changing tempo, pitch and formants together, as a
different speaker would), vocal-tract length perturbation (``warp``: the log-mel spectrum is read
at frequencies scaled by 1 +- warp, moving formants without touching tempo or pitch, which speed
perturbation ties together) and SpecAugment on the normalised log-mel features (``freq_masks``
bands of up to ``freq_mask_mels`` mel bins, and one time mask of up to ``time_mask_ms`` per
``time_mask_every_s`` of audio, set to the feature mean). ``init_from`` starts a new run from an
exported checkpoint (weights and feature statistics) with a fresh optimiser and schedule.

Distillation (``distill``: a folder of Whisper tiny.en encoder features, ``distill.py``): beside
the CTC losses, a linear head on the residual stream after ``distill_layer`` SSM layers regresses
the teacher's frame ``distill_delay`` frames back (L1 plus one minus the cosine, on features
normalised per dimension), weighted ``distill_weight``. A clip played faster or slower has its
teacher frames stretched to match. The head lives in ``last.pt`` only; the exported recogniser
has no trace of it.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..data.audio import mulaw_roundtrip, read_audio, resample
from ..data.augment import speed_perturb
from ..data.human import check_not_reserved
from ..data.manifest import read_manifest
from ..device import resolve_device
from ..training import cosine_lr_scale, length_batches, run_log
from .decode import cer, greedy_decode, wer
from .distill import TEACHER_DIM, TeacherFeatures, stretch
from .model import STTConfig, STTModel, load_stt, save_stt
from .phones import PHONE_BLANK, PHONES, Pronouncer
from .text import encode, normalize_text
from ..errors import ConfigError

__all__ = ["TrainConfig", "train", "load_clips", "load_clip_rows", "evaluate", "spec_augment",
           "mel_warp", "load_deepened", "run_results"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainConfig:
    train_manifest: str
    heldout_manifest: str
    run_dir: str
    d_model: int = 256
    n_layers: int = 6
    d_state: int = 64
    headdim: int = 64
    conv_channels: int = 256
    batch_audio_s: float = 64.0        # seconds of audio (padded) per batch
    max_clip_s: float = 12.0
    lr: float = 2e-3
    min_lr_frac: float = 0.05
    weight_decay: float = 0.01
    warmup_steps: int = 200
    max_steps: int = 100_000
    max_minutes: float = 80.0
    eval_every_steps: int = 250
    eval_utterances: int = 150
    checkpoint_every_s: float = 180.0
    gain_db: float = 6.0               # random level change per clip, +- this
    speed: float = 0.0                 # speed perturbation per clip, 1 +- this (0 = off)
    warp: float = 0.0                  # vocal-tract length perturbation, 1 +- this (0 = off)
    freq_masks: int = 0                # SpecAugment: frequency masks per clip (0 = off)
    freq_mask_mels: int = 8
    time_mask_every_s: float = 0.0     # SpecAugment: one time mask per this much audio (0 = off)
    time_mask_ms: int = 80
    init_from: str | None = None       # exported checkpoint to start a new run from
    phones_dict: str | None = None     # CMUdict file: add a phone CTC head (see phones.py)
    phone_weight: float = 1.0          # its loss's weight beside the characters'
    norm: str = "fixed"                # feature normalisation: fixed statistics, or "stream" (frontend.py)
    distill: str | None = None         # Whisper teacher features (distill.py) to regress, or None
    distill_weight: float = 1.0
    distill_layer: int = 4             # regress from the residual stream after this many layers
    distill_delay: int = 2             # frames the student's regression lags the teacher
    seed: int = 1
    threads: int = 1
    device: str = "cpu"                # where the model trains: cpu, cuda[:N], or auto (a GPU if seen)
    progress: bool = True

    def model_config(self) -> STTConfig:
        return STTConfig(conv_channels=self.conv_channels,
                         phone_vocab_size=len(PHONES) if self.phones_dict else 0,
                         norm=self.norm,
                         ssm=dict(d_model=self.d_model, n_layers=self.n_layers,
                                  d_state=self.d_state, headdim=self.headdim, expand=2))


def load_clips(manifest: str | Path, rate_hz: int, *, phone: bool = False, limit: int | None = None,
               max_s: float | None = None) -> list[tuple[np.ndarray, str]]:
    """Read a manifest's clips at ``rate_hz`` (resampled if needed), optionally through the mu-law
    channel. ``limit`` keeps an evenly spread subset. -> [(float32 samples, normalised text)]."""
    return [(x, text) for _, x, text in load_clip_rows(manifest, rate_hz, phone=phone, limit=limit,
                                                       max_s=max_s)]


def load_clip_rows(manifest: str | Path, rate_hz: int, *, phone: bool = False,
                   limit: int | None = None, max_s: float | None = None
                   ) -> list[tuple[Path, np.ndarray, str]]:
    """``load_clips`` with each clip's path: [(path, float32 samples, normalised text)]."""
    rows = read_manifest(manifest)
    check_not_reserved(p for p, _ in rows)        # the outside test never trains or tunes
    if limit is not None and len(rows) > limit:
        stride = len(rows) / limit
        rows = [rows[int(i * stride)] for i in range(limit)]
    clips = []
    for path, text in rows:
        x, rate = read_audio(path)
        if rate != rate_hz:
            x = resample(x, rate, rate_hz)
        if phone:
            x = mulaw_roundtrip(x)
        if max_s is not None and x.size > max_s * rate_hz:
            continue
        clips.append((path, x, normalize_text(text)))
    return clips


def _pad(clips: list[np.ndarray], step: int) -> tuple[torch.Tensor, torch.Tensor]:
    n = max(c.size for c in clips)
    n += (-n) % step
    out = np.zeros((len(clips), n), np.float32)
    for i, c in enumerate(clips):
        out[i, : c.size] = c
    frames = torch.tensor([math.ceil(c.size / step) for c in clips], dtype=torch.long)
    return torch.from_numpy(out), frames


@torch.no_grad()
def evaluate(model: STTModel, clips: list[tuple[np.ndarray, str]], batch: int = 16,
             pronouncer: Pronouncer | None = None) -> dict:
    """Greedy-decode clips -> {"cer", "wer", "n", "examples"}; with a phone head and a
    ``pronouncer``, also "per": the phone error rate over the clips whose words it knows."""
    model.eval()
    refs, hyps, phone_refs, phone_hyps = [], [], [], []
    step = model.config.step_samples
    device = model.frontend.feat_mean.device
    for i in range(0, len(clips), batch):
        part = clips[i:i + batch]
        audio, frames = _pad([c for c, _ in part], step)
        logits, phone_logits = model.forward_heads(audio.to(device))
        lp = torch.log_softmax(logits, dim=-1).cpu()
        if phone_logits is not None:
            phone_logits = phone_logits.cpu()
        for j, (_, text) in enumerate(part):
            hyps.append(greedy_decode(lp[j, : int(frames[j])]))
            refs.append(text)
            ref = pronouncer.encode(text) if pronouncer is not None else None
            if phone_logits is not None and ref is not None:
                best = phone_logits[j, : int(frames[j])].argmax(-1).tolist()
                ids = [p for k, p in enumerate(best)
                       if p != PHONE_BLANK and (k == 0 or p != best[k - 1])]
                phone_refs.append(" ".join(PHONES[p] for p in ref))
                phone_hyps.append(" ".join(PHONES[p] for p in ids))
    model.train()
    res = {"cer": cer(refs, hyps), "wer": wer(refs, hyps), "n": len(refs),
           "examples": [{"ref": r, "hyp": h} for r, h in list(zip(refs, hyps))[:3]]}
    if phone_refs:
        res["per"] = wer(phone_refs, phone_hyps)      # phones as "words": edit distance / length
        res["per_n"] = len(phone_refs)
    return res


def spec_augment(mel: torch.Tensor, lengths: list[int], rng: np.random.Generator, *,
                 freq_masks: int, freq_mask_mels: int, time_mask_every: int,
                 time_mask_frames: int) -> torch.Tensor:
    """SpecAugment on normalised log-mel (b, T, F): masked cells are set to 0 (the feature mean).
    ``lengths`` are each clip's real frames; time masks fall inside them. Returns a new tensor."""
    b, t, f = mel.shape
    keep = torch.ones(b, t, f, dtype=mel.dtype, device=mel.device)
    for i in range(b):
        for _ in range(freq_masks):
            w = int(rng.integers(0, freq_mask_mels + 1))
            if w:
                f0 = int(rng.integers(0, f - w + 1))
                keep[i, :, f0:f0 + w] = 0
        n = lengths[i] // time_mask_every if time_mask_every > 0 else 0
        for _ in range(n):
            w = int(rng.integers(0, time_mask_frames + 1))
            if w and lengths[i] > w:
                t0 = int(rng.integers(0, lengths[i] - w + 1))
                keep[i, t0:t0 + w, :] = 0
    return mel * keep


def mel_warp(mel: torch.Tensor, factors: np.ndarray, centers_hz: torch.Tensor,
             mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """Vocal-tract length perturbation on normalised log-mel (b, T, F): clip i's spectrum is
    warped so that what sat at frequency f moves to ``factors[i] * f`` (a longer or shorter vocal
    tract: formants move, pitch and tempo stay). Each mel bin reads the raw log-mel linearly
    interpolated at its centre frequency over the factor (``centers_hz``, ascending, one per bin);
    bins that would read past either end take the edge bin. Normalisation (``mean``, ``std``) is
    undone first and applied again after. Returns a new tensor."""
    b, _, f = mel.shape
    if len(factors) != b or centers_hz.shape != (f,):
        raise ConfigError(f"mel_warp: {len(factors)} factors and {tuple(centers_hz.shape)} centres "
                         f"for mel of shape {tuple(mel.shape)}")
    raw = mel * std + mean
    centers = centers_hz.detach().to("cpu", torch.float64).numpy()
    grid = np.arange(f, dtype=np.float64)
    out = torch.empty_like(raw)
    for i, a in enumerate(factors):
        pos_t = torch.from_numpy(np.interp(centers / float(a), centers, grid))
        lo = pos_t.floor().long().clamp(0, f - 1)
        hi = (lo + 1).clamp(max=f - 1)
        w = (pos_t - lo.to(torch.float64)).to(raw.device, raw.dtype)
        lo, hi = lo.to(raw.device), hi.to(raw.device)
        out[i] = raw[i][:, lo] * (1 - w) + raw[i][:, hi] * w
    return (out - mean) / std


def _augment(mel: torch.Tensor, *, warp: tuple[np.ndarray, torch.Tensor, torch.Tensor,
                                                 torch.Tensor] | None,
             spec: Callable[[torch.Tensor], torch.Tensor] | None) -> torch.Tensor:
    """The training feature augmentation: VTLP (``warp``: factors, centres, mean, std), then
    SpecAugment (``spec``)."""
    if warp is not None:
        mel = mel_warp(mel, *warp)
    return spec(mel) if spec is not None else mel


def _feature_stats(model: STTModel, clips: list[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
    fe = model.frontend
    feats = []
    for c in clips:
        x = torch.from_numpy(np.concatenate([np.zeros(fe.context, np.float32), c]))[None]
        feats.append(fe.log_mel(x.to(fe.feat_mean.device))[0])
    allf = torch.cat(feats)
    return allf.mean(0), allf.std(0)


def train(cfg: TrainConfig) -> dict:
    """Run (or resume) training as configured; returns the last evaluation."""
    torch.set_num_threads(cfg.threads)
    device = resolve_device(cfg.device)   # a GPU asked for and not seen: one line, before anything
    run = Path(cfg.run_dir)
    run.mkdir(parents=True, exist_ok=True)
    with run_log(run):
        return _train(cfg, run, device)


def run_results(run_dir: str | Path, out_dir: str | Path) -> dict:
    """A run's weights and logs, small, to carry back from a machine that trained it (the GPU
    machine's $OUT: at most 8 files): ``best/`` (the check's best, as saved), ``last/`` (the
    weights of ``last.pt``, without the optimiser's state, with the check made at its step in
    ``step.json`` when the run made one), ``train.log`` and ``metrics.jsonl``. A run with no
    check yet has no ``best/``; one without ``last.pt`` no ``last/``. -> {what: bytes} of the
    files written."""
    import shutil

    from .export import check_at

    run, out = Path(run_dir), Path(out_dir)
    if not (run / "train.log").exists():
        raise ConfigError(f"{run}: not a training run (no train.log)")
    out.mkdir(parents=True, exist_ok=True)
    written: dict[str, int] = {}

    def put(src: Path, name: str) -> None:
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, out / name)
        written[name] = (out / name).stat().st_size

    for name in ("train.log", "metrics.jsonl"):
        if (run / name).exists():
            put(run / name, name)
    if (run / "best" / "model.safetensors").exists():
        for name in ("config.json", "model.safetensors"):
            put(run / "best" / name, f"best/{name}")
    if (run / "last.pt").exists():
        ck = torch.load(run / "last.pt", map_location="cpu", weights_only=False)
        model = STTModel(TrainConfig(**ck["config"]).model_config())
        model.load_state_dict(ck["model"])
        save_stt(model, out / "last")
        final = check_at(run, ck["step"])   # the check at the step it stopped on (none mid-run)
        if final is not None:
            text = json.dumps({k: v for k, v in final.items() if k != "examples"}, indent=2)
            (out / "last" / "step.json").write_text(text + "\n")
        written.update({f"last/{f.name}": f.stat().st_size for f in sorted((out / "last").iterdir())})
    return written


def load_deepened(model: STTModel, start: STTModel) -> list[int]:
    """Load ``start``'s weights into ``model``, the same model with more SSM layers, so that it
    computes what ``start`` did: ``start``'s layers keep their order, spread evenly through the
    deeper stack, and each new layer's output projection starts at zero, which makes its residual
    block the identity (it learns from there): more capacity without starting from scratch.
    -> the new layers' indices; ValueError when the models differ in anything but depth, or
    ``model`` is not deeper."""
    src, dst = start.config.ssm_config, model.config.ssm_config
    same = (dataclasses.replace(start.config, ssm={**start.config.ssm, "n_layers": dst.n_layers})
            == model.config)
    if not same or dst.n_layers <= src.n_layers:
        raise ConfigError(f"its config {start.config} differs from this run's {model.config} in "
                         f"more than added SSM layers (a run may start from a checkpoint of the "
                         f"same shape, or deepen it)")
    keep = [i * dst.n_layers // src.n_layers for i in range(src.n_layers)]
    moved = {}
    for key, value in start.state_dict().items():
        parts = key.split(".")
        if parts[0] == "stack" and parts[1] in ("blocks", "norms"):
            parts[2] = str(keep[int(parts[2])])
        moved[".".join(parts)] = value
    target = model.state_dict()
    added = [i for i in range(dst.n_layers) if i not in keep]
    for i in added:
        out = cast(nn.Linear, model.stack.blocks[i].out_proj)
        moved[f"stack.blocks.{i}.out_proj.weight"] = torch.zeros_like(out.weight)
        if out.bias is not None:
            moved[f"stack.blocks.{i}.out_proj.bias"] = torch.zeros_like(out.bias)
        for key in target:
            if key.startswith((f"stack.blocks.{i}.", f"stack.norms.{i}.")):
                moved.setdefault(key, target[key])
    model.load_state_dict(moved)
    return added


def _phone_loss(logits: torch.Tensor, frames: torch.Tensor,
                targets: list[torch.Tensor | None]) -> torch.Tensor:
    """CTC over phones, mean per target phone, over the clips that have phone targets (0 when
    none of the batch's do)."""
    keep = [i for i, t in enumerate(targets) if t is not None and len(t) > 0]
    if not keep:
        return logits.sum() * 0.0
    lp = torch.log_softmax(logits[keep], dim=-1).transpose(0, 1)
    tgt = [t for t in targets if t is not None and len(t) > 0]   # the targets of ``keep``
    return F.ctc_loss(lp, torch.cat(tgt).to(lp.device), frames[keep], torch.tensor([len(t) for t in tgt]),
                      blank=PHONE_BLANK, reduction="mean", zero_infinity=True)


def _distill_tap(model: STTModel, layer: int) -> tuple[nn.Linear, list[torch.Tensor]]:
    """A linear head to the teacher's width, and the list a hook fills with the residual stream
    after ``layer`` SSM layers (one tensor per scanned segment) on every forward pass."""
    n = model.config.ssm_config.n_layers
    if not 1 <= layer <= n:
        raise ConfigError(f"distill_layer {layer}: the model has SSM layers 1..{n}")
    captured: list[torch.Tensor] = []
    # the input of layer ``layer``'s norm (or, after the last layer, of the final norm) is the
    # residual stream after ``layer`` layers
    tap = model.stack.norms[layer] if layer < n else model.stack.norm_f
    tap.register_forward_pre_hook(lambda _m, args: captured.append(args[0]))
    return nn.Linear(model.config.ssm_config.d_model, TEACHER_DIM), captured


@torch.no_grad()
def _fit_distill_head(model: STTModel, head: nn.Linear, captured: list[torch.Tensor],
                      clips: list[np.ndarray], teach: list[np.ndarray], delay: int,
                      batch: int = 16) -> float:
    """Start the distillation head at the least-squares (ridge) map from the student's hidden
    state to the teacher's frames over ``clips`` (heard without augmentation), so that its first
    gradients into the student say something rather than undo a random projection. -> the
    fitted map's mean L1 error on those frames."""
    was_training = model.training
    model.eval()
    device = model.frontend.feat_mean.device
    hs, ys = [], []
    step = model.config.step_samples
    for i in range(0, len(clips), batch):
        audio, frames = _pad(clips[i:i + batch], step)
        captured.clear()
        model.forward_heads(audio.to(device))
        h = torch.cat(captured, dim=1).cpu()
        for j, feats in enumerate(teach[i:i + batch]):
            n = min(int(frames[j]), h.shape[1])
            if n > delay:
                hs.append(h[j, delay:n])
                ys.append(torch.from_numpy(stretch(feats, n)[: n - delay]))
    captured.clear()
    model.train(was_training)
    hm, ym = torch.cat(hs).double(), torch.cat(ys).double()
    x = torch.cat([hm, torch.ones(hm.shape[0], 1, dtype=hm.dtype)], dim=1)
    gram = x.T @ x
    gram += 1e-3 * torch.trace(gram) / gram.shape[0] * torch.eye(gram.shape[0], dtype=gram.dtype)
    w = torch.linalg.solve(gram, x.T @ ym)               # (d + 1, D)
    head.weight.copy_(w[:-1].T.to(head.weight))
    head.bias.copy_(w[-1].to(head.bias))
    return float((x @ w - ym).abs().mean())


def _distill_loss(pred: torch.Tensor, frames: torch.Tensor, teach: list[np.ndarray | None],
                  delay: int) -> torch.Tensor:
    """L1 plus (1 - cosine) between the student's predictions (b, T, D) and each clip's teacher
    frames, stretched to the clip's ``frames`` and ``delay`` frames late: student frame t answers
    for teacher frame t - delay. Mean over the frames that have a teacher (0 when none do)."""
    b, t, d = pred.shape
    target = np.zeros((b, t, d), np.float32)
    mask = np.zeros((b, t), np.float32)
    for i, feats in enumerate(teach):
        n = min(int(frames[i]), t)
        if feats is None or n <= delay:
            continue
        target[i, delay:n] = stretch(feats, n)[: n - delay]
        mask[i, delay:n] = 1.0
    if not mask.any():
        return pred.sum() * 0.0
    tgt = torch.from_numpy(target).to(pred.device)
    m = torch.from_numpy(mask).to(pred.device)
    l1 = (pred - tgt).abs().mean(-1)
    cos = F.cosine_similarity(pred, tgt, dim=-1, eps=1e-6)
    return ((l1 + 1.0 - cos) * m).sum() / m.sum()


def _train(cfg: TrainConfig, run: Path, device: torch.device) -> dict:
    mcfg = cfg.model_config()
    rate, step_samples = mcfg.sample_rate_hz, mcfg.step_samples
    log.info("config %s", json.dumps(dataclasses.asdict(cfg)))
    if cfg.distill and not (1 <= cfg.distill_layer <= cfg.n_layers and cfg.distill_delay >= 0):
        raise ConfigError(f"distill_layer {cfg.distill_layer} / distill_delay "
                          f"{cfg.distill_delay}: a layer in 1..{cfg.n_layers} and a delay >= 0")
    teacher = TeacherFeatures(cfg.distill) if cfg.distill else None   # before the clips load
    t_load = time.monotonic()
    rows = load_clip_rows(cfg.train_manifest, rate, max_s=cfg.max_clip_s)
    train_clips = [(x, text) for _, x, text in rows]
    heldout = load_clips(cfg.heldout_manifest, rate, phone=True, limit=cfg.eval_utterances)
    targets = [torch.tensor(encode(t), dtype=torch.long) for _, t in train_clips]
    pronouncer = None
    phone_targets: list[torch.Tensor | None] = []
    if cfg.phones_dict:
        pronouncer = Pronouncer.load(cfg.phones_dict)
        for _, t in train_clips:
            ids = pronouncer.encode(t)
            phone_targets.append(None if ids is None else torch.tensor(ids, dtype=torch.long))
        known = sum(p is not None for p in phone_targets)
        log.info("phone targets for %d of %d training clips (%d words in %s; the rest train "
                 "the characters only)", known, len(train_clips), len(pronouncer),
                 cfg.phones_dict)
    paths = [path for path, _, _ in rows]      # read from the teacher's memory map per batch
    taught = [i for i, p in enumerate(paths) if teacher.has(p)] if teacher is not None else []
    if teacher is not None:
        if not taught:
            raise ConfigError(f"{cfg.distill} has no features for any clip of "
                              f"{cfg.train_manifest} (they are found by the clips' paths as "
                              f"seen from where they were made: run both from the same folder)")
        log.info("teacher features for %d of %d training clips (%s; the rest train the CTC "
                 "heads only)", len(taught), len(rows), cfg.distill)
    del rows
    hours = sum(c.size for c, _ in train_clips) / rate / 3600.0
    log.info("loaded %d training clips (%.2f h) and %d held-out clips in %.1f s",
             len(train_clips), hours, len(heldout), time.monotonic() - t_load)

    torch.manual_seed(cfg.seed)
    if device.type == "cuda":          # TF32 matrix products: the GPU's fast path, ample for CTC
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    model = STTModel(mcfg)
    if cfg.init_from and not (run / "last.pt").exists():
        start = load_stt(cfg.init_from)
        if start.config.norm != mcfg.norm:
            # the weights carry over; the front end's normalisation is not a weight
            log.info("%s normalises its features %s; this run: %s", cfg.init_from,
                     start.config.norm, mcfg.norm)
            start.config = dataclasses.replace(start.config, norm=mcfg.norm,
                                               norm_tau=mcfg.norm_tau)
        if start.config == mcfg:
            model.load_state_dict(start.state_dict())
            log.info("initialised from %s (weights and feature statistics)", cfg.init_from)
        elif (start.config.phone_vocab_size == 0 and mcfg.phone_vocab_size
              and dataclasses.replace(start.config, phone_vocab_size=mcfg.phone_vocab_size)
              == mcfg):
            missing = model.load_state_dict(start.state_dict(), strict=False).missing_keys
            log.info("initialised from %s (weights and feature statistics); new phone head %s",
                     cfg.init_from, missing)
        else:
            try:
                added = load_deepened(model, start)
            except ValueError as exc:
                raise ConfigError(f"init_from {cfg.init_from}: {exc}") from exc
            log.info("initialised from %s (weights and feature statistics), deepened from %d to "
                     "%d SSM layers: new layers %s start as the identity", cfg.init_from,
                     start.config.ssm_config.n_layers, mcfg.ssm_config.n_layers, added)
        model.train()
    model.to(device)
    log.info("training on %s", device)
    params = list(model.parameters())
    distill_head = captured = None
    if cfg.distill:
        distill_head, captured = _distill_tap(model, cfg.distill_layer)
        distill_head.to(device)
        params += list(distill_head.parameters())
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.98))
    step, elapsed_s, best_cer, epoch, pos = 0, 0.0, math.inf, 0, 0
    # the best check: lowest greedy CER, or with a phone head the mean of CER and phone error rate
    last = run / "last.pt"
    if last.exists():
        ck = torch.load(last, weights_only=False, map_location=device)
        if ("distill_head" in ck) != (distill_head is not None):
            raise ConfigError(f"{last} trained {'with' if 'distill_head' in ck else 'without'} "
                              f"distillation: resume it the same way, or start a new run")
        model.load_state_dict(ck["model"])
        if distill_head is not None:
            distill_head.load_state_dict(ck["distill_head"])
        opt.load_state_dict(ck["opt"])
        step, elapsed_s, best_cer = ck["step"], ck["elapsed_s"], ck["best_cer"]
        epoch, pos = ck["epoch"], ck["pos"]
        log.info("resumed from %s at step %d (%.1f min trained)", last, step, elapsed_s / 60)
    elif not cfg.init_from:
        rng = np.random.default_rng(cfg.seed)
        picks = rng.choice(len(train_clips), min(300, len(train_clips)), replace=False)
        sample = [train_clips[int(i)][0] for i in picks]
        mean, std = _feature_stats(model, sample)
        model.frontend.set_stats(mean, std)
        log.info("model %d parameters; feature stats from 300 clips", model.n_params())
    if distill_head is not None and captured is not None and taught and not last.exists():
        rng = np.random.default_rng(cfg.seed + 17)
        fit = [taught[int(i)] for i in rng.choice(len(taught), min(256, len(taught)),
                                                   replace=False)]
        err = _fit_distill_head(model, distill_head, captured,
                                [train_clips[i][0] for i in fit],
                                [cast(np.ndarray, cast(TeacherFeatures, teacher).get(paths[i]))
                                 for i in fit], cfg.distill_delay)
        log.info("distillation head fitted by least squares on %d clips: L1 %.3f a feature",
                 len(fit), err)

    def save_last() -> None:
        tmp = run / "last.pt.tmp"
        ck = {"model": model.state_dict(), "opt": opt.state_dict(), "step": step,
              "elapsed_s": elapsed_s, "best_cer": best_cer, "epoch": epoch, "pos": pos,
              "config": dataclasses.asdict(cfg)}
        if distill_head is not None:
            ck["distill_head"] = distill_head.state_dict()
        torch.save(ck, tmp)
        tmp.replace(last)

    def do_eval() -> dict:
        nonlocal best_cer
        t0 = time.monotonic()
        res = evaluate(model, heldout, pronouncer=pronouncer)
        if captured is not None:
            captured.clear()
        res.update(step=step, epoch=epoch, elapsed_min=round(elapsed_s / 60, 2),
                   eval_s=round(time.monotonic() - t0, 1))
        score = (res["cer"] + res["per"]) / 2 if "per" in res else res["cer"]
        if score < best_cer:
            best_cer = score
            save_stt(model, run / "best")
            (run / "best" / "metrics.json").write_text(json.dumps(res, indent=2) + "\n")
            res["best"] = True
        with open(run / "metrics.jsonl", "a") as f:
            f.write(json.dumps(res) + "\n")
        log.info("eval step %d: held-out CER %.3f WER %.3f%s (best %.3f) e.g. %r -> %r", step,
                 res["cer"], res["wer"], f" PER {res['per']:.3f}" if "per" in res else "",
                 best_cer, res["examples"][0]["ref"], res["examples"][0]["hyp"])
        return res

    lengths = [c.size for c, _ in train_clips]
    budget = int(cfg.batch_audio_s * rate)
    centers_hz = model.frontend.mel_centers_hz()
    model.train()
    bar = None
    if cfg.progress:
        from tqdm import tqdm
        bar = tqdm(initial=step, total=cfg.max_steps, desc="train stt", unit="step",
                   dynamic_ncols=True, mininterval=5.0)
    last_save = time.monotonic()
    res: dict = {}
    loss_avg = None
    distill_avg = None
    stop = False
    while not stop:
        batches = length_batches(lengths, budget, random.Random(cfg.seed * 1000 + epoch))
        rng = np.random.default_rng(cfg.seed * 7 + epoch)
        while pos < len(batches):
            t0 = time.monotonic()
            idx = batches[pos]
            gains = 10 ** (rng.uniform(-cfg.gain_db, cfg.gain_db, len(idx)) / 20)
            clips = [np.clip(train_clips[i][0] * g, -1, 1) for i, g in zip(idx, gains)]
            if cfg.speed > 0:
                speeds = rng.uniform(1 - cfg.speed, 1 + cfg.speed, len(clips))
                clips = [speed_perturb(c, float(f)) for c, f in zip(clips, speeds)]
            audio, frames = _pad(clips, step_samples)
            spec = warp = None
            if cfg.freq_masks or cfg.time_mask_every_s:
                mels_per_step = step_samples // mcfg.hop_samples
                mel_ms = 1000.0 * mcfg.hop_samples / rate
                spec = functools.partial(
                    spec_augment, lengths=[mels_per_step * int(n) for n in frames], rng=rng,
                    freq_masks=cfg.freq_masks, freq_mask_mels=cfg.freq_mask_mels,
                    time_mask_every=round(cfg.time_mask_every_s * 1000.0 / mel_ms),
                    time_mask_frames=round(cfg.time_mask_ms / mel_ms))
            if cfg.warp > 0:
                fe = model.frontend
                warp = (rng.uniform(1 - cfg.warp, 1 + cfg.warp, len(clips)), centers_hz,
                        fe.feat_mean.detach(), fe.feat_std.detach())
            augment = (functools.partial(_augment, warp=warp, spec=spec)
                       if spec is not None or warp is not None else None)
            tgt = [targets[i] for i in idx]
            for g in opt.param_groups:
                g["lr"] = cfg.lr * cosine_lr_scale(
                    step, elapsed_s, warmup_steps=cfg.warmup_steps, max_steps=cfg.max_steps,
                    max_minutes=cfg.max_minutes, min_frac=cfg.min_lr_frac)
            if captured is not None:
                captured.clear()
            logits, phone_logits = model.forward_heads(audio.to(device), augment)
            lp = torch.log_softmax(logits, dim=-1).transpose(0, 1)  # (T, b, V)
            loss = F.ctc_loss(lp, torch.cat(tgt).to(device), frames, torch.tensor([len(t) for t in tgt]),
                              blank=0, reduction="mean", zero_infinity=True)
            if phone_logits is not None:
                loss = loss + cfg.phone_weight * _phone_loss(
                    phone_logits, frames, [phone_targets[i] for i in idx])
            distill_loss = None
            if distill_head is not None and captured is not None and teacher is not None:
                distill_loss = _distill_loss(distill_head(torch.cat(captured, dim=1)), frames,
                                             [teacher.get(paths[i]) for i in idx],
                                             cfg.distill_delay)
                loss = loss + cfg.distill_weight * distill_loss
                d_val = distill_loss.item()
                distill_avg = d_val if distill_avg is None else 0.98 * distill_avg + 0.02 * d_val
            opt.zero_grad(set_to_none=True)
            loss.backward()
            gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            step += 1
            pos += 1
            elapsed_s += time.monotonic() - t0
            loss_val = loss.item()
            loss_avg = loss_val if loss_avg is None else 0.98 * loss_avg + 0.02 * loss_val
            if bar is not None:
                bar.update(1)
                bar.set_postfix(loss=f"{loss_avg:.3f}", ep=epoch, best=f"{best_cer:.3f}")
            if step % 50 == 0:
                log.info("step %d epoch %d loss %.4f avg %.4f gnorm %.2f lr %.2e frames/s %.0f%s",
                         step, epoch, loss_val, loss_avg, float(gnorm),
                         opt.param_groups[0]["lr"], float(frames.sum()) / (time.monotonic() - t0),
                         f" distill avg {distill_avg:.4f}" if distill_avg is not None else "")
            if step % cfg.eval_every_steps == 0:
                res = do_eval()
            if time.monotonic() - last_save > cfg.checkpoint_every_s:
                save_last()
                last_save = time.monotonic()
            if step >= cfg.max_steps or elapsed_s >= cfg.max_minutes * 60:
                stop = True
                break
        else:
            epoch += 1
            pos = 0
    res = do_eval()
    save_last()
    if bar is not None:
        bar.close()
    log.info("done: step %d, %.1f min, best held-out CER %.3f", step, elapsed_s / 60, best_cer)
    return res
