"""Training the recogniser on Whisper's streamed features: extraction writes the stream's own
features, a run checkpoints, resumes and exports a model the loader takes, held-out clips never
train, and bad folders are one clear error."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from ssm_engine.errors import ConfigError
from ssm_engine.stt.distill import TeacherFeatures
from ssm_engine.stt.encoder_model import WhisperSTTConfig, WhisperSTTModel
from ssm_engine.stt.recognizers import load_recognizer
from ssm_engine.stt.train_encoder import (
    EncoderTrainConfig,
    _read_features,
    extract_stream_features,
    train_encoder_stt,
)
from ssm_engine.data.audio import read_audio
from ssm_engine.data.manifest import read_manifest, write_manifest

from .test_stt_train import tiny_data  # noqa: F401  (the fixture)

SMALL = WhisperSTTConfig(window_frames=20, hop_frames=4, lookahead_frames=2)


@pytest.fixture
def features(tiny_data, tmp_path):  # noqa: F811
    train = extract_stream_features(tiny_data / "train.tsv", tmp_path / "wf", SMALL, workers=2)
    held = extract_stream_features(tiny_data / "heldout.tsv", tmp_path / "wfh", SMALL, workers=1)
    return tiny_data, train, held


def test_extraction_writes_what_the_stream_computes(features, tmp_path):
    data, summary, _ = features
    assert summary["clips"] == 4 and summary["encoder"]["hop_frames"] == 4
    stored = TeacherFeatures(tmp_path / "wf", normalise=False)
    path = read_manifest(data / "train.tsv")[1][0]
    x, rate = read_audio(path)
    assert rate == 8000
    model = WhisperSTTModel(SMALL)
    live = model.stream_encoder.clip_features(torch.from_numpy(x)[None]).numpy()
    got = stored.get(path)
    assert got is not None and got.shape == live.shape
    np.testing.assert_allclose(got, live, atol=5e-3, rtol=1e-2)      # float16 on disk


def test_utterance_features_are_each_clip_encoded_whole_and_never_mixed_with_streams(
        features, tmp_path):
    data, _, _ = features
    whole = WhisperSTTConfig(window_frames=20, hop_frames=4, lookahead_frames=2, features="utterance")
    summary = extract_stream_features(data / "train.tsv", tmp_path / "wu", whole, workers=1)
    assert summary["encoder"]["features"] == "utterance"
    path = read_manifest(data / "train.tsv")[0][0]
    x, _ = read_audio(path)
    ref = WhisperSTTModel(whole).stream_encoder.utterance_features(torch.from_numpy(x)[None]).numpy()
    got = TeacherFeatures(tmp_path / "wu", normalise=False).get(path)
    assert got is not None and got.shape == ref.shape
    np.testing.assert_allclose(got, ref, atol=5e-3, rtol=1e-2)
    mixed = EncoderTrainConfig(train=[str(tmp_path / "wu"), str(tmp_path / "wf")],
                               heldout=str(tmp_path / "wfh"), run_dir=str(tmp_path / "mixed"),
                               d_model=32, n_layers=1, max_steps=1)
    with pytest.raises(ConfigError, match="'features': 'stream'"):
        train_encoder_stt(mixed)
    res = train_encoder_stt(EncoderTrainConfig(**{**mixed.__dict__, "train": [str(tmp_path / "wu")],
                                                  "heldout": str(tmp_path / "wu"),
                                                  "run_dir": str(tmp_path / "u")}))
    assert res["step"] == 1
    assert load_recognizer(tmp_path / "u" / "final").config.features == "utterance"


def test_a_run_checkpoints_resumes_and_exports(features, tmp_path):
    cfg = EncoderTrainConfig(train=[str(tmp_path / "wf")], heldout=str(tmp_path / "wfh"),
                             run_dir=str(tmp_path / "run"), d_model=32, n_layers=1,
                             max_steps=3, eval_every_steps=2, warmup_steps=1, batch_frames=400)
    res = train_encoder_stt(cfg)
    assert res["step"] == 3 and res["n"] == 2 and 0.0 <= res["cer"]
    run = tmp_path / "run"
    assert (run / "last.pt").exists() and (run / "best" / "model.safetensors").exists()
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines] == [2]
    again = train_encoder_stt(EncoderTrainConfig(**{**cfg.__dict__, "max_steps": 5}))
    assert again["step"] == 5                                  # resumed from step 3, not 0
    model = load_recognizer(run / "final")
    assert isinstance(model, WhisperSTTModel) and model.config.hop_frames == 4


def test_held_out_clips_never_train_and_voices_are_capped(features, tmp_path):
    data, _, _ = features
    rows = read_manifest(data / "train.tsv")
    write_manifest(data / "held.tsv", rows[:1])
    _, kept = _read_features(tmp_path / "wf", exclude=frozenset({str(rows[0][0])}))
    assert sorted(t for _, t in kept) == ["call me", "no thanks", "okay"]
    write_manifest(data / "train_voices.tsv", [(p, "game:a" if i < 3 else "game:b")
                                               for i, (p, _) in enumerate(rows)])
    _, capped = _read_features(tmp_path / "wf", max_per_voice=1)
    assert len(capped) == 2                                    # one of a's three, b's one


def test_folders_of_another_encoder_or_no_features_are_refused(features, tmp_path):
    data, _, _ = features
    other = WhisperSTTConfig(window_frames=20, hop_frames=5, lookahead_frames=2)
    extract_stream_features(data / "heldout.tsv", tmp_path / "other", other, workers=1)
    cfg = EncoderTrainConfig(train=[str(tmp_path / "wf")], heldout=str(tmp_path / "other"),
                             run_dir=str(tmp_path / "run2"), d_model=32, n_layers=1, max_steps=1)
    with pytest.raises(ConfigError, match="encoder"):
        train_encoder_stt(cfg)
    with pytest.raises(ConfigError, match="stream-features"):
        _read_features(tmp_path / "nothing")
