"""Checkpoints: a directory with ``config.json`` (format + version + config) and ``model.safetensors``.

    save_checkpoint(model, "ckpt/")          # SSMStack -> ckpt/config.json, ckpt/model.safetensors
    model = load_checkpoint("ckpt/")         # -> SSMStack, weights validated against the config

config.json::

    {"format": "parley.ssm_engine.checkpoint", "format_version": 1,
     "kind": "SSMStack", "config": {...SSMConfig fields...}}

Loading checks everything and falls back to nothing: a missing file, bad JSON, an unknown format
or version, an invalid config, a corrupt safetensors file, a missing or unexpected tensor, a wrong
shape or dtype each raise a CheckpointError subclass whose message starts with the file's path.
Models built around an SSMStack (STT, TTS) reuse ``write_checkpoint`` / ``read_checkpoint``
with their own ``kind`` and config dict.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn

from .config import SSMConfig
from .errors import CheckpointFormatError, CheckpointMismatchError, ConfigError
from .stack import SSMStack

__all__ = ["CHECKPOINT_FORMAT", "CHECKPOINT_FORMAT_VERSION", "CONFIG_FILE", "WEIGHTS_FILE",
           "save_checkpoint", "load_checkpoint", "write_checkpoint", "read_checkpoint",
           "load_weights"]

CHECKPOINT_FORMAT = "parley.ssm_engine.checkpoint"
CHECKPOINT_FORMAT_VERSION = 1
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"


def write_checkpoint(directory: str | Path, module: nn.Module, kind: str,
                     config: dict[str, Any]) -> Path:
    """Write ``module``'s weights and ``config`` (JSON-able) into ``directory``; returns it."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in module.state_dict().items()}
    save_file(tensors, str(directory / WEIGHTS_FILE),
              metadata={"format": CHECKPOINT_FORMAT, "kind": kind})
    doc = {"format": CHECKPOINT_FORMAT, "format_version": CHECKPOINT_FORMAT_VERSION,
           "kind": kind, "config": config}
    (directory / CONFIG_FILE).write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    return directory


def read_checkpoint(directory: str | Path, kind: str) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """Read and check ``config.json``; read the weights. -> (config dict, tensors by name).
    The caller builds its module from the config and passes it to ``load_weights``."""
    directory = Path(directory)
    cfg_path = directory / CONFIG_FILE
    try:
        doc = json.loads(cfg_path.read_text())
    except FileNotFoundError as exc:
        raise CheckpointFormatError(cfg_path, "no such file (is this a checkpoint directory?)") from exc
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointFormatError(cfg_path, f"unreadable config: {exc}") from exc
    if not isinstance(doc, dict) or doc.get("format") != CHECKPOINT_FORMAT:
        got = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
        raise CheckpointFormatError(cfg_path, f"format is {got!r}, expected {CHECKPOINT_FORMAT!r}")
    if doc.get("format_version") != CHECKPOINT_FORMAT_VERSION:
        raise CheckpointFormatError(cfg_path, f"format_version {doc.get('format_version')!r} is not "
                                              f"supported (this code reads {CHECKPOINT_FORMAT_VERSION})")
    if doc.get("kind") != kind:
        raise CheckpointFormatError(cfg_path, f"holds a {doc.get('kind')!r}, expected {kind!r}")
    if not isinstance(doc.get("config"), dict):
        raise CheckpointFormatError(cfg_path, "'config' must be a JSON object")
    weights_path = directory / WEIGHTS_FILE
    try:
        tensors = load_file(str(weights_path))
    except FileNotFoundError as exc:
        raise CheckpointFormatError(weights_path, "no such file") from exc
    except (SafetensorError, OSError, ValueError) as exc:
        raise CheckpointFormatError(weights_path, f"corrupt or unreadable safetensors: {exc}") from exc
    return doc["config"], tensors


def load_weights(module: nn.Module, tensors: dict[str, torch.Tensor], path: str | Path) -> None:
    """Copy ``tensors`` into ``module`` after checking names, shapes and dtypes exactly."""
    expected = module.state_dict()
    missing = sorted(set(expected) - set(tensors))
    unexpected = sorted(set(tensors) - set(expected))
    if missing or unexpected:
        raise CheckpointMismatchError(path, f"tensor names differ from the config's model: "
                                            f"missing {missing[:8]}, unexpected {unexpected[:8]}")
    for name, want in expected.items():
        got = tensors[name]
        if got.shape != want.shape or got.dtype != want.dtype:
            raise CheckpointMismatchError(
                path, f"tensor {name!r} is {tuple(got.shape)} {got.dtype}, the config needs "
                      f"{tuple(want.shape)} {want.dtype}")
    module.load_state_dict(tensors, strict=True)


def save_checkpoint(model: SSMStack, directory: str | Path) -> Path:
    """Save an SSMStack (weights + config). -> the directory."""
    return write_checkpoint(directory, model, "SSMStack", model.config.to_dict())


def load_checkpoint(directory: str | Path) -> SSMStack:
    """Load an SSMStack saved by ``save_checkpoint``; every error names the offending file."""
    directory = Path(directory)
    config, tensors = read_checkpoint(directory, "SSMStack")
    try:
        cfg = SSMConfig.from_dict(config)
    except ConfigError as exc:
        raise CheckpointFormatError(directory / CONFIG_FILE, f"invalid config: {exc}") from exc
    model = SSMStack(cfg)
    load_weights(model, tensors, directory / WEIGHTS_FILE)
    return model.eval()
