"""StreamBatcher: many live streams, one batched ``step`` per tick. Synchronous, single-threaded.

    batcher = StreamBatcher(model)            # any StreamingModel (SSMStack, a full STT model, ...)
    a, b = batcher.open(), batcher.open()     # stream ids
    out = batcher.run({a: frames_a, b: frames_b})   # frames: (n, d_in) -> out[a]: (n, d_out)
    data = batcher.export_bytes(a); batcher.close(a)
    c = batcher.open(model.state_from_bytes(data))  # continues exactly where a stopped

The states of all live streams sit in one batched state object, one row per stream. A tick whose
due streams are all live streams steps that object directly (no copy of the state); a tick with a
subset gathers the due rows (``select``), steps them, and scatters them back (``put``). A model
that also has ``prefill`` (n steps in one parallel pass, see ``SupportsPrefill``) gets every chunk
of ``prefill_min`` frames or more that way (streams with equal lengths together): a stream with a
backlog (a pre-roll, a runner that fell behind) catches up at a fraction of n steps' cost. Joins and
leaves are queued and applied together at the start of the next tick: one ``cat`` and one
``select`` however many streams came and went. The only per-stream Python work is the dict lookup
of each stream's row when a batch of chunks arrives; each tick is a fixed number of tensor ops.

Not thread-safe: one thread owns a batcher (BatchRunner's worker thread, or a test).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, TypeVar, runtime_checkable

import torch

from .device import model_device
from .errors import ConfigError, StateError, StreamError, UnknownStreamError

__all__ = ["BatchableState", "StreamingModel", "SupportsPrefill", "StreamBatcher", "DEFAULT_PREFILL_MIN"]

S = TypeVar("S", bound="BatchableState")


@runtime_checkable
class BatchableState(Protocol):
    """A batch of per-stream states, one row per stream (StreamState implements it)."""

    @property
    def batch(self) -> int: ...
    def select(self: S, idx: torch.Tensor) -> S: ...           # rows idx, copied -> batch len(idx)
    def put(self, idx: torch.Tensor, rows: Any) -> None: ...   # overwrite rows idx in place
    @classmethod
    def cat(cls: type[S], parts: Sequence[S]) -> S: ...        # concatenate streams, in order
    def to_bytes(self) -> bytes: ...


@runtime_checkable
class StreamingModel(Protocol):
    """What StreamBatcher and BatchRunner need from a model (SSMStack implements it).

    ``step`` may update the state in place or return a new one; the batcher uses what it returns."""

    def init_state(self, batch: int) -> Any: ...                       # -> BatchableState
    def step(self, x: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]: ...  # (b, d_in)
    def state_from_bytes(self, data: bytes) -> Any: ...                # -> batch-1 state


@runtime_checkable
class SupportsPrefill(Protocol):
    """Optional: n frames per stream in one pass, equal to n ``step`` calls (STTModel has it)."""

    def prefill(self, x: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]: ...  # (b, n, d_in)


DEFAULT_PREFILL_MIN = 2
"""Frames from which a chunk goes through ``prefill``: on the STT model (1 thread, batch 1,
``benchmarks/bench_stt_prefill.py``, p50) 2 frames took 4.7 ms as one pass against 5.7 ms as
steps, 4 frames 5.0 against 11.1 ms, 8 frames 5.7 against 22.8 ms, 25 frames 8.7 against 74 ms.
(It was 8 while a short prefill padded to a whole 64-frame chunk and ran the library's conv.)"""


class StreamBatcher:
    """Runs one batched model step per tick over all live streams that have a frame due.

    ``prefill_min``: chunks this long or longer use the model's ``prefill`` (if it has one);
    None turns that off."""

    def __init__(self, model: StreamingModel, *, prefill_min: int | None = DEFAULT_PREFILL_MIN
                 ) -> None:
        if prefill_min is not None and prefill_min < 2:
            raise ConfigError(f"prefill_min must be >= 2 or None, got {prefill_min}")
        self.model = model
        self.device = model_device(model)        # frames go there; outputs come back on the CPU
        self._prefiller = model if isinstance(model, SupportsPrefill) else None
        self.prefill_min = prefill_min if self._prefiller is not None else None
        self._state: Any = None                  # BatchableState over live streams, or None
        self._ids: list[int] = []                # row -> stream id
        self._rows: dict[int, int] = {}          # stream id -> row
        self._joining: dict[int, Any] = {}       # stream id -> batch-1 state (None: fresh)
        self._leaving: set[int] = set()
        self._auto_ids = itertools.count()

    # -- membership ----------------------------------------------------------------------------
    @property
    def stream_ids(self) -> list[int]:
        """Ids of the open streams (live rows first, then streams that join at the next tick)."""
        return [s for s in self._ids if s not in self._leaving] + list(self._joining)

    def __contains__(self, stream_id: int) -> bool:
        return (stream_id in self._rows and stream_id not in self._leaving) or stream_id in self._joining

    def __len__(self) -> int:
        return len(self._ids) - len(self._leaving) + len(self._joining)

    def open(self, state: Any = None, *, stream_id: int | None = None) -> int:
        """Open a stream, fresh or from a batch-1 ``state`` (e.g. ``model.state_from_bytes``).
        Returns its id (``stream_id`` if given, else a new one). It joins at the next tick."""
        if state is not None and state.batch != 1:
            raise StateError(f"open() takes a batch-1 state, got batch {state.batch}")
        if stream_id is None:
            stream_id = next(self._auto_ids)
            while stream_id in self._rows or stream_id in self._joining:
                stream_id = next(self._auto_ids)
        elif stream_id in self._rows or stream_id in self._joining:
            raise StreamError(f"stream {stream_id} is already open")
        self._joining[stream_id] = state
        return stream_id

    def close(self, stream_id: int) -> None:
        """Close a stream; its row leaves at the next tick."""
        if stream_id in self._joining:
            del self._joining[stream_id]
        elif stream_id in self._rows and stream_id not in self._leaving:
            self._leaving.add(stream_id)
        else:
            raise UnknownStreamError(stream_id)

    def _apply_membership(self) -> None:
        if self._leaving:
            keep = [r for r, s in enumerate(self._ids) if s not in self._leaving]
            self._ids = [self._ids[r] for r in keep]
            self._state = (self._state.select(self._index(keep))
                           if keep else None)
            self._leaving.clear()
        if self._joining:
            parts = [st if st is not None else self.model.init_state(1)
                     for st in self._joining.values()]
            if self._state is not None:
                parts.insert(0, self._state)
            self._state = type(parts[0]).cat(parts)
            self._ids.extend(self._joining)
            self._joining.clear()
        self._rows = {s: r for r, s in enumerate(self._ids)}

    # -- state export --------------------------------------------------------------------------
    def export_state(self, stream_id: int) -> Any:
        """A copy of one stream's state (batch 1); the stream keeps running."""
        if stream_id not in self:
            raise UnknownStreamError(stream_id)
        self._apply_membership()
        return self._state.select(self._index([self._rows[stream_id]]))

    def export_bytes(self, stream_id: int) -> bytes:
        """``export_state(stream_id).to_bytes()``: movable to another process or replica."""
        return self.export_state(stream_id).to_bytes()

    # -- stepping ------------------------------------------------------------------------------
    def step(self, frames: Mapping[int, torch.Tensor]) -> dict[int, torch.Tensor]:
        """One tick. frames: stream id -> (d_in,) -> stream id -> (d_out,)."""
        out = self.run({s: f.unsqueeze(0) for s, f in frames.items()})
        return {s: y[0] for s, y in out.items()}

    def run(self, chunks: Mapping[int, torch.Tensor]) -> dict[int, torch.Tensor]:
        """Feed each stream its chunk, batching across streams.

        chunks: stream id -> (n_s, d_in) -> stream id -> (n_s, d_out). Chunks of ``prefill_min``
        frames or more go through ``prefill``; the rest run max(n_s) ticks, where at tick t the
        streams with n_s > t are due. Streams not in ``chunks`` do not advance."""
        self._apply_membership()
        if not chunks:
            return {}
        sids = list(chunks)
        for s in sids:
            if s not in self._rows:
                raise UnknownStreamError(s)
            c = chunks[s]
            if not isinstance(c, torch.Tensor) or c.dim() != 2:
                raise StreamError(f"stream {s}: frames must be a (n, d_in) tensor, got "
                                  f"{tuple(c.shape) if isinstance(c, torch.Tensor) else type(c)}")
        if self.device.type != "cpu":
            chunks = {s: chunks[s].to(self.device, non_blocking=True) for s in sids}
        out: dict[int, torch.Tensor] = {}
        if self.prefill_min is not None:
            long = [s for s in sids if chunks[s].shape[0] >= self.prefill_min]
            if long:
                out.update(self._prefill({s: chunks[s] for s in long}))
                sids = [s for s in sids if s not in out]
                if not sids:
                    return self._host(out)
        out.update(self._tick({s: chunks[s] for s in sids}))
        return self._host(out)

    def _index(self, rows: list[int]) -> torch.Tensor:
        """Row numbers as an index tensor on the model's device."""
        return torch.tensor(rows, dtype=torch.long, device=self.device)

    def _host(self, out: dict[int, torch.Tensor]) -> dict[int, torch.Tensor]:
        """Outputs back on the CPU (one copy per stream; nothing to do for a CPU model)."""
        if self.device.type == "cpu":
            return out
        return {s: y.cpu() for s, y in out.items()}

    def _prefill(self, chunks: dict[int, torch.Tensor]) -> dict[int, torch.Tensor]:
        """One ``prefill`` per group of equal-length chunks: gather, run, scatter back."""
        assert self._prefiller is not None, "prefill_min is None without a prefill"
        by_len: dict[int, list[int]] = {}
        for s, c in chunks.items():
            by_len.setdefault(c.shape[0], []).append(s)
        out = {}
        for group in by_len.values():
            x = torch.stack([chunks[s] for s in group])
            if len(group) == len(self._ids) == 1:   # the only live stream: no gather/scatter
                y, self._state = self._prefiller.prefill(x, self._state)
            else:
                due = self._index([self._rows[s] for s in group])
                sub = self._state.select(due)
                y, sub = self._prefiller.prefill(x, sub)
                self._state.put(due, sub)
            out.update({s: y[i] for i, s in enumerate(group)})
        return out

    def _tick(self, chunks: dict[int, torch.Tensor]) -> dict[int, torch.Tensor]:
        """Frame by frame, batching across streams (see ``run``)."""
        sids = list(chunks)
        lengths = torch.tensor([chunks[s].shape[0] for s in sids], dtype=torch.long)
        rows = torch.tensor([self._rows[s] for s in sids], dtype=torch.long)
        x_all = torch.cat([chunks[s] for s in sids], dim=0)         # (sum n, d_in)
        offsets = torch.cumsum(lengths, 0) - lengths
        # longest chunks first: the streams due at tick t are then a prefix of this order
        order = torch.argsort(-lengths, stable=True)
        lengths_o = lengths[order]                                  # loop bounds stay on the CPU
        rows_o, offsets_o = rows[order].to(self.device), offsets[order].to(self.device)
        n_live = len(self._ids)
        y_all: torch.Tensor | None = None
        for t in range(int(lengths_o[0]) if len(sids) else 0):
            k = int((lengths_o > t).sum())
            src, due = offsets_o[:k] + t, rows_o[:k]
            x = x_all.index_select(0, src)                           # (k, d_in)
            if k == n_live:       # every live stream is due: step the batched state as it is
                x_rows = torch.empty_like(x).index_copy_(0, due, x)
                y_rows, self._state = self.model.step(x_rows, self._state)
                y = y_rows.index_select(0, due)
            else:                 # a subset: gather its rows, step them, scatter them back
                sub = self._state.select(due)
                y, sub = self.model.step(x, sub)
                self._state.put(due, sub)
            if y_all is None:
                y_all = y.new_empty((x_all.shape[0],) + tuple(y.shape[1:]))
            y_all.index_copy_(0, src, y)
        if y_all is None:  # every chunk was empty
            return {s: chunks[s].new_empty((0,) + tuple(chunks[s].shape[1:])) for s in sids}
        return {s: y_all[int(o):int(o) + int(n)] for s, o, n in zip(sids, offsets.tolist(), lengths.tolist(),
                                                                     strict=True)}
