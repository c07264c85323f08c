"""WebRTCVADAnalyzer and make_vad_analyzer through pipecat's own VADAnalyzer state machine."""

from __future__ import annotations

import numpy as np
import pytest
from pipecat.audio.vad.silero import SileroVADAnalyzer
from pipecat.audio.vad.vad_analyzer import VADParams, VADState

from pipeline.errors import AudioFormatError, ConfigError
from pipeline.vad import WebRTCVADAnalyzer, make_vad_analyzer


async def states(analyzer, pcm: np.ndarray, rate_hz: int) -> list[VADState]:
    """Feed 20 ms frames through ``analyze_audio`` (as pipecat does); the state after each."""
    analyzer.set_sample_rate(rate_hz)
    step = rate_hz // 50
    out = [
        await analyzer.analyze_audio(pcm[i : i + step].tobytes())
        for i in range(0, len(pcm), step)
    ]
    await analyzer.cleanup()
    return out


def padded(speech: np.ndarray, rate_hz: int, lead_s: float = 0.5, tail_s: float = 1.0):
    return np.concatenate(
        [
            np.zeros(int(lead_s * rate_hz), np.int16),
            speech,
            np.zeros(int(tail_s * rate_hz), np.int16),
        ]
    )


@pytest.mark.parametrize("rate_hz", [8000, 16000])
@pytest.mark.parametrize("kind", ["webrtc", "silero"])
async def test_speech_starts_and_stops_around_flite_speech(kind, rate_hz, flite_speech):
    speech = flite_speech("hello, how are you today?", rate_hz)
    seq = await states(make_vad_analyzer(kind, rate_hz), padded(speech, rate_hz), rate_hz)
    speaking = [i for i, s in enumerate(seq) if s == VADState.SPEAKING]
    assert speaking, f"{kind} never detected speech"
    assert 0.5 <= speaking[0] * 0.02 <= 0.5 + 0.6  # starts within 0.6 s of the onset
    assert seq[-1] == VADState.QUIET  # and stops in the 1 s of trailing silence


@pytest.mark.parametrize("kind", ["webrtc", "silero"])
async def test_digital_silence_is_never_speech(kind):
    seq = await states(make_vad_analyzer(kind, 8000), np.zeros(3 * 8000, np.int16), 8000)
    assert set(seq) == {VADState.QUIET}


async def test_start_secs_and_min_volume_are_honoured(flite_speech):
    speech = padded(flite_speech("hello, how are you today?", 8000), 8000)
    slow = WebRTCVADAnalyzer(params=VADParams(start_secs=5.0, min_volume=0.0))
    assert VADState.SPEAKING not in await states(slow, speech, 8000)
    deaf = WebRTCVADAnalyzer(params=VADParams(min_volume=1.01))
    assert VADState.SPEAKING not in await states(deaf, speech, 8000)
    eager = WebRTCVADAnalyzer(params=VADParams(min_volume=0.0))
    assert VADState.SPEAKING in await states(eager, speech, 8000)


@pytest.mark.parametrize(("frame_ms", "samples"), [(10, 80), (20, 160), (30, 240)])
def test_frame_size_follows_frame_ms(frame_ms, samples):
    analyzer = WebRTCVADAnalyzer(frame_ms=frame_ms)
    analyzer.set_sample_rate(8000)
    assert analyzer.num_frames_required() == samples
    assert analyzer.voice_confidence(bytes(samples * 2)) == 0.0


def test_bad_configuration_raises():
    with pytest.raises(AudioFormatError):
        WebRTCVADAnalyzer().set_sample_rate(11025)
    with pytest.raises(AudioFormatError):
        WebRTCVADAnalyzer(sample_rate=44100)
    with pytest.raises(AudioFormatError):
        WebRTCVADAnalyzer(frame_ms=25)
    with pytest.raises(ConfigError):
        WebRTCVADAnalyzer(mode=4)
    with pytest.raises(AudioFormatError):
        make_vad_analyzer("silero", 48000)
    with pytest.raises(ConfigError):
        make_vad_analyzer("energy", 8000)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="stop timer"):
        make_vad_analyzer("silero", 8000, stop_timer="loudness")  # type: ignore[arg-type]


def test_bad_frame_raises_audio_format_error():
    analyzer = WebRTCVADAnalyzer()
    analyzer.set_sample_rate(8000)
    with pytest.raises(AudioFormatError):
        analyzer.voice_confidence(b"\x00" * 100)


def test_factory_builds_the_requested_kind_with_params():
    silero = make_vad_analyzer("silero", 8000, stop_secs=0.3)
    assert isinstance(silero, SileroVADAnalyzer) and silero.params.stop_secs == 0.3
    webrtc = make_vad_analyzer("webrtc", 16000, webrtc_mode=1, params=VADParams(start_secs=0.1))
    assert isinstance(webrtc, WebRTCVADAnalyzer) and webrtc.mode == 1
    assert webrtc.params.start_secs == 0.1


@pytest.mark.parametrize("kind", ["webrtc", "silero"])
async def test_analysis_runs_on_the_loop_with_the_same_states_as_pipecats_thread(kind, flite_speech):
    # pipecat's VADAnalyzer hands each frame to a thread of its own; ours analyze inline: the
    # same state sequence, and no thread is ever started
    from pipecat.audio.vad.vad_analyzer import VADAnalyzer

    speech = padded(flite_speech("my order has not arrived yet", 8000), 8000)
    inline = make_vad_analyzer(kind, 8000)
    threaded = make_vad_analyzer(kind, 8000)
    threaded.analyze_audio = VADAnalyzer.analyze_audio.__get__(threaded)
    assert await states(inline, speech, 8000) == await states(threaded, speech, 8000)
    assert not inline._executor._threads and threaded._executor._threads


def confidences(analyzer, pcm: np.ndarray, rate_hz: int) -> list[float]:
    analyzer.set_sample_rate(rate_hz)
    n = analyzer.num_frames_required()
    return [analyzer.voice_confidence(pcm[i:i + n].tobytes()) for i in range(0, len(pcm) - n + 1, n)]


def test_silero_analyzers_share_one_session_and_keep_their_own_state(flite_speech):
    """Every call's Silero analyzer runs on the process's one ONNX session (building one per call
    stalled the event loop), yet each keeps its own recurrent state: two calls analyzed frame by
    frame in turn score exactly as each does alone on a session of its own (stock pipecat)."""
    from pipecat.audio.vad import silero

    from pipeline.vad import InlineSileroVADAnalyzer

    rate = 8000
    speech = padded(flite_speech("hello how are you", rate), rate)
    noise = np.random.default_rng(0).normal(0, 2000, speech.size).clip(-32768, 32767).astype(np.int16)
    a, b = InlineSileroVADAnalyzer(sample_rate=rate), InlineSileroVADAnalyzer(sample_rate=rate)
    assert a._model.session is b._model.session
    assert silero.SileroOnnxModel is not type(a._model)  # pipecat's own class is put back
    assert type(SileroVADAnalyzer(sample_rate=rate)._model) is silero.SileroOnnxModel
    a.set_sample_rate(rate)
    b.set_sample_rate(rate)
    n = a.num_frames_required()
    got_a, got_b = [], []
    for i in range(0, speech.size - n + 1, n):  # interleaved: a's state must not leak into b's
        got_a.append(a.voice_confidence(speech[i:i + n].tobytes()))
        got_b.append(b.voice_confidence(noise[i:i + n].tobytes()))
    alone_a = confidences(SileroVADAnalyzer(sample_rate=rate), speech, rate)
    alone_b = confidences(SileroVADAnalyzer(sample_rate=rate), noise, rate)
    assert max(got_a) > 0.9 and max(got_b) < 0.5  # speech heard, noise not: the check has teeth
    np.testing.assert_allclose(got_a, alone_a, rtol=0, atol=1e-6)
    np.testing.assert_allclose(got_b, alone_b, rtol=0, atol=1e-6)


def sound_edges(pcm: np.ndarray, rate_hz: int) -> tuple[float, float]:
    """Where ``pcm`` is louder than -50 dBFS (10 ms RMS): its first and last such window."""
    w = rate_hz // 100
    n = pcm.size // w
    rms = np.sqrt((pcm[: n * w].astype(np.float64).reshape(n, w) ** 2).mean(axis=1))
    loud = np.flatnonzero(rms > 104)
    return loud[0] / 100, (loud[-1] + 1) / 100


@pytest.mark.parametrize("kind", ["webrtc", "silero"])
@pytest.mark.parametrize("text", ["hello, how are you today?", "i would like to check my account"])
async def test_the_start_and_stop_say_where_the_speech_began_and_ended(kind, text, flite_speech, monkeypatch):
    """On the audio's own clock (a frame read late moves nothing): the start's began_at_s and the
    stop's ended_at_s within 30 ms of where the speech sounds, though pipecat's smoothed loudness
    calls the start later than start_secs after it and the stop later than stop_secs after it."""
    rate_hz = 8000
    speech = flite_speech(text, rate_hz)
    rng = np.random.default_rng(0)
    pcm = padded(speech, rate_hz, lead_s=1.0)
    pcm = pcm + rng.normal(0, 15, pcm.size).astype(np.int16)   # a line's hiss, about -67 dBFS
    began, ended = (1.0 + t for t in sound_edges(speech, rate_hz))
    clock = {"t": 100.0}
    monkeypatch.setattr("pipeline.vad.time.monotonic", lambda: clock["t"])
    analyzer = make_vad_analyzer(kind, rate_hz)
    analyzer.set_sample_rate(rate_hz)
    step, calls, previous = rate_hz // 50, {}, VADState.QUIET
    for i in range(0, len(pcm), step):
        clock["t"] = 100.0 + (i + step) / rate_hz + (0.3 if i % (7 * step) == 0 else 0.0)  # some frames late
        state = await analyzer.analyze_audio(pcm[i: i + step].tobytes())
        if state == VADState.SPEAKING and previous in (VADState.QUIET, VADState.STARTING):
            calls.setdefault("began", analyzer.speech_began_at_s() - 100.0)
            calls.setdefault("start_called", (i + step) / rate_hz)
        elif state == VADState.QUIET and previous == VADState.STOPPING:
            calls["ended"] = analyzer.speech_ended_at_s() - 100.0
        previous = state
    await analyzer.cleanup()
    assert abs(calls["began"] - began) <= 0.03, (calls, began)
    assert abs(calls["ended"] - ended) <= 0.03, (calls, ended)
    assert calls["start_called"] - began > 0.2   # what start_secs alone would have put later


async def test_the_processor_says_where_the_stop_timer_starts_and_where_speech_cancels_it(flite_speech):
    """A ``SpeechPauseFrame`` after the audio frame whose window started the stop timer (and one
    with ``paused=False`` where speech came back within it); the stop follows the last one by
    ``stop_secs`` of audio."""
    from pipecat.frames.frames import InputAudioRawFrame, VADUserStoppedSpeakingFrame
    from pipecat.pipeline.worker import PipelineParams
    from pipecat.tests.utils import SleepFrame, run_test

    from pipeline.frames import SpeechPauseFrame
    from pipeline.vad import OnsetVADProcessor

    rate = 8000
    word, rest = flite_speech("hello", rate), flite_speech("how are you today", rate)
    _, end = sound_edges(word, rate)
    begin, _ = sound_edges(rest, rate)
    gap = np.zeros(int(0.1 * rate), np.int16)         # shorter than the stop timer
    pcm = padded(np.concatenate([word[:int(end * rate)], gap, rest[int(begin * rate):]]), rate)
    frames = [InputAudioRawFrame(audio=pcm[i:i + 160].tobytes(), sample_rate=rate, num_channels=1)
              for i in range(0, len(pcm), 160)]
    vad = OnsetVADProcessor(vad_analyzer=make_vad_analyzer("silero", rate, stop_secs=0.2))
    down, _ = await run_test(vad, frames_to_send=[*frames, SleepFrame(0.5)],
                             pipeline_params=PipelineParams(audio_in_sample_rate=rate))
    marks = [f for f in down if isinstance(f, (SpeechPauseFrame, VADUserStoppedSpeakingFrame))]
    pauses = [f.paused for f in marks if isinstance(f, SpeechPauseFrame)]
    assert pauses[-1] is True and False in pauses, pauses     # the gap, cancelled; then the end
    assert isinstance(marks[-1], VADUserStoppedSpeakingFrame)
    assert all(a != b for a, b in zip(pauses, pauses[1:]))    # started, cancelled, started ...
    last = down.index(next(f for f in reversed(down) if isinstance(f, SpeechPauseFrame)))
    stop = down.index(marks[-1])
    assert isinstance(down[last - 1], InputAudioRawFrame)    # after the audio it was heard in
    heard_s = sum(isinstance(f, InputAudioRawFrame) for f in down[last:stop]) * 0.02
    assert 0.15 <= heard_s <= 0.3, heard_s


@pytest.mark.parametrize("kind", ["webrtc", "silero"])
async def test_a_stop_timer_from_the_sounds_end_stops_sooner_but_never_before_the_quiet_is_long_enough(
        kind, flite_speech):
    """pipecat's count starts when the model hears no speech, after the sound has ended; counted
    from the sound's end, the stop comes sooner, still after stop_secs of quiet, and a frame or
    more after the stop timer started."""
    rate_hz = 8000
    speech = flite_speech("what are your opening hours", rate_hz)
    loud = np.flatnonzero(np.abs(speech.astype(np.int32)) > 300)
    sound_end_s = 0.5 + (loud[-1] + 1) / rate_hz
    stops, started = {}, {}
    for timer in ("model", "sound"):
        seq = await states(make_vad_analyzer(kind, rate_hz, stop_secs=0.2, stop_timer=timer),
                           padded(speech, rate_hz, tail_s=1.5), rate_hz)
        speaking = [i for i, st in enumerate(seq) if st == VADState.SPEAKING]
        quiet = [i for i, st in enumerate(seq) if st == VADState.QUIET and i > speaking[-1]]
        stops[timer] = (quiet[0] + 1) * 0.02          # the end of the frame the stop came on
        started[timer] = (speaking[-1] + 2) * 0.02    # the frame whose window began the timer
    assert stops["sound"] < stops["model"], stops
    assert stops["sound"] - sound_end_s >= 0.2 - 0.04, (stops, sound_end_s)   # a window's rounding
    assert stops["sound"] > started["sound"], (stops, started)
