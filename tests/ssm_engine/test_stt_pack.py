"""A data set packed to travel to the GPU machine: Opus clips in one tar, unpacked
into a data set the trainer reads; a run's results made small to carry back; the device
script's whole path, run here on the CPU."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch

from ssm_engine.data.audio import read_audio, read_wav, resample, write_wav
from ssm_engine.data.errors import AudioFileError, DataError
from ssm_engine.data.manifest import read_manifest, write_manifest
from ssm_engine.data.pack import pack, unpack
from ssm_engine.stt.model import load_stt
from ssm_engine.stt.phones import Pronouncer
from ssm_engine.stt.train import TrainConfig, run_results, train
from tests.ssm_engine.test_stt_train import _cfg

ROOT = Path(__file__).resolve().parents[2]
TEXTS = ["yes please", "no thanks", "call me back tomorrow", "my number is five five five"]


@pytest.fixture
def speech_data(tmp_path, flite_speech):
    """Four training clips (16 kHz, as a voice writes them) and two held out, with voice labels."""
    root = tmp_path / "speech"
    for split, texts in (("train", TEXTS), ("heldout", TEXTS[:2])):
        rows, voices = [], []
        for i, text in enumerate(texts):
            path = root / split / f"{i}.wav"
            path.parent.mkdir(parents=True, exist_ok=True)
            write_wav(path, flite_speech(text, 16000, voice="slt" if i % 2 else "awb") / 32768.0, 16000)
            rows.append((path, text))
            voices.append((path, "flite:awb" if i % 2 == 0 else "flite:slt"))
        write_manifest(root / f"{split}.tsv", rows)
        write_manifest(root / f"{split}_voices.tsv", voices)
    (root / "summary.json").write_text(json.dumps({"splits": {
        s: {"utterances": n, "hours": 0.001, "hours_per_voice": {"flite:slt": 0.001}}
        for s, n in (("train", 4), ("heldout", 2))}}))
    return root


def _band_energies(x: np.ndarray) -> np.ndarray:
    """log energy in 4 bands of each 20 ms frame at 8 kHz"""
    frames = x[: x.size // 160 * 160].reshape(-1, 160) * np.hanning(160)
    spec = np.abs(np.fft.rfft(frames, axis=1)) ** 2
    return np.log(np.stack([spec[:, a:b].sum(1) for a, b in ((2, 10), (10, 20), (20, 40), (40, 81))], 1) + 1e-6)


def test_a_pack_unpacks_into_a_data_set_of_the_same_speech_at_a_sixteenth_of_its_size(speech_data, tmp_path):
    dictionary = tmp_path / "cmu.dict"
    dictionary.write_text("yes Y EH1 S\nplease P L IY1 Z\n")
    summary = pack(speech_data, tmp_path / "p.tgz", level=1.0, phones=dictionary)
    assert summary["splits"] == {"train": {"clips": 4, "hours": summary["splits"]["train"]["hours"]},
                                 "heldout": {"clips": 2, "hours": summary["splits"]["heldout"]["hours"]}}
    wav_bytes = sum(p.stat().st_size for p in speech_data.rglob("*.wav"))
    assert summary["bytes"] < wav_bytes / 16 and summary["kbps"] < 16
    data = unpack(tmp_path / "p.tgz", tmp_path / "out")
    assert data == tmp_path / "out" / "speech"
    assert json.loads((data / "PACK.json").read_text())["phones"] == "cmu.dict.gz"
    assert Pronouncer.load(data / "cmu.dict.gz").prons("please") == (("P", "L", "IY", "Z"),)
    rows = read_manifest(data / "train.tsv")
    assert [t for _, t in rows] == TEXTS and all(p.suffix == ".opus" for p, _ in rows)
    assert [v for _, v in read_manifest(data / "train_voices.tsv")] == ["flite:awb", "flite:slt"] * 2
    for (packed, _), (orig, _) in zip(rows, read_manifest(speech_data / "train.tsv")):
        y, rate = read_audio(packed)
        x, orig_rate = read_wav(orig)
        x = resample(x, orig_rate, 8000)
        assert rate == 8000 and abs(y.size - x.size) <= 160          # within a 20 ms frame
        n = min(x.size, y.size)
        a, b = _band_energies(x[:n]), _band_energies(y[:n])
        loud = a[:, 0] > a[:, 0].max() - 8                           # the speech, not the silences
        corr = [np.corrcoef(a[loud, k], b[loud, k])[0, 1] for k in range(4)]
        assert min(corr) > 0.8, corr


def test_a_pack_over_its_limit_is_refused_and_leaves_no_file(speech_data, tmp_path):
    with pytest.raises(DataError, match="over 0.001 MB after 1 of 6 clips"):
        pack(speech_data, tmp_path / "p.tgz", max_mb=0.001)
    assert list(tmp_path.glob("p.tgz*")) == []
    with pytest.raises(DataError, match="neither train.tsv nor heldout.tsv"):
        pack(tmp_path, tmp_path / "q.tgz")
    with pytest.raises(DataError, match="compression level is 0..1"):
        pack(speech_data, tmp_path / "q.tgz", level=1.5)


def test_unpack_refuses_a_tar_that_is_not_a_pack_or_reaches_outside(tmp_path):
    def tar_of(name: str, members: dict[str, bytes]) -> Path:
        path = tmp_path / name
        with tarfile.open(path, "w:gz") as tar:
            for member, data in members.items():
                info = tarfile.TarInfo(member)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        return path

    with pytest.raises(DataError, match="not a data pack"):
        unpack(tar_of("a.tgz", {"x/train.tsv": b""}), tmp_path / "a")
    with pytest.raises(DataError, match="cannot unpack"):
        unpack(tar_of("b.tgz", {"x/PACK.json": b"{}", "../evil.txt": b"!"}), tmp_path / "b")
    assert not (tmp_path / "evil.txt").exists()
    with pytest.raises(DataError, match="cannot unpack"):
        unpack(tmp_path / "missing.tgz", tmp_path / "c")


def test_read_audio_names_a_broken_ogg_file(tmp_path):
    bad = tmp_path / "bad.opus"
    bad.write_bytes(b"OggS not really")
    with pytest.raises(AudioFileError, match="bad.opus"):
        read_audio(bad)


def _tiny(data: Path, run: Path, steps: int) -> TrainConfig:
    """test_stt_train's tiny model, with batches long enough for a flite sentence"""
    return dataclasses.replace(_cfg(data, run, steps), batch_audio_s=4.0)


def test_a_run_on_an_unpacked_pack_trains_and_its_results_travel_small(speech_data, tmp_path):
    pack(speech_data, tmp_path / "p.tgz")
    data = unpack(tmp_path / "p.tgz", tmp_path / "out")
    run = tmp_path / "run"
    res = train(_tiny(data, run, 3))
    assert res["step"] == 3 and res["n"] == 2
    assert "loaded 4 training clips" in (run / "train.log").read_text()
    written = run_results(run, tmp_path / "back")
    assert sorted(written) == ["best/config.json", "best/model.safetensors", "last/config.json",
                               "last/model.safetensors", "last/step.json", "metrics.jsonl", "train.log"]
    assert max(written.values()) < (run / "last.pt").stat().st_size      # no optimiser state
    last = load_stt(tmp_path / "back" / "last").state_dict()
    saved = torch.load(run / "last.pt", weights_only=False)["model"]
    assert all(torch.equal(last[k], v) for k, v in saved.items())
    assert json.loads((tmp_path / "back" / "last" / "step.json").read_text())["step"] == 3
    load_stt(tmp_path / "back" / "best")
    with pytest.raises(Exception, match="not a training run"):
        run_results(tmp_path, tmp_path / "nothing")


def test_the_device_script_trains_from_a_pack_and_leaves_its_results_in_out(speech_data, tmp_path):
    """scripts/device-train-stt as the GPU machine runs it, here on the CPU (DEVICE=cpu)."""
    pack(speech_data, tmp_path / "p.tgz", phones=None)
    out = tmp_path / "OUT"
    env = {**os.environ, "OUT": str(out), "DEVICE": "cpu", "PYTHON": sys.executable,
           "WORK": str(tmp_path / "work"), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([str(ROOT / "scripts" / "device-train-stt"), str(tmp_path / "p.tgz"), "0.5",
                           "--d-model", "32", "--layers", "1", "--batch-s", "4", "--max-steps", "3",
                           "--eval-every", "2", "--warmup", "1"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "unpacked" in proc.stdout and "phones: none" in proc.stdout and "training exit status 0" in proc.stdout
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert files == ["best/config.json", "best/model.safetensors", "last/config.json",
                     "last/model.safetensors", "last/step.json", "metrics.jsonl", "train.log", "train.out"]
    assert len(files) <= 8 and all((out / f).stat().st_size < 16 * 2**20 for f in files)   # what $OUT returns
    assert "training on cpu" in (out / "train.log").read_text()
    assert load_stt(out / "best").config.ssm_config.d_model == 32
