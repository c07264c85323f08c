"""Score a text-to-speech engine: ``parley eval tts``.

    parley eval tts --engine ssm --sentences data/tts/heldout.txt --json
    parley eval tts --engine espeak --sentences FILE --judge pocketsphinx --json
    parley eval tts --engine ssm --sentences FILE --teacher --json    # + the teacher's WER

The sentences file holds one sentence a line (blank lines are skipped). Measured, in one run:

* Time to first audio (``ttfa_ms_p50/p95/p99``): from handing the engine a sentence to its first
  audio chunk reaching the event loop, one stream at a time; then ``--concurrency`` streams
  started together, each speaking to its end (``ttfa_ms_concurrent_p50/p95/p99``), and how many
  real-time streams the engine sustained meanwhile (``concurrent_streams_realtime``: audio made
  / wall time). The SSM voice runs through the service's own engine (one thread, earliest
  deadline first, see ``pipeline.engines.ssm_voice``), espeak-ng through its engine on worker
  threads, as its service does.
* ``rtf``: wall time to synthesize a whole sentence alone / its audio duration.
* Intelligibility: ``asr_wer``, the corpus WER of an independent recognizer (the judge) on the
  synthesized audio against the sentence, after the same ``normalize_text`` as ``parley eval
  stt`` (lower case, punctuation dropped, numbers as words). The reference is, by default, the
  words parley's TTS front end reads the sentence as (``--reference spoken``: phone and order
  numbers digit by digit, as the voice and its teacher say them); ``--reference written`` reads
  the raw sentence as ``parley eval stt`` does (numbers as cardinals: "719" is "seven hundred
  nineteen"), which fits engines with their own number reading. The audio reaches the judge through
  the phone channel by default (``--rate 8000 --codec mulaw``). The judge is Whisper tiny.en
  (``--judge whisper``, default) or pocketsphinx; never parley's own recognizer. ``--teacher``
  also scores the teacher voice's audio of the same sentences (``teacher_asr_wer``): the voice
  the SSM model was distilled from, i.e. the ceiling it is held to.

One JSON object (``--json``); ``TTSEvalResult`` lists the keys.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import textwrap
import threading
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal, Protocol

import numpy as np

from pipeline.errors import PipelineError
from pipeline.voices import DEFAULT_VOICE
from harness.stt_eval import make_engine as make_judge
from harness.stt_eval import phone_channel, report
from ssm_engine.stt.decode import wer
from ssm_engine.stt.text import normalize_text

__all__ = ["TTSEvalResult", "evaluate", "register_cli", "read_sentences", "make_voice", "ENGINES",
           "JUDGES"]

ENGINES = ("ssm", "espeak")
JUDGES = ("whisper", "pocketsphinx")
Codec = Literal["mulaw", "none"]
Reference = Literal["spoken", "written"]


@dataclass
class TTSEvalResult:
    engine: str
    judge: str
    sentences: str
    n: int
    rate_hz: int
    codec: str
    reference: str
    ttfa_ms_p50: float
    ttfa_ms_p95: float
    ttfa_ms_p99: float
    rtf: float
    asr_wer: float
    concurrency: int
    ttfa_ms_concurrent_p50: float
    ttfa_ms_concurrent_p95: float
    ttfa_ms_concurrent_p99: float
    concurrent_streams_realtime: float
    audio_s: float
    teacher_asr_wer: float | None = None
    examples: list[dict[str, str]] = field(default_factory=list)


class Voice(Protocol):
    """An engine under test: ``stream(text)`` yields int16 chunks at ``rate_hz`` as made."""

    rate_hz: int

    def stream(self, text: str) -> AsyncIterator[np.ndarray]: ...

    def close(self) -> None: ...


class _SSMVoice:
    def __init__(self, rate_hz: int, model_dir: str | None, engine=None, compile: bool = False) -> None:
        from pipeline.engines.ssm_voice import DEFAULT_MODEL_DIR, SSMVoiceEngine

        self.engine = engine or SSMVoiceEngine(model_dir or DEFAULT_MODEL_DIR, compile=compile)
        self._owned = engine is None
        self.rate_hz = rate_hz

    async def stream(self, text: str) -> AsyncIterator[np.ndarray]:
        async for chunk in self.engine.open(self.rate_hz).speak(text):
            yield chunk.pcm

    def close(self) -> None:
        if self._owned:
            self.engine.close()


class _EspeakVoice:
    """espeak-ng as ``EspeakTTSService`` runs it: synthesis on a worker thread, chunks handed
    to the loop as the library calls back (its library lock serialises utterances)."""

    def __init__(self, rate_hz: int, workers: int) -> None:
        from pipeline.engines.espeak import EspeakEngine

        self.engine = EspeakEngine(sample_rate_hz=rate_hz)
        self.rate_hz = rate_hz
        self._pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="eval-espeak")

    async def stream(self, text: str) -> AsyncIterator[np.ndarray]:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()
        cancel = threading.Event()
        done = object()

        def run() -> None:
            try:
                self.engine.synthesize_stream(
                    text, lambda c: (loop.call_soon_threadsafe(queue.put_nowait, c.pcm), False)[1],
                    cancel)
            finally:
                loop.call_soon_threadsafe(queue.put_nowait, done)

        fut = loop.run_in_executor(self._pool, run)
        try:
            while (item := await queue.get()) is not done:
                yield item
            await fut
        finally:
            cancel.set()

    def close(self) -> None:
        self._pool.shutdown(wait=True)


def make_voice(engine: str, rate_hz: int, *, model_dir: str | None = None,
               concurrency: int = 16, compile: bool = False) -> Voice:
    """``compile``: an SSM voice's lone-stream steps compiled, as ``parley serve`` runs them."""
    if engine == "ssm":
        return _SSMVoice(rate_hz, model_dir, compile=compile)
    if engine == "espeak":
        return _EspeakVoice(rate_hz, concurrency)
    raise PipelineError(f"unknown TTS engine {engine!r} ({', '.join(ENGINES)})")


def read_sentences(path: str | Path, limit: int | None = None) -> list[str]:
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise PipelineError(f"cannot read the sentences file {path}: {exc}") from exc
    sentences = [s.strip() for s in lines if s.strip()]
    if not sentences:
        raise PipelineError(f"{path} holds no sentences (one a line)")
    return sentences[:limit] if limit else sentences


@dataclass
class Timed:
    ttfa_s: float
    wall_s: float
    pcm: np.ndarray


async def timed_synthesis(voice: Voice, text: str) -> Timed:
    """Speak ``text`` to its end: time to the first chunk, wall time, and the audio."""
    t0 = time.perf_counter()
    ttfa = None
    chunks = []
    async for pcm in voice.stream(text):
        if ttfa is None:
            ttfa = time.perf_counter() - t0
        chunks.append(pcm)
    wall = time.perf_counter() - t0
    pcm = np.concatenate(chunks) if chunks else np.zeros(0, np.int16)
    return Timed(ttfa if ttfa is not None else wall, wall, pcm)


def percentiles_ms(values_s: list[float]) -> tuple[float, float, float]:
    ms = np.asarray(values_s) * 1000.0
    p50, p95, p99 = (round(float(np.percentile(ms, q)), 2) for q in (50, 95, 99))
    return p50, p95, p99


async def measure(voice: Voice, sentences: list[str], concurrency: int) -> dict:
    """Latency and speed of ``voice`` (see the module docstring); also returns the audio."""
    await timed_synthesis(voice, sentences[0])                      # warm-up
    single = [await timed_synthesis(voice, s) for s in sentences]
    audio_s = sum(len(t.pcm) for t in single) / voice.rate_hz
    rounds = max(1, -(-len(sentences) // concurrency))
    conc_ttfa, conc_audio_s, conc_wall_s = [], 0.0, 0.0
    for r in range(rounds):
        batch = [sentences[(r * concurrency + i) % len(sentences)] for i in range(concurrency)]
        t0 = time.perf_counter()
        results = await asyncio.gather(*(timed_synthesis(voice, s) for s in batch))
        conc_wall_s += time.perf_counter() - t0
        conc_ttfa += [t.ttfa_s for t in results]
        conc_audio_s += sum(len(t.pcm) for t in results) / voice.rate_hz
    return {
        "ttfa": percentiles_ms([t.ttfa_s for t in single]),
        "ttfa_concurrent": percentiles_ms(conc_ttfa),
        "rtf": sum(t.wall_s for t in single) / max(audio_s, 1e-9),
        "concurrent_streams_realtime": conc_audio_s / max(conc_wall_s, 1e-9),
        "audio_s": audio_s,
        "pcm": [t.pcm for t in single],
    }


def reference_text(sentence: str, reference: Reference) -> str:
    """What the judge should have heard: the words parley's TTS front end reads the sentence as
    ("spoken": "719-032-7846" is "seven one nine, zero three two, ..."), or the sentence read
    the way ``parley eval stt`` reads references ("written": "seven hundred nineteen ...")."""
    if reference == "spoken":
        from ssm_engine.tts.text import normalize

        sentence = " ".join(w.text for w in normalize(sentence) if w.kind in ("word", "letter"))
    return normalize_text(sentence)


def judge_wer(judge, sentences: list[str], clips: list[np.ndarray], reference: Reference = "spoken"
              ) -> tuple[float, list[dict[str, str]]]:
    refs = [reference_text(s, reference) for s in sentences]
    hyps = [normalize_text(judge.transcribe_timed(pcm)[0]) if pcm.size else "" for pcm in clips]
    return round(wer(refs, hyps), 4), [{"ref": r, "hyp": h} for r, h in zip(refs, hyps)]


def spoken_words(sentence: str) -> list[str]:
    """The words parley's front end reads ``sentence`` as, its pauses as ",", ".", "?": what a
    teacher (or another engine, to compare voices and not number readers) is asked to say."""
    from ssm_engine.tts.align import PAUSE_PUNCT
    from ssm_engine.tts.text import normalize

    return [PAUSE_PUNCT.get(w.kind, w.text) for w in normalize(sentence)]


def spoken_text(sentence: str) -> str:
    """``spoken_words`` as one line of text, punctuation attached to its word."""
    text = " ".join(spoken_words(sentence))
    return text.replace(" ,", ",").replace(" .", ".").replace(" ?", "?")


def teacher_clips(sentences: list[str], rate_hz: int, codec: Codec, teacher_voice: str = "festival"
                  ) -> list[np.ndarray]:
    """The teacher voice's audio of each sentence (the SSM voice's training target: festival's
    slt HTS voice, given the words our normaliser makes of it, or Piper's joe voice given our
    phones, as ``parley data tts --teacher`` made them), through the same channel. Piper's noise
    is seeded (0): the same sentences give the same audio in every run."""
    from ssm_engine.tts.errors import TeacherError
    from ssm_engine.tts.teacher import SAMPLE_RATE_HZ, FestivalTeacher

    def line(audio: np.ndarray) -> np.ndarray:
        pcm = (np.clip(audio, -1.0, 1.0) * 32767.0).astype(np.int16)
        return phone_channel(pcm, SAMPLE_RATE_HZ, rate_hz, codec)

    if teacher_voice.startswith("piper:"):
        from ssm_engine.tts.phonemes import phonemize
        from ssm_engine.tts.piper_teacher import PiperTeacher

        try:
            piper = PiperTeacher(teacher_voice.partition(":")[2], seed=0)
            spoken = [piper.say(phonemize(s))[0] for s in sentences]
        except TeacherError as exc:
            raise PipelineError(f"the teacher voice failed: {exc}") from exc
        return [line(a) for a in spoken]
    out = []
    try:
        with FestivalTeacher() as teacher:
            for s in sentences:
                out.append(line(teacher.synthesize(spoken_words(s))[0]))
    except TeacherError as exc:
        raise PipelineError(f"the teacher voice failed: {exc}") from exc
    return out


def evaluate(engine: str, sentences_path: str | Path, *, judge: str = "whisper",
             rate_hz: int = 8000, codec: Codec = "mulaw", concurrency: int = 16,
             teacher: bool | str = False, model_dir: str | None = None, limit: int | None = None,
             reference: Reference = "spoken", voice: Voice | None = None,
             compile: bool = False) -> TTSEvalResult:
    """Run one engine over a sentences file; see the module docstring for what is measured.
    ``compile``: the SSM voice's lone-stream steps compiled, as ``parley serve`` runs them."""
    if judge not in JUDGES:
        raise PipelineError(f"unknown judge {judge!r} ({', '.join(JUDGES)})")
    if rate_hz not in (8000, 16000):
        raise PipelineError(f"--rate must be 8000 or 16000, got {rate_hz}")
    if concurrency < 1:
        raise PipelineError(f"--concurrency must be >= 1, got {concurrency}")
    if reference not in ("spoken", "written"):
        raise PipelineError(f"--reference must be spoken or written, got {reference!r}")
    sentences = read_sentences(sentences_path, limit)
    own = voice is None
    voice = voice or make_voice(engine, rate_hz, model_dir=model_dir, concurrency=concurrency,
                                compile=compile)
    try:
        m = asyncio.run(measure(voice, sentences, concurrency))
    finally:
        if own:
            voice.close()
    clips = [phone_channel(p, rate_hz, rate_hz, codec) for p in m["pcm"]]
    asr = make_judge(judge, rate_hz)
    try:
        asr_wer, examples = judge_wer(asr, sentences, clips, reference)
        teacher_voice = teacher if isinstance(teacher, str) else "festival"
        teacher_wer = (judge_wer(asr, sentences, teacher_clips(sentences, rate_hz, codec, teacher_voice),
                                 reference)[0] if teacher else None)
    finally:
        asr.close()
    return TTSEvalResult(
        engine=engine, judge=judge, sentences=str(sentences_path), n=len(sentences),
        rate_hz=rate_hz, codec=codec, reference=reference,
        ttfa_ms_p50=m["ttfa"][0], ttfa_ms_p95=m["ttfa"][1], ttfa_ms_p99=m["ttfa"][2],
        rtf=round(m["rtf"], 4), asr_wer=asr_wer, concurrency=concurrency,
        ttfa_ms_concurrent_p50=m["ttfa_concurrent"][0],
        ttfa_ms_concurrent_p95=m["ttfa_concurrent"][1],
        ttfa_ms_concurrent_p99=m["ttfa_concurrent"][2],
        concurrent_streams_realtime=round(m["concurrent_streams_realtime"], 2),
        audio_s=round(m["audio_s"], 2), teacher_asr_wer=teacher_wer, examples=examples[:5])


def register_cli(subparsers) -> None:
    """Add ``eval tts`` (under the shared ``eval`` group) to an argparse subparsers object."""
    from ssm_engine.stt.cli import group_subparsers

    group = group_subparsers(subparsers, "eval", "measure engines")
    p = group.add_parser(
        "tts", help="first-audio latency, RTF and intelligibility of a TTS engine",
        description=textwrap.fill("Speak every sentence of --sentences with one engine and measure: time from "
        "text in to the first audio chunk out (one stream, then --concurrency streams started "
        "together; p50/p95/p99 ms), real-time factor, and intelligibility: the word error rate "
        "of an independent recognizer (--judge; never parley's own STT) on the audio after the "
        "phone channel (--rate, --codec). --teacher scores the teacher's audio of the "
        "same sentences beside it (festival's for slt, piper:joe for joe), the yardstick for a "
        "distilled voice.", 96),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
        "  parley eval tts --engine ssm --sentences data/tts/v1/heldout.txt --teacher --json\n"
        "  parley eval tts --engine ssm --model joe --sentences data/tts/joe2/heldout.txt --teacher piper:joe\n"
        "  parley eval tts --engine espeak --sentences data/tts/v1/heldout.txt --limit 20\n"
        "  parley eval tts --engine ssm --sentences my.txt --judge pocketsphinx --rate 16000 --codec none")
    p.add_argument("--engine", choices=ENGINES, default="ssm",
                   help="ssm: parley's voice (--model); espeak: the espeak-ng baseline (default %(default)s)")
    p.add_argument("--sentences", required=True, help="one sentence a line")
    p.add_argument("--judge", choices=JUDGES, default="whisper",
                   help="the recognizer that scores intelligibility (default %(default)s)")
    p.add_argument("--teacher", nargs="?", const="own", default=None,
                   choices=("own", "festival", "piper:joe"),
                   help="also score the teacher voice's audio of the same sentences: festival "
                   "(slt's teacher) or piper:joe (joe's); given alone, the --model voice's own teacher")
    p.add_argument("--model", default=None,
                   help="SSM voice: a shipped voice's name (slt, joe) or a folder (default: "
                   f"{DEFAULT_VOICE}, the voice parley serve speaks)")
    p.add_argument("--concurrency", type=int, default=16, help="streams started together")
    p.add_argument("--rate", type=int, choices=[8000, 16000], default=8000,
                   help="output rate (8000: the phone path)")
    p.add_argument("--codec", choices=["mulaw", "none"], default="mulaw",
                   help="channel between the voice and the judge (default %(default)s)")
    p.add_argument("--reference", choices=["spoken", "written"], default="spoken",
                   help="score against the words parley's TTS front end reads the sentence as, "
                   "or as parley eval stt reads it (default %(default)s)")
    p.add_argument("--limit", type=int, default=None, help="the first N sentences only")
    p.add_argument("--out", default=None, help="also write the JSON object to this file")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--compile", choices=["on", "off"],
                   default="off" if os.environ.get("PARLEY_TTS_COMPILE") == "0" else "on",
                   help="with --engine ssm: the voice's lone-stream steps compiled with "
                   "torch.compile, as `parley serve` runs them (slow the first time; default "
                   "%(default)s, PARLEY_TTS_COMPILE=0 turns it off)")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    import torch

    torch.set_num_threads(1)
    from pipeline.voices import voice_dir

    model = str(voice_dir(args.model)) if args.model else None
    teacher = args.teacher or False
    if teacher == "own":  # the voice's own teacher: piper:joe for joe, festival for slt (or a folder)
        teacher = "piper:joe" if (args.model or DEFAULT_VOICE) == "joe" else "festival"
    res = evaluate(args.engine, args.sentences, judge=args.judge, rate_hz=args.rate,
                   codec=args.codec, concurrency=args.concurrency, teacher=teacher,
                   model_dir=model, limit=args.limit, reference=args.reference,
                   compile=args.compile == "on")
    report(asdict(res), out=args.out, as_json=args.json)
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m harness.tts_eval eval tts ...``"""
    parser = argparse.ArgumentParser(prog="python -m harness.tts_eval")
    register_cli(parser.add_subparsers(dest="command", required=True, metavar="COMMAND"))
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
