"""Device choice: what ``--device`` resolves to, and a batched recogniser whose model
sits on another device than the CPU tensors callers hand it.

No GPU is lent to CI, so the second part puts a model's weights on torch's ``meta`` device
(tensors without data) and has it check the device of everything the batcher hands it."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from ssm_engine import ConfigError, StreamBatcher, StreamState
from ssm_engine.device import describe_device, model_device, resolve_device
from tests.ssm_engine.test_stt_model import speechy, tiny_model


def test_auto_takes_the_gpu_only_when_torch_sees_one():
    want = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device("auto").type == want
    assert resolve_device("cpu") == torch.device("cpu")
    assert describe_device(torch.device("cpu")) == "cpu"


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present: cuda resolves")
@pytest.mark.parametrize("name", ["cuda", "cuda:0"])
def test_cuda_without_a_gpu_is_one_clear_error(name):
    with pytest.raises(ConfigError, match=r"sees no GPU.*use --device cpu or auto"):
        resolve_device(name)


@pytest.mark.parametrize("name", ["gpu", "", "cuda0", 3])
def test_unknown_device_names_are_refused(name):
    with pytest.raises(ConfigError, match="device must be one of auto, cpu, cuda"):
        resolve_device(name)


def test_model_device_follows_the_weights():
    model = tiny_model()
    assert model_device(model) == torch.device("cpu")
    assert model_device(object()) == torch.device("cpu")
    assert model_device(model.to("meta")) == torch.device("meta")


class DeviceCheckingModel(nn.Module):
    """A streaming model (a leaky sum of projected frames) that insists every tensor it is
    handed, frames and state rows alike, is on its own device: a CPU tensor left in the
    batcher's path fails the test, as it would fail on ``cuda``. Its weights are on ``meta``
    (no GPU here): shapes flow, no values exist."""

    def __init__(self, d_in: int = 8, d_out: int = 4) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.empty(d_in, d_out, device="meta"))
        self.seen: list[str] = []

    def _check(self, *tensors: torch.Tensor) -> None:
        for t in tensors:
            assert t.device == self.w.device, f"a {t.device} tensor reached a {self.w.device} model"

    def init_state(self, batch: int) -> StreamState:
        return StreamState({"h": torch.zeros(batch, self.w.shape[1], device=self.w.device)})

    def state_from_bytes(self, data: bytes) -> StreamState:
        return StreamState.from_bytes(data, self.init_state(1))

    def step(self, x: torch.Tensor, state: StreamState) -> tuple[torch.Tensor, StreamState]:
        self._check(x, state.tensors["h"])
        self.seen.append(f"step{x.shape[0]}")
        state.tensors["h"] = 0.5 * state.tensors["h"] + x @ self.w
        return state.tensors["h"].clone(), state

    def prefill(self, x: torch.Tensor, state: StreamState) -> tuple[torch.Tensor, StreamState]:
        self._check(x, state.tensors["h"])
        self.seen.append(f"prefill{x.shape[0]}x{x.shape[1]}")
        ys = []
        for t in range(x.shape[1]):
            state.tensors["h"] = 0.5 * state.tensors["h"] + x[:, t] @ self.w
            ys.append(state.tensors["h"])
        return torch.stack(ys, dim=1), state


def test_batcher_moves_frames_and_state_rows_to_the_models_device(monkeypatch):
    """Streams prefill, tick (all of them, then a subset), leave and join from a state with the
    model on another device; the outputs come back shaped as on the CPU."""
    model = DeviceCheckingModel()
    batcher = StreamBatcher(model, prefill_min=4)
    assert batcher.device == torch.device("meta")
    # meta tensors hold no data to copy back: check where the outputs were made instead
    monkeypatch.setattr(StreamBatcher, "_host", lambda self, out: out)
    a, b, c = batcher.open(), batcher.open(), batcher.open()
    frames = torch.randn(3, 12, 8)                                    # CPU, as callers hand it
    out = batcher.run({a: frames[0, :6], b: frames[1, :2], c: frames[2, :1]})
    assert {s: (y.device.type, tuple(y.shape)) for s, y in out.items()} == {
        a: ("meta", (6, 4)), b: ("meta", (2, 4)), c: ("meta", (1, 4))}
    batcher.close(b)                                                  # a row leaves
    d = batcher.open(model.init_state(1))                             # one joins with a state
    out = batcher.step({a: frames[0, 6], c: frames[2, 1], d: frames[1, 2]})
    assert {y.device.type for y in out.values()} == {"meta"} and out[d].shape == (4,)
    out = batcher.run({c: frames[2, 2:5]})                            # a subset ticks alone
    assert out[c].shape == (3, 4)
    assert batcher.export_state(a).batch == 1
    assert model.seen == ["prefill1x6", "step2", "step1", "step3", "step1", "step1", "step1"]


def test_a_cpu_model_hands_back_its_own_outputs():
    """On the CPU nothing is copied: the outputs are the model's own tensors."""
    batcher = StreamBatcher(tiny_model())
    s = batcher.open()
    frames = speechy(2).reshape(2, -1)
    out = batcher.run({s: frames})
    assert out[s].device.type == "cpu" and batcher._host(out) is out
