"""Mamba-2 block (selective diagonal SSM, SSD form) in pure PyTorch: three ways to run one set of weights.

Papers: Gu & Dao, "Mamba" (2023); Dao & Gu, "Transformers are SSMs" (Mamba-2 / SSD, 2024).
Structure follows state-spaces/mamba ``Mamba2Simple`` and ``ssd_minimal.py``.

Glossary (code name -> paper symbol, shape per stream)
    u            input of the block, (d_model,) per frame
    z            gate branch, (d_inner,); output is norm(y * silu(z))
    x            SSM input after conv+silu, (H, P)            paper: x_t
    B, C         input / output projections of the state, (G, N), shared by the H/G heads of a group
    dt           step size Delta, (H,); dt = softplus(raw + dt_bias)
    A            -exp(A_log), (H,): one scalar per head (Mamba-2's scalar-times-identity A)
    dA           exp(dt * A) in (0, 1): the per-step decay, paper: bar{A}_t (a_t in SSD)
    h            SSM state, (H, N, P) as in the SSD paper (mamba_ssm stores (H, P, N)):
                 h_t = dA_t h_{t-1} + B_t (dt_t x_t)^T ;  y_t = h_t^T C_t + D x_t
    g, s         step()'s scaled form of h: h = exp(s) g, s: (H,) log-scale per head. A step
                 lowers s by dt*A and adds B (dt x exp(-s))^T to g, so the decay costs no pass
                 over the state; rows whose s falls below -RENORM_LOG_SCALE are folded back
                 (g *= exp(s), s = 0) before the update, so s stays in [-20, 0] and exp(-s)
                 cannot overflow. forward() and reference() take h = exp(s) g, return s = 0.
    D            skip connection, (H,)
    H, P, N, G   nheads, headdim, d_state, ngroups;  d_inner = E * d_model = H * P
    conv window  the last d_conv - 1 inputs of the depthwise causal conv over (x, B, C),
                 (d_conv - 1, conv_dim), oldest first, channels last
    Q            chunk_size of the SSD scan; L = exp(segsum(dt*A)) is the 1-semiseparable mask

Three paths (same weights, same state layout; tests hold them equal):
    forward(u, state)    u: (b, l, d_model) -> (b, l, d_model). Chunked SSD scan: quadratic
                         attention-like form inside each chunk of Q frames, a linear recurrence
                         between chunks. For training and prefill.
    step(u, state)       u: (b, d_model) -> (b, d_model). One frame of the recurrence for a batch
                         of streams: the serving path; cost independent of stream position.
                         Updates the state in place (forward and reference return a new one).
    reference(u, state)  u: (b, l, d_model). A frame-by-frame loop over the textbook recurrence,
                         written without shared helpers; slow, obviously correct.

Why Mamba-2/SSD (measured here: torch 2.13 CPU, 1 thread, d_model=256, one layer, batch 4 x 256
frames, forward+backward): this block trains at ~10,000 frames/s; a pure-PyTorch Mamba-1 block
(d_state=16, per-channel A) with a log-space cumsum parallel scan at ~660 frames/s (15x slower:
it materialises several (b, l, d_inner, N) tensors), with a sequential scan at ~57 frames/s.
Mamba-2's scalar A per head turns the scan into batched matmuls (the chunked SSD form), and its
step into a rank-1 update and a GEMV per head. The 6-layer stack trains at ~1,600-2,200 frames/s
(benchmarks/bench_ssm_step.py re-measures it).

Serving costs (same machine): the step is memory-bound on the state, 6 x H x N x P floats =
768 KiB per stream at the default size. The scaled form (g, s) makes two passes over it per step;
the plain form (h.mul_(dA), then the rank-1 update, then the GEMV) makes three and was 7-13 %
slower at 64 streams, though ~0.3 ms faster at batch 1 (fewer small ops). torch.compile of step
was measured and is not used: 2x faster at batch 1, 1.5x slower at batch 64, 20-30 s per compile.
Flush denormals (torch.set_flush_denormal) on the stepping thread: a decaying state drifts into
denormal floats, which made the GEMV 8x slower here.

GPU path (documented, not implemented): mamba_ssm's Triton kernels take exactly these tensors:
``mamba_chunk_scan_combined(x, dt, A, B, C, chunk_size, D=D, z=None, dt_bias=dt_bias,
dt_softplus=True, initial_states=h0, return_final_states=True)`` replaces ``ssd_scan`` in forward;
``causal_conv1d_fn`` / ``causal_conv1d_update`` replace the conv (they keep the window channels
first, (b, conv_dim, d_conv): transpose ours); ``selective_state_update`` replaces the state update
in step (mamba_ssm keeps h as (b, H, P, N): fold s into g and transpose the last two dims at that
boundary; ours is (b, H, N, P) because the CPU step's batched GEMV is ~2x faster that way). A
kernel that is missing must be an explicit, logged choice, never a silent ImportError fallback.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .config import SSMConfig

__all__ = ["RMSNorm", "Mamba2Block", "ssd_scan", "segsum", "RENORM_LOG_SCALE"]

RENORM_LOG_SCALE = 20.0   # step() folds exp(s) back into g once s < -20 (|g| grows <= e^20 ~ 5e8)
SHORT_PREFILL = 16        # forward() of this many frames or fewer runs the conv as a sum of taps


class RMSNorm(nn.Module):
    """y = x / rms(x) * weight, optionally gated first: norm(x * silu(z)) (Mamba-2's gated norm)."""

    def __init__(self, d: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x: torch.Tensor, z: torch.Tensor | None = None) -> torch.Tensor:
        """x, z: (..., d) -> (..., d)."""
        if z is not None:
            x = x * F.silu(z)
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def segsum(a: torch.Tensor) -> torch.Tensor:
    """a: (..., T) -> (..., T, T) with out[..., i, j] = sum(a[..., j+1 : i+1]) for j <= i, else -inf.

    exp(segsum(dt*A)) is the decay from frame j to frame i. Computed by a masked cumsum (stable:
    no difference of two large cumulative sums)."""
    t = a.size(-1)
    x = a[..., None].expand(*a.shape, t)  # x[..., i, j] = a[..., i]
    strict = torch.tril(torch.ones(t, t, dtype=torch.bool, device=a.device), diagonal=-1)
    x = x.masked_fill(~strict, 0.0).cumsum(dim=-2)
    causal = torch.tril(torch.ones(t, t, dtype=torch.bool, device=a.device), diagonal=0)
    return x.masked_fill(~causal, -math.inf)


def ssd_scan(x: torch.Tensor, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, chunk: int,
             h0: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Chunked SSD scan (Mamba-2 paper, Listing 1), heads-first layout.

    x: (b, H, l, P) already multiplied by dt;  a: (b, H, l) = dt * A (log decay, <= 0);
    b, c: (b, G, l, N);  h0: (b, H, N, P);  l must be a multiple of ``chunk``.
    Returns y: (b, H, l, P) (without the D skip) and the final state h: (b, H, N, P).
    """
    bs, nh, length, p = x.shape
    g, n = b.shape[1], b.shape[-1]
    k = length // chunk
    x = x.reshape(bs, g, nh // g, k, chunk, p)           # (b, G, H/G, k, Q, P)
    a = a.reshape(bs, g, nh // g, k, chunk)              # (b, G, H/G, k, Q)
    b = b.reshape(bs, g, 1, k, chunk, n)                 # (b, G, 1, k, Q, N)
    c = c.reshape(bs, g, 1, k, chunk, n)
    a_cum = a.cumsum(-1)                                 # (b, G, H/G, k, Q)
    # 1. within each chunk: y = (L o C B^T) x   (the quadratic, attention-like form)
    scores = c @ b.transpose(-1, -2)                     # (b, G, 1, k, Q, Q), shared by heads
    y_diag = (scores * torch.exp(segsum(a))) @ x         # (b, G, H/G, k, Q, P)
    # 2. state each chunk contributes at its end: sum_s exp(a_cum[-1]-a_cum[s]) B_s x_s^T
    decay_in = torch.exp(a_cum[..., -1:] - a_cum)        # (b, G, H/G, k, Q)
    states = b.transpose(-1, -2) @ (x * decay_in[..., None])   # (b, G, H/G, k, N, P)
    h0 = h0.reshape(bs, g, nh // g, 1, n, p)
    if k == 1:   # one chunk (a short prefill): the state entering it is h0
        prev = h0
        h_final = (states[:, :, :, 0]
                   + h0[:, :, :, 0] * torch.exp(a_cum[:, :, :, 0, -1])[..., None, None])
    else:
        # 3. recurrence between chunks (quadratic in k; callers keep k small)
        states = torch.cat([h0, states], dim=3)
        chunk_decay = torch.exp(segsum(F.pad(a_cum[..., -1], (1, 0))))  # (b, G, H/G, k+1, k+1)
        states = torch.einsum("bghzc,bghcnp->bghznp", chunk_decay, states)
        prev, h_final = states[:, :, :, :-1], states[:, :, :, -1]
    # 4. contribution of the state entering each chunk: exp(a_cum[t]) C_t^T h_prev
    y_off = (c @ prev) * torch.exp(a_cum)[..., None]    # (b, G, H/G, k, Q, P)
    y = (y_diag + y_off).reshape(bs, nh, length, p)
    return y, h_final.reshape(bs, nh, n, p)


class Mamba2Block(nn.Module):
    """One Mamba-2 mixer: in_proj -> causal depthwise conv -> SSD -> gated RMSNorm -> out_proj."""

    def __init__(self, cfg: SSMConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.in_proj = nn.Linear(cfg.d_model, cfg.d_in_proj, bias=cfg.bias)
        self.conv1d = nn.Conv1d(cfg.conv_dim, cfg.conv_dim, cfg.d_conv, groups=cfg.conv_dim,
                                bias=cfg.conv_bias)
        dt = torch.exp(torch.rand(cfg.nheads) * (math.log(cfg.dt_max) - math.log(cfg.dt_min))
                       + math.log(cfg.dt_min)).clamp(min=cfg.dt_init_floor)
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))    # inverse softplus
        self.A_log = nn.Parameter(torch.log(torch.empty(cfg.nheads).uniform_(cfg.a_init_min,
                                                                             cfg.a_init_max)))
        self.D = nn.Parameter(torch.ones(cfg.nheads))
        self.norm = RMSNorm(cfg.d_inner, cfg.norm_eps)
        self.out_proj = nn.Linear(cfg.d_inner, cfg.d_model, bias=cfg.bias)

    # -- state -------------------------------------------------------------------------------
    def init_state(self, batch: int, device: torch.device | None = None,
                   dtype: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Zero state: conv (b, d_conv - 1, conv_dim), h (b, H, N, P)."""
        cfg, w = self.cfg, self.in_proj.weight
        device, dtype = device or w.device, dtype or w.dtype
        return (torch.zeros(batch, cfg.d_conv - 1, cfg.conv_dim, device=device, dtype=dtype),
                torch.zeros(batch, cfg.nheads, cfg.d_state, cfg.headdim, device=device, dtype=dtype))

    def _split(self, zxbcdt: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        cfg = self.cfg
        z, xbc, dt = torch.split(zxbcdt, [cfg.d_inner, cfg.conv_dim, cfg.nheads], dim=-1)
        return z, xbc, dt

    # -- training / prefill ------------------------------------------------------------------
    def forward(self, u: torch.Tensor, conv: torch.Tensor, h: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """u: (b, l, d_model), conv: (b, d_conv-1, conv_dim), h: (b, H, N, P)
        -> y: (b, l, d_model), new conv, new h. Inputs are not modified."""
        cfg = self.cfg
        bs, length, _ = u.shape
        z, xbc, dt = self._split(self.in_proj(u))
        xbc_cat = torch.cat([conv, xbc], dim=1)                    # (b, d_conv-1+l, conv_dim)
        new_conv = xbc_cat[:, xbc_cat.shape[1] - (cfg.d_conv - 1):]
        if length <= SHORT_PREFILL:
            # a few frames: the conv as a sum over its taps, channels last (the library conv
            # costs ~0.2 ms a call on such small inputs, most of a short prefill)
            w = self.conv1d.weight[:, 0]                            # (conv_dim, d_conv)
            xbc = xbc_cat[:, :length] * w[:, 0]
            for k in range(1, cfg.d_conv):
                xbc = xbc + xbc_cat[:, k:k + length] * w[:, k]
            if self.conv1d.bias is not None:
                xbc = xbc + self.conv1d.bias
            xbc = F.silu(xbc).transpose(1, 2)                       # (b, conv_dim, l)
        else:
            xbc = F.silu(F.conv1d(xbc_cat.transpose(1, 2), self.conv1d.weight, self.conv1d.bias,
                                  groups=cfg.conv_dim))             # (b, conv_dim, l)
        x, b, c = torch.split(xbc, [cfg.d_inner, cfg.ngroups * cfg.d_state,
                                    cfg.ngroups * cfg.d_state], dim=1)
        x = x.reshape(bs, cfg.nheads, cfg.headdim, length).transpose(-1, -2)  # (b, H, l, P)
        b = b.reshape(bs, cfg.ngroups, cfg.d_state, length).transpose(-1, -2)  # (b, G, l, N)
        c = c.reshape(bs, cfg.ngroups, cfg.d_state, length).transpose(-1, -2)
        dt = F.softplus(dt + self.dt_bias).transpose(1, 2)          # (b, H, l)
        a = dt * -torch.exp(self.A_log)[:, None]                    # (b, H, l)
        # a sequence shorter than a chunk is one chunk of its own length (a short prefill would
        # otherwise pay for chunk_size frames of quadratic form)
        chunk = min(cfg.chunk_size, length)
        pad = (-length) % chunk            # padded frames: dt = 0 -> no input, no decay
        xdt = x * dt[..., None]
        if pad:
            xdt, a = F.pad(xdt, (0, 0, 0, pad)), F.pad(a, (0, pad))
            b, c = F.pad(b, (0, 0, 0, pad)), F.pad(c, (0, 0, 0, pad))
        y, new_h = ssd_scan(xdt, a, b, c, chunk, h)
        new_conv, new_h = new_conv.contiguous(), new_h.contiguous()
        y = y[:, :, :length] + x * self.D[:, None, None]            # (b, H, l, P)
        y = y.transpose(1, 2).reshape(bs, length, cfg.d_inner)
        return self.out_proj(self.norm(y, z)), new_conv, new_h

    # -- serving -----------------------------------------------------------------------------
    def step(self, u: torch.Tensor, conv: torch.Tensor, gs: torch.Tensor, s: torch.Tensor,
             *, branch_free: bool = False) -> torch.Tensor:
        """u: (b, d_model) one frame per stream -> y: (b, d_model).

        Advances the state IN PLACE: conv (b, d_conv-1, conv_dim), gs = g (b, H, N, P) and
        s (b, H) with h = exp(s) g; all contiguous. The serving path: no per-frame allocation of the
        (large) state, and two passes over it (a rank-1 update and a GEMV) instead of three.

        ``branch_free``: fold exp(s) back into g with ``torch.where`` over every row instead of
        looking for the rows that need it first. The same numbers; eagerly a third pass over the
        state, but no data-dependent branch, so torch.compile makes one graph of the whole step
        (where it costs nothing: the pass fuses into the update)."""
        cfg = self.cfg
        bs, g = u.shape[0], cfg.ngroups
        z, xbc_t, dt = self._split(self.in_proj(u))
        w = self.conv1d.weight[:, 0]                                # (conv_dim, d_conv)
        xbc = xbc_t * w[:, -1]
        if self.conv1d.bias is not None:
            xbc = xbc + self.conv1d.bias
        for k in range(cfg.d_conv - 1):                             # older taps, channels last
            xbc = xbc.addcmul_(conv[:, k], w[:, k])
        if cfg.d_conv > 1:
            conv.copy_(torch.cat([conv[:, 1:], xbc_t[:, None]], dim=1))
        xbc = F.silu(xbc)
        x, b, c = torch.split(xbc, [cfg.d_inner, g * cfg.d_state, g * cfg.d_state], dim=-1)
        dt = F.softplus(dt + self.dt_bias)                          # (b, H)
        xdt = x.reshape(bs, cfg.nheads, cfg.headdim) * dt[..., None]  # (b, H, P)
        # h <- dA h + B (dt x)^T, y = h^T C, with h = exp(s) gs:  s <- s + dt A,
        # gs <- gs + B (dt x exp(-s))^T, y = exp(s) gs^T C. A rank-1 update and a GEMV per
        # (stream, head); (N, P) per head is the layout where both run fastest on CPU.
        hpg, n, nh = cfg.nheads // g, cfg.d_state, cfg.nheads
        s.add_(dt * -torch.exp(self.A_log))                         # log dA <= 0
        # fold exp(s) into g first where s fell low, so that exp(-s) below stays <= e^20
        if branch_free:
            low = s < -RENORM_LOG_SCALE                             # (b, H)
            gs.copy_(torch.where(low[..., None, None], gs * torch.exp(s)[..., None, None], gs))
            s.masked_fill_(low, 0.0)
        else:
            low = s.view(-1) < -RENORM_LOG_SCALE
            if bool(low.any()):
                rows = low.nonzero().squeeze(1)
                flat = gs.view(bs * nh, n * cfg.headdim)
                flat.index_copy_(0, rows, flat.index_select(0, rows)
                                 * torch.exp(s.view(-1).index_select(0, rows))[:, None])
                s.view(-1).index_fill_(0, rows, 0.0)
        gb = gs.view(bs * nh, n, cfg.headdim)                       # (b*H, N, P)
        b = b.reshape(bs, g, 1, n, 1).expand(bs, g, hpg, n, 1).reshape(bs * nh, n, 1)
        gb.baddbmm_(b, (xdt * torch.exp(-s)[..., None]).view(bs * nh, 1, cfg.headdim))
        c = c.reshape(bs, g, 1, 1, n).expand(bs, g, hpg, 1, n).reshape(bs * nh, 1, n)
        y = torch.bmm(c, gb).view(bs, nh, cfg.headdim) * torch.exp(s)[..., None]   # (b, H, P)
        y = y + x.view(bs, nh, cfg.headdim) * self.D[:, None]
        return self.out_proj(self.norm(y.view(bs, cfg.d_inner), z))

    # -- slow reference ----------------------------------------------------------------------
    def reference(self, u: torch.Tensor, conv: torch.Tensor, h: torch.Tensor
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """u: (b, l, d_model) -> y: (b, l, d_model), new conv, new h. One frame at a time, one
        head at a time, the recurrence written out literally. For tests only."""
        cfg = self.cfg
        hist = [conv[:, j] for j in range(cfg.d_conv - 1)]          # oldest first, each (b, conv_dim)
        h = h.clone()
        w = self.conv1d.weight[:, 0]                                 # (conv_dim, d_conv)
        A = -torch.exp(self.A_log)
        hpg = cfg.nheads // cfg.ngroups
        ys = []
        for t in range(u.shape[1]):
            proj = self.in_proj(u[:, t])
            z = proj[:, :cfg.d_inner]
            xbc_t = proj[:, cfg.d_inner:cfg.d_inner + cfg.conv_dim]
            dt_raw = proj[:, cfg.d_inner + cfg.conv_dim:]
            taps = hist + [xbc_t]                                   # d_conv frames, oldest first
            xbc = sum(taps[j] * w[:, j] for j in range(cfg.d_conv))
            if self.conv1d.bias is not None:
                xbc = xbc + self.conv1d.bias
            xbc = xbc * torch.sigmoid(xbc)                          # silu
            hist = taps[1:]
            x_all = xbc[:, :cfg.d_inner]
            bc = xbc[:, cfg.d_inner:]
            y = torch.empty_like(x_all)
            for head in range(cfg.nheads):
                grp = head // hpg
                x_t = x_all[:, head * cfg.headdim:(head + 1) * cfg.headdim]          # (b, P)
                B_t = bc[:, grp * cfg.d_state:(grp + 1) * cfg.d_state]             # (b, N)
                C_t = bc[:, (cfg.ngroups + grp) * cfg.d_state:(cfg.ngroups + grp + 1) * cfg.d_state]
                dt_t = torch.log1p(torch.exp(dt_raw[:, head] + self.dt_bias[head]))  # softplus
                decay = torch.exp(dt_t * A[head])
                h[:, head] = (decay[:, None, None] * h[:, head]                   # (b, N, P)
                              + B_t[:, :, None] * (dt_t[:, None] * x_t)[:, None, :])
                y[:, head * cfg.headdim:(head + 1) * cfg.headdim] = (
                    (h[:, head] * C_t[:, :, None]).sum(1) + self.D[head] * x_t)
            gated = y * (z * torch.sigmoid(z))
            normed = gated / torch.sqrt((gated ** 2).mean(-1, keepdim=True) + cfg.norm_eps)
            ys.append(self.out_proj(normed * self.norm.weight))
        new_conv = torch.stack(hist, dim=1) if hist else conv.clone()
        return torch.stack(ys, dim=1), new_conv, h
