"""Live recognition in real calls: pocketsphinx vs parley's SSM recogniser (greedy and beam + LM).

Question: in a real call (Twilio Media Streams over loopback, 8 kHz mu-law, the server's VAD
cutting turns), which recogniser hears the caller best, and how soon after the VAD's stop is
the final transcript there?

Three ``parley serve`` processes run side by side, identical but for the recogniser:
``--stt sphinx``, ``--stt ssm`` with greedy finals, and ``--stt ssm`` with the beam search and
word LM. The scripted caller (harness/callers/twilio.py) speaks the same caller phrases, with flite
voices, to each in turn (calls alternate between the servers, so machine noise hits all alike).
Per engine: corpus WER and CER of the server's transcripts against what was said (the same
``normalize_text`` for all), and the final-transcript latency at p50/p95/p99 (``final_ms``: from
the VAD's stop signal to the final transcript, the server's ``stt_final - vad_stop`` stages; and
the p50 from the end of speech, which adds the VAD's 200 ms silence timer). One JSON line.

    .venv/bin/python benchmarks/bench_stt_live.py                # 10 phrases x voices slt, awb
    .venv/bin/python benchmarks/bench_stt_live.py --voices slt --phrases 4     # a smoke run

The phrases are not from the text generator the LM was built from; two carry surnames outside
the lexicon. ``slt`` is a voice the SSM model never trained on; ``awb`` is one it did.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from common import git_sha  # noqa: E402

from benchmarks.serve_process import ServeProcess, free_port  # noqa: E402
from harness.callers.twilio import CallerConfig, CallerUtterance, run_call  # noqa: E402

TOKEN = "bench-token-" + "0" * 20
PHRASES = [
    "hi i'm calling about my internet bill",
    "my name is margaret kowalczyk",
    "i need to move my appointment to next tuesday",
    "the order number is seven two nine four",
    "can i speak to a manager please",
    "my card was charged twice last month",
    "what time do you open on saturday",
    "this is daniel okonkwo from the insurance company",
    "yes that's correct thank you",
    "please cancel my subscription",
]
ENGINES = {  # name -> serve arguments; "greedy" is started through this script (see _serve)
    "pocketsphinx": ["--stt", "sphinx"],
    "ssm_greedy": ["--stt", "ssm", "--decoder", "greedy"],
    "ssm_beam": ["--stt", "ssm", "--decoder", "beam"],
}


class Server(ServeProcess):
    """``parley serve`` in a child process: this script in --serve mode, which sets the SSM
    decoder and hands the rest of the command line to deploy.cli."""

    def __init__(self, name: str, extra: list[str], db_dir: str):
        port = free_port()
        super().__init__(name, [str(Path(__file__).resolve()), "--serve", *extra, "--port", str(port),
                                "--log-level", "WARNING", "--db", str(Path(db_dir) / f"{name}.db")],
                         port=port, log_path=Path(db_dir) / f"{name}.log",
                         env={"TWILIO_AUTH_TOKEN": TOKEN, "OMP_NUM_THREADS": "1"})

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/twilio/stream"


async def one_call(server: Server, phrases: list[str], voice: str) -> list[dict]:
    """The call's turns; phrases it never got to say (the agent hung up, e.g. on a misheard
    "bye") come back with no transcript, so they count as unheard, not as absent."""
    report = await run_call(CallerConfig(
        url=server.url, auth_token=TOKEN, voice=voice,
        utterances=tuple(CallerUtterance(text=p) for p in phrases), timeout_s=40 + 10 * len(phrases)))
    turns = []
    for t in report.turns[: len(phrases)]:
        lat = t.latency_ms       # ms after the end of caller speech, server's clock
        final = (lat.stt_final - lat.vad_stop if lat.stt_final is not None
                 and lat.vad_stop is not None else None)
        turns.append({"voice": voice, "caller_said": t.caller_said,
                      "agent_transcript": t.agent_transcript, "final_ms": final,
                      "end_of_speech_to_final_ms": lat.stt_final})
    for p in phrases[len(turns):]:
        turns.append({"voice": voice, "caller_said": p, "agent_transcript": None, "final_ms": None,
                      "end_of_speech_to_final_ms": None, "lost": True})
    return turns


def pct(values: list[float | None]) -> dict[str, float | None]:
    v = np.array([x for x in values if x is not None], dtype=float)
    if v.size == 0:
        return {"p50": None, "p95": None, "p99": None}
    return {k: round(float(np.percentile(v, q)), 1) for k, q in (("p50", 50), ("p95", 95),
                                                                  ("p99", 99))}


def score(turns: list[dict]) -> dict[str, object]:
    from ssm_engine.stt.decode import cer, wer
    from ssm_engine.stt.text import normalize_text

    refs = [normalize_text(t["caller_said"]) for t in turns]
    hyps = [normalize_text(t["agent_transcript"] or "") for t in turns]
    lat = pct([t["final_ms"] for t in turns])
    return {"turns": len(turns), "wer": round(wer(refs, hyps), 4), "cer": round(cer(refs, hyps), 4),
            **{f"final_ms_{k}": v for k, v in lat.items()},
            "end_of_speech_to_final_ms_p50": pct([t["end_of_speech_to_final_ms"]
                                                  for t in turns])["p50"],
            "unheard_turns": sum(1 for h in hyps if not h),
            "lost_turns": sum(1 for t in turns if t.get("lost"))}


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--voices", default="slt,awb", help="flite voices, comma-separated")
    ap.add_argument("--phrases", type=int, default=len(PHRASES), help="how many of the phrases")
    ap.add_argument("--per-call", type=int, default=5, help="phrases per call")
    ap.add_argument("--show", action="store_true", help="also print every turn (stderr)")
    args = ap.parse_args()
    phrases = PHRASES[: args.phrases]
    calls = [(v, phrases[i:i + args.per_call]) for v in args.voices.split(",")
             for i in range(0, len(phrases), args.per_call)]
    db_dir = tempfile.TemporaryDirectory(prefix="bench-stt-live-")   # call records, thrown away
    servers = {name: Server(name, extra, db_dir.name) for name, extra in ENGINES.items()}
    turns: dict[str, list[dict]] = {name: [] for name in servers}
    try:
        await asyncio.gather(*(s.wait_ready() for s in servers.values()))
        for s in servers.values():       # warm-up: loads models, first-call costs
            await one_call(s, ["hello"], "slt")
        for voice, group in calls:
            for name, server in servers.items():
                turns[name] += await one_call(server, group, voice)
    finally:
        for s in servers.values():
            s.stop()
        db_dir.cleanup()
    if args.show:
        for name, ts in turns.items():
            for t in ts:
                print(f"{name:>13} {t['voice']}: {t['caller_said']!r} -> "
                      f"{t['agent_transcript']!r}", file=sys.stderr)
    sha = git_sha()
    out: dict[str, object] = {"bench": "stt_live", "git": sha, "voices": args.voices,
                              "phrases": len(phrases), "loadavg_1m": round(os.getloadavg()[0], 2)}
    for name, ts in turns.items():
        for k, v in score(ts).items():
            out[f"{name}_{k}"] = v
        for voice in args.voices.split(","):
            sub = [t for t in ts if t["voice"] == voice]
            out[f"{name}_{voice}_wer"] = score(sub)["wer"] if sub else None
    print(json.dumps(out))


def _serve(argv: list[str]) -> int:
    """``--serve [--decoder greedy|beam] SERVE-ARGS``: run ``parley serve`` with that decoder."""
    from deploy.cli import main as parley

    if "--decoder" in argv:
        i = argv.index("--decoder")
        argv = [*argv[:i], "--stt-decoder", argv[i + 1], *argv[i + 2:]]
    return parley(["serve", *argv])


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        sys.exit(_serve(sys.argv[2:]))
    asyncio.run(main())
