"""How many calls this machine answers in time: the admission cap ``parley serve`` starts with.

    probes = engine_probes("silero", "ssm", "ssm")        # what loads each stage's probe
    cap = calibrate("silero", "ssm", "ssm", "hold", probes)   # ~1 s: the engines' steps timed here
    log.info("%s", cap.line())    # "admitting at most 9 calls: 2 cores x 50% busy / 103 ms CPU ..."
    cap.max_calls

A call costs the machine, per second of the call, CPU in each stage it runs through::

    c = pipeline + vad + LISTEN_SHARE * stt + SPEAK_SHARE * tts (+ turn, with smart-turn)

in ms of CPU per call-second. ``stt`` runs only while the caller speaks (an utterance opens when
the VAD hears speech), ``tts`` only while the agent speaks: each about half of a conversation.
``pipeline`` is the server's own work per call outside the model steps (the transport, G.711,
pipecat's processors, the beam searches, the event loop): a recorded figure. The cap is::

    max_calls = floor(cores * UTILISATION * 1000 / c), at least 1, at most MAX_CALLS

``UTILISATION`` (half the cores busy on average) is the headroom: callers' turns come in bursts,
and a reply that waits behind a burst is late. On the 2-core build machines 8 calls answered in
time and 12 did not (p50 499 against 771 ms, 2026-12-07); the recorded figures give 8.

Calibration (``calibrate``): each stage of the shipped engines that this server runs in-process or
in its workers (Silero VAD, the SSM recogniser with its Whisper encoder, the SSM voice) is timed on
this machine for a batch of ``CALIBRATION_BATCH`` synthetic streams, in this thread's CPU time (a
busy neighbour slows the wall clock, not this): a warm-up pass on one stream, then the timed one,
per stream and per second of audio. It assumes the cores are the server's: a neighbour that takes
one is not seen. Stages with no probe (pocketsphinx, espeak-ng, webrtcvad, smart-turn, a remote
model tier) take their figures from ``RECORDED_MS``. The steps run eagerly here, where a worker
may run a compiled graph: the estimate errs towards fewer calls.

``benchmarks/bench_capacity.py`` measures the answer: v2v latency against concurrent calls.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pipeline.cores import usable_cores
from pipeline.errors import ConfigError

__all__ = ["CALIBRATION_BATCH", "LISTEN_SHARE", "MAX_CALLS", "PIPELINE_MS", "RECORDED_MS", "SPEAK_SHARE",
           "UTILISATION", "Capacity", "Probe", "ProbeFactory", "StageCost", "calibrate", "capacity_from", "engine_probes",
           "measure", "recorded_capacity", "stages_of", "usable_cores"]

Stage = Literal["pipeline", "vad", "stt", "tts", "turn"]
Probe = Callable[[int], float]
"""Runs a stage for a batch of n streams, warm or not; returns the seconds of audio each stream got."""
ProbeFactory = Callable[[], Probe]
"""Makes a stage's probe (loads what it runs): timed in ``Capacity.calibration_s``."""

UTILISATION = 0.5
LISTEN_SHARE = 0.5   # of a call's seconds, those the recogniser hears the caller
SPEAK_SHARE = 0.5    # and those the voice speaks
SHARES: dict[Stage, float] = {"pipeline": 1.0, "vad": 1.0, "stt": LISTEN_SHARE, "tts": SPEAK_SHARE, "turn": 1.0}
MAX_CALLS = 1000
CALIBRATION_BATCH = 4
PIPELINE_MS = 45.0
"""The server's per-call work outside the model steps, ms of CPU per call-second: a py-spy profile
of 16 calls on the 2-core machine (2026-12-07) had the server process at ~95 % of a core, a quarter
of it Silero and the beam searches: 0.95 * 0.76 / 16 calls."""
RECORDED_MS: dict[tuple[Stage, str], float] = {
    ("pipeline", "parley"): PIPELINE_MS,
    ("vad", "silero"): 1.6,      # bench_vad_batch: one ONNX run per tick, 8 calls
    ("vad", "webrtc"): 0.15,     # 2-4 us per 20 ms frame
    ("stt", "ssm"): 86.0,        # bench_stt_encoder_cost: 0.086 core per stream-second at batch 8
    ("stt", "sphinx"): 280.0,    # pocketsphinx: ~0.28 core per caller speaking
    ("stt", "whisper"): 500.0,   # Whisper tiny.en: ~1 s of CPU for a ~2 s utterance, at its end
    ("stt", "remote"): 0.0,      # on the model tier
    ("tts", "ssm"): 55.0,        # bench_tts: real-time factor 0.055, one stream
    ("tts", "espeak"): 2.1,      # ~480x real time
    ("tts", "remote"): 0.0,
    ("turn", "smart-turn"): 50.0,  # ~200 ms per end-of-turn decision, one every ~4 s of a call
}
"""ms of CPU per second a stage is busy, for the engines a calibration does not time."""


@dataclass(frozen=True, slots=True)
class StageCost:
    stage: Stage
    engine: str
    ms_per_s: float        # CPU per second of audio through the stage, one stream
    share: float           # of a call's seconds, those the stage works
    measured: bool         # timed here (True), or RECORDED_MS

    @property
    def ms_per_call_s(self) -> float:
        return self.ms_per_s * self.share

    def describe(self) -> str:
        how = "measured" if self.measured else "recorded"
        part = f" ({self.ms_per_s:.1f} x {self.share:g})" if self.share != 1.0 else ""
        return f"{self.stage} {self.engine} {self.ms_per_call_s:.1f}{part} {how}"


@dataclass(frozen=True, slots=True)
class Capacity:
    max_calls: int
    cores: float
    costs: tuple[StageCost, ...]
    utilisation: float = UTILISATION
    calibration_s: float | None = None   # None: recorded figures only

    @property
    def ms_per_call_s(self) -> float:
        return sum(c.ms_per_call_s for c in self.costs)

    def line(self) -> str:
        """One log line: the cap, and the sum it came from."""
        parts = " + ".join(c.describe() for c in self.costs)
        how = (f"calibrated in {self.calibration_s:.1f} s on batches of {CALIBRATION_BATCH}"
               if self.calibration_s is not None else "recorded figures")
        return (f"admitting at most {self.max_calls} calls: {self.cores:g} cores x {self.utilisation:.0%} busy"
                f" / {self.ms_per_call_s:.0f} ms CPU per call-second ({parts}; {how}); --max-calls overrides")


def capacity_from(costs: tuple[StageCost, ...], cores: float, *, utilisation: float = UTILISATION,
                  calibration_s: float | None = None) -> Capacity:
    """The cap for calls costing ``costs`` on ``cores`` cores kept ``utilisation`` busy."""
    if not costs or cores <= 0 or not 0 < utilisation <= 1:
        raise ConfigError(f"capacity needs stage costs, cores > 0 and utilisation in (0, 1], got "
                          f"{len(costs)} costs, {cores} cores, {utilisation}")
    per_call = sum(c.ms_per_call_s for c in costs)
    if not math.isfinite(per_call) or per_call < 0:
        raise ConfigError(f"a call's cost must be a finite number of ms, got {per_call}")
    fit = MAX_CALLS if per_call == 0 else math.floor(cores * utilisation * 1000.0 / per_call)
    return Capacity(max(1, min(MAX_CALLS, fit)), cores, costs, utilisation, calibration_s)


def stages_of(vad: str, stt: str, tts: str, turn: str) -> list[tuple[Stage, str]]:
    """The stages a call of this pipeline runs through, with their engines."""
    stages: list[tuple[Stage, str]] = [("pipeline", "parley"), ("vad", vad), ("stt", stt), ("tts", tts)]
    if turn == "smart-turn":
        stages.append(("turn", turn))
    return stages


def recorded_capacity(cores: float | None = None) -> Capacity:
    """The cap of the shipped pipeline (Silero, the SSM recogniser and voice) from recorded figures."""
    costs = tuple(StageCost(s, e, RECORDED_MS[(s, e)], SHARES[s], False)
                  for s, e in stages_of("silero", "ssm", "ssm", "hold"))
    return capacity_from(costs, usable_cores() if cores is None else cores)


def measure(probe: Probe, batch: int, clock: Callable[[], int] = time.thread_time_ns) -> float:
    """ms of CPU per second of audio, per stream, of ``probe`` on ``batch`` streams: a warm-up run on
    one stream, then one on ``batch`` timed by ``clock`` (ns)."""
    probe(1)
    t0 = clock()
    audio_s = probe(batch)
    spent_ms = (clock() - t0) / 1e6
    if audio_s <= 0:
        raise ConfigError(f"a calibration probe made no audio ({audio_s} s)")
    return max(0.0, spent_ms) / (batch * audio_s)


def calibrate(vad: str, stt: str, tts: str, turn: str, probes: Mapping[tuple[Stage, str], ProbeFactory], *,
              cores: float | None = None, batch: int = CALIBRATION_BATCH,
              clock: Callable[[], int] = time.thread_time_ns,
              wall: Callable[[], float] = time.perf_counter) -> Capacity:
    """The cap for this pipeline: each stage with a probe timed (``measure``), the rest recorded."""
    t0 = wall()
    costs = []
    for stage, engine in stages_of(vad, stt, tts, turn):
        make = probes.get((stage, engine))
        if make is None:
            costs.append(StageCost(stage, engine, RECORDED_MS[(stage, engine)], SHARES[stage], False))
        else:
            costs.append(StageCost(stage, engine, measure(make(), batch, clock), SHARES[stage], True))
    return capacity_from(tuple(costs), usable_cores() if cores is None else cores,
                         calibration_s=wall() - t0)


# -- the shipped engines' probes --------------------------------------------------------------

PROBE_SENTENCE = "Thank you for calling, your order ships on Tuesday morning."
PROBE_SPEECH_S = 1.0  # of it, what the voice's probe speaks on each stream


def _silero_probe() -> Probe:
    """Silero v5 as ``vad_batch`` runs it: one ONNX run per 32 ms window for every stream."""
    from importlib import resources

    import numpy as np
    from pipecat.audio.vad.silero import SileroOnnxModel

    from pipeline.vad_batch import SILERO_CONTEXT, SILERO_WINDOW

    session = SileroOnnxModel(str(resources.files("pipecat.audio.vad.data") / "silero_vad.onnx")).session
    rate = 8000
    windows = 16  # 0.5 s
    rng = np.random.default_rng(0)

    def run(n: int) -> float:
        state = np.zeros((2, n, 128), np.float32)
        for _ in range(windows):
            rows = (rng.standard_normal((n, SILERO_CONTEXT[rate] + SILERO_WINDOW[rate])) * 0.1).astype(np.float32)
            _, state = session.run(None, {"input": rows, "state": state, "sr": np.array(rate, np.int64)})
        return windows * SILERO_WINDOW[rate] / rate

    return run


def _recogniser_probe(model_dir: str | Path | None) -> Probe:
    """The recogniser's batched step as the runner takes it: a hop of frames (the Whisper encoder's
    window re-encoded, then the SSM layers) for every stream, twice; and, with a final pass, that
    audio encoded whole once per stream (as each utterance is at its end)."""
    import torch

    from pipeline.engines.ssm_recognizer import DEFAULT_MODEL_DIR, DEFAULT_STRIDE, SSMSTTEngine
    from ssm_engine.stt.recognizers import load_recognizer

    loaded = [e.model for e in SSMSTTEngine.shared_engines()]   # serve loaded it already
    model: Any = loaded[0] if loaded else load_recognizer(model_dir or DEFAULT_MODEL_DIR).eval()
    block = getattr(model, "block_frames", 1)
    frames = -(-DEFAULT_STRIDE // block) * block
    samples = model.config.step_samples
    gen = torch.Generator().manual_seed(0)

    final = _final_model(model_dir)

    def run(n: int) -> float:
        state = model.init_state(n)
        hops = 2
        with torch.no_grad():
            for _ in range(hops):
                model.prefill(torch.randn(n, frames, samples, generator=gen) * 0.1, state)
            if final is not None:   # each stream's audio once more, encoded whole by the final pass
                for _ in range(n):
                    final.piece_log_probs(torch.randn(1, hops * frames * samples, generator=gen) * 0.1)
        return hops * frames * samples / model.config.sample_rate_hz

    return run


def _final_model(model_dir: str | Path | None) -> Any:
    """The final pass's model beside the recogniser, if the folder has one (its own copy: the
    server's lives in a worker process)."""
    from pipeline.engines.ssm_recognizer import DEFAULT_MODEL_DIR, FINAL_DIR
    from ssm_engine.stt.recognizers import load_recognizer

    folder = Path(model_dir or DEFAULT_MODEL_DIR) / FINAL_DIR
    return load_recognizer(folder).eval() if (folder / "config.json").exists() else None


def _voice_probe(voice_dir: str | Path | None) -> Probe:
    """The voice speaking the start of a sentence (``PROBE_SPEECH_S``) on every stream, batched as
    its engine's thread pulls them."""
    from pipeline.engines.ssm_voice import DEFAULT_MODEL_DIR
    from ssm_engine.tts.synth import TTSVoice

    voice = TTSVoice.load(voice_dir or DEFAULT_MODEL_DIR)

    def run(n: int) -> float:
        streams = [voice.open_stream(seed=i) for i in range(n)]
        for s in streams:
            s.push_text(PROBE_SENTENCE)
            s.end_text()
        audio_s = 0.0
        while audio_s < PROBE_SPEECH_S * n and not all(s.done for s in streams):
            chunks = voice.pull_many([s for s in streams if not s.done], max_chunks=5)
            audio_s += sum(c.duration_s for got in chunks for c in got)
        for s in streams:
            s.cancel()
        return audio_s / n

    return run


def engine_probes(vad: str, stt: str, tts: str, *, stt_model_dir: str | Path | None = None,
                  voice_dir: str | Path | None = None) -> dict[tuple[Stage, str], ProbeFactory]:
    """Probe factories for the shipped engines among these (the others have none: ``RECORDED_MS``);
    nothing loads until ``calibrate`` calls them (None: the engine's default model)."""
    probes: dict[tuple[Stage, str], ProbeFactory] = {}
    if vad == "silero":
        probes[("vad", "silero")] = _silero_probe
    if stt == "ssm":
        probes[("stt", "ssm")] = lambda: _recogniser_probe(stt_model_dir)
    if tts == "ssm":
        probes[("tts", "ssm")] = lambda: _voice_probe(voice_dir)
    return probes
