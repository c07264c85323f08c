"""SSMStack: a residual stack of pre-norm Mamba-2 blocks, d_model -> d_model, with explicit state.

    model = SSMStack(SSMConfig(d_model=256, n_layers=6))
    state = model.init_state(batch=n)              # StackState, fixed size per stream
    y, state = model.step(x, state)                # x: (n, d_model), one frame per stream
    y_seq, state = model.forward(x_seq, state)     # x_seq: (n, l, d_model), chunked SSD scan
    y_ref, state = model.reference(x_seq, state)   # frame-by-frame loop, for tests

Each layer computes ``u = u + Mamba2Block(RMSNorm(u))``; a final RMSNorm closes the stack.
``step`` advances the state it is given in place and returns it (the serving path must not
allocate ~1 MB of state per stream per frame); ``forward`` and ``reference`` leave their input
state untouched and return a new one (safe under autograd). Speech models put their own
input/output projections around the stack.
"""

from __future__ import annotations

from typing import cast

import torch
from torch import nn

from .config import SSMConfig
from .errors import StateError
from .mamba2 import Mamba2Block, RMSNorm
from .state import StackState

__all__ = ["SSMStack"]


class SSMStack(nn.Module):
    """Residual stack of Mamba-2 blocks; implements the StreamingModel protocol (batcher.py)."""

    def __init__(self, config: SSMConfig) -> None:
        super().__init__()
        self.config = config
        self.norms = nn.ModuleList(RMSNorm(config.d_model, config.norm_eps)
                                   for _ in range(config.n_layers))
        self.blocks = nn.ModuleList(Mamba2Block(config) for _ in range(config.n_layers))
        self.norm_f = RMSNorm(config.d_model, config.norm_eps)
        with torch.no_grad():  # GPT-2 style: keep the residual stream's variance bounded
            for block in cast("list[Mamba2Block]", self.blocks):
                block.out_proj.weight.mul_(1.0 / (2.0 * config.n_layers) ** 0.5)

    # -- state ----------------------------------------------------------------------------------
    def init_state(self, batch: int) -> StackState:
        """Zero state for ``batch`` streams: per layer conv (b, d_conv-1, conv_dim), h (b, H, N, P)."""
        if batch < 0:
            raise StateError(f"batch must be >= 0, got {batch}")
        parts = [blk.init_state(batch) for blk in cast("list[Mamba2Block]", self.blocks)]
        return StackState.from_layers([p[0] for p in parts], [p[1] for p in parts])

    def state_from_bytes(self, data: bytes) -> StackState:
        """Inverse of ``StackState.to_bytes``, validated against this model's shapes."""
        return StackState.from_bytes(data, self.init_state(1))

    def _check_state(self, state: StackState, batch: int) -> None:
        if not isinstance(state, StackState):
            raise StateError(f"expected a StackState, got {type(state).__name__}")
        if state.n_layers != self.config.n_layers or state.batch != batch:
            raise StateError(f"state {state!r} does not fit batch={batch}, "
                             f"n_layers={self.config.n_layers}")

    # -- the three paths ------------------------------------------------------------------------
    def forward(self, x_seq: torch.Tensor, state: StackState | None = None
                ) -> tuple[torch.Tensor, StackState]:
        """x_seq: (b, l, d_model) -> (y_seq: (b, l, d_model), new state). state None = zeros.

        Scans at most ``chunk_size * scan_chunks`` frames at a time, carrying the state between
        segments, so memory and the inter-chunk matrix stay bounded for long prefill."""
        if x_seq.dim() != 3 or x_seq.shape[-1] != self.config.d_model:
            raise StateError(f"forward expects (b, l, {self.config.d_model}), got {tuple(x_seq.shape)}")
        if state is None:
            state = self.init_state(x_seq.shape[0])
        self._check_state(state, x_seq.shape[0])
        seg = self.config.chunk_size * self.config.scan_chunks
        conv = [state.conv(i) for i in range(self.config.n_layers)]
        ssm = [state.ssm(i) for i in range(self.config.n_layers)]
        outs = []
        for start in range(0, x_seq.shape[1], seg):
            u = x_seq[:, start:start + seg]
            for i, (norm, block) in enumerate(zip(self.norms, cast("list[Mamba2Block]", self.blocks), strict=True)):
                y, conv[i], ssm[i] = block(norm(u), conv[i], ssm[i])
                u = u + y
            outs.append(self.norm_f(u))
        y_seq = torch.cat(outs, dim=1) if outs else x_seq.clone()
        if not outs:  # zero-length input: state unchanged, but never aliased
            return y_seq, state.clone()
        return y_seq, StackState.from_layers(conv, ssm)

    def step(self, x: torch.Tensor, state: StackState, *, branch_free: bool = False
             ) -> tuple[torch.Tensor, StackState]:
        """x: (b, d_model), one frame for each of b streams -> (y: (b, d_model), state).

        The serving path. ``state`` is advanced IN PLACE and returned (the same object): stepping
        allocates no per-stream state. ``state.clone()`` first to keep the old one.
        ``branch_free``: the form torch.compile makes one graph of (``Mamba2Block.step``)."""
        if x.dim() != 2 or x.shape[-1] != self.config.d_model:
            raise StateError(f"step expects (b, {self.config.d_model}), got {tuple(x.shape)}")
        self._check_state(state, x.shape[0])
        u = x
        for i, (norm, block) in enumerate(zip(self.norms, cast("list[Mamba2Block]", self.blocks), strict=True)):
            u = u + block.step(norm(u), state.conv(i), *state.scaled_ssm(i), branch_free=branch_free)
        return self.norm_f(u), state

    def reference(self, x_seq: torch.Tensor, state: StackState | None = None
                  ) -> tuple[torch.Tensor, StackState]:
        """x_seq: (b, l, d_model). The slow loop (Mamba2Block.reference) layer by layer."""
        if state is None:
            state = self.init_state(x_seq.shape[0])
        self._check_state(state, x_seq.shape[0])
        conv, ssm = [], []
        u = x_seq
        for i, (norm, block) in enumerate(zip(self.norms, cast("list[Mamba2Block]", self.blocks), strict=True)):
            y, c, h = block.reference(norm(u), state.conv(i), state.ssm(i))
            conv.append(c)
            ssm.append(h)
            u = u + y
        return self.norm_f(u), StackState.from_layers(conv, ssm)
