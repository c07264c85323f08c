"""STTModel: streaming steps equal the whole-clip forward; batching; bad input; checkpoints."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from ssm_engine import BatchRunner, CheckpointFormatError, StreamBatcher
from ssm_engine.errors import ConfigError
from ssm_engine.stt.decode import StreamingGreedyDecoder, greedy_decode
from ssm_engine.stt.errors import AudioInputError
from ssm_engine.stt.model import STTConfig, STTModel, load_stt, prepare_audio, save_stt
from ssm_engine.stt.stream import RecognizerStream


def tiny_config(**overrides) -> STTConfig:
    ssm = dict(d_model=32, n_layers=2, d_state=16, headdim=16, expand=2, chunk_size=8,
               scan_chunks=2)
    kw = dict(n_mels=16, conv_channels=24, ssm=ssm)
    kw.update(overrides)
    return STTConfig(**kw)


def tiny_model(seed: int = 0, **overrides) -> STTModel:
    torch.manual_seed(seed)
    return STTModel(tiny_config(**overrides)).eval()


def speechy(n_steps: int, batch: int = 1, seed: int = 0) -> torch.Tensor:
    """Deterministic noisy tones, (batch, n_steps * 160) at 8 kHz."""
    g = torch.Generator().manual_seed(seed)
    t = torch.arange(n_steps * 160) / 8000.0
    f = 200.0 + 600.0 * torch.rand(batch, 1, generator=g)
    return 0.3 * torch.sin(2 * torch.pi * f * t) + 0.05 * torch.randn(batch, t.numel(), generator=g)


SHIPPED = Path(__file__).resolve().parents[2] / "models" / "stt-ssm"


def _forward_log_probs(model: STTModel, audio: torch.Tensor) -> torch.Tensor:
    """What stepping returns, from the whole-clip forward: the characters' log-probs, then the
    phones' for a model with a phone head."""
    with torch.no_grad():
        chars, phones = model.forward_heads(audio)
    out = torch.log_softmax(chars, dim=-1)
    return out if phones is None else torch.cat([out, torch.log_softmax(phones, dim=-1)], -1)


def test_step_by_step_equals_forward():
    model = tiny_model()
    audio = speechy(40, batch=2)
    full = _forward_log_probs(model, audio)                       # (2, 40, V)
    state = model.init_state(2)
    steps = []
    for t in range(40):
        y, state = model.step(audio[:, t * 160:(t + 1) * 160], state)
        steps.append(y)
    stepped = torch.stack(steps, dim=1)
    torch.testing.assert_close(stepped, full, atol=1e-4, rtol=1e-4)
    for b in range(2):
        assert greedy_decode(stepped[b]) == greedy_decode(full[b])


def test_streaming_decoder_equals_whole_clip_decoding():
    model = tiny_model(seed=3)
    with torch.no_grad():                 # make the untrained head emit varied characters
        model.head.bias.normal_(0, 0.5)
        model.head.weight.mul_(40)
    audio = speechy(60, seed=5)
    full = _forward_log_probs(model, audio)[0]
    dec = StreamingGreedyDecoder()
    state = model.init_state(1)
    for t in range(60):
        y, state = model.step(audio[:, t * 160:(t + 1) * 160], state)
        dec.push(y)
    assert dec.text == greedy_decode(full)
    assert len(dec.text) > 3


def test_batcher_streams_of_different_lengths_match_forward():
    model = tiny_model()
    a, b = speechy(30, seed=1), speechy(17, seed=2)
    batcher = StreamBatcher(model)
    sa, sb = batcher.open(), batcher.open()
    out = batcher.run({sa: a.view(30, 160), sb: b.view(17, 160)})
    torch.testing.assert_close(out[sa], _forward_log_probs(model, a)[0], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(out[sb], _forward_log_probs(model, b)[0], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("split", [[40], [1, 39], [7, 8, 25], [13, 1, 9, 17]])
def test_prefill_in_any_pieces_equals_stepping(split):
    # a stream's state after prefilling pieces of any length continues exactly like stepping
    model = tiny_model(seed=1)
    audio = speechy(40, batch=2, seed=4)
    full = _forward_log_probs(model, audio)
    state = model.init_state(2)
    outs, t = [], 0
    for n in split:
        y, state = model.prefill(audio[:, t * 160:(t + n) * 160].reshape(2, n, 160), state)
        outs.append(y)
        t += n
    stepped = torch.cat(outs, dim=1)
    torch.testing.assert_close(stepped, full, atol=1e-4, rtol=1e-4)
    y, _ = model.step(torch.zeros(2, 160), state)             # and the state steps on
    ref = model.init_state(2)
    for k in range(40):
        _, ref = model.step(audio[:, k * 160:(k + 1) * 160], ref)
    y_ref, _ = model.step(torch.zeros(2, 160), ref)
    torch.testing.assert_close(y, y_ref, atol=1e-4, rtol=1e-4)


def test_prefill_rejects_bad_frames():
    model = tiny_model()
    state = model.init_state(1)
    with pytest.raises(AudioInputError, match="batch, n, samples"):
        model.prefill(torch.zeros(1, 160), state)
    with pytest.raises(AudioInputError, match="160 samples each"):
        model.prefill(torch.zeros(1, 3, 80), state)
    with pytest.raises(AudioInputError, match="NaN"):
        model.prefill(torch.full((1, 8, 160), float("nan")), state)


def test_batcher_prefills_long_chunks_and_matches_pure_stepping():
    # the same chunks through a batcher that prefills long ones and one that only steps: equal
    # outputs, and equal states afterwards (each stream then steps on identically)
    model = tiny_model(seed=2)
    audio = speechy(60, batch=3, seed=6)
    fast, slow = StreamBatcher(model, prefill_min=4), StreamBatcher(model, prefill_min=None)
    calls, prefill = [], model.prefill
    model.prefill = lambda x, state: calls.append(tuple(x.shape[:2])) or prefill(x, state)
    ids_f = [fast.open() for _ in range(3)]
    ids_s = [slow.open() for _ in range(3)]
    pos, got = [0, 0, 0], [[], [], []]
    for lengths in ([25, 25, 1], [1, 9, 3], [4, 4, 30], [2, 1, 1]):
        chunk = {}
        for i, n in enumerate(lengths):
            chunk[i] = audio[i, pos[i] * 160:(pos[i] + n) * 160].reshape(n, 160)
            pos[i] += n
        out_f = fast.run({ids_f[i]: c for i, c in chunk.items()})
        out_s = slow.run({ids_s[i]: c for i, c in chunk.items()})
        for i in chunk:
            torch.testing.assert_close(out_f[ids_f[i]], out_s[ids_s[i]], atol=1e-4, rtol=1e-4)
            got[i].append(out_f[ids_f[i]])
    for i in range(3):   # and both equal the whole-clip forward of what each stream heard
        full = _forward_log_probs(model, audio[i:i + 1, :pos[i] * 160])[0]
        torch.testing.assert_close(torch.cat(got[i]), full, atol=1e-4, rtol=1e-4)
    # equal lengths share one pass; chunks under prefill_min are stepped
    assert calls == [(2, 25), (1, 9), (2, 4), (1, 30)]


def test_batcher_without_a_prefill_model_only_steps():
    from ssm_engine import SSMConfig, SSMStack
    stack = SSMStack(SSMConfig(d_model=16, n_layers=1, d_state=8, headdim=8, expand=2))
    assert StreamBatcher(stack).prefill_min is None
    with pytest.raises(ConfigError, match="prefill_min"):
        StreamBatcher(tiny_model(), prefill_min=1)


def test_runner_stream_with_exported_state_continues_exactly():
    model = tiny_model()
    audio = speechy(20)
    with BatchRunner(model) as runner:
        sid = runner.open_stream()
        first = runner.submit(sid, audio[0, :1600].view(10, 160)).result()
        data = runner.export_state(sid).result()
        sid2 = runner.open_stream(data)
        second = runner.submit(sid2, audio[0, 1600:].view(10, 160)).result()
    full = _forward_log_probs(model, audio)[0]
    torch.testing.assert_close(torch.cat([first, second]), full, atol=1e-4, rtol=1e-4)


def test_recognizer_stream_buffers_partial_steps_and_flushes():
    model = tiny_model()
    audio = (speechy(13)[0].numpy()[:1980] * 32767).astype(np.int16)
    with BatchRunner(model) as runner:
        rs = RecognizerStream(runner, model.config, flush_s=0.1)
        assert rs.push(audio[:100]) is None                     # < one 20 ms step: kept
        fut = rs.push(audio[100:])                              # 1980 in all -> 12 steps
        assert fut.result().shape == (12, model.config.vocab_size)
        last = rs.finish().result()                             # 60 left + 100 ms of silence
        assert last.shape == (6, model.config.vocab_size)
        assert rs.closed and runner.open_streams == frozenset()
        with pytest.raises(AudioInputError):
            rs.push(audio)


@pytest.mark.parametrize("bad, match", [
    (torch.zeros(1, 100), "160 samples"),
    (torch.full((1, 160), float("nan")), "NaN"),
    (torch.zeros(160), "batch, samples"),
])
def test_step_rejects_bad_audio(bad, match):
    model = tiny_model()
    with pytest.raises(AudioInputError, match=match):
        model.step(bad, model.init_state(1))


def test_forward_rejects_empty_and_ragged_audio():
    model = tiny_model()
    with pytest.raises(AudioInputError, match="multiple of 160"):
        model(torch.zeros(1, 0))
    with pytest.raises(AudioInputError, match="multiple of 160"):
        model(torch.zeros(1, 170))


def test_prepare_audio_rates_and_errors():
    cfg = tiny_config()
    x16 = (np.sin(np.arange(16000) * 2 * np.pi * 440 / 16000) * 10000).astype(np.int16)
    out = prepare_audio(x16, 16000, cfg)
    assert out.shape == (1, 8000) and out.dtype == torch.float32
    assert prepare_audio(x16[:8010], 8000, cfg).shape == (1, 8160)     # padded to whole steps
    with pytest.raises(AudioInputError, match="44100 Hz is not supported"):
        prepare_audio(x16, 44100, cfg)
    with pytest.raises(AudioInputError, match="empty"):
        prepare_audio(np.zeros(0, np.int16), 8000, cfg)
    with pytest.raises(AudioInputError, match="NaN"):
        prepare_audio(np.array([0.0, np.nan], np.float32), 8000, cfg)
    with pytest.raises(AudioInputError, match="mono"):
        prepare_audio(np.zeros((2, 160), np.int16), 8000, cfg)


def test_checkpoint_round_trip_keeps_feature_stats(tmp_path):
    model = tiny_model()
    model.frontend.set_stats(torch.full((16,), -3.0), torch.full((16,), 2.0))
    save_stt(model, tmp_path / "ck")
    back = load_stt(tmp_path / "ck")
    assert back.config == model.config
    audio = speechy(10)
    torch.testing.assert_close(_forward_log_probs(back, audio), _forward_log_probs(model, audio))
    doc = json.loads((tmp_path / "ck" / "config.json").read_text())
    assert doc["kind"] == "STTModel"


def test_loading_a_missing_or_foreign_checkpoint_names_the_file(tmp_path):
    with pytest.raises(CheckpointFormatError, match=str(tmp_path / "nope")):
        load_stt(tmp_path / "nope")
    save_stt(tiny_model(), tmp_path / "ck")
    doc = json.loads((tmp_path / "ck" / "config.json").read_text())
    doc["config"]["n_mels"] = 0
    (tmp_path / "ck" / "config.json").write_text(json.dumps(doc))
    with pytest.raises(CheckpointFormatError, match="n_mels"):
        load_stt(tmp_path / "ck")


@pytest.mark.skipif(not (SHIPPED / "config.json").exists(), reason="no pure SSM model in models/stt-ssm")
def test_shipped_checkpoint_loads_streams_and_fits_the_size_limit():
    assert (SHIPPED / "model.safetensors").stat().st_size <= 25 * 1024 * 1024
    model = load_stt(SHIPPED)
    assert isinstance(model.config, STTConfig) and model.config.sample_rate_hz == 8000
    audio = speechy(25)
    full = _forward_log_probs(model, audio)[0]
    state = model.init_state(1)
    stepped = torch.cat([model.step(audio[:, t * 160:(t + 1) * 160], state)[0] for t in range(25)])
    torch.testing.assert_close(stepped, full, atol=1e-3, rtol=1e-3)


def test_log_mel_matches_an_fft_reference():
    # the front end's windowed DFT (a matmul) gives the same features as torch.fft.rfft
    fe = tiny_model().frontend
    x = speechy(30, batch=2, seed=3)
    padded = torch.cat([torch.zeros(2, fe.context), x], dim=1)
    frames = padded.unfold(1, fe.win, fe.hop) * torch.hann_window(fe.win, periodic=False)
    spec = torch.fft.rfft(frames, n=fe.n_fft)
    ref = torch.log((spec.real.square() + spec.imag.square()) @ fe.melfb + 1e-6)
    torch.testing.assert_close(fe.log_mel(padded), ref, atol=1e-3, rtol=1e-4)


def test_a_lone_stream_prefills_in_place_and_matches_forward():
    # one live stream: the batcher hands its state to prefill without a gather/scatter copy
    model = tiny_model(seed=5)
    audio = speechy(33, seed=9)
    batcher = StreamBatcher(model, prefill_min=2)
    sid = batcher.open()
    outs, t = [], 0
    for n in (5, 5, 1, 3, 12, 7):
        outs.append(batcher.run({sid: audio[0, t * 160:(t + n) * 160].reshape(n, 160)})[sid])
        t += n
    full = _forward_log_probs(model, audio)[0]
    torch.testing.assert_close(torch.cat(outs), full, atol=1e-4, rtol=1e-4)
    other = batcher.open()                       # a second stream joins: both continue exactly
    more = speechy(6, seed=10)
    out = batcher.run({sid: more[0].reshape(6, 160), other: more[0].reshape(6, 160)})
    ref = _forward_log_probs(model, torch.cat([audio, more], dim=1))[0, 33:]
    torch.testing.assert_close(out[sid], ref, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(out[other], _forward_log_probs(model, more)[0], atol=1e-4, rtol=1e-4)


def test_compiled_prefill_equals_eager_and_serves_only_its_shape():
    model, eager = tiny_model(seed=3), tiny_model(seed=3)
    with pytest.raises(ConfigError, match="positive frame count"):
        model.compile_prefill(0)
    assert model.compiled_frames == 0
    from torch._dynamo.utils import counters

    model.compile_prefill(3)                      # compiles now (both graphs it needs)
    assert model.compiled_frames == 3
    graphs = counters["stats"]["unique_graphs"]
    calls = []
    compiled = model._compiled
    model._compiled = lambda *a: calls.append(a[0].shape) or compiled(*a)
    audio = speechy(16, batch=2, seed=7)
    s1, s2 = model.init_state(1), eager.init_state(1)
    t = 0
    for n in (3, 3, 4, 3, 1, 2):                 # 3-frame chunks compiled, the others eager
        chunk = audio[:1, t * 160:(t + n) * 160].reshape(1, n, 160)
        y1, s1 = model.prefill(chunk, s1)
        y2, s2 = eager.prefill(chunk, s2)
        torch.testing.assert_close(y1, y2, atol=1e-4, rtol=1e-4)
        t += n
    assert calls == [(1, 480)] * 3
    assert counters["stats"]["unique_graphs"] == graphs        # nothing compiled mid-stream
    for k in s1.tensors:
        torch.testing.assert_close(s1.tensors[k], s2.tensors[k], atol=1e-4, rtol=1e-4)
    y1, _ = model.prefill(audio[:, :480].reshape(2, 3, 160), model.init_state(2))  # a batch: eager
    y2, _ = eager.prefill(audio[:, :480].reshape(2, 3, 160), eager.init_state(2))
    torch.testing.assert_close(y1, y2, atol=1e-4, rtol=1e-4)
    assert len(calls) == 3


def test_recognizer_stream_with_a_stride_runs_every_k_steps_and_hears_the_same():
    model = tiny_model(seed=4)
    audio = (speechy(23, seed=2)[0].numpy() * 32767).astype(np.int16)
    with pytest.raises(AudioInputError, match="stride"):
        RecognizerStream(None, model.config, stride=0)        # type: ignore[arg-type]
    with BatchRunner(model, prefill_min=2) as runner:
        every = RecognizerStream(runner, model.config, flush_s=0.1)
        strided = RecognizerStream(runner, model.config, flush_s=0.1, stride=3)
        got: dict[str, list] = {"every": [], "strided": []}
        for i in range(0, audio.size, 160):               # 20 ms pushes
            for name, rs in (("every", every), ("strided", strided)):
                fut = rs.push(audio[i:i + 160])
                if fut is not None:
                    got[name].append(fut.result())
        assert [r.shape[0] for r in got["strided"]] == [3] * 7   # 21 of 23 steps run so far
        assert len(got["every"]) == 23
        for name, rs in (("every", every), ("strided", strided)):
            got[name].append(rs.finish().result())
        assert got["strided"][-1].shape[0] == 2 + 5              # the 2 left + 100 ms of silence
    torch.testing.assert_close(torch.cat(got["strided"]), torch.cat(got["every"]),
                               atol=1e-4, rtol=1e-4)


def test_stream_norm_steps_prefills_and_forwards_alike():
    # the running mean is stream state like any other: silence, speech, silence in any pieces
    model = tiny_model(seed=2, norm="stream", norm_tau=20)
    audio = speechy(60, batch=2, seed=5)
    audio[:, :10 * 160] = 0.0
    audio[:, 50 * 160:] *= 0.001
    full = _forward_log_probs(model, audio)
    state = model.init_state(2)
    assert set(state.tensors) >= {"fe_cmn", "fe_peak"}
    steps = []
    for t in range(60):
        y, state = model.step(audio[:, t * 160:(t + 1) * 160], state)
        steps.append(y)
    torch.testing.assert_close(torch.stack(steps, dim=1), full, atol=1e-4, rtol=1e-4)
    state, outs, t = model.init_state(2), [], 0
    for n in (7, 1, 30, 22):
        y, state = model.prefill(audio[:, t * 160:(t + n) * 160].reshape(2, n, 160), state)
        outs.append(y)
        t += n
    torch.testing.assert_close(torch.cat(outs, dim=1), full, atol=1e-4, rtol=1e-4)
    # the fixed-statistics model of the same weights hears the same audio differently
    fixed = tiny_model(seed=2)
    assert not torch.allclose(_forward_log_probs(fixed, audio), full, atol=1e-3)


def _normalised_mels(model: STTModel, audio: torch.Tensor) -> torch.Tensor:
    fe = model.frontend
    padded = torch.cat([audio.new_zeros(audio.shape[0], fe.context), audio], dim=1)
    z = fe.normalise(fe.log_mel(padded))
    if fe.norm == "stream":
        z, _, _ = fe.stream_normalise(z, z.new_zeros(z.shape[0], fe.n_mels),
                                      z.new_zeros(z.shape[0], 1))
    return z


def test_stream_norm_takes_out_a_channel_and_ignores_silence():
    # the same speech through a louder, tilted channel: the fixed statistics see a different
    # spectrum for the whole call; the running mean takes the difference out within seconds
    torch.manual_seed(0)
    audio = speechy(300, seed=7)                                    # 6 s
    tilted = torch.cat([audio[:, :1], audio[:, 1:] - 0.9 * audio[:, :-1]], dim=1) * 3.0
    diff = {}
    for norm in ("fixed", "stream"):
        model = tiny_model(norm=norm, norm_tau=100)
        model.frontend.set_stats(torch.full((16,), -4.0), torch.full((16,), 2.0))
        d = (_normalised_mels(model, audio) - _normalised_mels(model, tilted)).abs().mean(-1)[0]
        diff[norm] = (float(d[:20].mean()), float(d[-100:].mean()))
    assert diff["fixed"][1] > 0.9 * diff["fixed"][0] > 0.1           # a constant difference
    assert diff["stream"][0] == pytest.approx(diff["fixed"][0], rel=0.1)   # starts alike
    assert diff["stream"][1] < 0.2 * diff["fixed"][1]              # ... and is taken out
    # five seconds of silence after speech leave the running mean where the speech put it
    model = tiny_model(norm="stream", norm_tau=100)
    model.frontend.set_stats(torch.full((16,), -4.0), torch.full((16,), 2.0))
    state = model.init_state(1)
    _, state = model.prefill(audio.reshape(1, 300, 160), state)
    _, state = model.prefill(torch.zeros(1, 1, 160), state)    # a window still over the speech
    cmn = state.tensors["fe_cmn"].clone()
    assert float(cmn.abs().mean()) > 0.05
    _, state = model.prefill(torch.zeros(1, 250, 160), state)
    torch.testing.assert_close(state.tensors["fe_cmn"], cmn)


def test_stream_norm_config_is_checked_and_kept(tmp_path):
    with pytest.raises(ConfigError, match="norm"):
        STTConfig(norm="cepstral")
    with pytest.raises(ConfigError, match="norm_tau"):
        STTConfig(norm="stream", norm_tau=0)
    model = tiny_model(norm="stream", norm_tau=50)
    save_stt(model, tmp_path / "ck")
    back = load_stt(tmp_path / "ck")
    assert (back.config.norm, back.config.norm_tau) == ("stream", 50)
    audio = speechy(30)
    torch.testing.assert_close(_forward_log_probs(back, audio), _forward_log_probs(model, audio))
    assert STTConfig.from_dict({k: v for k, v in tiny_config().to_dict().items()
                                if k not in ("norm", "norm_tau")}).norm == "fixed"
