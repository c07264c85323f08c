"""SSMSTTService inside real pipecat pipelines (run_test), its engine, and `parley eval stt`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from pipecat.frames.frames import (
    InputAudioRawFrame,
    InterimTranscriptionFrame,
    TranscriptionFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.pipeline.worker import PipelineParams
from pipecat.tests.utils import SleepFrame, run_test

from pipeline.audio.wav import write_wav
from pipeline.errors import AudioFormatError, EngineUnavailableError, PipelineError
from pipeline.frames import Hints, RecognitionFrame, RecognitionHintsFrame
from pipeline.engines.ssm_recognizer import DEFAULT_MODEL_DIR, SSMSTTEngine
from pipeline.services.ssm_stt import SSMSTTService
from harness.stt_eval import evaluate, write_hyps
from ssm_engine.stt.decode import cer
from ssm_engine.stt.model import STTConfig, STTModel, save_stt
from ssm_engine.stt.text import VOCAB


def audio_frames(pcm: np.ndarray, rate_hz: int) -> list[InputAudioRawFrame]:
    step = rate_hz // 50
    return [InputAudioRawFrame(audio=pcm[i:i + step].tobytes(), sample_rate=rate_hz,
                               num_channels=1) for i in range(0, len(pcm), step)]


def of(frames, cls):
    return [f for f in frames if isinstance(f, cls)]


def _saying_h() -> STTModel:
    """A tiny untrained model rigged to say "h" on every frame: plumbing tests only."""
    torch.manual_seed(0)
    model = STTModel(STTConfig(n_mels=16, conv_channels=16, ssm=dict(
        d_model=32, n_layers=1, d_state=16, headdim=16, expand=2)))
    with torch.no_grad():
        model.head.weight.zero_()
        model.head.bias.zero_()
        model.head.bias[VOCAB.index("h")] = 5.0
    return model.eval()


pytestmark = pytest.mark.usefixtures("one_torch_thread")   # tests/conftest.py


@pytest.fixture
def engine():
    eng = SSMSTTEngine(_saying_h())
    yield eng
    eng.close()


def _turn(rate: int) -> list:
    rng = np.random.default_rng(0)
    silence = np.zeros(rate // 2, np.int16)
    speech = (rng.standard_normal(rate) * 3000).astype(np.int16)
    frames = audio_frames(silence, rate) + audio_frames(speech[: rate // 5], rate)
    frames += [VADUserStartedSpeakingFrame(start_secs=0.2)]
    frames += audio_frames(speech[rate // 5:], rate) + audio_frames(silence, rate)
    return frames + [SleepFrame(sleep=1.5), VADUserStoppedSpeakingFrame(stop_secs=0.2),
                     SleepFrame(0.3)]


@pytest.mark.parametrize("rate", [8000, 16000])
async def test_partials_then_one_final_after_vad_stop(engine, rate):
    frames = _turn(rate)
    stt = SSMSTTService(engine=engine)
    down, _ = await run_test(stt, frames_to_send=frames,
                             pipeline_params=PipelineParams(audio_in_sample_rate=rate))
    finals = of(down, TranscriptionFrame)
    assert len(finals) == 1 and finals[0].finalized and finals[0].text == "h"
    assert [f.text for f in of(down, InterimTranscriptionFrame)] == ["h"]
    assert not of(down, InputAudioRawFrame)  # the caller's audio stops at the recognizer
    assert down.index(finals[0]) > down.index(of(down, VADUserStoppedSpeakingFrame)[0])
    assert len(stt.final_latencies_s) == 1
    assert engine.runner.open_streams == frozenset()        # the utterance's stream was closed


async def test_no_transcript_without_speech_signals(engine):
    frames = audio_frames(np.zeros(8000, np.int16), 8000) + [SleepFrame(sleep=0.2)]
    down, _ = await run_test(SSMSTTService(engine=engine, sample_rate=8000),
                             frames_to_send=frames,
                             pipeline_params=PipelineParams(audio_in_sample_rate=8000))
    assert not of(down, TranscriptionFrame) and not of(down, InterimTranscriptionFrame)
    assert engine.runner.batches_run == 0                    # nothing was stepped


def test_engine_refuses_bad_rates_and_audio(engine, tmp_path):
    with pytest.raises(AudioFormatError, match="44100"):
        engine.open(44100)
    utt = engine.open(8000)
    with pytest.raises(AudioFormatError, match="NaN"):
        utt.push(np.array([0.0, np.nan], np.float32))
    with pytest.raises(AudioFormatError, match="even byte count"):
        utt.push(b"\x00\x01\x02")
    utt.abort()
    with pytest.raises(EngineUnavailableError, match="parley train stt"):
        SSMSTTEngine(tmp_path / "no-model", decoder="greedy")
    with pytest.raises(EngineUnavailableError, match="parley train stt-lm"):
        SSMSTTEngine(_saying_h(), lm_path=tmp_path / "no-lm.arpa.gz")


def test_engine_stride_and_compile_hear_the_same_as_every_frame():
    # a strided, compiled engine (the serving default) transcribes exactly like the plain one;
    # the rigged model says "h" on every frame, so compare the log-probs of a real stream too
    from ssm_engine.stt.stream import RecognizerStream

    with pytest.raises(PipelineError, match="stride"):
        SSMSTTEngine(_saying_h(), decoder="greedy", stride=0)
    torch.manual_seed(1)
    model = STTModel(STTConfig(n_mels=16, conv_channels=16, ssm=dict(
        d_model=32, n_layers=1, d_state=16, headdim=16, expand=2))).eval()
    plain = SSMSTTEngine(model, decoder="greedy", stride=1, compile=False)
    fast = SSMSTTEngine(model, decoder="greedy", stride=4, compile=True)
    try:
        assert (plain.stride, fast.stride, model.compiled_frames) == (1, 4, 4)
        pcm = (np.random.default_rng(5).standard_normal(8000) * 4000).astype(np.int16)
        assert fast.transcribe(pcm, 8000) == plain.transcribe(pcm, 8000)
        outs = []
        for eng in (plain, fast):
            rs = RecognizerStream(eng.runner, model.config, stride=eng.stride)
            got = [f.result() for i in range(0, 8000, 160) if (f := rs.push(pcm[i:i + 160]))]
            outs.append(torch.cat(got + [rs.finish().result()]))
        torch.testing.assert_close(outs[1], outs[0], atol=1e-4, rtol=1e-4)
    finally:
        plain.close()
        fast.close()


def test_a_phone_head_model_finals_from_both_heads_and_the_baselines_pick_one(tmp_path):
    import shutil

    from ssm_engine.stt.beam import CTCBeamSearch
    from ssm_engine.stt.joint import JointSearch
    from ssm_engine.stt.phone_beam import PhoneBeamSearch
    from ssm_engine.stt.phones import PHONES, Pronouncer

    torch.manual_seed(0)
    model = STTModel(STTConfig(n_mels=16, conv_channels=16, phone_vocab_size=len(PHONES), ssm=dict(
        d_model=32, n_layers=1, d_state=16, headdim=16, expand=2)))
    folder = tmp_path / "model"
    save_stt(model, folder)
    shutil.copyfile(DEFAULT_MODEL_DIR / "lm.arpa.gz", folder / "lm.arpa.gz")
    with pytest.raises(EngineUnavailableError, match="lexicon.dict.gz"):
        SSMSTTEngine(folder, compile=False)
    with pytest.raises(PipelineError, match="phone head"):
        SSMSTTEngine(_saying_h(), decoder="phone-beam", compile=False)
    Pronouncer({"hello": (("HH", "AH", "L", "OW"),), "yes": (("Y", "EH", "S"),)}).write(
        folder / "lexicon.dict.gz", ["hello", "yes", "no"])
    kinds = {"beam": JointSearch, "char-beam": CTCBeamSearch, "phone-beam": PhoneBeamSearch}
    pcm = (np.random.default_rng(3).standard_normal(8000) * 3000).astype(np.int16)
    for decoder, kind in kinds.items():
        eng = SSMSTTEngine(folder, decoder=decoder, compile=False)
        try:
            assert type(eng.beam) is kind
            assert isinstance(eng.transcribe(pcm, 8000), str)
        finally:
            eng.close()


def test_transcribe_16k_and_8k_the_same_way(engine):
    pcm = (np.random.default_rng(1).standard_normal(16000) * 2000).astype(np.int16)
    assert engine.transcribe(pcm, 16000) == "h"
    assert engine.transcribe(pcm[::2], 8000) == "h"


@pytest.mark.parametrize("decoder", ["greedy", "beam"])
def test_eval_reports_the_agreed_keys(tmp_path, decoder):
    save_stt(_saying_h(), tmp_path / "model")
    rng = np.random.default_rng(2)
    lines = []
    for i, text in enumerate(["h", "hello"]):
        write_wav(tmp_path / f"{i}.wav", (rng.standard_normal(8000) * 2000).astype(np.int16), 16000)
        lines.append(f"{i}.wav\t{text}\n")
    (tmp_path / "m.tsv").write_text("".join(lines))
    res = evaluate("ssm", tmp_path / "m.tsv", rate_hz=8000, codec="mulaw",
                   model_dir=str(tmp_path / "model"), decoder=decoder,
                   lm_path=str(DEFAULT_MODEL_DIR / "lm.arpa.gz"))
    assert res.decoder == decoder
    assert res.n == 2 and res.cer == pytest.approx(4 / 6, abs=1e-3) and res.wer == pytest.approx(0.5)
    assert 0 < res.rtf and 0 < res.final_latency_ms_p50 <= res.final_latency_ms_p95
    doc = json.loads(json.dumps(res.__dict__))
    assert {"n", "wer", "cer", "rtf", "final_latency_ms_p50", "final_latency_ms_p95"} <= set(doc)
    # --hyps: every clip, worst first ("hello" heard as "h": one word error of one)
    write_hyps(res, tmp_path / "hyps.tsv")
    head, *rows = (tmp_path / "hyps.tsv").read_text().splitlines()
    assert head.split("\t") == ["path", "voice", "word_errors", "ref_words", "ref", "hyp"]
    assert [r.split("\t")[2:] for r in rows] == [["1", "1", "hello", "h"], ["0", "1", "h", "h"]]
    assert rows[0].split("\t")[0].endswith("1.wav")


@pytest.mark.skipif(not (Path(DEFAULT_MODEL_DIR) / "config.json").exists(),
                    reason="no shipped model in models/stt")
async def test_shipped_model_transcribes_a_training_voice(flite_speech):
    rate = 8000
    text = "my account number is four four one seven"
    speech = flite_speech(text, rate, voice="rms")
    silence = np.zeros(rate // 2, np.int16)
    frames = audio_frames(silence, rate) + [VADUserStartedSpeakingFrame(start_secs=0.2)]
    frames += audio_frames(speech, rate) + audio_frames(silence, rate)
    frames += [SleepFrame(sleep=1.0), VADUserStoppedSpeakingFrame(stop_secs=0.2), SleepFrame(0.5)]
    down, _ = await run_test(SSMSTTService(), frames_to_send=frames,
                             pipeline_params=PipelineParams(audio_in_sample_rate=rate))
    finals = of(down, TranscriptionFrame)
    assert len(finals) == 1
    assert cer([text], [finals[0].text]) < 0.5, finals[0].text


@pytest.mark.skipif(not (Path(DEFAULT_MODEL_DIR) / "config.json").exists(),
                    reason="no shipped model in models/stt")
async def test_hints_reach_the_recogniser_and_the_final_follows_as_a_recognition(flite_speech):
    """The agent's RecognitionHintsFrame stops at the recogniser and shapes the next utterance's
    final; each final is followed by a RecognitionFrame for the agent (Whisper's finals carry no
    confidence: the agent takes them as heard)."""
    rate = 8000
    speech = flite_speech("five five five, zero one two three", rate, voice="rms")
    silence = np.zeros(rate // 2, np.int16)
    frames = [RecognitionHintsFrame(Hints(expect=frozenset({"digits"})))]
    frames += audio_frames(silence, rate) + [VADUserStartedSpeakingFrame(start_secs=0.2)]
    frames += audio_frames(speech, rate) + audio_frames(silence, rate)
    frames += [SleepFrame(sleep=1.0), VADUserStoppedSpeakingFrame(stop_secs=0.2), SleepFrame(0.5)]
    stt = SSMSTTService()
    down, _ = await run_test(stt, frames_to_send=frames,
                             pipeline_params=PipelineParams(audio_in_sample_rate=rate))
    assert not of(down, RecognitionHintsFrame) and stt.hints.expect == {"digits"}
    finals, recs = of(down, TranscriptionFrame), of(down, RecognitionFrame)
    assert len(finals) == 1 and len(recs) == 1
    rec = recs[0].recognition
    assert finals[0].result is rec and rec.text == finals[0].text
    assert rec.text == "five five five zero one two three" and rec.hinted   # a digit string
    assert rec.confidence is None and rec.alternatives == ()
    assert down.index(recs[0]) > down.index(finals[0])


def test_eval_cli_registers_beside_other_commands():
    import argparse

    from harness.stt_eval import register_cli
    from ssm_engine.stt.cli import register_cli as register_train

    parser = argparse.ArgumentParser(prog="parley")
    sub = parser.add_subparsers(dest="command", required=True)
    register_train(sub)
    register_cli(sub)
    args = parser.parse_args(["eval", "stt", "--engine", "pocketsphinx", "--manifest", "m.tsv",
                              "--rate", "16000", "--codec", "none", "--json"])
    assert (args.engine, args.rate, args.codec, args.json) == ("pocketsphinx", 16000, "none", True)
    assert args.stride is None                                   # the engine's default
    assert args.compile == "off"       # the suite sets PARLEY_STT_COMPILE=0; "on" without it
    args = parser.parse_args(["eval", "stt", "--manifest", "m.tsv", "--stride", "1",
                              "--compile", "off"])
    assert (args.stride, args.compile) == (1, "off")
    with pytest.raises(SystemExit):
        parser.parse_args(["eval", "stt", "--manifest", "m.tsv", "--rate", "44100"])


def test_the_recognisers_settings_travel_in_the_pipeline_config():
    """Regression: the decoder, compile and runner were module globals that `parley serve` and
    benchmarks mutated; they are PipelineConfig fields now, and each setting has its own shared
    engine, so a service asks for exactly what the server pre-warmed."""
    from pipeline.builder import PipelineConfig, _make_stt

    with pytest.raises(PipelineError, match="stt_decoder"):
        PipelineConfig(stt_decoder="viterbi")
    with pytest.raises(PipelineError, match="stt_runner"):
        PipelineConfig(stt_runner="gpu")
    stt = _make_stt(PipelineConfig(stt="ssm", stt_decoder="greedy", stt_runner="thread"))
    assert (stt.backend.decoder, stt.backend.compile, stt.backend.runner) == ("greedy", False, "thread")
    greedy = SSMSTTEngine.shared(DEFAULT_MODEL_DIR, "greedy")
    try:
        assert SSMSTTEngine.shared(DEFAULT_MODEL_DIR, "greedy", compile=False, runner="thread") is greedy
        assert (DEFAULT_MODEL_DIR.resolve(), "greedy", False, "thread") in SSMSTTEngine._shared
        assert greedy.decoder == "greedy" and greedy.model.compiled_frames in (0, None)
    finally:
        SSMSTTEngine._shared.pop((DEFAULT_MODEL_DIR.resolve(), "greedy", False, "thread"), None)
        greedy.close()
