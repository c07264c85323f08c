"""The teacher data set: sentence choice, files and manifests, resume."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ssm_engine.data.audio import read_wav
from ssm_engine.tts import phonemize
from ssm_engine.tts.align import HOP
from ssm_engine.tts.dataset import DatasetConfig, generate, merge, pick_sentences
from ssm_engine.tts.errors import TTSError
from ssm_engine.tts.train import load_split
from ssm_engine.tts.sentences import AgentSentences
from ssm_engine.tts.teacher import festival_available
from ssm_engine.errors import ConfigError

missing = festival_available()
needs_festival = pytest.mark.skipif(missing is not None, reason=str(missing))


def test_sentences_are_seeded() -> None:
    a, b = AgentSentences(3), AgentSentences(3)
    assert [a.sentence() for _ in range(20)] == [b.sentence() for _ in range(20)]


def test_pick_sentences_distinct_and_heldout_apart() -> None:
    cfg = DatasetConfig(n_train=150, n_heldout=30, seed=5)
    train, heldout = pick_sentences(cfg)
    assert (len(train), len(heldout)) == (150, 30)
    assert pick_sentences(cfg) == (train, heldout)

    def words(text: str) -> tuple[str | None, ...]:
        return tuple(t.word for t in phonemize(text) if t.word_index >= 0)

    keys = [words(t) for t in train + heldout]
    assert len(set(keys)) == len(keys)
    assert all(3 <= len({t.word_index for t in phonemize(x) if t.word_index >= 0}) <= 25
               for x in train + heldout)


@needs_festival
def test_generate_writes_a_consistent_data_set_and_resumes(tmp_path: Path) -> None:
    cfg = DatasetConfig(out_dir=str(tmp_path), n_train=3, n_heldout=2, workers=1, seed=2,
                        progress=False)
    summary = generate(cfg)
    assert summary["failed"] == 0
    assert not (tmp_path / ".festival").exists()
    assert summary["splits"]["train"]["utterances"] == 3
    heldout_txt = (tmp_path / "heldout.txt").read_text().splitlines()
    assert len(heldout_txt) == 2
    for split, n in (("train", 3), ("heldout", 2)):
        lines = [json.loads(x) for x in (tmp_path / f"{split}.jsonl").read_text().splitlines()]
        assert len(lines) == n
        for d in lines:
            assert set(d) == {"id", "wav", "text", "tokens", "words", "durations", "teacher"}
            assert d["teacher"] == "festival"
            audio, rate = read_wav(tmp_path / d["wav"])
            assert rate == 16_000 and len(audio) == sum(d["durations"]) * HOP
            tokens = phonemize(d["text"])
            assert d["tokens"] == [[t.symbol, t.stress, t.position, t.word_index]
                                   for t in tokens]
            assert len(d["durations"]) == len(tokens)
            assert d["words"][tokens[0].word_index] == tokens[0].word
        if split == "heldout":
            assert [d["text"] for d in lines] == heldout_txt

    # resume: finished utterances are skipped; a stale one (front end changed) is redone
    wav0 = tmp_path / "wav" / "tr00000.wav"
    meta1 = tmp_path / "meta" / "tr00001.json"
    stamp0 = wav0.stat().st_mtime_ns
    stale = json.loads(meta1.read_text())
    stale["tokens"][0][1] = 2
    meta1.write_text(json.dumps(stale) + "\n")
    (tmp_path / "wav" / "tr00002.wav").unlink()
    generate(cfg)
    assert wav0.stat().st_mtime_ns == stamp0
    assert json.loads(meta1.read_text())["tokens"] != stale["tokens"]
    assert (tmp_path / "wav" / "tr00002.wav").exists()


@needs_festival
def test_merge_keeps_heldout_apart_and_training_reads_it(tmp_path: Path) -> None:
    a = tmp_path / "a"
    generate(DatasetConfig(out_dir=str(a), n_train=3, n_heldout=2, workers=1, seed=2, progress=False))
    load_split(a, "train")                     # caches a's features, which the merge links
    b = tmp_path / "b"
    shutil.copytree(a, b)
    heldout_a = [json.loads(x) for x in (a / "heldout.jsonl").read_text().splitlines()]
    train_b = [json.loads(x) for x in (b / "train.jsonl").read_text().splitlines()]
    train_b[0]["text"] = heldout_a[1]["text"].upper()      # another set's held-out sentence
    train_b[1]["text"] = "A sentence only the second set has."
    (b / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in train_b))
    (b / "heldout.jsonl").write_text("")

    out = tmp_path / "ab"
    summary = merge(out, [a, b])
    assert summary["splits"]["train"]["utterances"] == 4
    assert summary["splits"]["heldout"]["utterances"] == 2
    assert summary["dropped"] == {"heldout_sentence": 1, "repeated_sentence": 1}
    assert summary["config"]["teacher"] == "festival"     # what export's card reads
    clips = load_split(out, "train")
    assert [c.id for c in clips] == ["a-tr00000", "a-tr00001", "a-tr00002", "b-tr00001"]
    assert clips[3].text == "A sentence only the second set has."
    assert (out / "feats" / "a-tr00000.npy").is_symlink()
    assert len(clips[3].feats) == sum(train_b[1]["durations"])
    assert [c.id for c in load_split(out, "heldout")] == ["a-ho0000", "a-ho0001"]

    with pytest.raises(TTSError, match="at least two"):
        merge(tmp_path / "x", [a])
    with pytest.raises(TTSError, match="cannot be one of its sources"):
        merge(a, [a, b])
    with pytest.raises(TTSError, match="holds a data set of its own"):
        merge(b, [a, out])                     # b was made by generate, not by a merge
    assert merge(out, [a, b])["splits"] == summary["splits"]     # a merge again is fine
    summary_b = json.loads((b / "summary.json").read_text())
    (b / "summary.json").write_text(json.dumps(summary_b | {"config": {"teacher": "piper:joe"},
                                                              "teacher": "another voice"}))
    with pytest.raises(TTSError, match="different teachers"):
        merge(tmp_path / "x", [a, b])


def test_config_validates() -> None:
    with pytest.raises(ConfigError):
        DatasetConfig(workers=0)
    with pytest.raises(ConfigError):
        DatasetConfig(n_train=-1)
    with pytest.raises(ConfigError, match="unknown teacher 'piper:amy'"):
        DatasetConfig(teacher="piper:amy")


class _Sampler:
    """Stands in for pocketsphinx's trigram sampler: a few fixed English sentences."""

    SENTENCES = ("the weather was lovely over the weekend", "we walked along the river together",
                 "my sister bought a new bicycle yesterday")

    def sentence(self, rng) -> str:
        return rng.choice(self.SENTENCES)


def test_broad_sentences_replace_a_share_of_the_training_ones_only() -> None:
    plain = DatasetConfig(n_train=200, n_heldout=20, seed=7)
    broad = DatasetConfig(n_train=200, n_heldout=20, seed=7, broad=0.5, broad_sampler=_Sampler())
    train0, held0 = pick_sentences(plain)
    train, held = pick_sentences(broad)
    assert held == held0                              # the held-out sentences stay the agent's
    assert pick_sentences(broad) == (train, held)     # seeded
    agent = set(train0) | {AgentSentences(7).sentence() for _ in range(2000)}
    others = [t for t in train if t not in agent]
    assert 60 <= len(others) <= 140                   # about half, drawn anew
    sampled = {s.capitalize() + "." for s in _Sampler.SENTENCES}
    assert sampled & set(others)                      # conversational English is among them
    assert all(t[0].isupper() and t.endswith(".") for t in others)
    assert len(set(train)) == len(train)


def test_broad_needs_a_sampler_and_a_share() -> None:
    with pytest.raises(ConfigError, match="needs broad_sampler"):
        DatasetConfig(broad=0.3)
    with pytest.raises(ConfigError, match=r"in \[0, 1\]"):
        DatasetConfig(broad=1.5, broad_sampler=_Sampler())


@needs_festival
def test_a_broad_data_set_says_what_it_sampled(tmp_path: Path) -> None:
    cfg = DatasetConfig(out_dir=str(tmp_path), n_train=2, n_heldout=0, workers=1, seed=3,
                        progress=False, broad=1.0, broad_sampler=_Sampler(), broad_source="fixed")
    summary = generate(cfg)
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert saved["config"]["broad"] == 1.0 and saved["config"]["broad_source"] == "fixed"
    assert "broad_sampler" not in saved["config"]
    assert summary["splits"]["train"]["utterances"] == 2
