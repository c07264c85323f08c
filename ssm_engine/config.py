"""SSMConfig: the frozen, self-validating size of an SSMStack (see mamba2.py for the symbols)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from .errors import ConfigError

__all__ = ["SSMConfig"]


@dataclass(frozen=True)
class SSMConfig:
    """Sizes of a residual stack of Mamba-2 blocks.

    d_model     width of the residual stream (input and output of the stack)
    n_layers    number of residual Mamba-2 blocks
    d_state     N, state size per head (Mamba-2 paper: N)
    d_conv      width of the causal depthwise convolution (taps, including the current frame)
    expand      E, d_inner = E * d_model
    headdim     P, channels per head; nheads H = d_inner / P
    ngroups     G, heads share B and C in G groups (Mamba-2 "multi-value" grouping; 1 = all share)
    chunk_size  Q, block length of the chunked SSD scan used by forward()
    scan_chunks forward() scans at most this many chunks at once (bounds the (c x c) inter-chunk
                matrix), carrying the state from segment to segment; results do not depend on it
    """

    d_model: int = 256
    n_layers: int = 6
    d_state: int = 64
    d_conv: int = 4
    expand: int = 2
    headdim: int = 64
    ngroups: int = 1
    chunk_size: int = 64
    scan_chunks: int = 32
    norm_eps: float = 1e-5
    dt_min: float = 1e-3
    dt_max: float = 0.1
    dt_init_floor: float = 1e-4
    a_init_min: float = 1.0
    a_init_max: float = 16.0
    conv_bias: bool = True
    bias: bool = False

    def __post_init__(self) -> None:
        for name in ("d_model", "n_layers", "d_state", "d_conv", "expand", "headdim", "ngroups",
                     "chunk_size", "scan_chunks"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"SSMConfig.{name} must be a positive int, got {value!r}")
        if self.d_inner % self.headdim:
            raise ConfigError(
                f"SSMConfig: headdim={self.headdim} must divide d_inner=expand*d_model={self.d_inner}")
        if self.nheads % self.ngroups:
            raise ConfigError(f"SSMConfig: ngroups={self.ngroups} must divide nheads={self.nheads}")
        if not 0 < self.dt_min <= self.dt_max:
            raise ConfigError(f"SSMConfig: need 0 < dt_min <= dt_max, got {self.dt_min}, {self.dt_max}")
        if not 0 < self.a_init_min <= self.a_init_max:
            raise ConfigError(f"SSMConfig: need 0 < a_init_min <= a_init_max, got "
                              f"{self.a_init_min}, {self.a_init_max}")
        if self.norm_eps <= 0:
            raise ConfigError(f"SSMConfig.norm_eps must be > 0, got {self.norm_eps}")

    @property
    def d_inner(self) -> int:
        return self.expand * self.d_model

    @property
    def nheads(self) -> int:
        return self.d_inner // self.headdim

    @property
    def conv_dim(self) -> int:
        """Channels that go through the convolution: x, B and C."""
        return self.d_inner + 2 * self.ngroups * self.d_state

    @property
    def d_in_proj(self) -> int:
        """in_proj output width: z, x, B, C, dt."""
        return 2 * self.d_inner + 2 * self.ngroups * self.d_state + self.nheads

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> SSMConfig:
        """Strict inverse of to_dict: unknown or ill-typed keys raise ConfigError."""
        if not isinstance(data, dict):
            raise ConfigError(f"SSMConfig must be a JSON object, got {type(data).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"SSMConfig: unknown keys {unknown}")
        try:
            return cls(**data)
        except TypeError as exc:
            raise ConfigError(f"SSMConfig: {exc}") from exc
