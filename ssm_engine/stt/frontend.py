"""Causal log-mel front end with conv subsampling, frame-by-frame or whole-clip.

Audio at ``sample_rate_hz`` (8 kHz) comes in steps of ``step_samples`` (160 = 20 ms). Each step
yields ``mels_per_step`` (2) windows of ``win_samples`` (200 = 25 ms) every ``hop_samples``
(80 = 10 ms), each window ending at the newest sample it covers: nothing looks ahead. Log-mel
features are normalised with fixed per-bin statistics (buffers set from training data once), so
normalisation is the same on the first frame of a call as on the last (``norm="fixed"``). With
``norm="stream"`` the normalised features then lose a running per-bin mean as well (streaming
cepstral mean normalisation): it starts at the training mean and follows the call's own speech
with a time constant of ``norm_tau`` mel frames, updated only on frames within ``GATE_MARGIN`` of
a decaying peak level, so the silences of a call do not pull it down. It takes out what is
constant in a call, the channel's and much of the speaker's long-term spectrum. Two causal 1-D convs
(kernel 3 at 100 Hz, then kernel 4 stride 2) bring the features to one vector per 20 ms step.

Streaming state (per stream): ``fe_audio`` (b, win - hop, the last samples), ``fe_mel``
(b, 2, n_mels) and ``fe_conv`` (b, 2, channels): the left context of the two convolutions; with
``norm="stream"`` also ``fe_cmn`` (b, n_mels), the running mean, and ``fe_peak`` (b, 1), the peak.
Zero state == zero left padding in ``forward``, so stepping equals the whole-clip path.

Shapes: forward(audio (b, n*step)) -> (b, n, d_out); step(audio (b, step), state) -> (b, d_out);
prefill(audio (b, n*step), state) -> (b, n, d_out), the same as n steps.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import ConfigError

__all__ = ["LogMelFrontEnd", "mel_filterbank", "NORMS"]

NORMS = ("fixed", "stream")
# streaming mean normalisation, in units of the fixed-normalised features (per-bin z-scores; a
# frame's level is their mean over bins: about -1.7 for silence, 0 to 1.6 for speech)
GATE_MARGIN = 1.0        # a frame updates the mean when its level is within this of the peak
PEAK_DECAY = 0.002       # the peak level falls this much a frame (0.2 a second) ...
PEAK_START = 0.0         # ... from this, a typical speech level, at the start of a stream


def _hz_to_mel(f: torch.Tensor) -> torch.Tensor:
    return 2595.0 * torch.log10(1.0 + f / 700.0)


def _mel_to_hz(m: torch.Tensor) -> torch.Tensor:
    return 700.0 * (10.0 ** (m / 2595.0) - 1.0)


def _mel_points_hz(n_mels: int, f_min_hz: float, f_max_hz: float) -> torch.Tensor:
    """The n_mels + 2 edge and centre frequencies of HTK mel filters, evenly spaced in mel."""
    mel_pts = torch.linspace(float(_hz_to_mel(torch.tensor(f_min_hz))),
                             float(_hz_to_mel(torch.tensor(f_max_hz))), n_mels + 2,
                             dtype=torch.float64)
    return _mel_to_hz(mel_pts)


def mel_filterbank(n_fft: int, sample_rate_hz: int, n_mels: int, f_min_hz: float, f_max_hz: float
                   ) -> torch.Tensor:
    """HTK triangular mel filters, (n_fft // 2 + 1, n_mels)."""
    freqs = torch.linspace(0.0, sample_rate_hz / 2.0, n_fft // 2 + 1, dtype=torch.float64)
    hz = _mel_points_hz(n_mels, f_min_hz, f_max_hz)
    lo, mid, hi = hz[:-2, None], hz[1:-1, None], hz[2:, None]
    up = (freqs[None, :] - lo) / (mid - lo)
    down = (hi - freqs[None, :]) / (hi - mid)
    fb = torch.clamp(torch.minimum(up, down), min=0.0)
    return fb.T.to(torch.float32).contiguous()


def _windowed_dft(win: int, n_fft: int) -> torch.Tensor:
    """(win, 2 * (n_fft // 2 + 1)): a Hann-windowed frame @ this = [Re | Im] of its n_fft-point
    real DFT (the frame zero-padded to n_fft), i.e. torch.fft.rfft(frame * window, n=n_fft).
    A matmul rather than an FFT: the same numbers to ~1e-6, cheaper on a few 25 ms frames, and
    real-valued, so torch.compile generates code for it (it does not for complex ops)."""
    t = torch.arange(win, dtype=torch.float64)[:, None]
    k = torch.arange(n_fft // 2 + 1, dtype=torch.float64)[None, :]
    w = torch.hann_window(win, periodic=False, dtype=torch.float64)[:, None]
    ang = 2.0 * math.pi * t * k / n_fft
    return torch.cat([w * torch.cos(ang), -w * torch.sin(ang)], dim=1).to(torch.float32)


class LogMelFrontEnd(nn.Module):
    dft: torch.Tensor          # buffers (declared for the type checker: nn.Module hides them)
    melfb: torch.Tensor
    feat_mean: torch.Tensor
    feat_std: torch.Tensor

    def __init__(self, *, sample_rate_hz: int, step_samples: int, hop_samples: int,
                 win_samples: int, n_fft: int, n_mels: int, channels: int, d_out: int,
                 norm: str = "fixed", norm_tau: int = 200) -> None:
        super().__init__()
        if norm not in NORMS:
            raise ConfigError(f"norm must be one of {NORMS}, got {norm!r}")
        if isinstance(norm_tau, bool) or not isinstance(norm_tau, int) or norm_tau < 1:
            raise ConfigError(f"norm_tau must be a positive number of frames, got {norm_tau!r}")
        self.norm, self.norm_tau = norm, norm_tau
        if step_samples != 2 * hop_samples:
            raise ConfigError("step_samples must be 2 * hop_samples (two mel frames per step)")
        if not hop_samples < win_samples <= n_fft:
            raise ConfigError("need hop_samples < win_samples <= n_fft")
        self.step_samples, self.hop, self.win, self.n_fft = step_samples, hop_samples, win_samples, n_fft
        self.n_mels, self.channels = n_mels, channels
        self.context = win_samples - hop_samples
        self.register_buffer("dft", _windowed_dft(win_samples, n_fft), persistent=False)
        self.f_min_hz, self.f_max_hz = 60.0, min(3800.0, sample_rate_hz / 2.0 - 100.0)
        self.register_buffer("melfb", mel_filterbank(n_fft, sample_rate_hz, n_mels, self.f_min_hz,
                                                     self.f_max_hz),
                             persistent=False)
        self.register_buffer("feat_mean", torch.zeros(n_mels))
        self.register_buffer("feat_std", torch.ones(n_mels))
        self.conv1 = nn.Conv1d(n_mels, channels, kernel_size=3)
        self.conv2 = nn.Conv1d(channels, d_out, kernel_size=4, stride=2)

    # -- features ---------------------------------------------------------------------------------
    def mel_centers_hz(self) -> torch.Tensor:
        """The centre frequency of each mel filter, ascending (n_mels,), float64."""
        return _mel_points_hz(self.n_mels, self.f_min_hz, self.f_max_hz)[1:-1]

    def log_mel(self, padded: torch.Tensor) -> torch.Tensor:
        """padded audio (b, context + n*hop) -> raw log-mel (b, n, n_mels)."""
        frames = padded.unfold(1, self.win, self.hop)                   # (b, n, win)
        spec = frames @ self.dft                                        # (b, n, 2 * bins)
        bins = self.dft.shape[1] // 2
        power = spec[..., :bins].square() + spec[..., bins:].square()
        return torch.log(power @ self.melfb + 1e-6)

    def normalise(self, mel: torch.Tensor) -> torch.Tensor:
        return (mel - self.feat_mean) / self.feat_std

    def stream_normalise(self, z: torch.Tensor, cmn: torch.Tensor, peak: torch.Tensor
                         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Fixed-normalised features z (b, t, n_mels), the running mean (b, n_mels) and peak level
        (b, 1) before them -> (z less the running mean at each frame, the mean and peak after).
        Frame by frame: a few small ops per 10 ms frame, cheap beside the model."""
        alpha = 1.0 / self.norm_tau
        out = []
        for t in range(z.shape[1]):
            zt = z[:, t]
            level = zt.mean(dim=-1, keepdim=True)
            peak = torch.maximum(level, peak - PEAK_DECAY)
            gate = (level > peak - GATE_MARGIN).to(z.dtype)
            cmn = cmn + (alpha * gate) * (zt - cmn)
            out.append(zt - cmn)
        return torch.stack(out, dim=1), cmn, peak

    @torch.no_grad()
    def set_stats(self, mean: torch.Tensor, std: torch.Tensor) -> None:
        self.feat_mean.copy_(mean)
        self.feat_std.copy_(std.clamp_min(1e-3))

    # -- state ------------------------------------------------------------------------------------
    def init_state(self, batch: int, device: torch.device | None = None) -> dict[str, torch.Tensor]:
        dev = device if device is not None else self.conv1.weight.device
        state = {"fe_audio": torch.zeros(batch, self.context, device=dev),
                 "fe_mel": torch.zeros(batch, 2, self.n_mels, device=dev),
                 "fe_conv": torch.zeros(batch, 2, self.channels, device=dev)}
        if self.norm == "stream":
            state["fe_cmn"] = torch.zeros(batch, self.n_mels, device=dev)
            state["fe_peak"] = torch.full((batch, 1), PEAK_START, device=dev)
        return state

    # -- paths ------------------------------------------------------------------------------------
    def forward(self, audio: torch.Tensor,
                augment: Callable[[torch.Tensor], torch.Tensor] | None = None) -> torch.Tensor:
        """audio (b, n*step_samples) -> (b, n, d_out), from zero state. ``augment`` (training
        only) maps the normalised log-mel (b, 2n, n_mels) to a same-shaped tensor (SpecAugment)."""
        b, n_samples = audio.shape
        padded = torch.cat([audio.new_zeros(b, self.context), audio], dim=1)
        mel = self.normalise(self.log_mel(padded))                      # (b, 2n, n_mels)
        if augment is not None:
            mel = augment(mel)
        if self.norm == "stream":
            mel, _, _ = self.stream_normalise(mel, mel.new_zeros(b, self.n_mels),
                                              mel.new_full((b, 1), PEAK_START))
        x = F.pad(mel.transpose(1, 2), (2, 0))                          # zero left context
        c1 = F.gelu(self.conv1(x))                                      # (b, C, 2n)
        c2 = F.gelu(self.conv2(F.pad(c1, (2, 0))))                      # (b, d_out, n)
        return c2.transpose(1, 2).contiguous()

    def step(self, audio: torch.Tensor, state: dict[str, torch.Tensor]
             ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """audio (b, step_samples) -> ((b, d_out), new state tensors)."""
        y, new = self.prefill(audio, state)
        return y[:, 0], new

    def prefill(self, audio: torch.Tensor, state: dict[str, torch.Tensor]
                ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """audio (b, n*step_samples) -> ((b, n, d_out), new state tensors): n steps at once."""
        padded = torch.cat([state["fe_audio"], audio], dim=1)          # (b, context + n*step)
        mel = self.normalise(self.log_mel(padded))                      # (b, 2n, n_mels)
        norm_state = {}
        if self.norm == "stream":
            mel, cmn, peak = self.stream_normalise(mel, state["fe_cmn"], state["fe_peak"])
            norm_state = {"fe_cmn": cmn, "fe_peak": peak}
        mel_ctx = torch.cat([state["fe_mel"], mel], dim=1)              # (b, 2 + 2n, n_mels)
        c1 = F.gelu(self.conv1(mel_ctx.transpose(1, 2)))                # (b, C, 2n)
        c1 = c1.transpose(1, 2)
        c1_ctx = torch.cat([state["fe_conv"], c1], dim=1)               # (b, 2 + 2n, C)
        y = F.gelu(self.conv2(c1_ctx.transpose(1, 2)))                  # (b, d_out, n)
        new = {"fe_audio": padded[:, -self.context:], "fe_mel": mel_ctx[:, -2:],
               "fe_conv": c1_ctx[:, -2:], **norm_state}
        # contiguous: a transposed view would flow down the residual stream, and a linear layer
        # over a few transposed rows took ~12x longer than over contiguous ones (MKL, 1 thread)
        return y.transpose(1, 2).contiguous(), new
