"""How fast does parley's SSM voice start speaking, beside espeak-ng?

One seeded run, both engines as their pipecat services run them (``harness.tts_eval``'s voices:
the SSM voice through ``SSMVoiceEngine``, one thread, earliest deadline first; espeak-ng through
its library on worker threads), at 8 kHz, the phone rate, on one torch thread:

* ``ttfa_ms``: a sentence handed to the engine -> its first audio chunk on the event loop, one
  stream at a time (p50/p95/p99 over ``--repeats`` passes of the sentences, the two engines
  alternating sentence by sentence so both see the same machine load);
* ``ttfa_ms_16``: the same with ``--concurrency`` (16) streams started together, each speaking
  to its end, and ``streams_realtime_16``: audio made / wall time meanwhile (how many real-time
  streams the engine kept up with);
* ``rtf``: wall time to synthesize a sentence alone / its duration.

Targets (issue 5): SSM ttfa p50 <= 15 ms, p99 <= 30 ms, rtf <= 0.1.

    .venv/bin/python benchmarks/bench_tts.py [--model models/tts] [--seed 0] [--repeats 3]

Prints one JSON line (git sha, config, numbers, verdicts).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from common import git_sha  # noqa: E402

import torch  # noqa: E402

from pipeline.engines.ssm_voice import DEFAULT_MODEL_DIR  # noqa: E402
from harness.tts_eval import make_voice, percentiles_ms, timed_synthesis  # noqa: E402

SENTENCES = (
    "Thank you for calling, how can I help you today?",
    "Your order ships on Tuesday.",
    "Sure, let me check that for you.",
    "I can book you in for three thirty tomorrow afternoon.",
    "The total comes to forty two dollars and fifty cents.",
    "Could you spell your last name for me, please?",
    "One moment while I pull up your account.",
    "Your appointment with Doctor Lee is on May third.",
    "I'm sorry, I didn't catch that.",
    "We're open from nine to five, Monday through Friday.",
    "Is there anything else I can help you with?",
    "I'll transfer you to a member of our team now.",
    "Your refund should arrive within five business days.",
    "Great, you're all set.",
    "Please hold on for just a second.",
    "The package was delivered to your front door this morning.",
    "Would you like me to send a confirmation by text message?",
    "Your account number ends in four four one seven.",
    "Okay, I have updated your address.",
    "Have a wonderful day, goodbye!",
)


async def run(args) -> dict:
    rng = random.Random(args.seed)
    sentences = list(SENTENCES)
    voices = {"ssm": make_voice("ssm", 8000, model_dir=args.model, concurrency=args.concurrency),
              "espeak": make_voice("espeak", 8000, concurrency=args.concurrency)}
    model = voices["ssm"].engine.voice.model
    info = {"ssm_params": sum(p.numel() for p in model.parameters()),
            "ssm_trained": bool(model.config.feat_mean)}  # an untrained voice has no feature stats
    try:
        for v in voices.values():  # warm-up
            for s in sentences[:3]:
                await timed_synthesis(v, s)
        single = {k: [] for k in voices}
        for _ in range(args.repeats):
            rng.shuffle(sentences)
            for s in sentences:
                for name, v in voices.items():
                    single[name].append(await timed_synthesis(v, s))
        conc = {k: {"ttfa": [], "audio_s": 0.0, "wall_s": 0.0} for k in voices}
        for _ in range(args.repeats):
            batch = [rng.choice(SENTENCES) for _ in range(args.concurrency)]
            for name, v in voices.items():
                t0 = time.perf_counter()
                results = await asyncio.gather(*(timed_synthesis(v, s) for s in batch))
                conc[name]["wall_s"] += time.perf_counter() - t0
                conc[name]["ttfa"] += [r.ttfa_s for r in results]
                conc[name]["audio_s"] += sum(len(r.pcm) for r in results) / 8000
    finally:
        for v in voices.values():
            v.close()
    out = dict(info)
    for name in voices:
        p50, p95, p99 = percentiles_ms([t.ttfa_s for t in single[name]])
        c50, c95, c99 = percentiles_ms(conc[name]["ttfa"])
        audio_s = sum(len(t.pcm) for t in single[name]) / 8000
        out.update({
            f"{name}_ttfa_ms_p50": p50, f"{name}_ttfa_ms_p95": p95, f"{name}_ttfa_ms_p99": p99,
            f"{name}_ttfa_ms_{args.concurrency}_p50": c50,
            f"{name}_ttfa_ms_{args.concurrency}_p95": c95,
            f"{name}_ttfa_ms_{args.concurrency}_p99": c99,
            f"{name}_rtf": round(sum(t.wall_s for t in single[name]) / audio_s, 4),
            f"{name}_streams_realtime_{args.concurrency}":
                round(conc[name]["audio_s"] / conc[name]["wall_s"], 2),
            f"{name}_audio_s": round(audio_s, 1),
        })
    out["ssm_meets_ttfa_p50_15ms"] = out["ssm_ttfa_ms_p50"] <= 15.0
    out["ssm_meets_ttfa_p99_30ms"] = out["ssm_ttfa_ms_p99"] <= 30.0
    out["ssm_meets_rtf_0.1"] = out["ssm_rtf"] <= 0.1
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=str(DEFAULT_MODEL_DIR), help="the SSM voice folder")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=3, help="passes over the sentences")
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    torch.set_num_threads(1)
    logging.getLogger().setLevel(logging.WARNING)
    numbers = asyncio.run(run(args))
    sha = git_sha()
    print(json.dumps({"bench": "tts", "git": sha, "seed": args.seed, "repeats": args.repeats,
                      "sentences": len(SENTENCES), "rate_hz": 8000, "torch_threads": 1,
                      "concurrency": args.concurrency, "model": str(args.model), **numbers}))


if __name__ == "__main__":
    main()
