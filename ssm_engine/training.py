"""Pieces shared by the training recipes (``stt/train.py``, ``tts/train.py``).

    batches = length_batches(lengths, budget=6000, rng=random.Random(epoch))   # [[index, ...], ...]
    scale = cosine_lr_scale(step, elapsed_s, warmup_steps=200, max_steps=10**5, max_minutes=60)
    with run_log(run_dir):      # ssm_engine's log records also go to RUN/train.log
        ...

The learning rate warms up, then follows a cosine over ``max(step / max_steps, elapsed /
max_minutes)``, so a run cut by its time budget still ends with a decayed rate.
"""

from __future__ import annotations

import contextlib
import logging
import math
import random
from collections.abc import Iterator
from pathlib import Path

__all__ = ["length_batches", "cosine_lr_scale", "run_log"]


def length_batches(lengths: list[int], budget: int, rng: random.Random) -> list[list[int]]:
    """Group indices of similar length so each batch's padded size (longest x count) stays under
    ``budget``; the batches come out shuffled."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i] + rng.random())
    batches: list[list[int]] = []
    cur: list[int] = []
    for i in order:
        if cur and lengths[i] * (len(cur) + 1) > budget:
            batches.append(cur)
            cur = []
        cur.append(i)
    if cur:
        batches.append(cur)
    rng.shuffle(batches)
    return batches


def cosine_lr_scale(step: int, elapsed_s: float, *, warmup_steps: int, max_steps: int,
                    max_minutes: float, min_frac: float) -> float:
    """Multiplier of the peak learning rate at ``step`` after ``elapsed_s`` of training."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = min(1.0, max(step / max_steps, elapsed_s / (max_minutes * 60.0)))
    return min_frac + (1 - min_frac) * 0.5 * (1 + math.cos(math.pi * progress))


@contextlib.contextmanager
def run_log(run_dir: Path) -> Iterator[None]:
    """Copy ``ssm_engine``'s INFO records into ``run_dir/train.log`` while the block runs."""
    handler = logging.FileHandler(Path(run_dir) / "train.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    root = logging.getLogger("ssm_engine")
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        yield
    finally:
        root.removeHandler(handler)
        handler.close()
