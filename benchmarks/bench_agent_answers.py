"""Does the agent answer right, or say it does not know? Precision and recall on the example
agents' question sets, and the requests that carry their slots.

    python benchmarks/bench_agent_answers.py              # the embedded agent: one JSON line
    python benchmarks/bench_agent_answers.py --misses     # and every wrong or missing answer (stderr)
    python benchmarks/bench_agent_answers.py --words      # match by words only (no sentence encoder)
    python benchmarks/bench_agent_answers.py --llm-base-url http://127.0.0.1:8000/v1 --llm-model NAME
                                                          # the same sets through an LLM backend

Question sets: tests/agent/data/*_questions.yaml and *_heldout.yaml (``harness.answer_sets`` says
what is counted). Text in, no speech: this is the agent's own error, before any recogniser's.

With ``--llm-base-url`` / ``--llm-model`` each example agent runs with ``llm.backend: openai``
(``--llm-backend bedrock``: Amazon Bedrock, ``--llm-region``; the URL, if given, is its endpoint)
and every question goes to a fresh text call of it (``agent.console.AgentConsole``: the system
prompt with the knowledge, the tools, then the question). The key is read from the
variable ``--llm-api-key-env`` names (default ``OPENAI_API_KEY``; a local server needs none);
``lookup_order`` answers a canned reply. The free-text replies are judged by the facts they state
(``harness.llm_answers``: an entry's numbers and names, its answer word for word, or a sentence
embedding close to its answer; "I don't know" and an offered message count as no answer), then
counted as for the embedded agent. Requests that carry their slots are not scored for an LLM
backend. This repository's build machines have no model server and no network: the LLM figures
are for whoever has an endpoint; tests/agent/test_llm_answers.py runs the same path against the
scripted server (harness/scripted_llm.py) to check the plumbing and the judge, not a model.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import ROOT, git_sha  # noqa: E402

from harness.answer_sets import load_answer_set, score_answers, score_mixed_initiative  # noqa: E402

DATA = ROOT / "tests" / "agent" / "data"
SETS = sorted(DATA.glob("*_questions.yaml")) + sorted(DATA.glob("*_heldout.yaml"))
CANNED_TOOLS = {"lookup_order": {"status": "has shipped", "detail": "It is on its way."}}
"""What a webhook tool answers an LLM backend here (the order API need not run; no day or number
in it, which the judge would read as a knowledge entry's fact)."""


def _llm_spec(spec, args):
    """The example's spec with the backend the command line names."""
    llm = replace(spec.llm, backend=args.llm_backend, model=args.llm_model, base_url=args.llm_base_url,
                  api_key_env=args.llm_api_key_env, region=args.llm_region or spec.llm.region)
    return replace(spec, llm=llm)


def _print_misses(name: str, report, replies: dict[str, str] | None = None) -> None:
    """Each wrong and missing answer, with the reply when there is one (an LLM's)."""
    said = {q: f" {text!r}" for q, text in (replies or {}).items()}
    for q, want, got in report.wrong:
        print(f"{name} WRONG  {q!r}: {got} (want {want}){said.get(q, '')}", file=sys.stderr)
    for q, want, got in report.missed:
        if (q, want, got) not in report.wrong:
            print(f"{name} MISSED {q!r}: {got} (want {want}){said.get(q, '')}", file=sys.stderr)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--words", action="store_true", help="no sentence encoder: BM25 words only")
    ap.add_argument("--misses", action="store_true", help="print wrong and missing answers to stderr")
    ap.add_argument("--llm-base-url", help="an OpenAI-compatible endpoint (.../v1): score an LLM backend")
    ap.add_argument("--llm-model", help="the model the endpoint serves (required for an LLM backend)")
    ap.add_argument("--llm-backend", choices=["openai", "bedrock"], default="openai")
    ap.add_argument("--llm-api-key-env", default="OPENAI_API_KEY",
                    help="the environment variable holding the API key (openai backend)")
    ap.add_argument("--llm-region", help="the AWS region (bedrock backend)")
    args = ap.parse_args()
    use_llm = bool(args.llm_base_url or args.llm_model)
    if use_llm and not args.llm_model:
        ap.error("--llm-model is required with an LLM backend")
    encoder = None
    if not args.words:
        from agent.semantic import SentenceEncoder
        encoder = SentenceEncoder.default()
    out: dict = {"bench": "agent_answers", "git": git_sha(),
                 "matching": "words" if encoder is None else "semantic+words", "sets": {}}
    if use_llm:
        from loguru import logger
        logger.remove()  # pipecat logs every pipeline's start and every request at DEBUG
        out["llm"] = {"backend": args.llm_backend, "model": args.llm_model, "base_url": args.llm_base_url}
    t0 = time.perf_counter_ns()
    for path in SETS:
        qs = load_answer_set(path)
        name = path.stem.removesuffix("_questions")
        if use_llm:
            from harness.llm_answers import score_llm_answers
            run = asyncio.run(score_llm_answers(qs, _llm_spec(qs.spec, args), encoder=encoder,
                                                env=os.environ, tools=CANNED_TOOLS))
            out["sets"][name] = run.report.summary()
            if args.misses:
                _print_misses(name, run.report, run.replies)
            continue
        report = score_answers(qs, encoder)
        mixed = score_mixed_initiative(qs, encoder)
        out["sets"][name] = {**report.summary(),
                             "mixed_initiative": f"{sum(m.ok for m in mixed)}/{len(mixed)}"}
        if args.misses:
            _print_misses(name, report)
            for m in mixed:
                if not m.ok:
                    print(f"{name} MIXED  {m.turn.say!r}: {m.why}; {m.replies}", file=sys.stderr)
    out["elapsed_s"] = round((time.perf_counter_ns() - t0) / 1e9, 1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
