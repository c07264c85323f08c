"""Does counting the VAD's stop timer from the sound's end answer sooner without stopping inside
people's sentences?

pipecat's state machine counts ``stop_secs`` from the first window its model (and smoothed volume)
calls no speech, which comes after the sound has ended; ``stop_timer="sound"`` counts the quiet
since the sound's end as well (``pipeline.vad.InlineAnalysis``). Each timer runs offline over every
clip (no event loop, so no lateness: the timer alone), Silero as calls use it, 8 kHz G.711 mu-law,
20 ms frames, 0.5 s of silence before and 1.5 s after:

* **stops inside a clip**: each clip is one line a person said, so every stop before its last is
  one a call could take for the turn's end (a comma, a breath, two sentences in one line);
* **stop after the sound's end** (ms, p50/p95/p99): the last stop, less where the clip's sound
  ends (the last 8 ms quarter louder than a quarter of the way from the recording's noise floor
  to its speech level, and than -50 dBFS: the rule the VAD's own edges use, here over the whole
  recording without the added silence, so it depends on neither timer).

Clips: the human development set (``parley data human``; ``--manifest``, every ``--step``-th
clip) and, beside it, flite voices saying ``PHRASES`` (synthetic: the voices the benchmarks' calls
use). Timers: ``--timers`` as ``KIND@STOP_SECS`` (default pipecat's at 0.2 s, and the sound's at
0.2, 0.22 and 0.24 s, to compare them at equal stops inside clips).

    .venv/bin/python benchmarks/bench_vad_stop.py [--manifest data/stt/human2/human.tsv] [--step 1]

Prints one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from pathlib import Path

import numpy as np
import soxr

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import git_sha, percentiles, sound_end_s  # noqa: E402
from pipecat.audio.vad.vad_analyzer import VADState  # noqa: E402

from harness.flite import synthesize_flite  # noqa: E402
from pipeline.audio.g711 import ulaw_decode, ulaw_encode  # noqa: E402
from pipeline.audio.wav import read_wav  # noqa: E402
from pipeline.vad import make_vad_analyzer  # noqa: E402

RATE_HZ = 8000
FRAME = RATE_HZ // 50
PHRASES = (
    ("slt", "hello, i would like to book a cleaning for next tuesday"),
    ("rms", "my number is four one five, five five five, zero one nine nine"),
    ("awb", "yes please"),
    ("kal", "no thank you, that is all"),
    ("slt", "can you tell me what time you open on saturday"),
    ("rms", "i need to change my appointment, something came up at work"),
    ("awb", "my name is maria lopez"),
    ("kal", "what are your opening hours"),
)
DEFAULT_TIMERS = ("model@0.2", "sound@0.2", "sound@0.22", "sound@0.24")


async def stops_in(audio: np.ndarray, timer: str) -> list[float]:
    """Where (seconds into ``audio``) the analyzer called each stop."""
    kind, stop_s = timer.split("@")
    analyzer = make_vad_analyzer("silero", RATE_HZ, stop_secs=float(stop_s), silero_dispatch="inline",
                                 stop_timer=kind)  # type: ignore[arg-type]
    analyzer.set_sample_rate(RATE_HZ)
    before, stops = VADState.QUIET, []
    for i in range(0, audio.size - FRAME + 1, FRAME):
        state = await analyzer.analyze_audio(audio[i:i + FRAME].tobytes())
        if before in (VADState.SPEAKING, VADState.STOPPING) and state == VADState.QUIET:
            stops.append((i + FRAME) / RATE_HZ)
        before = state
    return stops


def phone(pcm: np.ndarray, rate: int) -> tuple[np.ndarray, float | None]:
    """8 kHz mu-law, with 0.5 s of silence before and 1.5 s after, and where its sound ends."""
    x = soxr.resample(pcm, rate, RATE_HZ) if rate != RATE_HZ else pcm
    x = ulaw_decode(ulaw_encode(np.asarray(x, np.int16)))
    end = sound_end_s(x, RATE_HZ)
    return (np.concatenate([np.zeros(RATE_HZ // 2, np.int16), x, np.zeros(3 * RATE_HZ // 2, np.int16)]),
            None if end is None else end + 0.5)


def human_clips(manifest: Path, step: int) -> list[tuple[np.ndarray, float | None]]:
    rows = [line.split("\t")[0] for line in manifest.read_text().splitlines() if line.strip()][::step]
    return [phone(*read_wav(manifest.parent / path)) for path in rows]


async def flite_clips() -> list[tuple[np.ndarray, float | None]]:
    return [phone(*await synthesize_flite(text, voice)) for voice, text in PHRASES]


async def score(clips: list[tuple[np.ndarray, float | None]], timer: str) -> dict:
    inside, split, none, after = 0, 0, 0, []
    for audio, end in clips:
        stops = await stops_in(audio, timer)
        if not stops or end is None:
            none += 1
            continue
        inside += len(stops) - 1
        split += len(stops) > 1
        after.append((stops[-1] - end) * 1000)
    return {"clips": len(clips), "stops_inside": inside, "clips_with_stops_inside": split, "no_stop": none,
            "stop_after_sound_end_ms": percentiles(after, digits=0, count=False)}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--manifest", type=Path, default=Path("data/stt/human2/human.tsv"),
                        help="the human development set's manifest (parley data human)")
    parser.add_argument("--step", type=int, default=1, help="every STEP-th clip of the manifest")
    parser.add_argument("--timers", nargs="+", default=list(DEFAULT_TIMERS), help="KIND@STOP_SECS, KIND model or sound")
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    from loguru import logger
    logger.remove()
    people, synthetic = human_clips(args.manifest, args.step), await flite_clips()
    out: dict = {"bench": "vad_stop", "git": git_sha(), "manifest": str(args.manifest), "step": args.step}
    for timer in args.timers:
        out[timer] = {"people": await score(people, timer), "flite": await score(synthetic, timer)}
        print(f"{timer}: {out[timer]}", file=sys.stderr, flush=True)
    print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main())
