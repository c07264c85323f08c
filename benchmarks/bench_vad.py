"""Which VAD should parley use on phone audio: webrtcvad or Silero?

The issue: "webrtcvad is nearly free but takes steady noise for speech: measure false starts on
noise and choose the default by that, not by habit". One seeded run measures, on 8 kHz phone-like
audio (300-3400 Hz band-pass, G.711 mu-law round trip):

* false speech starts per minute on noise alone: white, pink, babble (eight flite talkers
  mixed) and mains hum with harmonics, steady from the start, plus white and babble switched on
  and off every 3 s (onsets are where an adaptive noise model is caught out), each at two levels;
* detection of real speech (flite utterances in that noise at 10 and 20 dB SNR): the fraction of
  utterances detected, start delay (speech onset -> SPEAKING) and stop delay (speech end -> QUIET);
* CPU per audio second of the whole pipecat analyzer (model + volume gate + state machine).

Detectors: webrtcvad modes 1-3 with the volume gate off (min_volume=0), webrtcvad mode 3 with
pipecat's default gate (min_volume=0.6), and Silero with the gate off and on. All use
start_secs=0.2, stop_secs=0.2, confidence=0.7, fed in 20 ms chunks as a transport would.

    .venv/bin/python benchmarks/bench_vad.py [--seed 0] [--noise-s 30]

Prints one JSON line. A detector that takes noise for speech may start once and never stop, so
false starts per minute alone would flatter it: the time spent SPEAKING on noise is reported too.
``recommended_default`` is the kind of the detector, among those that detect at least 90 % of
utterances, with the least false starts per minute plus seconds-per-minute spent SPEAKING on
noise; the cheaper one on a tie.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import wave
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soxr

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipecat.audio.vad.vad_analyzer import VADState  # noqa: E402

from pipeline.vad import make_vad_analyzer  # noqa: E402

RATE_HZ = 8000
CHUNK = RATE_HZ // 50  # 20 ms transport frames
PHRASES = (
    ("slt", "hello, how are you today?"),
    ("rms", "I would like to check the balance on my account please."),
    ("awb", "yes, that is right."),
    ("kal", "can you call me back tomorrow morning?"),
    ("slt", "no thanks, I already paid that bill last week."),
    ("rms", "my number is five five five, one two three four."),
)
BABBLE_TEXT = (
    "the meeting moved to thursday afternoon, bring the reports",
    "we should order more paper for the printer on the second floor",
    "did you see the game last night, it went to overtime",
    "I think the train leaves at half past six from platform four",
    "please remember to lock the back door when you leave",
    "the new manager starts next monday, she comes from the sales team",
)
NOISE_LEVELS_DBFS = (-45.0, -30.0)
SNRS_DB = (20.0, 10.0)
SPEECH_LEVEL_DBFS = -20.0


@dataclass(frozen=True)
class Detector:
    name: str
    kind: str
    mode: int = 3
    min_volume: float = 0.0


DETECTORS = (
    Detector("webrtc_m1", "webrtc", mode=1),
    Detector("webrtc_m2", "webrtc", mode=2),
    Detector("webrtc_m3", "webrtc", mode=3),
    Detector("webrtc_m3_gate", "webrtc", mode=3, min_volume=0.6),
    Detector("silero", "silero"),
    Detector("silero_gate", "silero", min_volume=0.6),
)


def flite(voice: str, text: str, tmp: Path) -> np.ndarray:
    path = tmp / f"{abs(hash((voice, text)))}.wav"
    subprocess.run(["flite", "-voice", voice, "-t", text, "-o", str(path)], check=True)
    with wave.open(str(path)) as w:
        pcm = np.frombuffer(w.readframes(w.getnframes()), np.int16).astype(np.float32) / 32768
        return soxr.resample(pcm, w.getframerate(), RATE_HZ).astype(np.float32)


def rms_dbfs(x: np.ndarray) -> float:
    return 20 * np.log10(np.sqrt(np.mean(x.astype(np.float64) ** 2)) + 1e-12)


def scale_to(x: np.ndarray, dbfs: float) -> np.ndarray:
    return x * 10 ** ((dbfs - rms_dbfs(x)) / 20)


def phone_band(x: np.ndarray) -> np.ndarray:
    spec = np.fft.rfft(x)
    f = np.fft.rfftfreq(len(x), 1 / RATE_HZ)
    spec[(f < 300) | (f > 3400)] = 0
    return np.fft.irfft(spec, len(x)).astype(np.float32)


def mulaw_roundtrip(x: np.ndarray) -> np.ndarray:
    """G.711 mu-law quantization (the continuous law, 8 bits), back to 16-bit PCM."""
    mu = 255.0
    x = np.clip(x, -1, 1)
    y = np.sign(x) * np.log1p(mu * np.abs(x)) / np.log1p(mu)
    q = np.round(y * 127) / 127
    out = np.sign(q) * ((1 + mu) ** np.abs(q) - 1) / mu
    return (np.clip(out, -1, 1) * 32767).astype(np.int16)


def make_noise(kind: str, n: int, rng: np.random.Generator, babble_src: list[np.ndarray]):
    if kind == "white":
        x = rng.standard_normal(n)
    elif kind == "pink":
        spec = np.fft.rfft(rng.standard_normal(n))
        f = np.fft.rfftfreq(n, 1 / RATE_HZ)
        spec[1:] /= np.sqrt(f[1:])
        spec[0] = 0
        x = np.fft.irfft(spec, n)
    elif kind == "babble":
        x = np.zeros(n)
        for _ in range(8):  # eight talkers, each a random phrase sequence at a random level
            pos = int(rng.integers(0, RATE_HZ))
            while pos < n:
                s = babble_src[int(rng.integers(len(babble_src)))] * rng.uniform(0.5, 1.0)
                m = min(len(s), n - pos)
                x[pos : pos + m] += s[:m]
                pos += m + int(rng.integers(0, RATE_HZ // 4))
    elif kind.endswith("_bursts"):  # the noise switches on and off: 3 s on, 3 s off
        x = make_noise(kind.removesuffix("_bursts"), n, rng, babble_src)
        period, ramp = 6 * RATE_HZ, RATE_HZ // 20
        gate = ((np.arange(n) % period) < period // 2).astype(np.float32)
        x = x * np.convolve(gate, np.ones(ramp) / ramp, mode="same")
    elif kind == "hum":
        t = np.arange(n) / RATE_HZ
        x = sum(np.sin(2 * np.pi * 60 * k * t + rng.uniform(0, 6.28)) / k for k in range(1, 12))
        x = x + 0.05 * rng.standard_normal(n)
    else:
        raise ValueError(kind)
    return np.asarray(x, np.float32)


def speech_bounds(clean: np.ndarray) -> tuple[int, int]:
    """First and last sample of the 10 ms frames within 40 dB of the loudest frame."""
    frames = clean[: len(clean) // 80 * 80].reshape(-1, 80)
    energy = 10 * np.log10(np.mean(frames**2, axis=1) + 1e-12)
    active = np.nonzero(energy > energy.max() - 40)[0]
    return int(active[0] * 80), int((active[-1] + 1) * 80)


def run_detector(det: Detector, pcm: np.ndarray) -> tuple[list[tuple[int, VADState]], float]:
    """Feed 20 ms chunks; return (sample index, new state) at each change, and CPU seconds."""
    analyzer = make_vad_analyzer(
        det.kind, RATE_HZ, min_volume=det.min_volume, webrtc_mode=det.mode
    )
    analyzer.set_sample_rate(RATE_HZ)
    raw = pcm.tobytes()
    changes: list[tuple[int, VADState]] = []
    state = VADState.QUIET
    cpu0 = time.thread_time()
    for i in range(0, len(pcm) - CHUNK + 1, CHUNK):
        new = analyzer._run_analyzer(raw[2 * i : 2 * (i + CHUNK)])  # the exact pipecat logic
        if new in (VADState.SPEAKING, VADState.QUIET) and new != state:
            changes.append((i + CHUNK, new))
            state = new
    cpu = time.thread_time() - cpu0
    analyzer._executor.shutdown(wait=False)
    return changes, cpu


def state_at(changes: list[tuple[int, VADState]], sample: int) -> VADState:
    state = VADState.QUIET
    for t, s in changes:
        if t > sample:
            break
        state = s
    return state


def speaking_fraction(changes: list[tuple[int, VADState]], n: int) -> float:
    """Fraction of the stream spent in SPEAKING (a detector stuck on noise starts only once)."""
    total, since = 0, None
    for t, s in changes:
        if s == VADState.SPEAKING:
            since = t
        elif since is not None:
            total, since = total + t - since, None
    if since is not None:
        total += n - since
    return total / n


def pct(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)) * 1000, 1) if values else None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--noise-s", type=float, default=30.0, help="noise per type and level")
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    t_start = time.perf_counter()

    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        phrases = [flite(v, t, tmp) for v, t in PHRASES]
        babble_src = [flite(v, t, tmp) for v in ("slt", "rms", "awb", "kal") for t in BABBLE_TEXT]
    babble_src = [scale_to(b, -20) for b in babble_src]
    noise_kinds = ("white", "pink", "babble", "hum")

    # Noise-only streams: every speech start is a false start.
    noise_streams = []
    for kind in noise_kinds + ("white_bursts", "babble_bursts"):
        for level in NOISE_LEVELS_DBFS:
            n = make_noise(kind, int(args.noise_s * RATE_HZ), rng, babble_src)
            noise_streams.append((kind, level, mulaw_roundtrip(phone_band(scale_to(n, level)))))

    # Speech streams: each phrase in continuous noise, 2 s of noise around each.
    speech_streams = []
    gap = 2 * RATE_HZ
    for kind in noise_kinds:
        for snr in SNRS_DB:
            parts, truth, pos = [np.zeros(gap, np.float32)], [], gap
            for p in phrases:
                p = scale_to(p, SPEECH_LEVEL_DBFS)
                on, off = speech_bounds(p)
                truth.append((pos + on, pos + off))
                parts += [p, np.zeros(gap, np.float32)]
                pos += len(p) + gap
            clean = np.concatenate(parts)
            noise = make_noise(kind, len(clean), rng, babble_src)
            noise = scale_to(noise, SPEECH_LEVEL_DBFS - snr)
            mix = mulaw_roundtrip(phone_band(clean + noise))
            speech_streams.append((kind, snr, mix, truth))

    results = {}
    for det in DETECTORS:
        cpu_s, audio_s = 0.0, 0.0
        false_starts, speaking = {}, {}
        for kind, level, pcm in noise_streams:
            changes, cpu = run_detector(det, pcm)
            cpu_s += cpu
            audio_s += len(pcm) / RATE_HZ
            starts = sum(1 for _, s in changes if s == VADState.SPEAKING)
            false_starts[f"{kind}@{level:.0f}dBFS"] = starts / (len(pcm) / RATE_HZ / 60)
            speaking[f"{kind}@{level:.0f}dBFS"] = speaking_fraction(changes, len(pcm))
        detected, n_utts, start_d, stop_d, fs_speech, held = 0, 0, [], [], {}, 0
        for kind, snr, pcm, truth in speech_streams:
            changes, cpu = run_detector(det, pcm)
            cpu_s += cpu
            audio_s += len(pcm) / RATE_HZ
            for i, (on, off) in enumerate(truth):
                n_utts += 1
                next_on = truth[i + 1][0] if i + 1 < len(truth) else len(pcm)
                if state_at(changes, on) == VADState.SPEAKING:
                    held += 1  # still "speaking" from the noise before: no fresh start
                starts = [t for t, s in changes if s == VADState.SPEAKING and on <= t < off]
                if starts or state_at(changes, on) == VADState.SPEAKING:
                    detected += 1
                if starts and state_at(changes, on) != VADState.SPEAKING:
                    start_d.append((starts[0] - on) / RATE_HZ)
                stops = [t for t, s in changes if s == VADState.QUIET and off <= t < next_on]
                if stops and (starts or state_at(changes, on) == VADState.SPEAKING):
                    stop_d.append((stops[0] - off) / RATE_HZ)
            spurious = 0
            for t, s in changes:  # starts in the noise between utterances (0.5 s margin)
                if s == VADState.SPEAKING and not any(
                    on - RATE_HZ // 2 <= t < off + RATE_HZ // 2 for on, off in truth
                ):
                    spurious += 1
            fs_speech[f"{kind}@{snr:.0f}dB"] = spurious
        results[det.name] = {
            "false_starts_per_min": round(float(np.mean(list(false_starts.values()))), 2),
            "false_starts_per_min_by_noise": {k: round(v, 2) for k, v in false_starts.items()},
            "speaking_fraction_on_noise": round(float(np.mean(list(speaking.values()))), 3),
            "speaking_fraction_by_noise": {k: round(v, 3) for k, v in speaking.items()},
            "utterances_started_while_already_speaking": held,
            "detected_fraction": round(detected / n_utts, 3),
            "start_delay_ms_p50": pct(start_d, 50),
            "start_delay_ms_p95": pct(start_d, 95),
            "stop_delay_ms_p50": pct(stop_d, 50),
            "stop_delay_ms_p95": pct(stop_d, 95),
            "spurious_starts_between_utterances": fs_speech,
            "cpu_ms_per_s": round(cpu_s / audio_s * 1000, 3),
        }

    def score(name: str):
        r = results[name]
        return (
            r["detected_fraction"] < 0.9,
            r["false_starts_per_min"] + 60 * r["speaking_fraction_on_noise"],
            r["cpu_ms_per_s"],
        )

    best = min(results, key=score)
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        sha = None
    out = {
        "bench": "vad",
        "git_sha": sha,
        "config": {
            "seed": args.seed,
            "rate_hz": RATE_HZ,
            "noise_s_per_condition": args.noise_s,
            "noise_levels_dbfs": NOISE_LEVELS_DBFS,
            "snrs_db": SNRS_DB,
            "start_secs": 0.2,
            "stop_secs": 0.2,
            "confidence": 0.7,
        },
        "webrtc_false_starts_per_min": results["webrtc_m3"]["false_starts_per_min"],
        "silero_false_starts_per_min": results["silero"]["false_starts_per_min"],
        "webrtc_speaking_fraction_on_noise": results["webrtc_m3"]["speaking_fraction_on_noise"],
        "silero_speaking_fraction_on_noise": results["silero"]["speaking_fraction_on_noise"],
        "webrtc_cpu_ms_per_s": results["webrtc_m3"]["cpu_ms_per_s"],
        "silero_cpu_ms_per_s": results["silero"]["cpu_ms_per_s"],
        "best_detector": best,
        "recommended_default": best.split("_")[0],
        "detectors": results,
        "wall_s": round(time.perf_counter() - t_start, 1),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
