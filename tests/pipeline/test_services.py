"""SphinxSTTService and EspeakTTSService inside real pipecat pipelines (pipecat's run_test)."""

from __future__ import annotations

import numpy as np
import pytest
from pipecat.frames.frames import (
    AggregatedTextFrame,
    Frame,
    InputAudioRawFrame,
    InterimTranscriptionFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    TranscriptionFrame,
    TTSAudioRawFrame,
    TTSSpeakFrame,
    TTSStartedFrame,
    TTSStoppedFrame,
    TTSTextFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams
from pipecat.processors.audio.vad_processor import VADProcessor
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.tests.utils import SleepFrame, run_test

from pipeline.engines.espeak import EspeakEngine
from pipeline.services import EspeakTTSService, SphinxSTTService
from pipeline.vad import make_vad_analyzer


def audio_frames(pcm: np.ndarray, rate_hz: int) -> list[InputAudioRawFrame]:
    step = rate_hz // 50
    return [
        InputAudioRawFrame(audio=pcm[i : i + step].tobytes(), sample_rate=rate_hz, num_channels=1)
        for i in range(0, len(pcm), step)
    ]


def of(frames, cls):
    return [f for f in frames if isinstance(f, cls)]


async def test_stt_streams_partials_and_finalizes_on_vad_stop(flite_speech):
    rate = 16000
    speech = flite_speech("hello how are you", rate)
    silence = np.zeros(rate // 2, np.int16)
    frames = audio_frames(silence, rate)
    frames += audio_frames(speech[: rate // 5], rate)  # the VAD reports a start 0.2 s in
    frames += [VADUserStartedSpeakingFrame(start_secs=0.2)]
    frames += audio_frames(speech[rate // 5 :], rate) + audio_frames(silence, rate)
    # Frames arrive here all at once; a transport paces them in real time, so the decoder is
    # given time to catch up before the stop signal, as it would have.
    frames += [SleepFrame(sleep=0.5), VADUserStoppedSpeakingFrame(stop_secs=0.2), SleepFrame(0.5)]
    stt = SphinxSTTService()
    down, _ = await run_test(
        stt, frames_to_send=frames, pipeline_params=PipelineParams(audio_in_sample_rate=rate)
    )
    finals = of(down, TranscriptionFrame)
    assert len(finals) == 1 and finals[0].finalized
    assert "hello" in finals[0].text and "you" in finals[0].text
    assert of(down, InterimTranscriptionFrame)
    assert not of(down, InputAudioRawFrame)  # the caller's audio stops at the recognizer
    # The final comes after the stop signal, and fast.
    assert down.index(finals[0]) > down.index(of(down, VADUserStoppedSpeakingFrame)[0])
    assert len(stt.final_latencies_s) == 1 and stt.final_latencies_s[0] > 0  # timing: see benchmarks


async def test_stt_behind_a_real_vad_at_phone_rate(flite_speech):
    rate = 8000
    silence = np.zeros(rate, np.int16)
    pcm = np.concatenate([silence, flite_speech("hello how are you", rate), silence])
    vad = VADProcessor(vad_analyzer=make_vad_analyzer("webrtc", rate, min_volume=0.0))
    stt = SphinxSTTService()
    down, _ = await run_test(
        Pipeline([vad, stt]),
        frames_to_send=[*audio_frames(pcm, rate), SleepFrame(sleep=0.5)],
        pipeline_params=PipelineParams(audio_in_sample_rate=rate),
    )
    finals = of(down, TranscriptionFrame)
    assert len(finals) == 1 and "hello" in finals[0].text


async def test_no_transcript_without_speech_signals():
    frames = audio_frames(np.zeros(8000, np.int16), 8000) + [SleepFrame(sleep=0.2)]
    down, _ = await run_test(
        SphinxSTTService(sample_rate=8000),
        frames_to_send=frames,
        pipeline_params=PipelineParams(audio_in_sample_rate=8000),
    )
    assert not of(down, TranscriptionFrame) and not of(down, InterimTranscriptionFrame)


async def test_tts_streams_20ms_frames_with_word_timestamps():
    rate = 8000
    text = "Hello there, how are you today?"
    expected_s = EspeakEngine(sample_rate_hz=rate).synthesize(text).duration_s
    down, _ = await run_test(
        EspeakTTSService(sample_rate=rate), frames_to_send=[TTSSpeakFrame(text), SleepFrame()]
    )
    audio = of(down, TTSAudioRawFrame)
    assert of(down, TTSStartedFrame) and of(down, TTSStoppedFrame)
    assert len(audio) > 20
    assert all(len(f.audio) == rate // 50 * 2 for f in audio[:-1])  # 20 ms each but the last
    assert 0 < len(audio[-1].audio) <= rate // 50 * 2
    assert abs(sum(len(f.audio) for f in audio) / 2 / rate - expected_s) < 0.05
    words = of(down, TTSTextFrame)
    assert [w.text for w in words] == ["Hello", "there", "how", "are", "you", "today"]
    pts = [w.pts for w in words]
    assert all(p for p in pts) and pts == sorted(pts)
    assert down.index(audio[0]) < down.index(words[-1])


class BargeIn(FrameProcessor):
    """Stands in for the user aggregator: interrupts after the first few frames of bot audio."""

    def __init__(self, after_frames: int):
        super().__init__()
        self.after_frames = after_frames
        self.audio_before = 0
        self.audio_after = 0
        self.interrupted = False

    async def process_frame(self, frame: Frame, direction: FrameDirection):
        await super().process_frame(frame, direction)
        if isinstance(frame, TTSAudioRawFrame):
            if self.interrupted:
                self.audio_after += 1
            else:
                self.audio_before += 1
                if self.audio_before == self.after_frames:
                    self.interrupted = True
                    await self.broadcast_interruption()
        await self.push_frame(frame, direction)


async def test_tts_interruption_aborts_synthesis_mid_utterance(monkeypatch):
    """Barge-in must stop the engine itself, not only drop the audio it already made."""
    outcomes: list[bool] = []
    real = EspeakEngine.synthesize_stream

    def recording(self, text, on_chunk, cancel=None):
        outcomes.append(real(self, text, on_chunk, cancel))
        return outcomes[-1]

    monkeypatch.setattr(EspeakEngine, "synthesize_stream", recording)
    long_text = " ".join(["This sentence goes on and on so that it takes a while to speak."] * 40)
    barge_in = BargeIn(after_frames=5)
    down, _ = await run_test(
        Pipeline([EspeakTTSService(sample_rate=8000), barge_in]),
        frames_to_send=[TTSSpeakFrame(long_text), SleepFrame(sleep=1.0)],
    )
    # A frame the TTS pushed just before the interruption may still sit in BargeIn's own queue;
    # the TTS itself pushes nothing after it.
    assert barge_in.interrupted and barge_in.audio_after <= 2
    assert outcomes == [False]  # the engine was aborted, not run to the end of the text
    spoken_s = sum(len(f.audio) for f in of(down, TTSAudioRawFrame)) / 2 / 8000
    assert spoken_s < 1.0  # of about three minutes of text


async def test_tts_phrase_aggregation_cuts_at_commas():
    tokens = ["Well, ", "I think", " that we could,", " maybe", " try again", " tomorrow."]
    frames = [LLMFullResponseStartFrame(), *[LLMTextFrame(t) for t in tokens]]
    frames += [LLMFullResponseEndFrame(), SleepFrame()]
    down, _ = await run_test(
        EspeakTTSService(sample_rate=8000, aggregation="phrase", min_phrase_chars=8, first_phrase_words=0),
        frames_to_send=frames,
    )
    spoken = [f.text for f in of(down, AggregatedTextFrame) if not isinstance(f, TTSTextFrame)]
    assert spoken[:2] == ["Well, I think that we could,", "maybe try again tomorrow."]
    assert of(down, TTSAudioRawFrame)


async def test_tts_phrase_aggregation_speaks_the_first_word_at_once():
    tokens = ["Sure", ", I", " think", " that we could,", " maybe", " try again", " tomorrow."]
    frames = [LLMFullResponseStartFrame(), *[LLMTextFrame(t) for t in tokens], LLMFullResponseEndFrame()]
    frames += [LLMFullResponseStartFrame(), *[LLMTextFrame(t) for t in tokens], LLMFullResponseEndFrame()]
    frames += [SleepFrame()]
    down, _ = await run_test(
        EspeakTTSService(sample_rate=8000, aggregation="phrase", min_phrase_chars=8),
        frames_to_send=frames,
    )
    spoken = [f.text for f in of(down, AggregatedTextFrame) if not isinstance(f, TTSTextFrame)]
    # each response starts with its first word alone, then phrases as before
    once = ["Sure,", "I think that we could,", "maybe try again tomorrow."]
    assert spoken == once + once


async def test_tts_phrase_aggregation_keeps_a_sentence_that_came_whole():
    """Regression: the first-word cut split whole greetings ("Thank" / "you for calling...")."""
    frames = [LLMFullResponseStartFrame(), LLMTextFrame("Thank you for calling. How can I help?"),
              LLMFullResponseEndFrame(), SleepFrame()]
    down, _ = await run_test(EspeakTTSService(sample_rate=8000, aggregation="phrase"), frames_to_send=frames)
    spoken = [f.text for f in of(down, AggregatedTextFrame) if not isinstance(f, TTSTextFrame)]
    assert spoken == ["Thank you for calling.", "How can I help?"]


@pytest.mark.parametrize("stt", ["sphinx", "ssm"])
def test_the_callers_audio_goes_past_the_recognizer_only_for_smart_turn(stt):
    # smart-turn's turn-stop strategy (in the user aggregator) listens to the caller's audio;
    # with the silence timer nothing downstream of the recognizer needs it
    from pipeline.builder import PipelineConfig, _make_stt

    assert _make_stt(PipelineConfig(stt=stt, turn="smart-turn"))._audio_passthrough is True
    assert _make_stt(PipelineConfig(stt=stt, turn="silence"))._audio_passthrough is False
    assert _make_stt(PipelineConfig.stock_pipecat(stt=stt))._audio_passthrough is True
