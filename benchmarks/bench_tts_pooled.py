"""Over every run that judged it, is an SSM voice as clear on the phone line as its teacher and Piper?

    .venv/bin/python benchmarks/bench_tts_pooled.py \
        /tmp/logs/tts_errors42.json:ssm-joe-pf4 /tmp/logs/tts_errors42b.json:ssm-joe \
        /tmp/logs/tts_errors43.json:ssm-joe --against teacher-joe piper-joe

Each argument is a `bench_tts.py --errors` file and the engine in it that is the voice under
test (its name differs from run to run when a run heard a candidate beside the shipped voice).
One run's ratio to the teacher moves by a tenth from one draw of fresh sentences to the next;
runs on different fresh sentences (`--fresh-from`) together judge more of them. Sentences are
pooled by their text (a sentence several runs judged counts once, with all its renderings), and
each ratio carries a 95 % interval from bench_tts's paired bootstrap over sentences (2,000
draws): raw word errors, and errors capped at each sentence's word count (Whisper tiny.en
sometimes loops). Per kind of sentence too ("fresh": the generator's; the hand-written replies:
numbers, names, plain). Prints one JSON line; no audio is made.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from line_scoring import ratio_95  # noqa: E402

DRAWS = 2000


def _load(specs: list[str], against: list[str]) -> dict[str, dict]:
    """{sentence: {"kind", engine: [errors, capped errors, words]}} over every file."""
    pooled: dict[str, dict] = {}
    for spec in specs:
        path, sep, engine = spec.rpartition(":")
        if not sep:
            raise SystemExit(f"{spec}: expected FILE:ENGINE")
        try:
            doc = json.loads(Path(path).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise SystemExit(f"{path}: cannot read a bench_tts --errors file: {exc}") from None
        for name in (engine, *against):
            if name not in doc:
                raise SystemExit(f"{path}: no engine {name!r} (it has {', '.join(doc)})")
        for tag, name in (("voice", engine), *((a, a) for a in against)):
            for row in doc[name]:
                words = len(row["ref"].split())
                entry = pooled.setdefault(row["ref"], {"kind": row["kind"]})
                tally = entry.setdefault(tag, [0, 0, 0])
                tally[0] += row["errors"]
                tally[1] += min(row["errors"], words)
                tally[2] += words
    return pooled


def _ratios(pooled: dict[str, dict], keys: list[str], against: list[str], rng: np.random.Generator) -> dict:
    """WER of the voice over ``keys``, and its ratio to each of ``against`` with the 95 % interval
    of ``line_scoring.ratio_95`` (raw, and errors capped at each sentence's words)."""
    tally = {name: np.array([pooled[k][name] for k in keys], dtype=np.int64) for name in ("voice", *against)}
    voice = tally["voice"]
    out: dict = {"sentences": len(keys), "wer": round(voice[:, 0].sum() / voice[:, 2].sum(), 4),
                 "wer_capped": round(voice[:, 1].sum() / voice[:, 2].sum(), 4)}
    for name in against:
        other = tally[name]
        out[f"{name}_wer"] = round(other[:, 0].sum() / other[:, 2].sum(), 4)
        for col, suffix in ((0, ""), (1, "_capped")):
            if other[:, col].sum() == 0:
                out[f"vs_{name}{suffix}"] = None
                continue
            counts = {name: other[:, [col, 2]], "voice": voice[:, [col, 2]]}
            out[f"vs_{name}{suffix}"] = round(voice[:, col].sum() / other[:, col].sum(), 3)
            out[f"vs_{name}{suffix}_95"] = ratio_95(counts, name, rng, draws=DRAWS)["voice"]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("runs", nargs="+", metavar="FILE:ENGINE", help="bench_tts --errors files and the voice in each")
    ap.add_argument("--against", nargs="+", default=["teacher-joe", "piper-joe"],
                    help="the engines to compare with, in every file (default %(default)s)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    pooled = _load(args.runs, args.against)
    rng = np.random.default_rng(args.seed)
    kinds = sorted({e["kind"] for e in pooled.values()})
    report: dict = {"bench": "tts_pooled", "runs": args.runs, "draws": DRAWS,
                    "all": _ratios(pooled, list(pooled), args.against, rng)}
    replies = [k for k, e in pooled.items() if e["kind"] != "fresh"]
    if replies and len(replies) < len(pooled):
        report["replies"] = _ratios(pooled, replies, args.against, rng)
    for kind in kinds:
        report[kind] = _ratios(pooled, [k for k, e in pooled.items() if e["kind"] == kind], args.against, rng)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
