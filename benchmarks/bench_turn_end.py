"""Does the end of turn wait out a comma? The hold, the plain timer and smart-turn v3, one run.

    .venv/bin/python benchmarks/bench_turn_end.py [--voices flite:slt flite:awb espeak:en-us+f3]

Each call is one caller sentence with a comma pause in it ("hello, I would like to check my
order"; flite and espeak-ng pause 250-500 ms there), or one without, then silence, to three
``parley serve`` processes that differ only in ``--turn``: ``hold`` (the silence timer, held
450 ms more on an unfinished transcript; the default), ``silence`` (the 200 ms timer alone) and
``smart-turn`` (pipecat's smart-turn v3 model). The same call goes to the three at once.

- false turn ends: calls whose one sentence the server split into more than one turn, and of
  those, the calls the agent still answered whole (the caller talked over the reply to the first
  part, so the agent took that turn back and heard both parts as one);
- v2v p50/p95/p99: end of the caller's speech to the first agent audio byte, for the sentences
  with and without a comma apart (the hold must not slow a finished sentence down).

Prints one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from common import git_sha  # noqa: E402

from benchmarks.bench_conversations import Script, Server, _pct, place  # noqa: E402

COMMA = ["hello, I would like to check my order", "yes, my name is anna lee",
         "hi, is this the dental office", "well, I was wondering about your opening hours",
         "so, I need to leave a message", "okay, and where are you located",
         "hello, can you hear me", "um, I think I need to talk to a person"]
PLAIN = ["what are your opening hours", "where are you located", "is there parking",
         "I would like to leave a message"]
TURNS = ("hold", "silence", "smart-turn")


async def main_async(args: argparse.Namespace) -> dict:
    logs = tempfile.TemporaryDirectory(prefix="parley-bench-turn-")
    wavs = Path(logs.name) / "wav"
    wavs.mkdir()
    servers = {t: Server(f"turn-{t}", ["--turn", t], logs.name, {}) for t in TURNS}
    rows: dict[str, list[dict]] = {t: [] for t in TURNS}
    try:
        await asyncio.gather(*(s.wait_ready(timeout_s=180) for s in servers.values()))
        for i, text in enumerate(COMMA + PLAIN):
            for voice_name in args.voices:
                script = Script("receptionist", "comma" if text in COMMA else "plain", [text])
                got = await asyncio.gather(*(place(servers[t], script, voice_name, wavs, i)
                                             for t in TURNS))
                for t, row in zip(TURNS, got):
                    rows[t].append(row)
                print(f"{text!r} ({voice_name}): " + ", ".join(
                    f"{t} {len(r['heard'])} turn(s)" for t, r in zip(TURNS, got)),
                    file=sys.stderr, flush=True)
    finally:
        for s in servers.values():
            s.stop()
        logs.cleanup()
    out: dict = {"bench": "turn_end", "voices": args.voices,
                 "git": git_sha()}
    for t, rs in rows.items():
        comma = [r for r in rs if r["goal"] == "comma"]
        plain = [r for r in rs if r["goal"] == "plain"]
        out[t] = {
            "comma_calls": len(comma),
            "false_turn_ends": sum(r["false_turn_ends"] > 0 for r in comma),
            "false_turn_ends_plain": sum(r["false_turn_ends"] > 0 for r in plain),
            # split calls whose every fragment's answer the agent took back (the caller talked
            # over it) and answered the sentence whole
            "split_answered_whole": sum(0 < r["false_turn_ends"] <= r["continued"]
                                        for r in comma),
            "v2v_ms_comma": _pct([r["v2v_ms"][-1] for r in comma if r["v2v_ms"]]),
            "v2v_ms_plain": _pct([r["v2v_ms"][0] for r in plain if r["v2v_ms"]]),
            "split_examples": [r["heard"] for r in comma if r["false_turn_ends"]][:4],
        }
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--voices", nargs="+", default=["flite:slt", "flite:awb", "espeak:en-us+f3"])
    args = ap.parse_args(argv)
    print(json.dumps(asyncio.run(main_async(args))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
