"""forward (chunked SSD), step (frame by frame) and reference (slow loop) compute the same thing.

Tolerances: float64 paths agree to 1e-10 absolute (they differ only by summation order);
float32 paths to 2e-4 absolute on outputs of order 1."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.ssm_engine.ssm_helpers import TINY, make_model, max_diff, random_state
from ssm_engine import SSMConfig, StateError

TOL64 = 1e-10
TOL32 = 2e-4


def step_all(model, x, state):
    ys = []
    for t in range(x.shape[1]):
        y, state = model.step(x[:, t], state)
        ys.append(y)
    return torch.stack(ys, dim=1), state


@pytest.mark.parametrize("cfg", [
    TINY,
    dataclasses.replace(TINY, ngroups=2),                    # B, C shared by pairs of heads
    dataclasses.replace(TINY, d_conv=2, chunk_size=8, scan_chunks=1),
])
@pytest.mark.parametrize("length", [1, 4, 13, 37])
def test_forward_step_reference_agree_float64(cfg, length):
    model = make_model(cfg)
    x = torch.randn(3, length, cfg.d_model, dtype=torch.float64)
    s0 = random_state(model, 3)
    y_ref, s_ref = model.reference(x, s0)
    y_fwd, s_fwd = model.forward(x, s0)
    y_stp, s_stp = step_all(model, x, s0.clone())
    assert (y_fwd - y_ref).abs().max() < TOL64
    assert (y_stp - y_ref).abs().max() < TOL64
    assert max_diff(s_fwd, s_ref) < TOL64
    assert max_diff(s_stp, s_ref) < TOL64
    assert y_ref.abs().max() > 0.1            # the comparison is not between zeros


def test_forward_step_agree_float32_at_serving_size():
    cfg = SSMConfig(d_model=64, n_layers=2, d_state=16, headdim=16, chunk_size=16)
    model = make_model(cfg, dtype=torch.float32)
    x = torch.randn(2, 50, 64)
    y_fwd, s_fwd = model(x)
    y_stp, s_stp = step_all(model, x, model.init_state(2))
    assert (y_fwd - y_stp).abs().max() < TOL32
    assert max_diff(s_fwd, s_stp) < TOL32


@settings(max_examples=25, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=30), max_size=5))
def test_forward_over_any_split_equals_one_pass(cuts):
    model = make_model()
    x = torch.randn(2, 30, TINY.d_model, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    s0 = random_state(model, 2)
    y_one, s_one = model(x, s0)
    bounds = [0, *sorted(cuts), 30]
    state, ys = s0, []
    for a, b in zip(bounds, bounds[1:]):
        y, state = model(x[:, a:b], state)
        ys.append(y)
    assert (torch.cat(ys, dim=1) - y_one).abs().max() < TOL64
    assert max_diff(state, s_one) < TOL64


def test_forward_leaves_input_state_untouched_and_step_updates_in_place():
    model = make_model()
    s0 = random_state(model, 2)
    before = s0.clone()
    model(torch.randn(2, 5, 16, dtype=torch.float64), s0)
    assert max_diff(s0, before) == 0
    y, s1 = model.step(torch.randn(2, 16, dtype=torch.float64), s0)
    assert s1 is s0 and max_diff(s0, before) > 0


def test_step_cost_is_position_independent_state_size():
    model = make_model()
    state = model.init_state(1)
    sizes = {k: v.shape for k, v in state.tensors.items()}
    _, state = model(torch.randn(1, 100, 16, dtype=torch.float64), state)
    assert {k: v.shape for k, v in state.tensors.items()} == sizes


def test_backward_through_forward_gives_finite_grads():
    model = make_model(dtype=torch.float32).train()
    y, _ = model(torch.randn(2, 20, 16))
    y.pow(2).mean().backward()
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert any(g.abs().sum() > 0 for g in grads)


def test_wrong_shapes_raise_state_error():
    model = make_model()
    with pytest.raises(StateError):
        model.step(torch.randn(2, 16, dtype=torch.float64), model.init_state(3))
    with pytest.raises(StateError):
        model(torch.randn(2, 5, 15, dtype=torch.float64))
    other = make_model(dataclasses.replace(TINY, n_layers=3))
    with pytest.raises(StateError):
        model.step(torch.randn(1, 16, dtype=torch.float64), other.init_state(1))


@pytest.mark.parametrize("branch_free", [False, True])
def test_step_folds_the_log_scale_back_and_stays_exact(branch_free):
    """Guards the scaled state of step(): fast-decaying heads cross the fold threshold many
    times in 150 frames, and outputs still match forward(); the same with the branch-free fold
    (torch.where over every row) that torch.compile is given."""
    from ssm_engine.mamba2 import RENORM_LOG_SCALE

    cfg = dataclasses.replace(TINY, a_init_min=8.0, a_init_max=16.0, dt_min=0.05, dt_max=0.1)
    model = make_model(cfg)
    x = torch.randn(2, 150, cfg.d_model, dtype=torch.float64)
    y_fwd, s_fwd = model(x)
    state, ys, folds = model.init_state(2), [], 0
    for t in range(150):
        before = state.tensors["logscale0"].clone()
        y, state = model.step(x[:, t], state, branch_free=branch_free)
        folds += int((state.tensors["logscale0"] > before).sum())
        ys.append(y)
    assert folds > 10
    assert all(state.tensors[f"logscale{i}"].min() >= -RENORM_LOG_SCALE for i in range(2))
    assert (torch.stack(ys, 1) - y_fwd).abs().max() < TOL64
    assert max_diff(state, s_fwd) < TOL64


def test_float32_step_does_not_drift_over_a_long_stream():
    model64, model32 = make_model(), make_model(dtype=torch.float32)
    x = torch.randn(1, 1500, 16, dtype=torch.float64)
    y64, _ = model64(x)
    state, ys = model32.init_state(1), []
    for t in range(x.shape[1]):
        y, state = model32.step(x[:, t].float(), state)
        ys.append(y)
    err = (torch.stack(ys, 1).double() - y64).abs()
    assert err[:, -300:].max() < TOL32           # no worse at the end than allowed anywhere


def test_a_huge_single_step_decay_does_not_overflow():
    """Regression: with dt*A = -300 in one step, exp(-s) overflowed float32 (inf, then NaN)
    when the log-scale was folded back after the update instead of before it."""
    model = make_model(dtype=torch.float32)
    with torch.no_grad():
        for block in model.blocks:
            block.dt_bias.fill_(20.0)
            block.A_log.fill_(math.log(15.0))
    x = torch.randn(2, 12, 16)
    y_fwd, _ = model(x)
    y_stp, state = step_all(model, x, model.init_state(2))
    assert torch.isfinite(y_stp).all() and torch.isfinite(state.ssm(0)).all()
    assert (y_stp - y_fwd).abs().max() < TOL32
