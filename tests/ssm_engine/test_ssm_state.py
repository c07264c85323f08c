"""Stream state: split/merge by rows, save/restore (also as bytes) continues identically."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ssm_engine import StackState, StateError, StreamState
from tests.ssm_engine.ssm_helpers import TINY, make_model, max_diff, random_state


def test_select_put_cat_move_rows():
    model = make_model()
    s = random_state(model, 3)
    one = s.select([2])
    assert one.batch == 1 and max_diff(one, s.select(torch.tensor([2]))) == 0
    s.put([0], one)
    assert max_diff(s.select([0]), s.select([2])) == 0
    four = StackState.cat([s, one])
    assert isinstance(four, StackState) and four.batch == 4
    assert max_diff(four.select([3]), one) == 0
    assert max_diff(four.select(slice(0, 3)), s) == 0


def test_select_copies_so_stepping_the_part_leaves_the_whole_alone():
    model = make_model()
    s = random_state(model, 2)
    before = s.clone()
    part = s.select([1])
    model.step(torch.randn(1, 16, dtype=torch.float64), part)
    assert max_diff(s, before) == 0


def test_saved_state_continues_identically_also_through_bytes():
    model = make_model()
    x = torch.randn(2, 20, 16, dtype=torch.float64)
    _, mid = model(x[:, :9])
    saved = mid.clone()
    data = mid.to_bytes()
    y_cont, s_cont = model(x[:, 9:], mid)
    y_saved, s_saved = model(x[:, 9:], saved)
    y_bytes, s_bytes = model(x[:, 9:], model.state_from_bytes(data))
    assert torch.equal(y_cont, y_saved) and torch.equal(y_cont, y_bytes)
    assert max_diff(s_cont, s_bytes) == 0


def test_state_bytes_from_another_config_are_refused():
    small, big = make_model(), make_model(dataclasses.replace(TINY, d_state=16))
    with pytest.raises(StateError, match="does not fit"):
        small.state_from_bytes(big.init_state(1).to_bytes())
    with pytest.raises(StateError):
        small.state_from_bytes(make_model(dataclasses.replace(TINY, n_layers=3)).init_state(1).to_bytes())


def test_state_bytes_of_another_kind_are_refused():
    model = make_model()
    generic = StreamState(dict(model.init_state(1).tensors))
    with pytest.raises(StateError, match="StackState"):
        model.state_from_bytes(generic.to_bytes())


@settings(max_examples=60, deadline=None)
@given(data=st.binary(max_size=300))
def test_arbitrary_bytes_raise_only_state_error(data):
    model = make_model()
    with pytest.raises(StateError):
        model.state_from_bytes(data)


def test_truncated_state_bytes_raise_state_error():
    model = make_model()
    data = random_state(model, 1).to_bytes()
    for cut in (0, 7, 8, len(data) // 2, len(data) - 1):
        with pytest.raises(StateError):
            model.state_from_bytes(data[:cut])


def test_mismatched_tensors_are_refused():
    with pytest.raises(StateError, match="batch"):
        StreamState({"a": torch.zeros(2, 3), "b": torch.zeros(3, 3)})
    with pytest.raises(StateError, match="conv0"):
        StackState({"conv0": torch.zeros(1, 3, 4)})
    model = make_model()
    s = model.init_state(2)
    with pytest.raises(StateError):
        s.put([0], make_model(dataclasses.replace(TINY, d_state=16)).init_state(1))
