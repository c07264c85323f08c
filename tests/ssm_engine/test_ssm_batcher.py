"""StreamBatcher: a stream's outputs do not depend on which other streams share its batch."""

from __future__ import annotations

import pytest
import torch

from ssm_engine import StateError, StreamBatcher, StreamError, UnknownStreamError
from tests.ssm_engine.ssm_helpers import make_model


def solo(model, x):
    """The stream run alone through forward(): what the batcher must reproduce."""
    y, _ = model(x[None])
    return y[0]


def test_streams_joining_and_leaving_do_not_disturb_the_others():
    model = make_model()
    g = torch.Generator().manual_seed(0)
    xs = {name: torch.randn(24, 16, dtype=torch.float64, generator=g) for name in "abcd"}
    got = {name: [] for name in xs}
    b = StreamBatcher(model)
    ids = {"a": b.open(), "b": b.open()}
    pos = dict.fromkeys(xs, 0)
    # (tick range, who sends): c joins at 6, b leaves at 12, d joins at 12, c leaves at 18
    schedule = [(range(0, 6), "ab"), (range(6, 12), "abc"), (range(12, 18), "acd"), (range(18, 24), "ad")]
    for ticks, who in schedule:
        for name in who:
            if name not in ids:
                ids[name] = b.open()
        for name in list(ids):
            if name not in who:
                b.close(ids.pop(name))
        for _ in ticks:
            out = b.step({ids[n]: xs[n][pos[n]] for n in who})
            for n in who:
                got[n].append(out[ids[n]])
                pos[n] += 1
    for name, x in xs.items():
        y = torch.stack(got[name])
        assert (y - solo(model, x[:len(y)])).abs().max() < 1e-10, name
    assert len(b) == 2


def test_uneven_chunks_and_idle_streams():
    model = make_model()
    b = StreamBatcher(model)
    sa, sb, sc = b.open(), b.open(), b.open()
    xa, xb = torch.randn(7, 16, dtype=torch.float64), torch.randn(3, 16, dtype=torch.float64)
    out = b.run({sa: xa[:5], sb: xb})            # sc idle: must not advance
    out2 = b.run({sa: xa[5:], sc: xb[:1]})
    assert out[sa].shape == (5, 16) and out[sb].shape == (3, 16)
    assert (torch.cat([out[sa], out2[sa]]) - solo(model, xa)).abs().max() < 1e-10
    assert (out[sb] - solo(model, xb)).abs().max() < 1e-10
    assert (out2[sc] - solo(model, xb[:1])).abs().max() < 1e-10


def test_export_and_import_continue_identically():
    model = make_model()
    x = torch.randn(10, 16, dtype=torch.float64)
    b1, b2 = StreamBatcher(model), StreamBatcher(model)
    s1, _other = b1.open(), b1.open()
    first = b1.run({s1: x[:4]})[s1]
    data = b1.export_bytes(s1)
    b1.close(s1)
    s2 = b2.open(model.state_from_bytes(data))
    rest = b2.run({s2: x[4:]})[s2]
    assert (torch.cat([first, rest]) - solo(model, x)).abs().max() < 1e-10


def test_unknown_closed_and_duplicate_streams_are_errors():
    b = StreamBatcher(make_model())
    s = b.open()
    b.close(s)
    with pytest.raises(UnknownStreamError):
        b.close(s)
    with pytest.raises(UnknownStreamError):
        b.step({s: torch.zeros(16, dtype=torch.float64)})
    with pytest.raises(UnknownStreamError):
        b.export_state(99)
    s2 = b.open(stream_id=5)
    with pytest.raises(StreamError, match="already open"):
        b.open(stream_id=s2)
    with pytest.raises(StreamError, match="n, d_in"):
        b.run({s2: torch.zeros(16, dtype=torch.float64)})
    with pytest.raises(StateError):
        b.open(b.model.init_state(2))


def test_closing_every_stream_then_reopening_works():
    model = make_model()
    b = StreamBatcher(model)
    s = b.open()
    b.run({s: torch.randn(2, 16, dtype=torch.float64)})
    b.close(s)
    assert b.run({}) == {} and len(b) == 0
    x = torch.randn(3, 16, dtype=torch.float64)
    s2 = b.open()
    assert (b.run({s2: x})[s2] - solo(model, x)).abs().max() < 1e-10
