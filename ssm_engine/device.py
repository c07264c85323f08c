"""Where a model runs: the device a server asks for, and the device a loaded model is on.

    device = resolve_device("auto")      # cuda:0 when torch sees a GPU, else cpu
    model.to(device)
    model_device(model)                  # -> the device of its first parameter (cpu if none)

``StreamBatcher`` and ``TTSVoice`` follow their model's device: callers hand them CPU tensors
and get CPU tensors back, whatever the model runs on, so the layers above never ask.
"""

from __future__ import annotations

import torch

from .errors import ConfigError

__all__ = ["DEVICE_CHOICES", "resolve_device", "model_device", "describe_device"]

DEVICE_CHOICES = ("auto", "cpu", "cuda")


def resolve_device(name: str) -> torch.device:
    """``auto`` -> ``cuda`` when a GPU is usable, else ``cpu``; ``cpu``; ``cuda`` or ``cuda:N``
    (a ConfigError, in one line, when torch sees no such GPU: a CPU build, no driver, no
    device N)."""
    if not isinstance(name, str) or not (name in DEVICE_CHOICES or name.startswith("cuda:")):
        raise ConfigError(f"device must be one of {', '.join(DEVICE_CHOICES)} or cuda:N, got {name!r}")
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cpu":
        return torch.device("cpu")
    try:
        device = torch.device(name)
    except RuntimeError as exc:
        raise ConfigError(f"device {name!r} is not a device torch knows: {exc}") from None
    if not torch.cuda.is_available():
        build = "a CPU-only build" if torch.version.cuda is None else "no GPU or driver visible"
        raise ConfigError(f"device {name!r}: torch {torch.__version__} sees no GPU ({build}); "
                          f"use --device cpu or auto")
    if device.index is not None and device.index >= torch.cuda.device_count():
        raise ConfigError(f"device {name!r}: torch sees {torch.cuda.device_count()} GPU(s)")
    return device


def model_device(model: object) -> torch.device:
    """The device of ``model``'s first parameter; ``cpu`` for anything without parameters."""
    params = getattr(model, "parameters", None)
    if callable(params):
        for p in params():
            return p.device
    return torch.device("cpu")


def describe_device(device: torch.device) -> str:
    """``cpu`` or ``cuda:0 (NVIDIA H200)``: for a start-up log line."""
    if device.type != "cuda":
        return str(device)
    index = device.index if device.index is not None else torch.cuda.current_device()
    return f"cuda:{index} ({torch.cuda.get_device_name(index)})"
