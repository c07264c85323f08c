"""How long from the LLM's first token to the agent's first audio byte?

One seeded run, two pipelines side by side, each: ``build_agent`` (llm.backend openai: the
OpenAI-compatible service between its turn guards) -> ``EspeakTTSService`` (8 kHz) -> a minimal
output transport (pipecat's ``BaseOutputTransport`` with 20 ms chunks; its ``write_audio_frame``
is the wire). The LLM is ``ScriptedChatServer`` on loopback, streaming receptionist answers as
word tokens at ``--token-ms`` per token against an absolute clock. The pipelines differ only in
the TTS's text aggregation: ``phrase`` (parley's default: cut after , ; : once 12 characters have
gathered), ``sentence`` (pipecat's stock behaviour, the baseline) and ``phrase_min4`` (phrases
of 4 characters: "Sure," is spoken on its own; shows what the first-phrase rule costs).

Per turn, from two probe processors (one after the agent, one after the TTS: pipecat observers
run behind a queue, so their clock reads late) and the transport (``time.perf_counter_ns``):

* ``first_token_to_audio_ms``: the LLM's first ``LLMTextFrame`` arrives after the agent -> the
  first audio byte reaches the transport's ``write_audio_frame``. Bounded below by how long the first
  phrase (or sentence) takes to stream in: the answer cannot be spoken before its words exist.
* ``first_token_to_tts_audio_ms``: the same, to the first ``TTSAudioRawFrame`` leaving the TTS.
* ``release_to_audio_ms``: the token that completed the first phrase (the last token the LLM
  pushed before the TTS's first audio) -> the first audio byte at the transport: what the path
  itself adds (aggregation, synthesis start, hops, the transport's chunking).

    .venv/bin/python benchmarks/bench_llm_to_audio.py [--seed 0] [--turns 24] [--token-ms 30]

Prints one JSON line (git sha, config, p50/p95/p99 per mode, the target verdicts).
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

from loguru import logger  # noqa: E402
from pipecat.frames.frames import (  # noqa: E402
    LLMContextFrame,
    LLMFullResponseEndFrame,
    LLMTextFrame,
    OutputAudioRawFrame,
    StartFrame,
    TTSAudioRawFrame,
    TTSStoppedFrame,
)
from pipecat.pipeline.pipeline import Pipeline  # noqa: E402
from pipecat.pipeline.worker import PipelineParams, PipelineWorker  # noqa: E402
from pipecat.processors.aggregators.llm_context import LLMContext  # noqa: E402
from pipecat.processors.frame_processor import FrameProcessor  # noqa: E402
from pipecat.transports.base_output import BaseOutputTransport  # noqa: E402
from pipecat.transports.base_transport import TransportParams  # noqa: E402
from pipecat.workers.runner import WorkerRunner  # noqa: E402

from agent.factory import build_agent  # noqa: E402
from harness.scripted_llm import ScriptedChatServer, ScriptedReply  # noqa: E402
from agent.spec import parse_spec  # noqa: E402
from pipeline.services.espeak_tts import EspeakTTSService  # noqa: E402

RATE_HZ = 8000
TARGET_P50_MS = 40.0
ANSWERS = (
    "Sure, we are open Monday to Friday from eight to six, and Saturday from nine to one.",
    "Yes, there is free parking behind the building, and the entrance is on Mill Lane.",
    "We are at 42 River Street, next to the public library, on the second floor.",
    "Of course, I can take a message for you. May I have your name, please?",
    "A standard cleaning and check up costs ninety five dollars without insurance.",
    "For a dental emergency during opening hours, please come straight in.",
    "We accept most major dental insurance plans, including Delta Dental, Cigna and Aetna.",
    "Thank you, Ann. I have passed on your message, and someone will call you back today.",
)
SPEC = """
name: Bench reception
persona: You are a receptionist.
greeting: Hello.
llm: {backend: openai, model: bench, base_url: "URL", filler_after_s: 5, timeout_s: 10}
"""


class WireTransport(BaseOutputTransport):
    """A transport whose wire is a timestamp: the first audio byte of each turn."""

    def __init__(self, **kwargs):
        super().__init__(TransportParams(audio_out_enabled=True, audio_out_sample_rate=RATE_HZ,
                                         audio_out_10ms_chunks=2, audio_out_auto_silence=False),
                         **kwargs)
        self.first_write_ns: int | None = None

    async def start(self, frame: StartFrame):
        await super().start(frame)
        await self.set_transport_ready(frame)

    async def write_audio_frame(self, frame: OutputAudioRawFrame) -> bool:
        if self.first_write_ns is None and any(frame.audio):
            self.first_write_ns = time.perf_counter_ns()
        return True


class Timeline:
    """Per turn: first token, last token before the first audio, first TTS audio."""

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self.first_token_ns: int | None = None
        self.last_token_ns: int | None = None
        self.release_ns: int | None = None
        self.tts_audio_ns: int | None = None


class TokenProbe(FrameProcessor):
    """Between the agent and the TTS: when each LLM token arrives (one hop after the LLM)."""

    def __init__(self, timeline: Timeline):
        super().__init__()
        self._t = timeline

    async def process_frame(self, frame, direction):
        await super().process_frame(frame, direction)
        if isinstance(frame, LLMTextFrame) and frame.text.strip():
            now = time.perf_counter_ns()
            if self._t.first_token_ns is None:
                self._t.first_token_ns = now
            if self._t.tts_audio_ns is None:
                self._t.last_token_ns = now
        await self.push_frame(frame, direction)


class AudioProbe(FrameProcessor):
    """Between the TTS and the transport: the first audio of a turn leaving the TTS, and the
    end of the greeting (``TTSStoppedFrame``) and of each response (the TTS lets
    ``LLMFullResponseEndFrame`` go only after the response's audio)."""

    def __init__(self, timeline: Timeline):
        super().__init__()
        self._t = timeline
        self.greeted = asyncio.Event()
        self.done = asyncio.Event()

    async def process_frame(self, frame, direction):
        await super().process_frame(frame, direction)
        if isinstance(frame, TTSAudioRawFrame) and self._t.tts_audio_ns is None \
                and self._t.first_token_ns is not None:
            self._t.tts_audio_ns = time.perf_counter_ns()
            self._t.release_ns = self._t.last_token_ns
        elif isinstance(frame, TTSStoppedFrame):
            self.greeted.set()
        elif isinstance(frame, LLMFullResponseEndFrame):
            self.done.set()
        await self.push_frame(frame, direction)


def percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)

    def pick(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)

    return {"p50": pick(0.5), "p95": pick(0.95), "p99": pick(0.99), "n": len(ordered)}


MODES = (  # name, TTS aggregation, min_phrase_chars
    ("phrase", "phrase", 12),  # parley's default (build_pipeline)
    ("sentence", "sentence", 12),  # pipecat's stock behaviour: the baseline
    ("phrase_min4", "phrase", 4),  # what a shorter first phrase ("Sure, ...") would give
)


async def run_mode(mode: str, base_url: str, turns: list[str], warmup: int) -> dict:
    _, aggregation, min_chars = next(m for m in MODES if m[0] == mode)
    spec = parse_spec(SPEC.replace("URL", base_url))
    agent = build_agent(spec, call_sid=f"bench-{mode}", params={}, env={})
    tts = EspeakTTSService(sample_rate=RATE_HZ, aggregation=aggregation,
                           min_phrase_chars=min_chars)
    wire = WireTransport()
    timeline = Timeline()
    worker = PipelineWorker(
        Pipeline([agent, TokenProbe(timeline), tts, end := AudioProbe(timeline), wire]),
        params=PipelineParams(audio_in_sample_rate=RATE_HZ, audio_out_sample_rate=RATE_HZ),
        enable_rtvi=False, idle_timeout_secs=None,
    )
    runner = WorkerRunner()
    results: dict[str, list[float]] = {"first_token_to_audio_ms": [],
                                       "first_token_to_tts_audio_ms": [],
                                       "release_to_audio_ms": []}

    async def drive() -> None:
        try:
            await turns_loop()
        finally:
            await worker.cancel()

    async def turns_loop() -> None:
        async with asyncio.timeout(10):
            await end.greeted.wait()
        context = LLMContext()
        for i, _ in enumerate(turns):
            end.done.clear()
            timeline.reset()
            wire.first_write_ns = None
            context.add_message({"role": "user", "content": f"question {i}"})
            await worker.queue_frame(LLMContextFrame(context=context))
            async with asyncio.timeout(15):
                await end.done.wait()
            await asyncio.sleep(0.05)  # let the last chunks drain to the wire
            if i < warmup:
                continue
            t = timeline
            if not (t.first_token_ns and t.tts_audio_ns and t.release_ns and wire.first_write_ns):
                raise RuntimeError(f"{mode} turn {i}: incomplete timeline {vars(t)}, "
                                   f"wire {wire.first_write_ns}")
            results["first_token_to_audio_ms"].append((wire.first_write_ns - t.first_token_ns) / 1e6)
            results["first_token_to_tts_audio_ms"].append((t.tts_audio_ns - t.first_token_ns) / 1e6)
            results["release_to_audio_ms"].append((wire.first_write_ns - t.release_ns) / 1e6)

    await runner.add_workers(worker)
    await asyncio.gather(runner.run(), drive())
    return {name: percentiles(values) for name, values in results.items()}


async def main_async(args) -> dict:
    rng = random.Random(args.seed)
    turns = [rng.choice(ANSWERS) for _ in range(args.turns + args.warmup)]
    queue: list[str] = []

    def script(_body: dict) -> ScriptedReply:
        return ScriptedReply(text=queue.pop(0), token_interval_s=args.token_ms / 1000)

    out: dict[str, object] = {}
    async with ScriptedChatServer(script) as server:
        for mode, _, _ in MODES:
            queue[:] = list(turns)
            out[mode] = await run_mode(mode, server.base_url, turns, args.warmup)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--turns", type=int, default=24)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--token-ms", type=float, default=30.0)
    args = parser.parse_args()
    logger.remove()
    logger.add(sys.stderr, level="WARNING")
    logging.basicConfig(level=logging.WARNING)
    started = time.perf_counter()
    results = asyncio.run(main_async(args))
    sha = git_sha()
    phrase, sentence = results["phrase"], results["sentence"]
    out = {
        "bench": "llm_to_audio", "git": sha, "seed": args.seed, "turns": args.turns,
        "warmup": args.warmup, "token_ms": args.token_ms, "sample_rate_hz": RATE_HZ,
        "llm": "OpenAICompatLLMService <- ScriptedChatServer (SSE over loopback)",
        "tts": "EspeakTTSService", "measured_to": "BaseOutputTransport.write_audio_frame",
        "phrase": phrase, "sentence": sentence, "phrase_min4": results["phrase_min4"],
        "target_p50_ms": TARGET_P50_MS,
        "first_token_target_met": phrase["first_token_to_audio_ms"]["p50"] <= TARGET_P50_MS,
        "release_target_met": phrase["release_to_audio_ms"]["p50"] <= TARGET_P50_MS,
        "phrase_saves_p50_ms": round(sentence["first_token_to_audio_ms"]["p50"]
                                     - phrase["first_token_to_audio_ms"]["p50"], 2),
        "wall_s": round(time.perf_counter() - started, 1),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
