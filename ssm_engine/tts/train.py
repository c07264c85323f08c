"""Train the streaming SSM voice (``parley train tts``), resumably, on one CPU thread.

    cfg = TTSTrainConfig(data_dir="data/tts/v1", run_dir="runs/tts/v1")
    train(cfg)

Data: the folder written by ``parley data tts`` (``train.jsonl``, ``heldout.jsonl``, ``wav/``).
The vocoder features of every clip are computed once and cached in ``DATA/feats/`` (float16
``.npy``). Targets are teacher-forced: the decoder is trained on the teacher's phone durations,
the duration predictor on the same durations, in the log domain.

Losses: L1 on the normalised cepstrum and log-f0 (log-f0 only on voiced frames), binary
cross-entropy on voicing, squared error on log(1 + frames) of each phone.

The run directory holds ``last.pt`` (model, optimiser, step, elapsed time; a second run resumes
from it), ``best/`` (``save_tts`` format, lowest held-out loss), ``train.log``,
``metrics.jsonl`` and ``samples/`` (held-out sentences synthesised at each evaluation, to listen
to). The learning rate follows ``ssm_engine.training.cosine_lr_scale``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import numpy as np
import torch
import torch.nn.functional as F

from ..mamba2 import Mamba2Block
from ..training import cosine_lr_scale, length_batches, run_log
from .errors import TTSError
from .model import TTSConfig, TTSModel, load_tts, normalise_targets, position_features, save_tts
from .vocoder import CEP0, LF0, N_CEP, N_FEATURES, SAMPLE_RATE_HZ, VUV, analyze

__all__ = ["TTSTrainConfig", "train", "load_split", "Clip"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TTSTrainConfig:
    data_dir: str
    run_dir: str
    d_model: int = 192
    n_layers: int = 4
    d_state: int = 64
    headdim: int = 48
    batch_frames: int = 8000           # padded frames (10 ms) per batch
    lr: float = 2e-3
    min_lr_frac: float = 0.05
    weight_decay: float = 0.01
    warmup_steps: int = 200
    max_steps: int = 100_000
    max_minutes: float = 60.0
    eval_every_steps: int = 200
    checkpoint_every_s: float = 180.0
    dur_weight: float = 1.0
    envelope_loss: str = "cepstrum"    # or "spectrum": see ``losses``
    init_from: str | None = None       # a voice folder (``save_tts``) to fine-tune from
    grow_layers: int = 0               # with init_from: acoustic layers added on top (``_load_grown``)
    seed: int = 1
    threads: int = 1
    progress: bool = True

    def model_config(self, n_symbols: int, mean: np.ndarray, std: np.ndarray) -> TTSConfig:
        ssm = dict(d_model=self.d_model, n_layers=self.n_layers, d_state=self.d_state,
                   headdim=self.headdim, expand=2)
        enc = dict(d_model=self.d_model, n_layers=1, d_state=32, headdim=self.headdim, expand=2)
        return TTSConfig(n_symbols=n_symbols, enc_ssm=enc, ssm=ssm,
                         feat_mean=tuple(float(v) for v in mean),
                         feat_std=tuple(float(v) for v in std))


@dataclass
class Clip:
    id: str
    tokens: np.ndarray      # (n, 3) int64
    durations: np.ndarray   # (n,) int64 frames
    feats: np.ndarray       # (T, N_FEATURES) float32, T == durations.sum()
    text: str


def _symbol_ids() -> dict[str, int]:
    from .phonemes import SYMBOLS

    return {s: i for i, s in enumerate(SYMBOLS)}


def load_split(data_dir: str | Path, split: str, *, progress: bool = False,
               skip_unreadable: bool = False) -> list[Clip]:
    """Read ``DATA/<split>.jsonl`` and the clips' features (computed and cached if missing).
    ``skip_unreadable``: leave out clips whose audio cannot be read yet (a data set still being
    written) instead of raising."""
    data_dir = Path(data_dir)
    manifest = data_dir / f"{split}.jsonl"
    if not manifest.exists():
        raise TTSError(f"{manifest}: no such manifest (run `parley data tts --out {data_dir}`)")
    ids = _symbol_ids()
    cache = data_dir / "feats"
    cache.mkdir(exist_ok=True)
    lines = manifest.read_text().splitlines()
    rows = [json.loads(line) for line in lines if line.strip()]
    it = rows
    if progress:
        from tqdm import tqdm
        it = tqdm(rows, desc=f"features {split}", unit="clip", mininterval=2.0)
    clips = []
    for row in it:
        try:
            tokens = np.array([[ids[t[0]], t[1], t[2]] for t in row["tokens"]], dtype=np.int64)
        except KeyError as exc:
            raise TTSError(f"{manifest}: {row.get('id')}: unknown phone symbol {exc}") from exc
        durations = np.asarray(row["durations"], dtype=np.int64)
        path = cache / f"{row['id']}.npy"
        wav = data_dir / row["wav"]
        fresh = path.exists() and wav.exists() and path.stat().st_mtime >= wav.stat().st_mtime
        if fresh:  # a clip regenerated after its features were cached is analysed again
            feats = np.load(path).astype(np.float32)
        else:
            import soundfile as sf

            try:
                pcm, rate = sf.read(wav, dtype="int16")
            except (OSError, RuntimeError) as exc:  # soundfile's LibsndfileError is a RuntimeError
                if skip_unreadable:
                    log.warning("skipping %s for now: %s", row["id"], exc)
                    continue
                raise TTSError(f"{wav}: cannot read: {exc}") from exc
            if rate != 16_000:
                raise TTSError(f"{wav}: expected 16 kHz audio, got {rate} Hz")
            feats = analyze(pcm)
            np.save(path, feats.astype(np.float16))
            feats = feats.astype(np.float16).astype(np.float32)
        total = int(durations.sum())
        if total != len(feats):  # the data set guarantees this; mend a one-frame rounding slip
            if abs(total - len(feats)) > 2:
                raise TTSError(f"{manifest}: {row['id']}: durations sum to {total} frames, "
                               f"audio has {len(feats)}")
            feats = np.pad(feats, ((0, max(0, total - len(feats))), (0, 0)), mode="edge")[:total]
        clips.append(Clip(row["id"], tokens, durations, feats, row.get("text", "")))
    return clips


def feature_stats(clips: list[Clip]) -> tuple[np.ndarray, np.ndarray]:
    allf = np.concatenate([c.feats for c in clips])
    mean, std = allf.mean(0), allf.std(0) + 1e-4
    mean[VUV], std[VUV] = 0.0, 1.0
    return mean, std


ENVELOPE_LOSSES = ("cepstrum", "spectrum")
SPECTRUM_BANDS = 64
PHONE_BAND_HZ = 4_000.0
ABOVE_PHONE_WEIGHT = 0.25


def envelope_bands(n_bands: int = SPECTRUM_BANDS) -> tuple[torch.Tensor, torch.Tensor]:
    """The spectrum loss's view of an envelope: ``(N_CEP, n_bands)`` mapping a raw cepstrum to
    the natural-log magnitude of the vocoder's filter at ``n_bands`` mel-spaced frequencies from
    50 Hz to 8 kHz (``c0 + 2 sum c_n cos(w n)``, as ``vocoder._min_phase_response`` builds it),
    and each band's weight: 1 up to 4 kHz, what a phone line carries, ``ABOVE_PHONE_WEIGHT``
    above (wideband calls still hear it)."""
    def mel(f: np.ndarray) -> np.ndarray:
        return 2595.0 * np.log10(1.0 + f / 700.0)

    top = mel(np.array([50.0, SAMPLE_RATE_HZ / 2]))
    freqs = 700.0 * (10 ** (np.linspace(top[0], top[1], n_bands) / 2595.0) - 1.0)
    n = np.arange(N_CEP)[:, None]
    matrix = 2.0 * np.cos(2 * np.pi * n * freqs[None, :] / SAMPLE_RATE_HZ)
    matrix[0] = 1.0
    weights = np.where(freqs <= PHONE_BAND_HZ, 1.0, ABOVE_PHONE_WEIGHT)
    return (torch.tensor(matrix, dtype=torch.float32),
            torch.tensor(weights / weights.sum(), dtype=torch.float32))


_BANDS = envelope_bands()


def _collate(clips: list[Clip], mean: np.ndarray, std: np.ndarray) -> dict[str, torch.Tensor]:
    b = len(clips)
    n = max(len(c.tokens) for c in clips)
    tokens = torch.zeros(b, n, 3, dtype=torch.long)
    mask = torch.zeros(b, n, dtype=torch.bool)
    durs = torch.zeros(b, n, dtype=torch.long)
    for i, c in enumerate(clips):
        tokens[i, : len(c.tokens)] = torch.from_numpy(c.tokens)
        mask[i, : len(c.tokens)] = True
        durs[i, : len(c.tokens)] = torch.from_numpy(c.durations)
    frame_phone, frame_pos = position_features(durs)
    t = frame_phone.shape[1]
    target = torch.zeros(b, t, N_FEATURES)
    for i, c in enumerate(clips):
        target[i, : len(c.feats)] = torch.from_numpy(normalise_targets(c.feats, mean, std))
    return {"tokens": tokens, "mask": mask, "durations": durs, "frame_phone": frame_phone,
            "frame_pos": frame_pos, "target": target, "frame_mask": frame_phone >= 0}


def losses(model: TTSModel, batch: dict[str, torch.Tensor], dur_weight: float = 1.0,
           envelope_loss: str = "cepstrum") -> dict[str, torch.Tensor]:
    """The training losses; both envelope losses are reported, ``envelope_loss`` picks the one
    that trains:

    - ``cep``: L1 on each normalised cepstral coefficient. Every coefficient weighs the same, so
      the high quefrencies (fine ripple, standard deviation 0.03) count as much as the low ones
      that place the formants (0.6): a 20-fold tilt against what is heard.
    - ``spec``: L1, in nats, between the log envelopes the two cepstra give the vocoder's filter
      at mel-spaced frequencies (``envelope_bands``): each coefficient weighs what it changes in
      the spectrum, most below 4 kHz (the phone line)."""
    enc = model.encode(batch["tokens"], batch["mask"])
    log_dur = model.durations(enc)
    pred = model.decode(enc, batch["frame_phone"], batch["frame_pos"])[:, : batch["target"].shape[1]]
    fm = batch["frame_mask"].unsqueeze(-1).to(pred.dtype)
    tgt = batch["target"]
    n_frames = fm.sum().clamp(min=1)
    cep = (torch.abs(pred[..., CEP0:] - tgt[..., CEP0:]) * fm).sum() / (n_frames * (N_FEATURES - CEP0))
    matrix, weights = _BANDS
    diff = (pred[..., CEP0:] - tgt[..., CEP0:]) * model.feat_std[CEP0:]      # raw cepstra
    spec = ((torch.abs(diff @ matrix) * weights).sum(-1, keepdim=True) * fm).sum() / n_frames
    voiced = tgt[..., VUV:VUV + 1] * fm
    lf0 = (torch.abs(pred[..., LF0:LF0 + 1] - tgt[..., LF0:LF0 + 1]) * voiced).sum() / voiced.sum().clamp(min=1)
    vuv = (F.binary_cross_entropy_with_logits(pred[..., VUV:VUV + 1], tgt[..., VUV:VUV + 1],
                                              reduction="none") * fm).sum() / n_frames
    pm = batch["mask"].to(pred.dtype)
    dur = (((log_dur - torch.log1p(batch["durations"].to(pred.dtype))) ** 2) * pm).sum() / pm.sum()
    if envelope_loss not in ENVELOPE_LOSSES:
        raise TTSError(f"envelope loss must be one of {', '.join(ENVELOPE_LOSSES)}, not {envelope_loss!r}")
    envelope = spec if envelope_loss == "spectrum" else cep
    total = envelope + lf0 + 0.5 * vuv + dur_weight * dur
    return {"loss": total, "cep": cep, "spec": spec, "lf0": lf0, "vuv": vuv, "dur": dur}


@torch.no_grad()
def evaluate(model: TTSModel, clips: list[Clip], mean: np.ndarray, std: np.ndarray,
             batch: int = 16, envelope_loss: str = "cepstrum") -> dict:
    model.eval()
    sums: dict[str, float] = {}
    for i in range(0, len(clips), batch):
        part = clips[i:i + batch]
        out = losses(model, _collate(part, mean, std), envelope_loss=envelope_loss)
        for k, v in out.items():
            sums[k] = sums.get(k, 0.0) + float(v) * len(part)
    model.train()
    return {k: round(v / max(1, len(clips)), 4) for k, v in sums.items()} | {"n": len(clips)}


def _init_voice(directory: str, n_symbols: int) -> TTSModel:
    """The voice a fine-tune starts from; its sizes and normalisation replace the config's."""
    path = Path(directory)
    if not (path / "config.json").is_file():
        raise TTSError(f"--init-from {directory}: not a voice folder (no config.json)")
    model = load_tts(path)
    if model.config.n_symbols != n_symbols:
        raise TTSError(f"--init-from {directory}: the voice knows {model.config.n_symbols} phone "
                       f"symbols, this front end {n_symbols}")
    return model


def _added_layers(model: TTSModel, old: int) -> tuple[str, ...]:
    """The parameter-name prefixes of ``model``'s acoustic layers from layer ``old`` up."""
    return tuple(f"stack.{part}.{i}." for i in range(old, int(model.config.ssm["n_layers"]))
                 for part in ("blocks", "norms"))


def _load_grown(model: TTSModel, init: TTSModel) -> None:
    """``init``'s weights into ``model``, which may have more acoustic layers on top of init's
    (``grow_layers``). Each added layer's output projection starts at zero, so its residual adds
    nothing: the grown voice speaks exactly as ``init`` until training moves the new layers
    (the zero projection still gets gradients, and through it the rest of the layer). The final
    norm stays init's, applied after the added layers as it was after the old ones."""
    try:
        missing, unexpected = model.load_state_dict(init.state_dict(), strict=False)
    except RuntimeError as exc:       # a tensor of another shape
        raise TTSError(f"--init-from: the voice does not fit this model: {exc}") from exc
    old = int(init.config.ssm["n_layers"])
    bad = [k for k in missing if not k.startswith(_added_layers(model, old))]
    if bad or unexpected:
        raise TTSError(f"--init-from: the voice does not fit this model (missing {bad[:3]}, "
                       f"unexpected {list(unexpected)[:3]})")
    with torch.no_grad():
        for i in range(old, int(model.config.ssm["n_layers"])):
            out_proj = cast("Mamba2Block", model.stack.blocks[i]).out_proj
            out_proj.weight.zero_()
            if out_proj.bias is not None:
                out_proj.bias.zero_()


GROWN_VOICE_LR_SCALE = 0.25
"""With ``grow_layers``, the grown voice's own weights train at this share of the learning rate
and the added layers at all of it. The voice is already trained: at the full rate a fine-tune
first loses ground (runs/tts/joe-grow-fulllr, lr 4e-4 for everything: held-out spectrum
loss 0.362 -> 0.367-0.368 over its first 600 steps)."""


def _param_groups(model: TTSModel, cfg: TTSTrainConfig) -> list[dict]:
    """The optimizer's groups, each with its ``lr_scale`` (the schedule multiplies it in)."""
    if not cfg.grow_layers:
        return [{"params": list(model.parameters()), "lr_scale": 1.0}]
    grown = _added_layers(model, int(model.config.ssm["n_layers"]) - cfg.grow_layers)
    new = [p for n, p in model.named_parameters() if n.startswith(grown)]
    rest = [p for n, p in model.named_parameters() if not n.startswith(grown)]
    return [{"params": rest, "lr_scale": GROWN_VOICE_LR_SCALE}, {"params": new, "lr_scale": 1.0}]


def train(cfg: TTSTrainConfig) -> dict:
    """Run (or resume) training as configured; returns the last evaluation."""
    torch.set_num_threads(cfg.threads)
    run = Path(cfg.run_dir)
    run.mkdir(parents=True, exist_ok=True)
    with run_log(run):
        return _train(cfg, run)


def _train(cfg: TTSTrainConfig, run: Path) -> dict:
    log.info("config %s", json.dumps(dataclasses.asdict(cfg)))
    t_load = time.monotonic()
    clips = load_split(cfg.data_dir, "train", progress=cfg.progress)
    heldout = load_split(cfg.data_dir, "heldout", progress=cfg.progress)
    hours = sum(len(c.feats) for c in clips) / 100 / 3600
    log.info("loaded %d training clips (%.2f h) and %d held-out clips in %.1f s",
             len(clips), hours, len(heldout), time.monotonic() - t_load)
    from .phonemes import SYMBOLS

    last = run / "last.pt"
    ck = torch.load(last, weights_only=False) if last.exists() else None
    init = _init_voice(cfg.init_from, len(SYMBOLS)) if cfg.init_from else None
    if ck is not None:
        mean, std = np.asarray(ck["mean"]), np.asarray(ck["std"])
    elif init is not None:      # its normalisation goes with its weights
        mean = np.asarray(init.config.feat_mean, dtype=np.float64)
        std = np.asarray(init.config.feat_std, dtype=np.float64)
    else:
        mean, std = feature_stats(clips)
    torch.manual_seed(cfg.seed)
    if init is not None:
        config = dataclasses.replace(init.config, feat_mean=tuple(float(v) for v in mean),
                                     feat_std=tuple(float(v) for v in std))
        if cfg.grow_layers:
            config = dataclasses.replace(config, ssm={**config.ssm, "n_layers":
                                                      int(config.ssm["n_layers"]) + cfg.grow_layers})
        model = TTSModel(config)
    else:
        model = TTSModel(cfg.model_config(len(SYMBOLS), mean, std))
    opt = torch.optim.AdamW(_param_groups(model, cfg), lr=cfg.lr, weight_decay=cfg.weight_decay,
                            betas=(0.9, 0.98))
    step, elapsed_s, best, epoch, pos = 0, 0.0, math.inf, 0, 0
    if ck is not None:
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        step, elapsed_s, best = ck["step"], ck["elapsed_s"], ck["best"]
        epoch, pos = ck["epoch"], ck["pos"]
        log.info("resumed from %s at step %d (%.1f min trained)", last, step, elapsed_s / 60)
    elif init is not None:
        _load_grown(model, init)
        log.info("fine-tuning %s (%d parameters%s)", cfg.init_from,
                 sum(p.numel() for p in model.parameters()),
                 f", {cfg.grow_layers} acoustic layers added" if cfg.grow_layers else "")
    else:
        log.info("model %d parameters", sum(p.numel() for p in model.parameters()))
    log.info("envelope loss: %s", cfg.envelope_loss)

    def save_last() -> None:
        tmp = run / "last.pt.tmp"
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step,
                    "elapsed_s": elapsed_s, "best": best, "epoch": epoch, "pos": pos,
                    "mean": mean.tolist(), "std": std.tolist(),
                    "config": dataclasses.asdict(cfg)}, tmp)
        tmp.replace(last)

    def do_eval() -> dict:
        nonlocal best
        t0 = time.monotonic()
        res = evaluate(model, heldout, mean, std, envelope_loss=cfg.envelope_loss)
        res.update(step=step, epoch=epoch, elapsed_min=round(elapsed_s / 60, 2),
                   eval_s=round(time.monotonic() - t0, 1))
        if res["loss"] < best:
            best = res["loss"]
            save_tts(model, run / "best")
            (run / "best" / "metrics.json").write_text(json.dumps(res, indent=2) + "\n")
            res["best"] = True
        with open(run / "metrics.jsonl", "a") as f:
            f.write(json.dumps(res) + "\n")
        log.info("eval step %d: held-out loss %.4f (cep %.4f spec %.4f lf0 %.4f vuv %.4f dur %.4f) "
                 "best %.4f", step, res["loss"], res["cep"], res["spec"], res["lf0"], res["vuv"],
                 res["dur"], best)
        return res

    lengths = [len(c.feats) for c in clips]
    manifest_mtime = (Path(cfg.data_dir) / "train.jsonl").stat().st_mtime
    model.train()
    bar = None
    if cfg.progress:
        from tqdm import tqdm
        bar = tqdm(initial=step, total=cfg.max_steps, desc="train tts", unit="step",
                   dynamic_ncols=True, mininterval=5.0)
    last_save = time.monotonic()
    res: dict = {}
    loss_avg = None
    stop = False
    while not stop:
        batches = length_batches(lengths, cfg.batch_frames, random.Random(cfg.seed * 1000 + epoch))
        while pos < len(batches):
            t0 = time.monotonic()
            batch = _collate([clips[i] for i in batches[pos]], mean, std)
            for g in opt.param_groups:
                g["lr"] = cfg.lr * g.get("lr_scale", 1.0) * cosine_lr_scale(   # runs before it: 1
                    step, elapsed_s, warmup_steps=cfg.warmup_steps, max_steps=cfg.max_steps,
                    max_minutes=cfg.max_minutes, min_frac=cfg.min_lr_frac)
            out = losses(model, batch, cfg.dur_weight, cfg.envelope_loss)
            opt.zero_grad(set_to_none=True)
            out["loss"].backward()
            gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            step += 1
            pos += 1
            elapsed_s += time.monotonic() - t0
            loss_val = out["loss"].item()
            loss_avg = loss_val if loss_avg is None else 0.98 * loss_avg + 0.02 * loss_val
            if bar is not None:
                bar.update(1)
                bar.set_postfix(loss=f"{loss_avg:.3f}", ep=epoch, best=f"{best:.3f}")
            if step % 50 == 0:
                log.info("step %d epoch %d loss %.4f avg %.4f (cep %.3f spec %.3f lf0 %.3f vuv %.3f "
                         "dur %.3f) gnorm %.2f lr %.2e frames/s %.0f", step, epoch, loss_val, loss_avg,
                         out["cep"].item(), out["spec"].item(), out["lf0"].item(), out["vuv"].item(), out["dur"].item(),
                         float(gnorm), opt.param_groups[0]["lr"],
                         float(batch["frame_mask"].sum()) / (time.monotonic() - t0))
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
            # the data set may still be growing (``parley data tts`` rewrites its manifest every
            # 200 utterances): pick up new clips at each epoch boundary
            mtime = (Path(cfg.data_dir) / "train.jsonl").stat().st_mtime
            if mtime != manifest_mtime:
                manifest_mtime = mtime
                clips = load_split(cfg.data_dir, "train", skip_unreadable=True)
                lengths = [len(c.feats) for c in clips]
                log.info("epoch %d: data set now %d clips (%.2f h)", epoch, len(clips),
                         sum(lengths) / 100 / 3600)
    if res.get("step") != step:
        res = do_eval()
    save_last()
    if bar is not None:
        bar.close()
    log.info("done: step %d, %.1f min, best held-out loss %.4f", step, elapsed_s / 60, best)
    return res
