"""Helpers shared by the ssm_engine tests: a tiny config, seeded models, random states."""

from __future__ import annotations

import torch

from ssm_engine import SSMConfig, SSMStack, StackState

TINY = SSMConfig(d_model=16, n_layers=2, d_state=8, d_conv=4, expand=2, headdim=8,
                 chunk_size=4, scan_chunks=2)


def make_model(cfg: SSMConfig = TINY, seed: int = 0, dtype: torch.dtype = torch.float64) -> SSMStack:
    torch.manual_seed(seed)
    return SSMStack(cfg).to(dtype).eval()


def random_state(model: SSMStack, batch: int, seed: int = 1) -> StackState:
    """A non-zero state, so that tests see the initial state actually being used."""
    g = torch.Generator().manual_seed(seed)
    zero = model.init_state(batch)
    return StackState({k: torch.randn(v.shape, generator=g, dtype=v.dtype) * 0.5
                       for k, v in zero.tensors.items()})


def max_diff(a: StackState, b: StackState) -> float:
    """Largest difference between the conv windows and the SSM states h = exp(s) g."""
    assert a.tensors.keys() == b.tensors.keys()
    return max(max((a.conv(i) - b.conv(i)).abs().max().item(),
                   (a.ssm(i) - b.ssm(i)).abs().max().item()) for i in range(a.n_layers))
