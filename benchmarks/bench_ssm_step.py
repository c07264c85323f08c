"""Does an SSM step cost the same at minute 60 as at second 1, and how many streams fit on a core?

Measures, in one run, on one CPU thread (torch.set_num_threads(1), denormals flushed):
  1. per-step latency (batch 1) of SSMStack.step and of a decoder-only transformer with a KV cache
     of the same width, depth and (about) parameter count, at stream positions 10, 1k, 10k, 100k.
     The four positions are stepped round-robin, so machine noise hits them alike.
     SSM: each state is reached honestly by running forward() over random frames (prefill).
     Transformer: the KV cache at each position is FILLED WITH RANDOM VALUES instead of stepping
     that many times (attention cost does not depend on the values); it grows as it is stepped.
  2. memory per stream (state bytes; the transformer's KV cache at each position).
  3. streams served in real time at a 20 ms step on one core: the largest batch whose
     StreamBatcher tick (all streams due, one frame each) has p50 <= 20 ms (also: p99 <= 20 ms),
     for the STT-size model (d_state=64) and a smaller one (d_state=32).
  4. training throughput of the parallel path: forward+backward frames/s.
Prints progress to stderr and one JSON line to stdout.

torch.compile is not used: measured here (torch 2.13, CPU) it halves the batch-1 step
(2.6 -> 1.35 ms) but makes the batch-64 step slower (27 -> 41 ms) and costs 20-30 s per compile.

    .venv/bin/python benchmarks/bench_ssm_step.py            # full run, ~1-2 minutes
    .venv/bin/python benchmarks/bench_ssm_step.py --quick    # smoke run, seconds
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ssm_engine import SSMConfig, SSMStack, StreamBatcher  # noqa: E402
from ssm_engine.mamba2 import RMSNorm  # noqa: E402

STEP_BUDGET_MS = 20.0


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def pct(ns: list[int]) -> dict[str, float]:
    s = sorted(ns)

    def q(p: float) -> float:
        return round(s[min(len(s) - 1, int(p * len(s)))] / 1e6, 3)
    return {"p50_ms": q(0.50), "p95_ms": q(0.95), "p99_ms": q(0.99)}


def git_sha() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                             cwd=Path(__file__).parent, timeout=5)
        return out.stdout.strip() if out.returncode == 0 else "uncommitted"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


# -- the baseline: decoder-only transformer with a KV cache ------------------------------------
class TxLayer(nn.Module):
    def __init__(self, d: int, n_heads: int, d_ff: int, eps: float) -> None:
        super().__init__()
        self.n_heads, self.hd = n_heads, d // n_heads
        self.norm1, self.norm2 = RMSNorm(d, eps), RMSNorm(d, eps)
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.out = nn.Linear(d, d, bias=False)
        self.up = nn.Linear(d, d_ff, bias=False)
        self.down = nn.Linear(d_ff, d, bias=False)

    def step(self, x: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, pos: int
             ) -> torch.Tensor:
        """x: (b, d); caches: (b, heads, max_len, hd), filled up to pos (exclusive)."""
        b = x.shape[0]
        q, k, v = self.qkv(self.norm1(x)).view(b, 3, self.n_heads, self.hd).unbind(1)
        k_cache[:, :, pos] = k
        v_cache[:, :, pos] = v
        att = F.scaled_dot_product_attention(q[:, :, None], k_cache[:, :, :pos + 1],
                                             v_cache[:, :, :pos + 1])      # (b, heads, 1, hd)
        x = x + self.out(att.reshape(b, -1))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class TxDecoder(nn.Module):
    """No positional encoding (NoPE): the step cost is what is measured, not quality."""

    def __init__(self, d: int, n_layers: int, n_heads: int, d_ff: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.layers = nn.ModuleList(TxLayer(d, n_heads, d_ff, eps) for _ in range(n_layers))
        self.norm_f = RMSNorm(d, eps)
        self.n_heads, self.hd = n_heads, d // n_heads

    def new_cache(self, batch: int, max_len: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        shape = (batch, self.n_heads, max_len, self.hd)
        return [(torch.randn(shape), torch.randn(shape)) for _ in self.layers]

    def step(self, x: torch.Tensor, cache: list, pos: int) -> torch.Tensor:
        for layer, (k, v) in zip(self.layers, cache, strict=True):
            x = layer.step(x, k, v, pos)
        return self.norm_f(x)


def matched_ff(cfg: SSMConfig, ssm_params: int, n_heads: int) -> int:
    d = cfg.d_model
    per_layer = (ssm_params - d) / cfg.n_layers - 4 * d * d - 2 * d
    return max(16, int(round(per_layer / (2 * d))))


def n_params(m: nn.Module) -> int:
    return sum(p.numel() for p in m.parameters())


# -- measurements --------------------------------------------------------------------------------
def ssm_states_at(model: SSMStack, positions: list[int], quick: bool) -> dict[int, object]:
    """Prefill one stream with forward() over random frames, keeping the state at each position."""
    states, state, done = {}, model.init_state(1), 0
    g = torch.Generator().manual_seed(1)
    for pos in sorted(positions):
        if quick and pos > 1000:   # smoke run only: random state of the right size
            states[pos] = type(state)({k: torch.randn(v.shape, generator=g) * 0.1
                                       for k, v in state.tensors.items()})
            continue
        while done < pos:
            n = min(pos - done, 8192)
            _, state = model(torch.randn(1, n, model.config.d_model, generator=g), state)
            done += n
        states[pos] = state.clone()
    return states


def latency_by_position(step_fns: dict[int, object], n_steps: int, warmup: int) -> dict[int, list[int]]:
    """Round-robin over positions: each call advances that stream by one frame."""
    times: dict[int, list[int]] = {p: [] for p in step_fns}
    for i in range(warmup + n_steps):
        for p, fn in step_fns.items():
            t0 = time.perf_counter_ns()
            fn()
            dt = time.perf_counter_ns() - t0
            if i >= warmup:
                times[p].append(dt)
    return times


def streams_realtime(model: SSMStack, quick: bool) -> tuple[int, int, dict[int, dict[str, float]]]:
    """Largest number of streams whose StreamBatcher tick (all due, one frame each) fits in 20 ms.

    The batch sizes are ticked round-robin, so a noisy neighbour slows them alike. Returns the
    largest size with tick p50 <= 20 ms (sustained: the runner keeps up), the largest with
    p99 <= 20 ms (no frame late either), and the whole curve."""
    sizes = [8, 32, 64] if quick else [16, 32, 48, 64, 80, 96, 112, 128]
    n_steps = 8 if quick else 40
    g = torch.Generator().manual_seed(2)
    batchers = {b: StreamBatcher(model) for b in sizes}
    ids = {b: [bt.open() for _ in range(b)] for b, bt in batchers.items()}
    times: dict[int, list[int]] = {b: [] for b in sizes}
    for i in range(3 + n_steps):
        for b, batcher in batchers.items():
            frames = torch.randn(b, model.config.d_model, generator=g)
            t0 = time.perf_counter_ns()
            batcher.run({sid: frames[j:j + 1] for j, sid in enumerate(ids[b])})
            dt = time.perf_counter_ns() - t0
            if i >= 3:
                times[b].append(dt)
    curve = {b: pct(t) for b, t in times.items()}
    for b, c in curve.items():
        log(f"  d_state={model.config.d_state} streams={b:4d}  tick {c}")
    best50 = max([b for b, c in curve.items() if c["p50_ms"] <= STEP_BUDGET_MS], default=0)
    best99 = max([b for b, c in curve.items() if c["p99_ms"] <= STEP_BUDGET_MS], default=0)
    return best50, best99, curve


def train_throughput(cfg: SSMConfig, quick: bool) -> float:
    torch.manual_seed(3)
    model = SSMStack(cfg).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    b, l = (2, 128) if quick else (4, 512)  # noqa: E741 (batch, length: the paper's symbols)
    x = torch.randn(b, l, cfg.d_model)
    rates = []
    for i in range(2 if quick else 4):
        t0 = time.perf_counter_ns()
        y, _ = model(x)
        y.pow(2).mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if i > 0:
            rates.append(b * l / ((time.perf_counter_ns() - t0) / 1e9))
    return round(sorted(rates)[len(rates) // 2], 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="smoke run: few steps, random SSM state "
                                                         "beyond position 1k, small batches")
    args = ap.parse_args()
    torch.set_num_threads(1)
    flush = torch.set_flush_denormal(True)
    torch.manual_seed(0)
    t_start = time.perf_counter()

    cfg = SSMConfig(d_model=256, n_layers=6, d_state=64, d_conv=4, expand=2, headdim=64,
                    chunk_size=64)
    ssm = SSMStack(cfg).eval()
    n_heads = 4
    d_ff = matched_ff(cfg, n_params(ssm), n_heads)
    tx = TxDecoder(cfg.d_model, cfg.n_layers, n_heads, d_ff).eval()
    positions = [10, 1_000, 10_000, 100_000]
    n_steps, warmup = (20, 3) if args.quick else (150, 10)
    notes = [
        "transformer KV caches are filled with random values up to each position (not stepped)",
        "SSM states are reached by forward() prefill over random frames"
        + (" up to 1k; beyond that random (--quick)" if args.quick else ""),
        "positions are stepped round-robin; each step advances its stream by one frame",
        "streams_realtime_20ms_1core: largest batch of streams whose StreamBatcher tick (all due, "
        "one frame each) has p50 <= 20 ms; _p99: p99 <= 20 ms. Sizes ticked round-robin. The "
        "machine is shared: p99 includes the neighbours' noise",
        "eager mode (torch.compile: faster at batch 1, slower at batch 64 here)",
    ]

    with torch.no_grad():
        log(f"params: ssm={n_params(ssm)} transformer={n_params(tx)} (d_ff={d_ff})")
        t0 = time.perf_counter()
        states = ssm_states_at(ssm, positions, args.quick)
        prefill_s = time.perf_counter() - t0
        log(f"ssm prefill to {max(positions)}: {prefill_s:.1f} s")
        x1 = torch.randn(1, cfg.d_model)

        def ssm_fn(p: int):
            return lambda: ssm.step(x1, states[p])
        ssm_times = latency_by_position({p: ssm_fn(p) for p in positions}, n_steps, warmup)
        ssm_lat = {p: pct(t) for p, t in ssm_times.items()}
        log(f"ssm step: {ssm_lat}")

        extra = warmup + n_steps + 1
        caches = {p: tx.new_cache(1, p + extra) for p in positions}
        cursor = dict.fromkeys(positions, 0)

        def tx_fn(p: int):
            def fn() -> None:
                tx.step(x1, caches[p], p + cursor[p])
                cursor[p] += 1
            return fn
        tx_steps = max(10, n_steps // 3)   # the 100k step is slow; fewer samples suffice
        tx_times = latency_by_position({p: tx_fn(p) for p in positions}, tx_steps, min(warmup, 3))
        tx_lat = {p: pct(t) for p, t in tx_times.items()}
        log(f"transformer step: {tx_lat}")
        caches.clear()

        best, best99, curve = streams_realtime(ssm, args.quick)
        small_cfg = dataclasses.replace(cfg, d_state=32)
        small = SSMStack(small_cfg).eval()
        best_small, best99_small, curve_small = streams_realtime(small, args.quick)
    train_fps = train_throughput(cfg, args.quick)
    log(f"train fwd+bwd: {train_fps} frames/s")

    state_bytes = ssm.init_state(1).nbytes_per_stream()
    kv_bytes = {p: 2 * cfg.n_layers * p * cfg.d_model * 4 for p in positions}
    result = {
        "bench": "ssm_step",
        "git_sha": git_sha(),
        "quick": args.quick,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "flush_denormal": flush,
        "config": {"ssm": dataclasses.asdict(cfg),
                   "transformer": {"d_model": cfg.d_model, "n_layers": cfg.n_layers,
                                   "n_heads": n_heads, "d_ff": d_ff, "kv_dtype": "float32"}},
        "params": n_params(ssm),
        "params_transformer": n_params(tx),
        "positions": positions,
        "ssm_step_ms": {str(p): v for p, v in ssm_lat.items()},
        "tx_step_ms": {str(p): v for p, v in tx_lat.items()},
        "ssm_step_ratio_100k_vs_10": round(ssm_lat[100_000]["p50_ms"] / ssm_lat[10]["p50_ms"], 3),
        "tx_step_ratio_100k_vs_10": round(tx_lat[100_000]["p50_ms"] / tx_lat[10]["p50_ms"], 2),
        "memory_per_stream_bytes": {"ssm": state_bytes,
                                    "transformer_kv": {str(p): b for p, b in kv_bytes.items()}},
        "streams_realtime_20ms_1core": best,
        "streams_realtime_20ms_1core_p99": best99,
        "tick_ms_by_streams": {str(b): v for b, v in curve.items()},
        "smaller_d_state_32": {"params": n_params(small),
                               "state_bytes_per_stream": small.init_state(1).nbytes_per_stream(),
                               "streams_realtime_20ms_1core": best_small,
                               "streams_realtime_20ms_1core_p99": best99_small,
                               "tick_ms_by_streams": {str(b): v for b, v in curve_small.items()}},
        "ssm_prefill_frames_per_s": (round(max(p for p in positions if not args.quick or p <= 1000)
                                           / prefill_s, 1) if prefill_s > 0 else None),
        "train_frames_per_s_fwd_bwd": train_fps,
        "train_shape": [2, 128] if args.quick else [4, 512],
        "wall_s": round(time.perf_counter() - t_start, 1),
        "notes": notes,
    }
    assert math.isfinite(result["ssm_step_ratio_100k_vs_10"])
    print(json.dumps(result))


if __name__ == "__main__":
    main()
