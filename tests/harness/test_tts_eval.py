"""``parley eval tts`` end to end on a few sentences: real engines, real judges."""

from __future__ import annotations

import json

import numpy as np
import pytest

from deploy import cli
from pipeline.errors import PipelineError
from harness.tts_eval import evaluate, reference_text, teacher_clips
from ssm_engine.tts.piper_teacher import piper_available
from ssm_engine.tts.teacher import festival_available

from tests.pipeline.test_ssm_tts import random_voice_dir

KEYS = {"n", "ttfa_ms_p50", "ttfa_ms_p95", "ttfa_ms_p99", "rtf", "asr_wer", "concurrency",
        "ttfa_ms_concurrent_p50", "ttfa_ms_concurrent_p95", "ttfa_ms_concurrent_p99",
        "concurrent_streams_realtime", "teacher_asr_wer"}


@pytest.fixture
def sentences(tmp_path):
    path = tmp_path / "sentences.txt"
    path.write_text("Your order ships on Tuesday.\n\nThank you for calling, how can I help?\n")
    return path


@pytest.mark.parametrize("compile", ["off", "on"])
def test_eval_tts_of_the_ssm_voice_with_the_pocketsphinx_judge(tmp_path, sentences, capsys,
                                                               monkeypatch, compile):
    """``--compile on`` measures the voice as ``parley serve`` runs it (its lone-stream steps
    compiled); the suite's default is off (PARLEY_TTS_COMPILE=0, tests/conftest.py)."""
    from ssm_engine.tts.synth import TTSVoice

    monkeypatch.setattr(cli, "configure_logging", lambda level: None)  # keep pytest's logging
    compiled: list[bool] = []
    real = TTSVoice.compile_steps
    monkeypatch.setattr(TTSVoice, "compile_steps", lambda self: compiled.append(True) or real(self))
    voice = random_voice_dir(tmp_path / "voice", frames_per_phone=4)
    assert cli.main(["eval", "tts", "--engine", "ssm", "--model", str(voice), "--sentences",
                   str(sentences), "--judge", "pocketsphinx", "--concurrency", "2", "--json",
                   *(["--compile", "on"] if compile == "on" else [])]) == 0
    assert compiled == ([True] if compile == "on" else [])
    doc = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert KEYS <= set(doc) and doc["n"] == 2 and doc["engine"] == "ssm"
    assert 0 < doc["ttfa_ms_p50"] <= doc["ttfa_ms_p95"] <= doc["ttfa_ms_p99"]
    assert 0 < doc["ttfa_ms_concurrent_p50"] <= doc["ttfa_ms_concurrent_p99"]
    assert doc["rtf"] > 0 and doc["audio_s"] > 0.5 and doc["teacher_asr_wer"] is None
    # an untrained voice babbles: the judge hears (almost) none of the words
    assert doc["asr_wer"] > 0.5
    assert doc["examples"][0]["ref"] == "your order ships on tuesday"


@pytest.mark.skipif(festival_available() is not None, reason=str(festival_available()))
def test_eval_tts_of_espeak_with_the_whisper_judge_beside_the_teacher(sentences):
    res = evaluate("espeak", sentences, judge="whisper", concurrency=2, teacher=True)
    assert res.n == 2 and res.judge == "whisper"
    # Whisper understands espeak-ng on the phone channel (FACTS: 31-41 % WER over many sentences)
    # and the festival teacher better still (FACTS: ~3 %)
    assert res.asr_wer < 0.5, res.examples
    assert res.teacher_asr_wer is not None and res.teacher_asr_wer < 0.25
    assert res.ttfa_ms_p99 > 0 and 0 < res.rtf < 1


@pytest.mark.skipif(piper_available() is not None, reason=str(piper_available()))
def test_the_piper_teacher_is_the_yardstick_for_joe(sentences):
    """joe's teacher is Piper fed our phones; Whisper hears it nearly perfectly on the line."""
    res = evaluate("espeak", sentences, judge="whisper", concurrency=2, teacher="piper:joe")
    assert res.teacher_asr_wer is not None and res.teacher_asr_wer < 0.2
    clips = teacher_clips(["One moment, please."], 8000, "mulaw", "piper:joe")
    assert len(clips) == 1 and clips[0].dtype == np.int16 and 0.4 < len(clips[0]) / 8000 < 3


def test_the_reference_is_what_the_voice_was_asked_to_say():
    """Regression guard: scored against cardinals ("seven hundred nineteen ..."), every phone
    number the voice read correctly digit by digit counted as several wrong words."""
    text = "Call 719-032-7846 by July 1st."
    assert reference_text(text, "spoken") == (
        "call seven one nine zero three two seven eight four six by july first")
    assert reference_text(text, "written").startswith("call seven hundred nineteen")


def test_eval_tts_rejects_what_it_cannot_run(tmp_path, sentences):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n \n")
    with pytest.raises(PipelineError, match="no sentences"):
        evaluate("espeak", empty, judge="pocketsphinx")
    with pytest.raises(PipelineError, match="cannot read"):
        evaluate("espeak", tmp_path / "missing.txt", judge="pocketsphinx")
    with pytest.raises(PipelineError, match="unknown judge"):
        evaluate("espeak", sentences, judge="ssm")  # never parley's own recognizer
    with pytest.raises(PipelineError, match="no SSM voice"):
        evaluate("ssm", sentences, judge="pocketsphinx", model_dir=str(tmp_path / "nope"))
