"""Recorded people to train on (``parley data people``): each game's lines found with their own
words, in file trees and archives laid out like the Debian packages', then judged and written."""

from __future__ import annotations

import io
import json
import struct
import zipfile
from functools import partial

import numpy as np
import pytest
import soundfile

from ssm_engine.data.errors import DataError
from ssm_engine.data.human import SOURCES as DEV_SOURCES
from ssm_engine.data.human_train import (
    PACKAGES,
    TRAIN_SOURCES,
    TrainClip,
    build_human_train,
    dog_lines,
    drascula_strings,
    find_train_clips,
    qtbl_entries,
    word_errors,
)
from ssm_engine.data.manifest import read_manifest


def _tone(seconds: float, rate: int, f_hz: float = 220.0) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (0.3 * np.sin(2 * np.pi * f_hz * t)).astype(np.float32)


def _wav_bytes(x: np.ndarray, rate: int, fmt: str = "WAV") -> bytes:
    buf = io.BytesIO()
    soundfile.write(buf, x, rate, format=fmt, **({"subtype": "PCM_16"} if fmt == "WAV" else {}))
    return buf.getvalue()


# --- Drascula: drascula.dat's string tables, 8-bit speech files named by table and line -------

def _string_block(strings: list[str]) -> bytes:
    """One language's block laid out as drascula.dat's reader walks it: the first string (always
    empty) at 0; before each next string, two bytes back from the previous one's start, the
    distance between the two starts."""
    assert strings[0] == ""
    block = bytearray(4)                                    # "" at 0, the first distance at 2
    prev = 4
    for s in strings[1:]:
        block += b"\0\0"                                    # where the next distance goes
        start = len(block)
        struct.pack_into(">H", block, prev - 2, start - prev)
        block += s.encode("latin-1") + b"\0"
        prev = start
    return bytes(block)


def _drascula_dat(tables: dict[str, list[str]]) -> bytes:
    out = bytearray(b"DRASCULA" + bytes([6]))
    for _ in range(13):                                     # the fixed tables, empty
        out += struct.pack(">H", 0)
    out += struct.pack(">H", 2)                             # two languages
    names = ("text", "textd", "textb", "textbj", "texte", "texti", "textl", "textp", "textt",
             "textvb", "textsys", "texthis", "textverbs", "textmisc", "textd1")
    for name in names:
        strings = tables.get(name, ["", "x"])
        out += struct.pack(">H", len(strings))
        for lang in range(2):
            block = _string_block(strings if lang == 0 else [""] + ["otra"] * (len(strings) - 1))
            out += struct.pack(">H", len(block)) + block
    return bytes(out)


def test_drascula_strings_reads_each_table_in_english():
    dat = _drascula_dat({"text": ["", "yes that's done", "it's not unusual"],
                         "textb": ["", "give me a scotch on the rocks"]})
    tables = drascula_strings(dat)
    assert tables["text"] == ["", "yes that's done", "it's not unusual"]
    assert tables["textb"] == ["", "give me a scotch on the rocks"]
    with pytest.raises(DataError, match="not a DRASCULA"):
        drascula_strings(b"NOTDRASC" + dat[8:])


def _drascula_tree(root):
    folder = root / "drascula/usr/share/scummvm/drascula/en"
    folder.mkdir(parents=True)
    (folder / "drascula.dat").write_bytes(_drascula_dat(
        {"text": ["", "yes that's done", "it's not unusual"],
         "textb": ["", "GIVE ME A SCOTCH ON THE ROCKS!!"]}))
    u8 = (np.clip(_tone(1.0, 11025), -1, 1) * 127 + 128).astype(np.uint8)
    for name in ("1", "2", "B1", "B7", "ZZ3", "music"):     # B7: no such line; ZZ, music: no table
        (folder / f"{name}.ALS").write_bytes(u8.tobytes())


def test_drascula_lines_carry_their_table_words_and_speaker(tmp_path):
    _drascula_tree(tmp_path)
    clips = find_train_clips(tmp_path, root=tmp_path / "nothing")
    assert [(c.key, c.text, c.speaker) for c in clips] == [
        ("drascula/1", "yes that's done", "drascula:hero"),
        ("drascula/2", "it's not unusual", "drascula:hero"),
        ("drascula/B1", "give me a scotch on the rocks", "drascula:B")]
    x, rate = clips[0].load()
    assert rate == 11025 and x.size == 11025 and 0.25 < np.abs(x).max() <= 1.0


# --- Flight of the Amazon Queen: a QTBL archive, dialogue (.DOG) lines and their speech -------

def _dog(talk: int, joe: list[tuple[int, str]], person: list[tuple[int, str]],
         person2: str = "", joe2: str = "") -> bytes:
    d = bytearray(32)                                       # the header; no levels
    struct.pack_into(">hhhh", d, 0, 0, 0, talk, len(joe))
    struct.pack_into(">h", d, 8, len(person))

    def lines(items):
        for head, s in items:
            d.extend(b"\0\0" + struct.pack(">h", head) + bytes([len(s)]) + s.encode("cp437"))
            while len(d) % 4:
                d.append(0)

    lines(joe)
    struct.pack_into(">H", d, 22, len(d))
    lines(person)
    struct.pack_into(">H", d, 26, len(d))
    for s in (person2, joe2):
        d.extend(bytes([len(s)]) + s.encode("cp437"))
        while s and len(d) % 2:
            d.append(0)
    return b"\0" * 20 + bytes(d)


def _qtbl(entries: dict[str, bytes]) -> bytes:
    head = bytearray(b"QTBL" + b"\0" * 8 + b"\0" + struct.pack(">H", len(entries)))
    toc_size = 21 * len(entries)
    off = len(head) + toc_size
    body = bytearray()
    for name, data in entries.items():
        head += name.encode().ljust(12, b"\0") + b"\1" + struct.pack(">II", off + len(body),
                                                                    len(data))
        body += data
    return bytes(head + body)


def test_dog_lines_are_named_as_the_engine_names_its_speech():
    dog = _dog(2, joe=[(0, "Hello there.*ABGood day."), (0x1a, "Bye.")],
               person=[(0x1a, "Chunga warunga.")], person2="Go away!", joe2="")
    assert dog_lines(dog) == {"02SSSSJ1": "Hello there.", "02SSSSJ2": "Good day.",
                              "02001AJ1": "Bye.", "02001AP1": "Chunga warunga.",
                              "02XXXXP1": "Go away!"}


def test_fotaq_lines_come_from_the_archive_with_joe_told_apart(tmp_path):
    dog = _dog(2, joe=[(0, "Hello there.")], person=[(0x1a, "Chunga warunga.")])
    speech = _wav_bytes(_tone(1.0, 11025), 11025)
    archive = _qtbl({"APE.DOG": dog, "02SSSSJ1.SB": speech, "02001AP1.SB": speech,
                     "02XXXXJ1.SB": speech})                # a speech file with no line: skipped
    where = tmp_path / "flight-of-the-amazon-queen/usr/share/scummvm/flight-of-the-amazon-queen"
    where.mkdir(parents=True)
    (where / "queen.1c").write_bytes(archive)
    assert qtbl_entries(archive)["APE.DOG"][1] == len(dog)
    clips = find_train_clips(tmp_path, root=tmp_path / "nothing")
    assert [(c.key, c.text, c.speaker) for c in clips] == [
        ("fotaq/02001AP1", "chunga warunga", "fotaq:ape"),
        ("fotaq/02SSSSJ1", "hello there", "fotaq:joe")]
    x, rate = clips[1].load()
    assert rate == 11025 and x.size == 11025
    with pytest.raises(DataError, match="QTBL"):
        qtbl_entries(b"ZZZZ" + archive[4:])


# --- Warzone 2100: a zip's spoken messages, their words in the tutorial and audio.cfg ---------

def test_warzone_messages_take_the_tutorial_and_audio_cfg_words(tmp_path):
    where = tmp_path / "warzone2100-data/usr/share/games/warzone2100"
    where.mkdir(parents=True)
    ogg = _wav_bytes(_tone(1.0, 22050), 22050, "OGG")
    with zipfile.ZipFile(where / "base.wz", "w") as z:
        z.writestr("script/tutorial.js", '{ "audio": "tut1.ogg", "message": _("In this '
                   'training session you\'ll learn"), },\n')
        z.writestr("audio/audio.cfg", 'audio "pcv334.ogg" 0 100 /* Design Completed */\n'
                   'audio "boom.ogg" 0 100 /* an explosion */\n'
                   'audio "gone.ogg" 0 100 /* not in the archive */\n')
        z.writestr("audio/tutorial/tut1.ogg", ogg)
        z.writestr("audio/voice/pcv334.ogg", ogg)
        z.writestr("audio/sfx/boom.ogg", ogg)
    clips = find_train_clips(tmp_path, root=tmp_path / "nothing")
    assert [(c.key, c.text, c.speaker) for c in clips] == [
        ("warzone/tutorial/tut1.ogg", "in this training session you'll learn", "warzone:tutorial"),
        ("warzone/voice/pcv334.ogg", "design completed", "warzone:voice")]
    assert clips[0].load()[1] == 22050


def test_missing_packages_give_no_clips_and_are_named(tmp_path, caplog):
    assert find_train_clips(tmp_path, root=tmp_path) == []
    assert "install-human-train" in caplog.text


def test_no_training_source_is_a_development_set_source():
    dev_packages = " ".join(s.package for s in DEV_SOURCES)
    assert {s.name for s in TRAIN_SOURCES} == set(PACKAGES)
    for package in PACKAGES.values():
        assert package not in dev_packages
    assert not {s.name for s in TRAIN_SOURCES} & {s.name for s in DEV_SOURCES}


# --- judging and writing ------------------------------------------------------------------

def test_word_errors_counts_edits_against_the_reference():
    assert word_errors("there is nothing special", "there's nothing special") == (2, 4)
    assert word_errors("yes that's done", "yes that's done") == (0, 3)
    assert word_errors("hi", "") == (1, 1)


def _tone_11k(seconds: float, f_hz: float) -> tuple[np.ndarray, int]:
    return _tone(seconds, 11025, f_hz), 11025


def _clip(key: str, text: str, seconds: float = 1.0, f_hz: float = 220.0) -> TrainClip:
    return TrainClip(key, text, f"game:{key[0]}", partial(_tone_11k, seconds, f_hz))


def _judge_by_pitch():
    """A judge that 'hears' the words from the tone: 220 Hz lines are heard right, 440 Hz ones as
    something else (the game's text is not what was said)."""
    def judge(x, rate):
        spec = np.abs(np.fft.rfft(x))
        f = np.argmax(spec) * rate / x.size
        return "right words" if f < 330 else "something else entirely"
    return judge


def test_build_keeps_only_what_the_judge_hears_and_writes_copies(tmp_path):
    clips = [_clip("a1", "right words"), _clip("b1", "right words", f_hz=440.0),
             _clip("a2", "right words", seconds=0.2), _clip("a3", "right words here")]
    out = tmp_path / "people"
    summary = build_human_train(out, clips, copies=2, judge=_judge_by_pitch, progress=False)
    rows = read_manifest(out / "train.tsv")
    assert [t for _, t in rows] == ["right words"] * 2 + ["right words here"] * 2
    assert summary["verdicts"] == {"kept": 2, "judge": 1, "length": 1}
    assert summary["splits"]["train"]["utterances"] == 4
    assert set(summary["splits"]["train"]["hours_per_voice"]) == {"human:game:a"}
    assert read_manifest(out / "heldout.tsv") == []
    judged = (out / "judged.tsv").read_text().splitlines()
    assert judged[0].split("\t") == ["key", "speaker", "seconds", "words", "judge", "wer",
                                     "verdict"]
    by_key = {line.split("\t")[0]: line.split("\t") for line in judged[1:]}
    assert by_key["b1"][4:] == ["something else entirely", "1.500", "judge"]
    assert by_key["a3"][4:] == ["right words", "0.333", "kept"]
    assert by_key["a2"][6] == "length"
    x, rate = soundfile.read(rows[0][0])
    assert rate == 8000 and 0 < np.abs(x).max() <= 1.0
    assert json.loads((out / "summary.json").read_text())["speakers"] == 1


def test_build_is_the_same_whatever_the_workers(tmp_path):
    clips = [_clip(f"a{i}", "right words", seconds=0.5 + 0.1 * i) for i in range(5)]
    build_human_train(tmp_path / "one", clips, copies=2, seed=3, progress=False)
    build_human_train(tmp_path / "two", clips, copies=2, seed=3, workers=2, progress=False)
    one = read_manifest(tmp_path / "one/train.tsv")
    two = read_manifest(tmp_path / "two/train.tsv")
    assert [p.name for p, _ in one] == [p.name for p, _ in two]
    for (p, _), (q, _) in zip(one, two):
        assert np.array_equal(soundfile.read(p)[0], soundfile.read(q)[0])


def test_build_refuses_no_copies(tmp_path):
    with pytest.raises(DataError, match="copies"):
        build_human_train(tmp_path, [_clip("a", "x")], copies=0, progress=False)
