"""``evaluate(turn_end=True)``: each clip ends where a call's VAD would end the turn, and the
final is timed from that stop."""

from __future__ import annotations

import numpy as np
import pytest

from harness.stt_eval import TURN_STOP_S, evaluate, turn_end_sample
from pipeline.audio.wav import write_wav

RATE = 8000


def _speech_end(pcm: np.ndarray) -> int:
    """The end of the last 20 ms frame louder than -40 dBFS."""
    frames = pcm[: pcm.size // 160 * 160].astype(np.float32).reshape(-1, 160) / 32768
    loud = np.flatnonzero(np.sqrt((frames ** 2).mean(axis=1)) > 0.01)
    return int(loud[-1] + 1) * 160


def test_the_turn_ends_the_vads_stop_after_the_speech(flite_speech):
    speech = flite_speech("please call me back tomorrow morning", RATE)
    end = _speech_end(speech)
    clip = np.concatenate([speech[:end], np.zeros(RATE, np.int16)])
    stop = turn_end_sample(clip, RATE)
    # the stop timer's 0.2 s after the last window heard as speech, give or take Silero's windows
    assert end + TURN_STOP_S * RATE <= stop <= end + (TURN_STOP_S + 0.2) * RATE
    cut = turn_end_sample(speech[:end], RATE)          # no silence after it: padded until the stop
    assert cut == stop


def test_a_clip_with_nothing_heard_as_speech_ends_where_it_ends():
    hum = (0.001 * 32767 * np.sin(np.arange(RATE) * 2 * np.pi * 50 / RATE)).astype(np.int16)
    assert turn_end_sample(hum, RATE) == hum.size


@pytest.mark.usefixtures("one_torch_thread")
def test_turn_end_evaluation_cuts_each_clip_at_its_stop(tmp_path, flite_speech):
    speech = flite_speech("yes that is right", RATE)
    end = _speech_end(speech)
    clip = np.concatenate([speech[:end], np.zeros(3 * RATE, np.int16)])   # 3 s of quiet after
    write_wav(tmp_path / "a.wav", clip, RATE)
    (tmp_path / "m.tsv").write_text("a.wav\tyes that is right\n")
    whole = evaluate("whisper", tmp_path / "m.tsv", rate_hz=RATE, codec="none")
    turn = evaluate("whisper", tmp_path / "m.tsv", rate_hz=RATE, codec="none", turn_end=True)
    assert whole.audio_s == pytest.approx(clip.size / RATE, abs=0.06)   # audio_s: to 0.1 s
    assert turn.audio_s == pytest.approx(turn_end_sample(clip, RATE) / RATE, abs=0.06)   # audio_s: to 0.1 s
    assert turn.audio_s < whole.audio_s - 2.0
    assert turn.wer == 0.0 and turn.final_latency_ms_p50 > 0
