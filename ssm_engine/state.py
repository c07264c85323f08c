"""Per-stream recurrent state: a named set of tensors whose first dimension is the stream.

``StreamState`` is the generic container the batcher works with: row ``i`` of every tensor belongs
to stream ``i`` of the batch, so a batch of streams is split and merged by indexing dim 0:

    s = model.init_state(batch=3)       # 3 streams
    one = s.select([1])                 # copy of stream 1's rows        -> batch 1
    s.put([0], one)                     # overwrite stream 0 in place with stream 1's state
    s2 = StreamState.cat([s, one])      # batch 4 (type of the first part is kept)
    data = one.to_bytes()               # safetensors bytes, movable to another process
    back = model.state_from_bytes(data) # validated against the model's own template

``StackState`` is the state of an SSMStack: for each layer i, ``conv{i}`` (b, d_conv-1, conv_dim),
the last d_conv-1 inputs of the causal convolution, and the SSM state h (b, H, N, P), stored as
``ssm{i}`` = g (b, H, N, P) and ``logscale{i}`` = s (b, H) with h = exp(s) * g (see mamba2.py:
step() decays h by lowering s instead of rewriting g; forward() returns s = 0). Its size is fixed:
it does not grow with the length of the stream.

A model with more state (a speech front end around the stack, say) builds its own StreamState
with more names (``StreamState({**stack_state.tensors, "frontend": ...})``) and gets select/put/
cat/bytes for free.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping, Sequence
from typing import TypeVar

import torch
from safetensors import SafetensorError
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from .errors import StateError

__all__ = ["StreamState", "StackState", "STATE_FORMAT", "STATE_FORMAT_VERSION"]

STATE_FORMAT = "parley.ssm_engine.state"
STATE_FORMAT_VERSION = "1"

S = TypeVar("S", bound="StreamState")
Index = torch.Tensor | Sequence[int] | slice


def _as_index(idx: Index) -> torch.Tensor | slice:
    if isinstance(idx, slice):
        return idx
    if isinstance(idx, torch.Tensor):
        return idx.to(torch.long)
    return torch.as_tensor(list(idx), dtype=torch.long)


class StreamState:
    """Named tensors sharing a leading batch (stream) dimension. Shapes: name -> (b, ...)."""

    __slots__ = ("tensors",)

    def __init__(self, tensors: Mapping[str, torch.Tensor]) -> None:
        if not tensors:
            raise StateError("a StreamState needs at least one tensor")
        batches = {name: t.shape[0] if t.dim() else None for name, t in tensors.items()}
        if None in batches.values() or len(set(batches.values())) != 1:
            raise StateError(f"state tensors disagree on the batch (first) dimension: {batches}")
        self.tensors: dict[str, torch.Tensor] = dict(tensors)

    @property
    def batch(self) -> int:
        """Number of streams (rows) in this state."""
        return next(iter(self.tensors.values())).shape[0]

    def __repr__(self) -> str:
        shapes = ", ".join(f"{k}={tuple(v.shape)}" for k, v in self.tensors.items())
        return f"{type(self).__name__}({shapes})"

    def _new(self: S, tensors: Mapping[str, torch.Tensor]) -> S:
        return type(self)(tensors)

    def select(self: S, idx: Index) -> S:
        """Rows ``idx`` of every tensor, copied (a slice gives views). -> batch len(idx)."""
        index = self._on_device(_as_index(idx))
        if isinstance(index, slice):
            return self._new({k: v[index] for k, v in self.tensors.items()})
        return self._new({k: v.index_select(0, index) for k, v in self.tensors.items()})

    def _on_device(self, index: torch.Tensor | slice) -> torch.Tensor | slice:
        """An index tensor on the device of this state's tensors (a GPU state's rows)."""
        if isinstance(index, slice):
            return index
        return index.to(next(iter(self.tensors.values())).device)

    def put(self, idx: Index, rows: StreamState) -> None:
        """Overwrite rows ``idx`` in place with the (len(idx)-row) state ``rows``."""
        self._check_compatible(rows, ignore_batch=True)
        index = self._on_device(_as_index(idx))
        for name, t in self.tensors.items():
            if isinstance(index, slice):
                t[index] = rows.tensors[name]
            else:
                t.index_copy_(0, index, rows.tensors[name])

    def clone(self: S) -> S:
        return self._new({k: v.clone() for k, v in self.tensors.items()})

    @classmethod
    def cat(cls, parts: Sequence[S]) -> S:
        """Streams of all parts, in order, in one new state (of the first part's type)."""
        if not parts:
            raise StateError("cat needs at least one state")
        first = parts[0]
        for p in parts[1:]:
            first._check_compatible(p, ignore_batch=True)
        if len(parts) == 1:
            return first.clone()
        return first._new({k: torch.cat([p.tensors[k] for p in parts], 0) for k in first.tensors})

    def _check_compatible(self, other: StreamState, *, ignore_batch: bool) -> None:
        if self.tensors.keys() != other.tensors.keys():
            raise StateError(f"state names differ: {sorted(self.tensors)} vs {sorted(other.tensors)}")
        for k, a in self.tensors.items():
            b = other.tensors[k]
            sa, sb = (a.shape[1:], b.shape[1:]) if ignore_batch else (a.shape, b.shape)
            if sa != sb or a.dtype != b.dtype:
                raise StateError(f"state {k!r}: {tuple(b.shape)} {b.dtype} does not fit "
                                 f"{tuple(a.shape)} {a.dtype}")

    def to_bytes(self) -> bytes:
        """Serialize (safetensors, tensors on CPU) with a format tag and the state's class name."""
        tensors = {k: v.detach().to("cpu").contiguous() for k, v in self.tensors.items()}
        meta = {"format": STATE_FORMAT, "version": STATE_FORMAT_VERSION, "kind": type(self).__name__}
        return st_save(tensors, metadata=meta)

    @classmethod
    def from_bytes(cls: type[S], data: bytes, template: StreamState) -> S:
        """Parse ``to_bytes`` output, checking names, shapes (except batch) and dtypes against
        ``template`` (e.g. ``model.init_state(1)``). Raises StateError on anything else."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise StateError(f"state bytes must be bytes, got {type(data).__name__}")
        data = bytes(data)
        try:
            tensors = st_load(data)
            meta = _read_metadata(data)
        except (SafetensorError, ValueError, OSError) as exc:
            raise StateError(f"state bytes are not a readable safetensors blob: {exc}") from exc
        if meta.get("format") != STATE_FORMAT or meta.get("version") != STATE_FORMAT_VERSION:
            raise StateError(f"state bytes have format {meta.get('format')!r} version "
                             f"{meta.get('version')!r}; expected {STATE_FORMAT!r} "
                             f"version {STATE_FORMAT_VERSION!r}")
        if meta.get("kind") != cls.__name__:
            raise StateError(f"state bytes hold a {meta.get('kind')!r}, expected {cls.__name__!r}")
        state = cls(tensors)   # raises StateError if the names do not form a cls
        template._check_compatible(state, ignore_batch=True)
        device = next(iter(template.tensors.values())).device
        return state._new({k: v.to(device) for k, v in state.tensors.items()})


def _read_metadata(data: bytes) -> dict[str, str]:
    """The ``__metadata__`` of a safetensors blob (8-byte little-endian header size, JSON header)."""
    if len(data) < 8:
        raise StateError("too short")
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.get("__metadata__", {})
    if not isinstance(meta, dict):
        raise StateError("bad metadata")
    return meta


class StackState(StreamState):
    """State of an SSMStack. Per layer i: ``conv{i}`` (b, d_conv-1, conv_dim), ``ssm{i}`` = g
    (b, H, N, P) and ``logscale{i}`` = s (b, H); the SSM state is h = exp(s) * g."""

    __slots__ = ()
    _KINDS = ("conv", "ssm", "logscale")

    def __init__(self, tensors: Mapping[str, torch.Tensor]) -> None:
        # step() updates these in place through .view(): keep them contiguous (no-op if they are)
        super().__init__({k: v.contiguous() for k, v in tensors.items()})
        n = len(self.tensors) // 3
        expected = {f"{kind}{i}" for i in range(n) for kind in self._KINDS}
        if set(self.tensors) != expected or n == 0:
            raise StateError(f"StackState needs names conv0.., ssm0.., logscale0.. for each layer; "
                             f"got {sorted(self.tensors)}")

    @classmethod
    def from_layers(cls, conv: Sequence[torch.Tensor], ssm: Sequence[torch.Tensor]) -> StackState:
        """From per-layer conv windows and plain SSM states h (b, H, N, P) (log-scales = 0)."""
        tensors: dict[str, torch.Tensor] = {}
        for i, (c, h) in enumerate(zip(conv, ssm, strict=True)):
            tensors[f"conv{i}"] = c
            tensors[f"ssm{i}"] = h
            tensors[f"logscale{i}"] = h.new_zeros(h.shape[:2])
        return cls(tensors)

    @property
    def n_layers(self) -> int:
        return len(self.tensors) // 3

    def conv(self, i: int) -> torch.Tensor:
        """(b, d_conv - 1, conv_dim): the previous d_conv-1 conv inputs of layer i, oldest first."""
        return self.tensors[f"conv{i}"]

    def ssm(self, i: int) -> torch.Tensor:
        """(b, H, N, P): the SSM state h = exp(s) * g of layer i (a new tensor)."""
        return self.tensors[f"ssm{i}"] * torch.exp(self.tensors[f"logscale{i}"])[:, :, None, None]

    def scaled_ssm(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(g (b, H, N, P), s (b, H)) of layer i, the stored tensors themselves (step updates them)."""
        return self.tensors[f"ssm{i}"], self.tensors[f"logscale{i}"]

    def nbytes_per_stream(self) -> int:
        return sum(t[0].numel() * t.element_size() for t in self.tensors.values())
