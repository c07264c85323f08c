"""Greedy CTC decoding, whole-clip or streaming, and the error rates it is scored with.

    text = greedy_decode(log_probs)              # (T, V) -> "hello world"
    dec = StreamingGreedyDecoder()
    changed = dec.push(frames)                   # (n, V) log-probs of the newest frames
    dec.text                                     # the partial transcript so far
    cer(ref, hyp), wer(ref, hyp)                 # edit distance / reference length
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .text import BLANK, VOCAB
from ..words import edit_distance

__all__ = ["greedy_decode", "StreamingGreedyDecoder", "edit_distance", "cer", "wer"]


def _collapse(ids: Sequence[int], prev: int = BLANK) -> tuple[list[int], int]:
    out: list[int] = []
    for i in ids:
        if i != prev and i != BLANK:
            out.append(i)
        prev = i
    return out, prev


def greedy_decode(log_probs: torch.Tensor) -> str:
    """(T, V) scores of one utterance -> text (best path, repeats merged, blanks dropped)."""
    ids, _ = _collapse(log_probs.argmax(dim=-1).tolist())
    return " ".join("".join(VOCAB[i] for i in ids).split())


class StreamingGreedyDecoder:
    """Greedy CTC over frames pushed a few at a time; ``text`` is the transcript so far."""

    def __init__(self) -> None:
        self._ids: list[int] = []
        self._prev = BLANK

    def push(self, log_probs: torch.Tensor) -> bool:
        """Add (n, V) frames; True when the transcript changed."""
        new, self._prev = _collapse(log_probs.argmax(dim=-1).tolist(), self._prev)
        self._ids.extend(new)
        return bool(new)

    @property
    def text(self) -> str:
        return " ".join("".join(VOCAB[i] for i in self._ids).split())

    def reset(self) -> None:
        self._ids.clear()
        self._prev = BLANK


def cer(refs: Sequence[str], hyps: Sequence[str]) -> float:
    """Corpus character error rate: total edits / total reference characters."""
    errs = sum(edit_distance(r, h) for r, h in zip(refs, hyps, strict=True))
    return errs / max(1, sum(len(r) for r in refs))


def wer(refs: Sequence[str], hyps: Sequence[str]) -> float:
    """Corpus word error rate: total word edits / total reference words."""
    errs = sum(edit_distance(r.split(), h.split()) for r, h in zip(refs, hyps, strict=True))
    return errs / max(1, sum(len(r.split()) for r in refs))
