"""Checkpoints round-trip; every way of being broken gives a CheckpointError naming the file."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from ssm_engine import (
    CheckpointFormatError,
    CheckpointMismatchError,
    ConfigError,
    SSMConfig,
    SSMStack,
    load_checkpoint,
    save_checkpoint,
)
from ssm_engine.checkpoint import CONFIG_FILE, WEIGHTS_FILE
from tests.ssm_engine.ssm_helpers import TINY, make_model


@pytest.fixture
def saved(tmp_path):
    model = make_model(dtype=torch.float32)
    save_checkpoint(model, tmp_path / "ckpt")
    return model, tmp_path / "ckpt"


def test_round_trip_gives_identical_outputs(saved):
    model, path = saved
    loaded = load_checkpoint(path)
    assert loaded.config == model.config
    x = torch.randn(2, 11, 16)
    assert torch.equal(model(x)[0], loaded(x)[0])
    doc = json.loads((path / CONFIG_FILE).read_text())
    assert doc["format_version"] == 1 and doc["config"]["d_state"] == TINY.d_state


def test_missing_directory_names_the_config_file(tmp_path):
    with pytest.raises(CheckpointFormatError) as err:
        load_checkpoint(tmp_path / "nope")
    assert str(tmp_path / "nope" / CONFIG_FILE) in str(err.value)


@pytest.mark.parametrize("edit, match", [
    (lambda d: d.update(format_version=2), "format_version 2"),
    (lambda d: d.update(format="something-else"), "format"),
    (lambda d: d.update(kind="TTSModel"), "TTSModel"),
    (lambda d: d["config"].update(headdim=5), "invalid config"),
    (lambda d: d["config"].update(colour="blue"), "unknown keys"),
])
def test_bad_config_names_the_config_file(saved, edit, match):
    _, path = saved
    doc = json.loads((path / CONFIG_FILE).read_text())
    edit(doc)
    (path / CONFIG_FILE).write_text(json.dumps(doc))
    with pytest.raises(CheckpointFormatError, match=match) as err:
        load_checkpoint(path)
    assert str(path / CONFIG_FILE) in str(err.value)


def test_unparsable_json_names_the_config_file(saved):
    _, path = saved
    (path / CONFIG_FILE).write_text("{not json")
    with pytest.raises(CheckpointFormatError, match="unreadable") as err:
        load_checkpoint(path)
    assert err.value.path == path / CONFIG_FILE


@pytest.mark.parametrize("damage", [
    lambda b: b[: len(b) // 2],               # truncated
    lambda b: b"\xff" * 16 + b[16:],          # header size garbage
    lambda b: b"",                            # empty
])
def test_corrupt_weights_name_the_weights_file(saved, damage):
    _, path = saved
    w = path / WEIGHTS_FILE
    w.write_bytes(damage(w.read_bytes()))
    with pytest.raises(CheckpointFormatError, match="safetensors") as err:
        load_checkpoint(path)
    assert str(w) in str(err.value)


def test_missing_weights_name_the_weights_file(saved):
    _, path = saved
    (path / WEIGHTS_FILE).unlink()
    with pytest.raises(CheckpointFormatError) as err:
        load_checkpoint(path)
    assert err.value.path == path / WEIGHTS_FILE


def test_weights_of_another_size_are_a_mismatch(saved, tmp_path):
    _, path = saved
    other = tmp_path / "other"
    save_checkpoint(make_model(dataclasses.replace(TINY, d_state=16), dtype=torch.float32), other)
    (path / WEIGHTS_FILE).write_bytes((other / WEIGHTS_FILE).read_bytes())
    with pytest.raises(CheckpointMismatchError, match="in_proj.weight") as err:
        load_checkpoint(path)
    assert str(path / WEIGHTS_FILE) in str(err.value)


def test_weights_with_a_missing_layer_are_a_mismatch(saved, tmp_path):
    _, path = saved
    other = tmp_path / "other"
    save_checkpoint(make_model(dataclasses.replace(TINY, n_layers=1), dtype=torch.float32), other)
    (path / WEIGHTS_FILE).write_bytes((other / WEIGHTS_FILE).read_bytes())
    with pytest.raises(CheckpointMismatchError, match="missing") as err:
        load_checkpoint(path)
    assert str(path / WEIGHTS_FILE) in str(err.value)


def test_float64_weights_are_a_dtype_mismatch(tmp_path):
    save_checkpoint(make_model(dtype=torch.float64), tmp_path)
    with pytest.raises(CheckpointMismatchError, match="float64"):
        load_checkpoint(tmp_path)


@pytest.mark.parametrize("kwargs", [
    {"d_model": 0}, {"headdim": 7}, {"ngroups": 3}, {"n_layers": True}, {"dt_min": 0.5, "dt_max": 0.1},
])
def test_invalid_configs_raise_config_error(kwargs):
    with pytest.raises(ConfigError):
        SSMConfig(**{**dataclasses.asdict(TINY), **kwargs})


def test_config_dict_round_trip():
    assert SSMConfig.from_dict(TINY.to_dict()) == TINY
    assert isinstance(SSMStack(TINY), SSMStack)
