"""Training recipe: a few steps of a tiny model, checkpoints, resume, export with a model card."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ssm_engine.data.audio import write_wav
from ssm_engine.data.manifest import write_manifest
from ssm_engine.stt.export import export_run
from ssm_engine.stt.model import load_stt
from ssm_engine.stt.train import TrainConfig, train


@pytest.fixture
def tiny_data(tmp_path):
    rng = np.random.default_rng(0)
    rows = {"train": [], "heldout": []}
    for split, rate, n in (("train", 8000, 4), ("heldout", 16000, 2)):
        for i in range(n):
            t = np.arange(int(rate * (0.8 + 0.2 * i))) / rate
            x = 0.3 * np.sin(2 * np.pi * (200 + 50 * i) * t) + 0.02 * rng.standard_normal(t.size)
            path = tmp_path / split / f"{i}.wav"
            path.parent.mkdir(exist_ok=True)
            write_wav(path, x, rate)
            rows[split].append((path, ["yes", "no thanks", "okay", "call me"][i]))
        write_manifest(tmp_path / f"{split}.tsv", rows[split])
    summary = {"splits": {s: {"utterances": len(r), "hours": 0.001,
                              "hours_per_voice": {"test:tone": 0.001}} for s, r in rows.items()}}
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    return tmp_path


def _cfg(data, run, steps):
    return TrainConfig(train_manifest=str(data / "train.tsv"),
                       heldout_manifest=str(data / "heldout.tsv"), run_dir=str(run),
                       d_model=32, n_layers=1, d_state=16, headdim=16, conv_channels=16,
                       batch_audio_s=2.0, warmup_steps=2, max_steps=steps, eval_every_steps=2,
                       progress=False)


def test_train_checkpoints_resumes_and_exports(tiny_data, tmp_path):
    run = tmp_path / "run"
    res = train(_cfg(tiny_data, run, 3))
    assert res["step"] == 3 and 0.0 <= res["cer"] and res["n"] == 2
    assert (run / "last.pt").exists() and (run / "best" / "model.safetensors").exists()
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == [2, 3]
    res = train(_cfg(tiny_data, run, 5))                         # resumes at step 3
    assert res["step"] == 5
    assert "resumed from" in (run / "train.log").read_text()
    out = export_run(run, tmp_path / "shipped", data_dir=tiny_data, command="parley train stt")
    card = (out / "MODEL_CARD.md").read_text()
    assert "test:tone" in card and "parley train stt" in card
    assert (out / "training.log").exists()
    load_stt(out)


def test_cli_registers_data_and_train_under_shared_groups():
    import argparse

    from ssm_engine.stt.cli import group_subparsers, register_cli

    parser = argparse.ArgumentParser(prog="parley")
    sub = parser.add_subparsers(dest="command", required=True)
    other = group_subparsers(sub, "train", "train models")       # someone else's "train tts"
    other.add_parser("tts").set_defaults(func=lambda a: 7)
    register_cli(sub)
    args = parser.parse_args(["train", "stt", "--run", "r", "--max-minutes", "5"])
    assert args.run == "r" and args.max_minutes == 5.0 and args.func.__name__ == "_train_stt"
    assert parser.parse_args(["train", "tts"]).func(None) == 7
    args = parser.parse_args(["data", "stt", "--train", "10", "--out", "d"])
    assert (args.train, args.out, args.func.__name__) == (10, "d", "_data_stt")
