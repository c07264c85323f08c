"""BatchedSileroVADAnalyzer: many calls' Silero windows in one ONNX run, scoring exactly as each
call's own model would (pipecat's stock SileroVADAnalyzer, batch 1, on a session of its own)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from pipecat.audio.vad.silero import SileroVADAnalyzer
from pipecat.audio.vad.vad_analyzer import VADState
from pipecat.frames.frames import InputAudioRawFrame, VADUserStartedSpeakingFrame, VADUserStoppedSpeakingFrame
from pipecat.pipeline.worker import PipelineParams
from pipecat.processors.audio.vad_processor import VADProcessor
from pipecat.tests.utils import SleepFrame, run_test

from pipeline.errors import AudioFormatError, ConfigError
from pipeline.vad import BatchedSileroVADAnalyzer, InlineSileroVADAnalyzer, make_vad_analyzer
from pipeline.vad_batch import SileroBatcher

TEXTS = ["hello, how are you today?", "my order has not arrived yet", "yes", "could you call me back tomorrow"]


class Recorded:
    """An analyzer fed 20 ms frames; the confidence of every window and the state after every frame.

    Silero's model resets (pipecat's ``_maybe_reset_model``) see each confidence, so the hook
    records them on the batched and the stock analyzer alike."""

    def __init__(self, analyzer, pcm: np.ndarray, rate_hz: int) -> None:
        self.analyzer, self.rate_hz = analyzer, rate_hz
        self.frames = [pcm[i : i + rate_hz // 50].tobytes() for i in range(0, len(pcm), rate_hz // 50)]
        self.scores: list[float] = []
        self.states: list[VADState] = []
        analyzer.set_sample_rate(rate_hz)
        reset = analyzer._maybe_reset_model
        analyzer._maybe_reset_model = lambda p: (self.scores.append(float(p)), reset(p))

    async def feed(self, frames: int | None = None) -> None:
        for frame in self.frames[len(self.states) : frames]:
            self.states.append(await self.analyzer.analyze_audio(frame))

    def reference(self) -> Recorded:
        """The same audio through stock pipecat, synchronously, one window per model run."""
        ref = Recorded(SileroVADAnalyzer(sample_rate=self.rate_hz), np.zeros(0, np.int16), self.rate_hz)
        for frame in self.frames:
            ref.states.append(ref.analyzer._run_analyzer(frame))
        return ref


def speech_calls(flite_speech, rate_hz: int, n: int) -> list[np.ndarray]:
    """n calls: speech at different offsets, with silence long enough for the model's resets."""
    calls = []
    for k in range(n):
        speech = flite_speech(TEXTS[k % len(TEXTS)], rate_hz, voice=("slt", "kal")[k % 2])
        lead, tail = np.zeros(int(rate_hz * 0.3 * (k + 1)), np.int16), np.zeros(rate_hz * 3, np.int16)
        calls.append(np.concatenate([lead, speech, tail, speech, tail[: rate_hz // 2]]))
    return calls


def assert_same(got: Recorded, ref: Recorded) -> None:
    assert len(got.scores) == len(ref.scores) > 0
    np.testing.assert_allclose(got.scores, ref.scores, rtol=0, atol=1e-5)
    assert got.states == ref.states


@pytest.mark.parametrize("dispatch", ["loop", "thread"])
async def test_interleaved_calls_score_as_each_alone(dispatch, flite_speech):
    calls = [Recorded(make_vad_analyzer("silero", 8000, silero_dispatch=dispatch), pcm, 8000)
             for pcm in speech_calls(flite_speech, 8000, 4)]
    await asyncio.gather(*(call.feed() for call in calls))
    for call in calls:
        assert_same(call, call.reference())
        assert max(call.scores) > 0.9 and VADState.SPEAKING in call.states  # speech heard: teeth
    batcher = calls[0].analyzer._batcher
    assert all(call.analyzer._batcher is batcher for call in calls)
    assert batcher.windows >= 2.5 * batcher.batches  # the calls really shared runs


def test_default_silero_is_batched_and_inline_stays_selectable():
    assert type(make_vad_analyzer("silero", 8000)) is BatchedSileroVADAnalyzer
    assert type(make_vad_analyzer("silero", 8000, silero_dispatch="inline")) is InlineSileroVADAnalyzer
    with pytest.raises(ConfigError):
        make_vad_analyzer("silero", 8000, silero_dispatch="gpu")  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        make_vad_analyzer("silero", 8000, silero_gather_ms=-1.0)


@pytest.mark.parametrize("dispatch", ["loop", "thread"])
async def test_a_reset_mid_stream_leaves_the_other_calls_alone(dispatch, flite_speech):
    calls = [Recorded(make_vad_analyzer("silero", 8000, silero_dispatch=dispatch), pcm, 8000)
             for pcm in speech_calls(flite_speech, 8000, 3)]
    half = len(calls[0].frames) // 2
    await asyncio.gather(*(call.feed(half) for call in calls))
    calls[0].analyzer._model.reset_states()  # as Silero's periodic reset does, out of turn
    await asyncio.gather(*(call.feed() for call in calls))
    for call in calls[1:]:
        assert_same(call, call.reference())
    ref = calls[0].reference()  # the reset call equals its reference reset at the same frame
    ref0 = Recorded(SileroVADAnalyzer(sample_rate=8000), np.zeros(0, np.int16), 8000)
    for i, frame in enumerate(calls[0].frames):
        if i == half:
            ref0.analyzer._model.reset_states()
        ref0.states.append(ref0.analyzer._run_analyzer(frame))
    assert_same(calls[0], ref0)
    assert not np.allclose(ref0.scores, ref.scores)  # and the reset did change its scores


async def test_a_reset_while_the_window_is_in_flight_keeps_the_fresh_state(flite_speech):
    """A batch on the thread must not write its stale state over a reset that came meanwhile."""
    pcm = speech_calls(flite_speech, 8000, 1)[0]
    analyzer = make_vad_analyzer("silero", 8000, silero_dispatch="thread")
    analyzer.set_sample_rate(8000)
    model = analyzer._model
    for i in range(0, 8000, 160):
        await analyzer.analyze_audio(pcm[4000 + i : 4160 + i].tobytes())
    window = np.zeros(256, np.float32)
    pending = asyncio.ensure_future(analyzer._batcher.confidence(model, window, 8000))
    await asyncio.sleep(0)  # submitted; the batch is on the thread
    model.reset_states()
    await pending
    assert not model._state.any() and model._last_batch_size == 0


async def test_calls_that_stop_or_are_cancelled_do_not_hold_up_the_others(flite_speech):
    calls = [Recorded(make_vad_analyzer("silero", 8000), pcm, 8000) for pcm in speech_calls(flite_speech, 8000, 4)]
    quitter = asyncio.ensure_future(calls[2].feed())
    others = asyncio.gather(calls[0].feed(), calls[1].feed(len(calls[1].frames) // 3), calls[3].feed())
    for _ in range(200):  # cancel the quitter while it awaits a batch
        await asyncio.sleep(0)
    quitter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await quitter
    await asyncio.wait_for(others, 30)
    assert_same(calls[0], calls[0].reference())
    assert_same(calls[3], calls[3].reference())
    short = calls[1].reference()
    n = len(calls[1].scores)
    np.testing.assert_allclose(calls[1].scores, short.scores[:n], rtol=0, atol=1e-5)


async def test_mixed_rates_score_correctly_and_never_share_a_run(flite_speech):
    runs: list[tuple[int, tuple[int, ...]]] = []
    calls = [Recorded(make_vad_analyzer("silero", rate), speech_calls(flite_speech, rate, 2)[k], rate)
             for rate in (8000, 16000) for k in (0, 1)]
    calls[0].analyzer.set_sample_rate(8000)
    batcher = SileroBatcher.for_running_loop(calls[0].analyzer._model.session)
    real = batcher._session

    class Spy:
        def run(self, names, feeds):
            runs.append((int(feeds["sr"]), feeds["input"].shape))
            return real.run(names, feeds)

    batcher._session = Spy()  # type: ignore[assignment]
    try:
        await asyncio.gather(*(call.feed() for call in calls))
    finally:
        batcher._session = real
    for call in calls:
        assert_same(call, call.reference())
    assert {(sr, shape[1]) for sr, shape in runs} == {(8000, 256 + 32), (16000, 512 + 64)}
    assert max(shape[0] for _, shape in runs) == 2  # two calls a rate, batched


@pytest.mark.parametrize("dispatch", ["loop", "thread", "inline"])
async def test_odd_byte_counts_raise_audio_format_error(dispatch):
    analyzer = make_vad_analyzer("silero", 8000, silero_dispatch=dispatch)
    analyzer.set_sample_rate(8000)
    await analyzer.analyze_audio(bytes(320))
    with pytest.raises(AudioFormatError, match="even byte count"):
        await analyzer.analyze_audio(bytes(321))
    assert await analyzer.analyze_audio(bytes(320)) == VADState.QUIET  # the bad frame left no trace


async def test_a_frame_of_several_windows_is_scored_window_by_window(flite_speech):
    """100 ms frames: every window is scored, in order. pipecat checks its STARTING/STOPPING timers
    once per frame, the batched analyzer once per window, so Silero's periodic model reset (due
    after 2 s, taken when QUIET) may land a window apart: compare the first 2 s exactly."""
    pcm = speech_calls(flite_speech, 8000, 1)[0]
    got = Recorded(make_vad_analyzer("silero", 8000), pcm, 8000)
    got.frames = [pcm[i : i + 800].tobytes() for i in range(0, len(pcm), 800)]
    await got.feed()
    ref = got.reference()
    assert len(got.scores) == len(ref.scores) == len(pcm) // 256
    before_any_reset = 2 * 8000 // 256
    np.testing.assert_allclose(got.scores[:before_any_reset], ref.scores[:before_any_reset], rtol=0, atol=1e-5)


async def test_two_pipelines_report_speech_through_one_batcher(flite_speech):
    rate = 8000

    def frames(text: str):
        silence = np.zeros(rate, np.int16)
        pcm = np.concatenate([silence, flite_speech(text, rate), silence])
        step = rate // 50
        out = [InputAudioRawFrame(audio=pcm[i : i + step].tobytes(), sample_rate=rate, num_channels=1)
               for i in range(0, len(pcm), step)]
        return [*out, SleepFrame(sleep=0.3)]

    vads = [make_vad_analyzer("silero", rate, min_volume=0.0) for _ in TEXTS[:2]]
    results = await asyncio.gather(*(
        run_test(VADProcessor(vad_analyzer=vad), frames_to_send=frames(text),
                 pipeline_params=PipelineParams(audio_in_sample_rate=rate))
        for vad, text in zip(vads, TEXTS[:2], strict=True)
    ))
    for down, _ in results:
        kinds = [type(f) for f in down if isinstance(f, (VADUserStartedSpeakingFrame, VADUserStoppedSpeakingFrame))]
        assert kinds[:1] == [VADUserStartedSpeakingFrame] and kinds[-1] is VADUserStoppedSpeakingFrame
    assert vads[0]._batcher is vads[1]._batcher and vads[0]._batcher.windows > 0
