"""Training recipe: a few steps of a tiny model, checkpoints, resume, export with a model card."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ssm_engine.data.audio import write_wav
from ssm_engine.data.manifest import write_manifest
from ssm_engine.stt.cli import _phones_dict
from ssm_engine.stt.export import export_run
from ssm_engine.stt.model import load_stt
from ssm_engine.stt.train import TrainConfig, train
from ssm_engine.errors import ConfigError


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


def test_export_last_ships_the_last_checkpoint_with_the_check_made_at_its_step(tiny_data, tmp_path):
    import torch

    from ssm_engine import CheckpointFormatError

    run = tmp_path / "run"
    train(_cfg(tiny_data, run, 4))
    last_state = torch.load(run / "last.pt", weights_only=False)["model"]
    out = export_run(run, tmp_path / "last", data_dir=tiny_data, checkpoint="last")
    shipped = load_stt(out).state_dict()
    assert all(torch.equal(shipped[k], v) for k, v in last_state.items())
    assert "- Steps 4," in (out / "MODEL_CARD.md").read_text()
    rows = [x for x in (run / "metrics.jsonl").read_text().splitlines() if json.loads(x)["step"] != 4]
    (run / "metrics.jsonl").write_text("\n".join(rows) + "\n")          # as if the run were still going
    with pytest.raises(CheckpointFormatError, match="step 4 was never checked"):
        export_run(run, tmp_path / "again", data_dir=tiny_data, checkpoint="last")


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
    assert args.phones == "pocketsphinx" and Path(_phones_dict(args.phones)).is_file()
    assert _phones_dict("none") is None
    with pytest.raises(SystemExit, match="no such dictionary"):
        _phones_dict("/nonexistent/cmu.dict")
    assert parser.parse_args(["train", "tts"]).func(None) == 7
    args = parser.parse_args(["data", "stt", "--train", "10", "--out", "d"])
    assert (args.train, args.out, args.func.__name__) == (10, "d", "_data_stt")


def test_spec_augment_masks_bands_and_spans_inside_each_clip():
    import torch

    from ssm_engine.stt.train import spec_augment

    mel = torch.ones(2, 300, 64)
    out = spec_augment(mel, [300, 120], np.random.default_rng(3), freq_masks=2, freq_mask_mels=8,
                       time_mask_every=100, time_mask_frames=8)
    assert out.shape == mel.shape and torch.all(mel == 1)                # input untouched
    zero_bins = (out == 0).all(dim=1)                                      # (b, F): whole band
    zero_frames = (out == 0).all(dim=2)                                    # (b, T): whole span
    assert 0 < int(zero_bins[0].sum()) <= 16 and int(zero_bins[1].sum()) <= 16
    assert 0 < int(zero_frames[0].sum()) <= 3 * 8
    assert not zero_frames[1, 120:].any()                  # never in the second clip's padding
    assert int(zero_frames[1, :120].sum()) <= 8            # 120 frames: one mask at most
    cells = (out == 0) & ~zero_bins[:, None, :] & ~zero_frames[:, :, None]
    assert not cells.any()                                 # nothing masked but bands and spans
    same = spec_augment(mel, [300, 120], np.random.default_rng(3), freq_masks=2,
                        freq_mask_mels=8, time_mask_every=100, time_mask_frames=8)
    assert torch.equal(out, same)                                          # seeded
    off = spec_augment(mel, [300, 120], np.random.default_rng(3), freq_masks=0,
                       freq_mask_mels=8, time_mask_every=0, time_mask_frames=8)
    assert torch.equal(off, mel)


def test_mel_warp_moves_formants_by_the_factor_and_keeps_the_level():
    import torch

    from ssm_engine.stt.model import STTConfig, STTModel
    from ssm_engine.stt.train import mel_warp

    fe = STTModel(STTConfig()).frontend
    centers = fe.mel_centers_hz()
    assert centers.shape == (64,) and bool((centers.diff() > 0).all())
    assert 60.0 < float(centers[0]) and float(centers[-1]) < 3800.0
    # each centre sits where its filter peaks in the front end's filterbank
    bin_hz = 4000.0 / (fe.melfb.shape[0] - 1)
    peaks = fe.melfb.argmax(dim=0).to(torch.float64) * bin_hz
    assert float((peaks - centers).abs().max()) <= bin_hz
    mean, std = torch.linspace(-3, 1, 64), torch.linspace(0.5, 2, 64)
    raw = torch.full((3, 4, 64), -2.0)
    peak = int((centers - 1000.0).abs().argmin())                 # a "formant" at 1 kHz
    raw[:, :, peak] = 4.0
    mel = (raw - mean) / std
    out = mel_warp(mel, np.array([1.0, 1.12, 0.88]), centers, mean, std)
    assert out.shape == mel.shape and torch.equal(mel, (raw - mean) / std)   # input untouched
    assert torch.allclose(out[0], mel[0], atol=1e-5)                          # factor 1: as is
    back = out * std + mean
    for i, a in ((1, 1.12), (2, 0.88)):
        moved = float(centers[int(back[i, 0].argmax())])
        assert abs(moved - 1000.0 * a) < 0.06 * 1000.0 * a, (a, moved)
        assert torch.allclose(back[i].min(), torch.tensor(-2.0), atol=1e-4)   # floor kept
    with pytest.raises(ConfigError, match="factors"):
        mel_warp(mel, np.array([1.0]), centers, mean, std)


def test_a_new_run_starts_from_an_exported_checkpoint_with_augmentation(tiny_data, tmp_path):
    import dataclasses

    import torch

    train(_cfg(tiny_data, tmp_path / "a", 2))
    start = load_stt(tmp_path / "a" / "best")
    cfg = dataclasses.replace(_cfg(tiny_data, tmp_path / "b", 1), init_from=str(tmp_path / "a" / "best"),
                              speed=0.1, warp=0.1, freq_masks=2, time_mask_every_s=0.5, lr=1e-9,
                              warmup_steps=1)
    train(cfg)
    log = (tmp_path / "b" / "train.log").read_text()
    assert "initialised from" in log
    after = load_stt(tmp_path / "b" / "best")
    # a 1e-9 learning rate leaves the starting weights (and their feature statistics) in place
    for (name, a), b in zip(start.state_dict().items(), after.state_dict().values()):
        assert torch.allclose(a, b, atol=1e-6), name
    card = (export_run(tmp_path / "b", tmp_path / "out", data_dir=tiny_data) / "MODEL_CARD.md").read_text()
    assert "speed +-10 %" in card and "SpecAugment (2 frequency masks" in card
    assert "vocal-tract length perturbation +-10 %" in card
    assert f"started from {tmp_path / 'a' / 'best'}" in card
    bad = dataclasses.replace(cfg, run_dir=str(tmp_path / "c"), d_model=48, conv_channels=48,
                              headdim=16)
    with pytest.raises(ConfigError, match="differs"):
        train(bad)


def test_a_stream_normalised_run_starts_from_a_fixed_checkpoint_and_ships_its_front_end(
        tiny_data, tmp_path):
    import dataclasses

    import torch

    train(_cfg(tiny_data, tmp_path / "a", 2))
    start = load_stt(tmp_path / "a" / "best")
    assert start.config.norm == "fixed"
    cfg = dataclasses.replace(_cfg(tiny_data, tmp_path / "b", 1), norm="stream", lr=1e-9,
                              init_from=str(tmp_path / "a" / "best"), warmup_steps=1)
    train(cfg)
    assert "normalises its features fixed; this run: stream" in (tmp_path / "b" / "train.log").read_text()
    after = load_stt(tmp_path / "b" / "best")
    assert (after.config.norm, after.config.norm_tau) == ("stream", 200)
    for (name, a), b in zip(start.state_dict().items(), after.state_dict().values()):
        assert torch.allclose(a, b, atol=1e-6), name     # the weights carried over
    card = (export_run(tmp_path / "b", tmp_path / "out", data_dir=tiny_data) / "MODEL_CARD.md").read_text()
    assert "less a running mean of the stream's speech, time constant 2 s" in card
    assert load_stt(tmp_path / "out").config.norm == "stream"


def test_a_deeper_run_starts_from_a_shallower_checkpoint_computing_the_same(tiny_data, tmp_path):
    import dataclasses

    import torch

    from ssm_engine.stt.model import STTModel
    from ssm_engine.stt.train import load_deepened

    train(_cfg(tiny_data, tmp_path / "a", 2))
    start = load_stt(tmp_path / "a" / "best").eval()
    deep_cfg = dataclasses.replace(start.config, ssm={**start.config.ssm, "n_layers": 3})
    deep = STTModel(deep_cfg)
    assert load_deepened(deep, start) == [1, 2]
    deep.eval()
    audio = torch.randn(2, 4000) * 0.1
    with torch.no_grad():
        assert torch.equal(start(audio)[0], deep(audio)[0])
    # the old layer keeps its weights at index 0; the new ones are the identity through a zero
    # output projection, their other weights left to train
    assert torch.equal(deep.stack.blocks[0].in_proj.weight, start.stack.blocks[0].in_proj.weight)
    assert not deep.stack.blocks[1].out_proj.weight.any()
    assert deep.stack.blocks[2].in_proj.weight.abs().sum() > 0
    with pytest.raises(ConfigError, match="differs"):
        load_deepened(STTModel(start.config), deep)                 # shallower
    # through the recipe: a 3-layer run from the 1-layer checkpoint trains and says so
    cfg = dataclasses.replace(_cfg(tiny_data, tmp_path / "b", 1), n_layers=3,
                              init_from=str(tmp_path / "a" / "best"))
    train(cfg)
    assert "deepened from 1 to 3 SSM layers" in (tmp_path / "b" / "train.log").read_text()
    assert load_stt(tmp_path / "b" / "best").config.ssm_config.n_layers == 3


def test_a_phone_head_run_from_a_plain_checkpoint_trains_checks_and_ships_its_lexicon(
        tiny_data, tmp_path):
    import dataclasses
    import shutil

    import torch

    from ssm_engine.stt.lm import build_lm
    from ssm_engine.stt.phones import PHONES, Pronouncer

    train(_cfg(tiny_data, tmp_path / "a", 2))
    start = load_stt(tmp_path / "a" / "best")
    dictionary = tmp_path / "cmu.dict"
    # "okay" left out: that sentence trains the characters only
    dictionary.write_text("yes Y EH1 S\nno N OW1\nthanks TH AE1 NG K S\ncall K AO1 L\n"
                          "me M IY1\n")
    cfg = dataclasses.replace(_cfg(tiny_data, tmp_path / "b", 3),
                              init_from=str(tmp_path / "a" / "best"), phones_dict=str(dictionary),
                              lr=1e-9, warmup_steps=1)
    res = train(cfg)
    log = (tmp_path / "b" / "train.log").read_text()
    assert "phone targets for 3 of 4 training clips" in log and "new phone head" in log
    assert "per" in res and res["per_n"] == 2 and " PER " in log
    after = load_stt(tmp_path / "b" / "best")
    assert after.config.phone_vocab_size == len(PHONES) and after.out_size == 29 + len(PHONES)
    # everything but the new head came from the plain checkpoint (a 1e-9 rate keeps it there)
    assert start.config.phone_vocab_size == 0
    for name, value in start.state_dict().items():
        assert torch.allclose(after.state_dict()[name], value, atol=1e-6), name
    # export: the lexicon covers the LM's words, so the LM must be there first
    out = tmp_path / "shipped"
    with pytest.raises(ConfigError, match="lm.arpa.gz"):
        export_run(tmp_path / "b", out, data_dir=tiny_data)
    build_lm(["yes", "no thanks", "call me"]).write_arpa(out / "lm.arpa.gz")
    export_run(tmp_path / "b", out, data_dir=tiny_data)
    shipped = Pronouncer.load(out / "lexicon.dict.gz")
    assert shipped.prons("thanks") == (("TH", "AE", "NG", "K", "S"),) and "okay" not in shipped
    assert "phones and a word boundary" in (out / "MODEL_CARD.md").read_text()
    shutil.rmtree(out)


def test_a_gpu_asked_for_and_not_seen_stops_training_before_anything(tiny_data, tmp_path):
    """`parley train stt --device cuda` on a machine where torch sees no GPU: one ConfigError line,
    no run folder written. (The GPU path itself runs only where a GPU is lent.)"""
    import dataclasses

    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    run = tmp_path / "run"
    with pytest.raises(ConfigError, match="sees no GPU"):
        train(dataclasses.replace(_cfg(tiny_data, run, 2), device="cuda"))
    assert not run.exists()
    res = train(dataclasses.replace(_cfg(tiny_data, run, 2), device="auto"))   # auto: the CPU here
    assert res["step"] == 2 and "training on cpu" in (run / "train.log").read_text()
