"""TTSModel: phone tokens -> durations -> vocoder features, causal over frames.

    model = TTSModel(TTSConfig(n_symbols=len(SYMBOLS)))
    enc = model.encode(tokens, mask)                      # (b, n, 3) int64 -> (b, n, d_enc)
    log_dur = model.durations(enc)                        # (b, n): log(1 + frames)
    feats = model.decode(enc, frame_phone, frame_pos)     # (b, T, N_FEATURES), normalised
    save_tts(model, "models/tts"); model = load_tts("models/tts")

Three parts, each streaming-safe:

1. **Phone encoder**: embeddings of (symbol, stress, position-in-word) summed, ``enc_conv_layers``
   residual convolutions of width ``enc_kernel`` centred on the phone (so each phone sees
   ``lookahead`` phones ahead: a small bounded look-ahead), then a causal ``SSMStack`` over phones
   (unbounded look-back: where in the phrase we are). Padding positions are zero vectors, the
   same as the convolutions' zero padding, so a phone near the end of the text gets the same
   encoding whether it is computed in a batch or as the text streams in and is flushed.
2. **Duration predictor**: a linear read-out of the encoding, ``log(1 + frames)``.
3. **Acoustic decoder**: each 10 ms frame gets its phone's encoding plus where it sits in the
   phone (fraction done, fraction left, log duration); every ``frames_per_step`` (4) frames are
   joined into one input of a causal ``SSMStack`` (one step per 40 ms: at batch 1 a step's cost
   is per-op overhead, so fewer steps is what makes it fast), and a linear head gives those
   frames' vocoder features of vocoder.py (normalised by the data set's mean and std kept in the
   config; the voicing column is a logit).

``step_frames`` runs the acoustic decoder one group of frames at a time for a batch of streams
(the serving path); ``decode`` is the parallel path used in training; they agree
(test_tts_model).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from ..checkpoint import load_weights, read_checkpoint, write_checkpoint
from ..config import SSMConfig
from ..errors import CheckpointFormatError, ConfigError
from ..stack import SSMStack
from ..state import StackState
from .vocoder import CEP0, HOP_SAMPLES, LF0, MAX_POSTFILTER, N_CEP, N_FEATURES, SAMPLE_RATE_HZ, VUV

__all__ = ["TTSConfig", "TTSModel", "save_tts", "load_tts", "CHECKPOINT_KIND", "N_POS_FEATURES"]

CHECKPOINT_KIND = "TTSModel"
N_POS_FEATURES = 4


def _enc_ssm() -> dict[str, Any]:
    return SSMConfig(d_model=192, n_layers=1, d_state=32, headdim=48, expand=2).to_dict()


def _dec_ssm() -> dict[str, Any]:
    return SSMConfig(d_model=192, n_layers=4, d_state=64, headdim=48, expand=2).to_dict()


@dataclass(frozen=True)
class TTSConfig:
    """Sizes of the voice; ``enc_ssm``/``ssm`` are SSMConfig dicts; ``feat_mean``/``feat_std``
    normalise the vocoder features (set from the training data; identity by default).
    ``postfilter``: how much the vocoder deepens this voice's envelopes when it speaks
    (``vocoder._min_phase_response``; 0: as predicted). Not learnt: it is chosen for a trained
    voice on the phone line (``bench_tts.py --postfilter``) and written into its config.json; a
    new run starts at 0, a fine-tune keeps its starting voice's. ``fractional_pulses``: the
    vocoder puts each pitch pulse at its exact instant, not on a whole sample (``vocoder``;
    chosen on the line like the postfilter; no weight depends on it). ``postfilter_from``: the
    first cepstral coefficient the postfilter scales (1: all but the level; 3: the phone band's
    tilt, c1 and c2, left as predicted)."""

    n_symbols: int
    n_stress: int = 4
    n_position: int = 5
    enc_kernel: int = 5
    enc_conv_layers: int = 2
    enc_ssm: dict[str, Any] = field(default_factory=_enc_ssm)
    ssm: dict[str, Any] = field(default_factory=_dec_ssm)
    frames_per_step: int = 4
    n_features: int = N_FEATURES
    sample_rate_hz: int = SAMPLE_RATE_HZ
    hop_samples: int = HOP_SAMPLES
    feat_mean: tuple[float, ...] = ()
    feat_std: tuple[float, ...] = ()
    postfilter: float = 0.0
    fractional_pulses: bool = False
    postfilter_from: int = 1

    def __post_init__(self) -> None:
        if self.n_symbols < 2:
            raise ConfigError(f"TTSConfig.n_symbols must be >= 2, got {self.n_symbols}")
        if self.enc_kernel % 2 == 0 or self.enc_kernel < 1:
            raise ConfigError(f"TTSConfig.enc_kernel must be odd, got {self.enc_kernel}")
        if self.frames_per_step < 1:
            raise ConfigError(f"TTSConfig.frames_per_step must be >= 1, got {self.frames_per_step}")
        if self.n_features != N_FEATURES:
            raise ConfigError(f"TTSConfig.n_features must be {N_FEATURES} (the vocoder's)")
        for name in ("feat_mean", "feat_std"):
            value = getattr(self, name)
            if value and len(value) != N_FEATURES:
                raise ConfigError(f"TTSConfig.{name} needs {N_FEATURES} values, got {len(value)}")
        if not 0.0 <= self.postfilter <= MAX_POSTFILTER:
            raise ConfigError(f"TTSConfig.postfilter must be within 0..{MAX_POSTFILTER}, "
                              f"got {self.postfilter}")
        if not 1 <= self.postfilter_from < N_CEP:
            raise ConfigError(f"TTSConfig.postfilter_from must be within 1..{N_CEP - 1}, "
                              f"got {self.postfilter_from}")
        enc, dec = SSMConfig.from_dict(self.enc_ssm), SSMConfig.from_dict(self.ssm)
        if enc.d_model != dec.d_model:
            raise ConfigError("TTSConfig: enc_ssm and ssm must share d_model")

    @property
    def d_model(self) -> int:
        return int(self.ssm["d_model"])

    @property
    def lookahead(self) -> int:
        """Phones ahead each phone's encoding depends on (and behind, for the convolutions)."""
        return self.enc_conv_layers * (self.enc_kernel // 2)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["feat_mean"], d["feat_std"] = list(self.feat_mean), list(self.feat_std)
        return d

    @classmethod
    def from_dict(cls, data: Any) -> TTSConfig:
        if not isinstance(data, dict):
            raise ConfigError(f"TTSConfig must be a JSON object, got {type(data).__name__}")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - names
        if unknown:
            raise ConfigError(f"TTSConfig: unknown keys {sorted(unknown)}")
        kw = dict(data)
        for name in ("feat_mean", "feat_std"):
            if name in kw:
                kw[name] = tuple(float(v) for v in kw[name])
        return cls(**kw)


def position_features(durations: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Frame -> phone index and in-phone position features for integer ``durations`` (b, n).

    Returns ``frame_phone`` (b, T) long (-1 past the end) and ``frame_pos`` (b, T, 4):
    fraction of the phone done, fraction left, frames left / 20, log(1 + duration)."""
    b, n = durations.shape
    total = durations.sum(dim=1)
    t_max = int(total.max().item()) if b else 0
    phone = torch.full((b, t_max), -1, dtype=torch.long)
    pos = torch.zeros(b, t_max, N_POS_FEATURES)
    for i in range(b):
        d = durations[i].clamp(min=0)
        idx = torch.repeat_interleave(torch.arange(n), d)
        if idx.numel() == 0:
            continue
        starts = torch.cumsum(d, 0) - d
        k = torch.arange(idx.numel()) - starts[idx]
        pos[i, : idx.numel()] = frame_position(k, d[idx])
        phone[i, : idx.numel()] = idx
    return phone, pos


def frame_position(k: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """In-phone position features of frame ``k`` (0-based) of a phone of ``d`` frames."""
    k = k.to(torch.float32)
    d = d.to(torch.float32).clamp(min=1)
    return torch.stack([k / d, (d - k) / d, (d - k) / 20.0, torch.log1p(d)], dim=-1)


class TTSModel(nn.Module):
    feat_mean: torch.Tensor    # buffers (declared for the type checker: nn.Module hides them)
    feat_std: torch.Tensor

    def __init__(self, config: TTSConfig) -> None:
        super().__init__()
        self.config = config
        d = config.d_model
        self.emb_symbol = nn.Embedding(config.n_symbols, d)
        self.emb_stress = nn.Embedding(config.n_stress, d)
        self.emb_position = nn.Embedding(config.n_position, d)
        self.convs = nn.ModuleList(nn.Conv1d(d, d, config.enc_kernel, padding=config.enc_kernel // 2)
                                   for _ in range(config.enc_conv_layers))
        self.conv_norms = nn.ModuleList(nn.LayerNorm(d) for _ in range(config.enc_conv_layers))
        self.enc_stack = SSMStack(SSMConfig.from_dict(config.enc_ssm))
        self.dur_head = nn.Linear(d, 1)
        r = config.frames_per_step
        self.frame_in = nn.Linear(d, d)
        self.pos_in = nn.Linear(N_POS_FEATURES, d)
        self.group_in = nn.Linear(r * d, d)
        self.stack = SSMStack(SSMConfig.from_dict(config.ssm))
        self.head = nn.Linear(d, r * config.n_features)
        mean = torch.tensor(config.feat_mean or [0.0] * N_FEATURES, dtype=torch.float32)
        std = torch.tensor(config.feat_std or [1.0] * N_FEATURES, dtype=torch.float32)
        self.register_buffer("feat_mean", mean, persistent=False)
        self.register_buffer("feat_std", std, persistent=False)

    # -- encoder --------------------------------------------------------------------------------
    def embed(self, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """tokens (b, n, 3) int64, mask (b, n) bool -> (b, n, d) with zeros at padding."""
        x = (self.emb_symbol(tokens[..., 0]) + self.emb_stress(tokens[..., 1])
             + self.emb_position(tokens[..., 2]))
        return x * mask.unsqueeze(-1)

    def encode_local(self, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The look-ahead convolutions only: (b, n, 3) -> (b, n, d)."""
        m = mask.unsqueeze(-1).to(torch.float32)
        x = self.embed(tokens, mask)
        for conv, norm in zip(self.convs, self.conv_norms, strict=True):
            y = F.gelu(conv(x.transpose(1, 2)).transpose(1, 2))
            x = norm(x + y) * m
        return x

    def encode(self, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Whole phone sequences: (b, n, 3) -> (b, n, d)."""
        local = self.encode_local(tokens, mask)
        enc, _ = self.enc_stack(local)
        return enc

    def durations(self, enc: torch.Tensor) -> torch.Tensor:
        """(b, n, d) -> (b, n) predicted log(1 + frames)."""
        return self.dur_head(enc).squeeze(-1)

    # -- decoder ----------------------------------------------------------------------------------
    def frame_inputs(self, enc_rows: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """Per-frame decoder inputs from the frame's phone encoding and position features."""
        return self.frame_in(enc_rows) + self.pos_in(pos)

    def _grouped(self, x: torch.Tensor) -> torch.Tensor:
        """(b, g * r, d) per-frame inputs -> (b, g, d): one decoder step per r frames."""
        b, t, d = x.shape
        r = self.config.frames_per_step
        return self.group_in(x.reshape(b, t // r, r * d))

    def _ungrouped(self, y: torch.Tensor) -> torch.Tensor:
        """(b, g, d) stack output -> (b, g * r, N_FEATURES)."""
        out = self.head(y)
        return out.reshape(out.shape[0], -1, self.config.n_features)

    def decode(self, enc: torch.Tensor, frame_phone: torch.Tensor, frame_pos: torch.Tensor
               ) -> torch.Tensor:
        """Parallel (training) path: -> (b, T', N_FEATURES) normalised features (vuv as a logit),
        T' = T rounded up to a multiple of ``frames_per_step``. Frames with ``frame_phone`` -1
        (padding) get zero inputs, exactly like the padding that ends a streamed utterance."""
        idx = frame_phone.clamp(min=0).unsqueeze(-1).expand(-1, -1, enc.shape[-1])
        rows = torch.gather(enc, 1, idx)
        x = self.frame_inputs(rows, frame_pos) * (frame_phone >= 0).unsqueeze(-1)
        pad = (-x.shape[1]) % self.config.frames_per_step
        x = F.pad(x, (0, 0, 0, pad))
        y, _ = self.stack(self._grouped(x))
        return self._ungrouped(y)

    def init_frame_state(self, batch: int) -> StackState:
        return self.stack.init_state(batch)

    def step_frames(self, x: torch.Tensor, state: StackState, *, branch_free: bool = False
                    ) -> torch.Tensor:
        """Serving path: per-frame inputs (b, r, d) of the next r frames of b streams ->
        (b, r, N_FEATURES) normalised features; ``state`` advances in place (``branch_free``:
        ``SSMStack.step``'s, for torch.compile)."""
        y, _ = self.stack.step(self._grouped(x)[:, 0], state, branch_free=branch_free)
        return self._ungrouped(y[:, None])

    def denormalize(self, feats: torch.Tensor) -> torch.Tensor:
        """Normalised model output -> vocoder features (voicing as 0/1 from the logit)."""
        out = feats * self.feat_std + self.feat_mean
        out[..., VUV] = (feats[..., VUV] > 0).to(out.dtype)
        return out


def save_tts(model: TTSModel, directory: str | Path) -> Path:
    return write_checkpoint(directory, model, CHECKPOINT_KIND, model.config.to_dict())


def load_tts(directory: str | Path) -> TTSModel:
    config_dict, tensors = read_checkpoint(directory, CHECKPOINT_KIND)
    try:
        config = TTSConfig.from_dict(config_dict)
    except (ConfigError, TypeError) as exc:
        raise CheckpointFormatError(Path(directory) / "config.json", f"invalid TTS config: {exc}") from exc
    model = TTSModel(config)
    load_weights(model, tensors, directory)
    model.eval()
    return model


def normalise_targets(feats: np.ndarray, mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    """Vocoder features -> training targets (voicing stays 0/1 for the BCE loss)."""
    out = (feats - mean) / std
    out[:, VUV] = feats[:, VUV]
    return out


FEATURE_GROUPS = {"lf0": LF0, "vuv": VUV, "cep": slice(CEP0, N_FEATURES)}
