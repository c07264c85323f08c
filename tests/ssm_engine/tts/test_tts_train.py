"""The training recipe end to end on a tiny hand-made data set: train, resume, export, speak."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from ssm_engine.tts.errors import TTSError
from ssm_engine.tts.model import TTSConfig, TTSModel
from ssm_engine.tts.phonemes import phonemize
from ssm_engine.tts.synth import TTSVoice
from ssm_engine.tts.train import TTSTrainConfig, load_split, train
from ssm_engine.tts.vocoder import HOP_SAMPLES, SAMPLE_RATE_HZ

SENTENCES = ["Hello there.", "Your order ships today.", "Is that right?", "Please hold."]


def _write_set(root: Path) -> None:
    """Sentences 'spoken' as vowel-like tones, one per phone, 6 frames each."""
    (root / "wav").mkdir(parents=True)
    rng = np.random.default_rng(0)
    for split, texts in (("train", SENTENCES), ("heldout", SENTENCES[:2])):
        lines = []
        for k, text in enumerate(texts):
            tokens = phonemize(text)
            durations = [6] * len(tokens)
            n = sum(durations) * HOP_SAMPLES
            t = np.arange(n) / SAMPLE_RATE_HZ
            f0 = 120 + 40 * rng.random()
            pcm = 0.2 * np.sign(np.sin(2 * np.pi * f0 * t)) * np.hanning(n)
            uid = f"{split[:2]}{k:03d}"
            sf.write(root / "wav" / f"{uid}.wav", pcm, SAMPLE_RATE_HZ, subtype="PCM_16")
            lines.append(json.dumps({
                "id": uid, "wav": f"wav/{uid}.wav", "text": text,
                "tokens": [[x.symbol, x.stress, x.position, x.word_index] for x in tokens],
                "words": [], "durations": durations}))
        (root / f"{split}.jsonl").write_text("\n".join(lines) + "\n")


def test_train_resume_export_and_speak(tmp_path: Path) -> None:
    data, run, out = tmp_path / "data", tmp_path / "run", tmp_path / "voice"
    _write_set(data)
    small = dict(d_model=32, n_layers=1, d_state=8, headdim=16, batch_frames=400,
                 eval_every_steps=2, warmup_steps=1, progress=False)
    first = train(TTSTrainConfig(data_dir=str(data), run_dir=str(run), max_steps=3, **small))
    assert first["step"] == 3 and np.isfinite(first["loss"])
    assert (data / "feats").is_dir() and len(list((data / "feats").glob("*.npy"))) == 6
    second = train(TTSTrainConfig(data_dir=str(data), run_dir=str(run), max_steps=5, **small))
    assert second["step"] == 5
    log = (run / "train.log").read_text()
    assert "resumed from" in log and "eval step 4" in log

    from ssm_engine.tts.export import export_voice

    export_voice(run, out, data_dir=data, command="parley train tts (test)")
    card = (out / "MODEL_CARD.md").read_text()
    assert "parley train tts (test)" in card and "samples/heldout_0.wav" in card
    assert "female, distilled from festival's" in card      # no summary.json: festival's set
    (data / "summary.json").write_text(json.dumps({"config": {"teacher": "piper:joe"}}))
    export_voice(run, out, data_dir=data, command="parley train tts (test)")
    card = (out / "MODEL_CARD.md").read_text()
    assert "male, distilled from Piper's neural voice" in card
    assert "spoken by Piper's joe voice" in card and "festival teacher" not in card
    best_step = json.loads((run / "best" / "metrics.json").read_text())["step"]
    assert f"(step {best_step}, the lowest held-out loss)" in card
    export_voice(run, out, data_dir=data, command="parley train tts (test)", checkpoint="last")
    assert "(step 5, the run's last)" in (out / "MODEL_CARD.md").read_text()
    last = TTSVoice.load(out).model.state_dict()
    import torch

    saved = torch.load(run / "last.pt", weights_only=False)["model"]
    assert all(torch.equal(last[k], saved[k]) for k in saved)
    voice = TTSVoice.load(out)
    syn = voice.synthesize("Hello there.")
    assert syn.pcm.size > 0 and [w for w, _ in syn.words] == ["hello", "there"]
    pcm, rate = sf.read(out / "samples" / "heldout_0.wav")
    assert rate == SAMPLE_RATE_HZ and pcm.size > 0


def test_bad_data_sets_name_the_problem(tmp_path: Path) -> None:
    with pytest.raises(TTSError, match="no such manifest"):
        load_split(tmp_path, "train")
    _write_set(tmp_path / "d")
    rows = (tmp_path / "d" / "train.jsonl").read_text().splitlines()
    bad = json.loads(rows[0])
    bad["tokens"][0][0] = "zz"
    (tmp_path / "d" / "train.jsonl").write_text(json.dumps(bad) + "\n")
    with pytest.raises(TTSError, match="unknown phone symbol"):
        load_split(tmp_path / "d", "train")


SMALL = dict(d_model=32, n_layers=1, d_state=8, headdim=16, batch_frames=400,
             eval_every_steps=2, warmup_steps=1, progress=False)


def _tiny_voice(tmp_path: Path) -> tuple[Path, Path, dict]:
    """The data set, a voice trained two steps on it and exported, and the sizes it trained at."""
    from ssm_engine.tts.export import export_voice

    data, run, voice = tmp_path / "data", tmp_path / "run", tmp_path / "voice"
    _write_set(data)
    train(TTSTrainConfig(data_dir=str(data), run_dir=str(run), max_steps=2, **SMALL))
    export_voice(run, voice, data_dir=data, command="parley train tts (test)", checkpoint="last")
    return data, voice, dict(SMALL)


def test_fine_tune_with_the_spectrum_loss_starts_from_the_voice(tmp_path: Path) -> None:
    import torch

    from ssm_engine.tts.export import export_voice

    data, voice, small = _tiny_voice(tmp_path)
    start = TTSVoice.load(voice).model
    tuned = tmp_path / "tuned"
    res = train(TTSTrainConfig(data_dir=str(data), run_dir=str(tuned), max_steps=2, lr=1e-9,
                               envelope_loss="spectrum", init_from=str(voice),
                               **{**small, "d_model": 64}))     # the voice's sizes win
    assert res["step"] == 2 and res["spec"] > 0 and np.isfinite(res["loss"])
    # with a vanishing learning rate the fine-tune is still the voice it started from
    after = torch.load(tuned / "last.pt", weights_only=False)
    assert all(torch.allclose(after["model"][k], v, atol=1e-5) for k, v in start.state_dict().items())
    assert np.allclose(after["std"], start.config.feat_std)
    log = (tuned / "train.log").read_text()
    assert f"fine-tuning {voice}" in log and "envelope loss: spectrum" in log
    export_voice(tuned, tmp_path / "tuned-voice", data_dir=data, command="parley train tts (test)")
    card = (tmp_path / "tuned-voice" / "MODEL_CARD.md").read_text()
    assert f"Fine-tuned from the voice in `{voice}`" in card and "L1 on the log envelope" in card
    assert "From scratch. " in (voice / "MODEL_CARD.md").read_text()
    with pytest.raises(TTSError, match="not a voice folder"):
        train(TTSTrainConfig(data_dir=str(data), run_dir=str(tmp_path / "r3"), max_steps=1,
                             init_from=str(data), **small))
    with pytest.raises(TTSError, match="envelope loss must be one of"):
        train(TTSTrainConfig(data_dir=str(data), run_dir=str(tmp_path / "r4"), max_steps=1,
                             envelope_loss="mel", **small))


def test_a_grown_voice_starts_as_the_voice_and_trains_its_new_layers(tmp_path: Path) -> None:
    """``grow_layers``: acoustic layers added on top of a voice start as no-ops (the grown voice
    speaks the voice's very samples), then learn; the exported card says so; the CLI refuses
    growth without a voice to grow."""
    import torch

    from ssm_engine.tts.export import export_voice
    from ssm_engine.tts.model import load_tts
    from ssm_engine.tts.train import _load_grown

    data, voice, small = _tiny_voice(tmp_path)
    start = load_tts(voice)
    grown_config = TTSConfig.from_dict({**start.config.to_dict(),
                                        "ssm": {**start.config.ssm, "n_layers": 3}})
    grown = TTSModel(grown_config)
    _load_grown(grown, start)
    text = "Your order ships today, is that right?"
    np.testing.assert_array_equal(TTSVoice(grown).synthesize(text).pcm,
                                  TTSVoice(start).synthesize(text).pcm)
    tuned = tmp_path / "tuned"
    res = train(TTSTrainConfig(data_dir=str(data), run_dir=str(tuned), max_steps=3, lr=1e-2,
                               init_from=str(voice), grow_layers=2, **small))
    assert res["step"] == 3
    saved = torch.load(tuned / "last.pt", weights_only=False)
    after = saved["model"]
    assert after["stack.blocks.2.out_proj.weight"].abs().sum() > 0      # the new layers learnt
    # the voice's own weights at a quarter of the rate, the new layers at all of it
    assert [g["lr_scale"] for g in saved["opt"]["param_groups"]] == [0.25, 1.0]
    assert len(saved["opt"]["param_groups"][1]["params"]) == len(
        [k for k in after if k.startswith(("stack.blocks.1.", "stack.blocks.2.", "stack.norms.1.",
                                           "stack.norms.2."))])
    assert "2 acoustic layers added" in (tuned / "train.log").read_text()
    export_voice(tuned, tmp_path / "grown-voice", data_dir=data, command="parley train tts (test)")
    assert load_tts(tmp_path / "grown-voice").config.ssm["n_layers"] == 3
    assert "2 acoustic layers added on top" in (tmp_path / "grown-voice" / "MODEL_CARD.md").read_text()
    with pytest.raises(TTSError, match="does not fit this model"):
        _load_grown(TTSModel(TTSConfig.from_dict({**grown_config.to_dict(), "enc_kernel": 3})), start)


def test_grow_layers_needs_a_voice_to_grow(tmp_path: Path, capsys) -> None:
    from deploy.cli import main

    assert main(["train", "tts", "--data", str(tmp_path), "--run", str(tmp_path / "r"),
                 "--grow-layers", "2"]) == 2
    assert "--grow-layers N takes N >= 0 and needs --init-from" in capsys.readouterr().err


def test_the_spectrum_loss_weighs_coefficients_by_what_they_change() -> None:
    """One standard deviation of error on a formant-placing coefficient (c1) and on a ripple
    coefficient (c39) cost the cepstrum loss the same; the spectrum loss, what the ear gets,
    charges c1 many times more."""
    import torch

    from ssm_engine.tts.model import TTSConfig, TTSModel
    from ssm_engine.tts.phonemes import SYMBOLS
    from ssm_engine.tts.train import Clip, _collate, losses
    from ssm_engine.tts.vocoder import CEP0, N_FEATURES, VUV

    std = [1.0] * N_FEATURES
    std[CEP0 + 1], std[CEP0 + 39] = 0.6, 0.03
    model = TTSModel(TTSConfig(n_symbols=len(SYMBOLS), feat_mean=tuple([0.0] * N_FEATURES),
                               feat_std=tuple(std)))
    tokens = np.array([[1, 0, 0]] * 4, dtype=np.int64)
    clip = Clip("c", tokens, np.full(4, 3, dtype=np.int64), np.zeros((12, N_FEATURES), np.float32), "")
    batch = _collate([clip], np.zeros(N_FEATURES), np.ones(N_FEATURES))
    with torch.no_grad():
        enc = model.encode(batch["tokens"], batch["mask"])
        pred = model.decode(enc, batch["frame_phone"], batch["frame_pos"])[:, :12]
    pred[..., VUV] = 1.0

    def cost(k: int) -> tuple[float, float]:
        target = pred.clone()
        target[..., CEP0 + k] += 1.0          # one standard deviation of error
        with torch.no_grad():
            out = losses(model, {**batch, "target": target})
            base = losses(model, {**batch, "target": pred.clone()})
        return float(out["cep"] - base["cep"]), float(out["spec"] - base["spec"])

    cep1, spec1 = cost(1)
    cep39, spec39 = cost(39)
    assert abs(cep1 - cep39) < 1e-4
    assert spec1 > 10 * spec39 > 0
