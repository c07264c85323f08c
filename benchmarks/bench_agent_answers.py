"""Does the embedded agent answer right, or say it does not know? Precision and recall on the
example agents' question sets, and the requests that carry their slots.

    python benchmarks/bench_agent_answers.py              # one JSON line
    python benchmarks/bench_agent_answers.py --misses     # and every wrong or missing answer (stderr)
    python benchmarks/bench_agent_answers.py --words      # match by words only (no sentence encoder)

Question sets: tests/agent/data/*_questions.yaml (``harness.answer_sets`` says what is counted).
Text in, no speech: this is the agent's own error, before any recogniser's.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import ROOT, git_sha  # noqa: E402

from harness.answer_sets import load_answer_set, score_answers, score_mixed_initiative  # noqa: E402

DATA = ROOT / "tests" / "agent" / "data"
SETS = sorted(DATA.glob("*_questions.yaml")) + sorted(DATA.glob("*_heldout.yaml"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--words", action="store_true", help="no sentence encoder: BM25 words only")
    ap.add_argument("--misses", action="store_true", help="print wrong and missing answers to stderr")
    args = ap.parse_args()
    encoder = None
    if not args.words:
        from agent.semantic import SentenceEncoder
        encoder = SentenceEncoder.default()
    out: dict = {"bench": "agent_answers", "git": git_sha(),
                 "matching": "words" if encoder is None else "semantic+words", "sets": {}}
    t0 = time.perf_counter_ns()
    for path in SETS:
        qs = load_answer_set(path)
        report = score_answers(qs, encoder)
        mixed = score_mixed_initiative(qs, encoder)
        name = path.stem.removesuffix("_questions")
        out["sets"][name] = {**report.summary(),
                             "mixed_initiative": f"{sum(m.ok for m in mixed)}/{len(mixed)}"}
        if args.misses:
            for q, want, got in report.wrong:
                print(f"{name} WRONG  {q!r}: {got} (want {want})", file=sys.stderr)
            for q, want, got in report.missed:
                if (q, want, got) not in report.wrong:
                    print(f"{name} MISSED {q!r}: {got} (want {want})", file=sys.stderr)
            for m in mixed:
                if not m.ok:
                    print(f"{name} MIXED  {m.turn.say!r}: {m.why}; {m.replies}", file=sys.stderr)
    out["elapsed_s"] = round((time.perf_counter_ns() - t0) / 1e9, 1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
