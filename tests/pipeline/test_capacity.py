"""The admission cap's arithmetic and calibration, on injected timings: bounded, deterministic, one
log line. No assertion here depends on how fast this machine is."""

from __future__ import annotations

import math

import pytest

from pipeline.capacity import (
    CALIBRATION_BATCH, MAX_CALLS, PIPELINE_MS, RECORDED_MS, UTILISATION, StageCost, calibrate, capacity_from,
    engine_probes, measure, recorded_capacity, usable_cores,
)
from pipeline.errors import ConfigError


class ScriptedClock:
    """A CPU clock (ns) that advances by the scripted amounts, one per timed probe run."""

    def __init__(self, spent_ms: list[float]) -> None:
        self._spent = iter(spent_ms)
        self.now_ns = 0
        self._started = False

    def __call__(self) -> int:
        if self._started:        # the end of a timed run: the time it took
            self.now_ns += int(next(self._spent) * 1e6)
        self._started = not self._started
        return self.now_ns


class FakeProbe:
    """A stage that makes ``audio_s`` of audio per stream and remembers the batches it ran."""

    def __init__(self, audio_s: float) -> None:
        self.audio_s = audio_s
        self.batches: list[int] = []

    def __call__(self, n: int) -> float:
        self.batches.append(n)
        return self.audio_s


def _calibrated(cores: float = 2.0):
    vad, stt, tts = FakeProbe(0.5), FakeProbe(0.4), FakeProbe(1.0)
    # CPU per timed run on a batch of 4: vad 4 ms for 0.5 s -> 2 ms/s; stt 160 ms for 0.4 s -> 100;
    # tts 100 ms for 1 s -> 25
    clock = ScriptedClock([4.0, 160.0, 100.0])
    cap = calibrate("silero", "ssm", "ssm", "hold",
                    {("vad", "silero"): lambda: vad, ("stt", "ssm"): lambda: stt, ("tts", "ssm"): lambda: tts},
                    cores=cores, clock=clock, wall=iter([10.0, 10.7]).__next__)
    return cap, (vad, stt, tts)


def test_calibration_sums_each_stage_measured_on_a_batch():
    cap, probes = _calibrated()
    by_stage = {c.stage: c for c in cap.costs}
    assert [c.stage for c in cap.costs] == ["pipeline", "vad", "stt", "tts"]
    assert by_stage["pipeline"].ms_per_call_s == PIPELINE_MS and not by_stage["pipeline"].measured
    assert by_stage["vad"].ms_per_s == pytest.approx(2.0) and by_stage["vad"].measured
    assert by_stage["stt"].ms_per_s == pytest.approx(100.0) and by_stage["stt"].ms_per_call_s == pytest.approx(50.0)
    assert by_stage["tts"].ms_per_s == pytest.approx(25.0) and by_stage["tts"].ms_per_call_s == pytest.approx(12.5)
    per_call = PIPELINE_MS + 2.0 + 50.0 + 12.5
    assert cap.ms_per_call_s == pytest.approx(per_call)
    assert cap.max_calls == math.floor(2.0 * UTILISATION * 1000 / per_call) == 9
    assert cap.calibration_s == pytest.approx(0.7)
    for probe in probes:   # a warm-up on one stream, then the timed batch
        assert probe.batches == [1, CALIBRATION_BATCH]


def test_calibration_is_deterministic_given_its_timings():
    assert _calibrated()[0] == _calibrated()[0]


def test_more_cores_admit_more_calls_and_the_cap_is_bounded():
    caps = [_calibrated(cores)[0].max_calls for cores in (0.1, 1, 2, 4, 8, 10_000)]
    assert caps == sorted(caps)
    assert caps[0] == 1 and caps[-1] == MAX_CALLS


def test_the_log_line_is_one_line_that_shows_the_sum():
    cap, _ = _calibrated()
    line = cap.line()
    assert "\n" not in line and "\r" not in line
    assert line.startswith("admitting at most 9 calls: 2 cores x 50% busy / 110 ms CPU per call-second (")
    for part in ("pipeline parley 45.0 recorded", "vad silero 2.0 measured", "stt ssm 50.0 (100.0 x 0.5) measured",
                 "tts ssm 12.5 (25.0 x 0.5) measured", "calibrated in 0.7 s", "--max-calls overrides"):
        assert part in line


def test_engines_without_a_probe_take_their_recorded_figures():
    cap = calibrate("webrtc", "sphinx", "espeak", "smart-turn", engine_probes("webrtc", "sphinx", "espeak"),
                    cores=2.0)
    assert [(c.stage, c.engine, c.measured) for c in cap.costs] == [
        ("pipeline", "parley", False), ("vad", "webrtc", False), ("stt", "sphinx", False),
        ("tts", "espeak", False), ("turn", "smart-turn", False)]
    assert cap.ms_per_call_s == pytest.approx(PIPELINE_MS + 0.15 + 140.0 + 1.05 + 50.0)
    assert cap.max_calls == 4 and "recorded" in cap.line()


def test_the_recorded_figures_give_what_was_measured_on_two_cores():
    """On the 2-core machines 8 calls answered in time and 12 did not."""
    cap = recorded_capacity(2.0)
    assert cap.max_calls == 8 and cap.calibration_s is None
    assert cap.ms_per_call_s == pytest.approx(PIPELINE_MS + RECORDED_MS[("vad", "silero")]
                                              + 0.5 * RECORDED_MS[("stt", "ssm")] + 0.5 * RECORDED_MS[("tts", "ssm")])


def test_nonsense_is_refused():
    cost = (StageCost("pipeline", "parley", 45.0, 1.0, False),)
    for kwargs in ({"cores": 0.0}, {"cores": 2.0, "utilisation": 0.0}, {"cores": 2.0, "utilisation": 1.5}):
        with pytest.raises(ConfigError):
            capacity_from(cost, **kwargs)
    with pytest.raises(ConfigError):
        capacity_from((StageCost("stt", "ssm", math.nan, 0.5, True),), 2.0)
    with pytest.raises(ConfigError):
        measure(FakeProbe(0.0), 4, ScriptedClock([1.0]))
    assert capacity_from((StageCost("stt", "remote", 0.0, 0.5, False),), 2.0).max_calls == MAX_CALLS


def test_usable_cores_are_this_process_s():
    import os

    assert 0 < usable_cores() <= (os.cpu_count() or 1)


def test_the_silero_probe_runs_the_shipped_model():
    probe = engine_probes("silero", "remote", "remote")[("vad", "silero")]()
    assert probe(3) == pytest.approx(16 * 256 / 8000)
