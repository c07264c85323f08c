"""``parley say`` and the shipped voices: what a user runs to hear a voice, and how one is picked."""

from __future__ import annotations

import io
import json
import wave
from pathlib import Path

import numpy as np
import pytest

from deploy import cli, serve_cli
from pipeline.audio.g711 import ulaw_decode, ulaw_encode
from pipeline.errors import ConfigError
from pipeline.say_cli import say
from pipeline.voices import DEFAULT_VOICE, VOICES, voice_dir
from ssm_engine.tts.synth import TTSVoice

TEXT = "Your order ships on Monday, at 9:30."


def _wav(path: Path) -> tuple[np.ndarray, int]:
    with wave.open(str(path), "rb") as w:
        return np.frombuffer(w.readframes(w.getnframes()), "<i2"), w.getframerate()


@pytest.fixture(autouse=True)
def _quiet_logging(monkeypatch):
    monkeypatch.setattr(cli, "configure_logging", lambda level: None)


def test_parley_say_writes_what_the_voice_streams(tmp_path, capsys):
    out = tmp_path / "reply.wav"
    assert cli.main(["say", TEXT, "--out", str(out)]) == 0
    report = json.loads(capsys.readouterr().out)
    pcm, rate = _wav(out)
    assert rate == 16000 and report["rate_hz"] == 16000 and report["voice"] == DEFAULT_VOICE
    assert report["seconds"] == pytest.approx(len(pcm) / 16000, abs=1e-3)
    assert 0 < report["first_audio_ms"] < report["seconds"] * 1000 and report["rtf"] > 0
    assert [w for w, _ in report["words"]] == ["your", "order", "ships", "on", "monday", "at",
                                                "nine", "thirty"]
    starts = [s for _, s in report["words"]]
    assert starts == sorted(starts) and starts[-1] < report["seconds"]
    # the same samples as the voice synthesising the whole text at once
    whole = TTSVoice.load(voice_dir(DEFAULT_VOICE)).synthesize(TEXT).pcm
    assert np.abs(pcm.astype(np.int32) - (np.clip(whole, -1, 1) * 32767).astype(np.int16)).max() <= 1


def test_the_phone_line_version_is_8_khz_mu_law(tmp_path, capsys, monkeypatch):
    out = tmp_path / "line.wav"
    monkeypatch.setattr("sys.stdin", io.StringIO("One moment, please.\n"))
    assert cli.main(["say", "-", "--out", str(out), "--rate", "8000", "--codec", "mulaw"]) == 0
    report = json.loads(capsys.readouterr().out)
    pcm, rate = _wav(out)
    assert rate == 8000 and report["codec"] == "mulaw"
    assert len(pcm) == pytest.approx(report["seconds"] * 8000, abs=2)
    assert np.array_equal(ulaw_decode(ulaw_encode(pcm)), pcm)          # on mu-law's grid
    assert [w for w, _ in report["words"]] == ["one", "moment", "please"]


@pytest.mark.parametrize("argv, message", [
    (["hi", "--voice", "amy"], "unknown voice 'amy': one of slt, joe, or a voice folder"),
    (["hi", "--voice", "/no/such/voice"], "no SSM voice at /no/such/voice"),
    (["hi", "--codec", "mulaw"], "--codec mulaw is the phone line's"),
    (["  "], "nothing to say: the text is empty"),
    (["!?", ], "nothing to say in '!?'"),
    (["hi", "--pace", "3"], "--pace must be within 0.5..2.0"),
    (["hi", "--question-rise", "20"], "--question-rise must be within 0..12 semitones"),
    (["hi", "--postfilter", "2"], "--postfilter must be within 0..1.0"),
])
def test_mistakes_are_one_line(tmp_path, capsys, argv, message):
    out = tmp_path / "x.wav"
    assert cli.main(["say", *argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_an_unwritable_file_is_refused_before_the_work(tmp_path, capsys):
    assert cli.main(["say", "hi", "--out", str(tmp_path / "nope" / "x.wav")]) == 2
    assert "no folder" in capsys.readouterr().err


def test_voices_by_name_or_folder(tmp_path):
    assert voice_dir("slt") == VOICES["slt"].folder and voice_dir("joe") == VOICES["joe"].folder
    assert voice_dir(str(tmp_path)) == tmp_path and voice_dir("runs/tts/v2/best") == Path("runs/tts/v2/best")
    with pytest.raises(ConfigError, match="unknown voice 'bob'"):
        voice_dir("bob")
    assert {v.gender for v in VOICES.values()} == {"female", "male"}


def test_say_with_a_voice_folder_and_at_8_khz_and_slower(tmp_path):
    result = say("Thank you for calling.", VOICES["slt"].folder, rate_hz=8000)
    assert result["pcm"].dtype == np.int16
    assert len(result["pcm"]) == pytest.approx(result["seconds"] * 8000, abs=2)
    slower = say("Thank you for calling.", VOICES["slt"].folder, rate_hz=8000, pace=1.25)
    assert slower["seconds"] == pytest.approx(1.25 * result["seconds"], rel=0.1)


def test_a_yes_no_question_ends_higher_unless_asked_not_to(tmp_path, capsys):
    question = "Is that the right number?"
    risen, flat = tmp_path / "risen.wav", tmp_path / "flat.wav"
    assert cli.main(["say", question, "--out", str(risen)]) == 0
    assert json.loads(capsys.readouterr().out)["question_rise_st"] == 6.0
    assert cli.main(["say", question, "--out", str(flat), "--question-rise", "0"]) == 0
    a, b = _wav(flat)[0], _wav(risen)[0]
    assert len(a) == len(b)
    differ = np.nonzero(a != b)[0]
    assert differ.size and differ[0] > len(a) // 3       # the end rises, the start is the same
    statement = say("That is the right number.", VOICES["slt"].folder)["pcm"]
    assert np.array_equal(statement, say("That is the right number.", VOICES["slt"].folder,
                                         question_rise_st=0.0)["pcm"])


def test_joe_speaks_with_its_postfilter_unless_asked_not_to_and_slt_without(tmp_path, capsys):
    """The postfilter is a voice's own (its config.json): joe's deepens its envelopes, slt's is 0
    (its teacher's envelopes are sharp already: models/tts-joe's card)."""
    sharp, plain = tmp_path / "sharp.wav", tmp_path / "plain.wav"
    assert cli.main(["say", TEXT, "--voice", "joe", "--out", str(sharp)]) == 0
    said = json.loads(capsys.readouterr().out)
    assert (said["postfilter"], said["postfilter_from"]) == (0.6, 4)    # the tilt left as predicted
    assert cli.main(["say", TEXT, "--voice", "joe", "--out", str(plain), "--postfilter", "0"]) == 0
    assert json.loads(capsys.readouterr().out)["postfilter"] == 0
    a, b = _wav(plain)[0], _wav(sharp)[0]
    assert len(a) == len(b) and not np.array_equal(a, b)        # the same timing, another sound
    assert cli.main(["say", TEXT, "--voice", "slt", "--out", str(plain)]) == 0
    assert json.loads(capsys.readouterr().out)["postfilter"] == 0


def _folder(*argv: str):
    """serve's voice folder for these arguments, the spec loaded as serve loads it."""
    args = cli.build_parser().parse_args(["serve", *argv])
    return serve_cli._voice_folder(args, serve_cli._load_agent_spec(args.agent))


def test_serve_takes_the_voice_from_the_flag_then_the_spec(tmp_path):
    spec = tmp_path / "agent.yaml"
    spec.write_text("name: Ava\ngreeting: Hello.\nvoice: joe\n")
    plain = tmp_path / "plain.yaml"
    plain.write_text("name: Ava\ngreeting: Hello.\n")
    assert _folder("--agent", str(plain)) is None       # the default voice
    assert _folder("--agent", str(spec)) == str(VOICES["joe"].folder)
    assert _folder("--agent", str(spec), "--voice", "slt") == str(VOICES["slt"].folder)
    assert _folder("--agent", str(spec), "--tts-model", str(tmp_path)) == str(tmp_path)
    with pytest.raises(ConfigError, match="give one"):
        _folder("--voice", "slt", "--tts-model", str(tmp_path))
    with pytest.raises(ConfigError, match="unknown voice 'amy'"):
        _folder("--voice", "amy")


@pytest.mark.parametrize("name", list(VOICES))
def test_every_shipped_voice_speaks_and_has_its_card(name, tmp_path, capsys):
    folder = VOICES[name].folder
    card = (folder / "MODEL_CARD.md").read_text()
    assert VOICES[name].gender in card and (folder / "samples").is_dir()
    assert cli.main(["say", "Thank you for calling.", "--voice", name, "--out",
                     str(tmp_path / "t.wav"), "--rate", "8000"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["folder"] == str(folder) and [w for w, _ in report["words"]] == ["thank", "you",
                                                                                    "for", "calling"]
