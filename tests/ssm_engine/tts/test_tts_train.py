"""The training recipe end to end on a tiny hand-made data set: train, resume, export, speak."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from ssm_engine.tts.errors import TTSError
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
