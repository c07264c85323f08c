"""Score speech-to-text engines on a manifest: ``parley eval stt``.

    parley eval stt --engine ssm --manifest data/stt/v1/heldout.tsv --rate 8000 --codec mulaw --json

Each clip (``path<TAB>text``) is resampled to ``--rate``, optionally sent through a G.711 mu-law
round trip (the phone channel), and streamed to the engine 20 ms at a time as fast as it
goes. Reported, as one JSON object: ``n``, ``wer`` and ``cer`` (corpus-level, after the same
``normalize_text`` for every engine: lower case, numbers as words, no punctuation), ``rtf``
(processing time / audio time, one thread), and the final latency after the end of the audio
(from the last chunk's result to the final transcript: the flush / end-of-utterance search)
at p50, p95 and p99 in ms. When ``<manifest>_voices.tsv`` (path<TAB>voice, written by ``parley
data stt``) sits beside the manifest, WER and CER per voice are added under ``by_voice``.

``turn_end=True`` ends each clip where a call would: the shipped VAD (Silero, 0.2 s stop) runs
over it and the clip is cut where its turn ends (``turn_end_sample``), the last ``PACED_S``
before that are pushed at the pace of speech (what an early final has to run in while the VAD's
stop timer runs), the VAD's pauses (its stop timer's starts and cancels, ``turn_end_events``)
reach the SSM recogniser after the audio they were heard in, as a call's ``SpeechPauseFrame``
does, and the final latency is from the VAD's stop.

Engines: ``ssm`` (parley's streaming recogniser; ``--decoder`` picks how finals are
decoded: greedy, beam, char-beam, phone-beam), ``pocketsphinx`` (streaming baseline) and
``whisper`` (tiny.en through faster-whisper, not streaming: it decodes the whole clip after
its end, so its final latency is its whole decode; numbers come out as words, see
``pipeline.engines.whisper``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from collections.abc import Sequence
from typing import Literal, Protocol

import numpy as np

from pipeline.audio.g711 import resample, ulaw_decode, ulaw_encode
from pipeline.audio.wav import read_wav
from pipeline.errors import PipelineError
from ssm_engine.data.manifest import read_manifest
from ssm_engine.stt.decode import cer, edit_distance, wer
from ssm_engine.stt.text import normalize_text

__all__ = ["Pauses", "STTEvalResult", "evaluate", "turn_end_events", "turn_end_sample", "voices_of",
           "register_cli", "make_engine", "phone_channel", "report", "write_hyps"]

Codec = Literal["mulaw", "none"]
CHUNK_MS = 20
PACED_S = 0.5
"""``turn_end``: the end of each turn pushed at the pace of speech, not as fast as it goes."""
TURN_STOP_S = 0.2
"""``turn_end``: the VAD's stop timer, as ``parley serve`` sets it (``PipelineConfig.vad_stop_s``)."""
TURN_START_S = 0.1
"""``turn_end``: the VAD's start timer (``PipelineConfig.vad_start_s``)."""


Pauses = Sequence[tuple[int, bool]]
"""The VAD's stop timer on a clip: (the sample it was heard at, started or speech again)."""


class _Streamer(Protocol):
    def transcribe_timed(self, pcm: np.ndarray, paced_from: int | None = None,
                         pauses: Pauses = ()) -> tuple[str, float]: ...

    def close(self) -> None: ...


@dataclass
class STTEvalResult:
    engine: str
    decoder: str
    manifest: str
    rate_hz: int
    codec: str
    n: int
    wer: float
    cer: float
    rtf: float
    final_latency_ms_p50: float
    final_latency_ms_p95: float
    final_latency_ms_p99: float
    audio_s: float
    by_voice: dict[str, dict[str, float]] = field(default_factory=dict)
    examples: list[dict[str, str]] = field(default_factory=list)
    # every clip: (path, voice, reference, hypothesis); not part of the JSON report
    utterances: list[tuple[str, str, str, str]] = field(default_factory=list, repr=False)


class _SSM:
    def __init__(self, rate_hz: int, model_dir: str | None, decoder: str = "beam",
                 lm_path: str | None = None, stride: int | None = None,
                 compile: bool | None = None, final_pass: bool | None = None,
                 final_decoder: str | None = None) -> None:
        from pipeline.engines.ssm_recognizer import DEFAULT_MODEL_DIR, DEFAULT_STRIDE, SSMSTTEngine

        self.engine = SSMSTTEngine(model_dir or DEFAULT_MODEL_DIR, lm_path=lm_path,
                                   decoder=decoder,  # type: ignore[arg-type]
                                   stride=stride or DEFAULT_STRIDE, compile=compile,
                                   final_pass=final_pass, final_decoder=final_decoder)
        self.rate_hz = rate_hz

    def transcribe_timed(self, pcm: np.ndarray, paced_from: int | None = None,
                         pauses: Pauses = ()) -> tuple[str, float]:
        utt = self.engine.open(self.rate_hz)
        step = self.rate_hz * CHUNK_MS // 1000
        clock: float | None = None
        todo = list(pauses)
        for i in range(0, len(pcm), step):
            if paced_from is not None and i >= paced_from:   # the end of the turn, as it is spoken
                clock = time.perf_counter() if clock is None else clock + CHUNK_MS / 1000
                time.sleep(max(0.0, clock - time.perf_counter()))
            fut = utt.push(pcm[i:i + step])
            while todo and todo[0][0] <= i + step:     # heard in this chunk: after its audio
                utt.pause(todo.pop(0)[1])
            if fut is not None:
                utt.take(fut.result())
        if clock is not None:          # the last chunk's 20 ms play out before the stop is called
            time.sleep(max(0.0, clock + CHUNK_MS / 1000 - time.perf_counter()))
        t0 = time.perf_counter()
        text = utt.finish_sync()
        return text, time.perf_counter() - t0

    def close(self) -> None:
        self.engine.close()


class _Sphinx:
    def __init__(self, rate_hz: int) -> None:
        from pipeline.engines.sphinx import SphinxEngine

        self.engine = SphinxEngine(sample_rate_hz=rate_hz)
        self.rate_hz = rate_hz

    def transcribe_timed(self, pcm: np.ndarray, paced_from: int | None = None,
                         pauses: Pauses = ()) -> tuple[str, float]:
        self.engine.start_utt()      # its result comes at end_utt whatever the pace: not paced
        step = self.rate_hz * CHUNK_MS // 1000
        for i in range(0, len(pcm), step):
            self.engine.feed(pcm[i:i + step])
        t0 = time.perf_counter()
        text = self.engine.end_utt()
        return text, time.perf_counter() - t0

    def close(self) -> None:
        pass


class _Whisper:
    """Not streaming: the whole clip is decoded after its end, so all of it is final latency."""

    def __init__(self, rate_hz: int) -> None:
        from pipeline.engines.whisper import WhisperRecognizer

        self.engine = WhisperRecognizer()
        self.engine.load()
        self.rate_hz = rate_hz

    def transcribe_timed(self, pcm: np.ndarray, paced_from: int | None = None,
                         pauses: Pauses = ()) -> tuple[str, float]:
        t0 = time.perf_counter()     # decodes after the end: the pace changes nothing
        text = self.engine.transcribe(pcm, self.rate_hz)
        return text, time.perf_counter() - t0

    def close(self) -> None:
        pass


ENGINES = ("ssm", "pocketsphinx", "whisper")


def make_engine(name: str, rate_hz: int, model_dir: str | None = None, decoder: str = "beam",
                lm_path: str | None = None, stride: int | None = None,
                compile: bool | None = None, final_pass: bool | None = None,
                final_decoder: str | None = None) -> _Streamer:
    if name == "ssm":
        return _SSM(rate_hz, model_dir, decoder, lm_path, stride, compile, final_pass,
                    final_decoder)
    if name == "pocketsphinx":
        return _Sphinx(rate_hz)
    if name == "whisper":
        return _Whisper(rate_hz)
    raise PipelineError(f"unknown STT engine {name!r} ({', '.join(ENGINES)})")


def phone_channel(pcm: np.ndarray, rate: int, to_rate: int, codec: Codec) -> np.ndarray:
    """int16 audio as the far end hears it: resampled to ``to_rate``, through mu-law if asked."""
    pcm = resample(np.asarray(pcm, np.int16), rate, to_rate) if rate != to_rate else pcm
    return ulaw_decode(ulaw_encode(pcm)) if codec == "mulaw" else pcm


def _read_clip(path: Path) -> tuple[np.ndarray, int]:
    """A manifest's clip as int16: WAV, or Ogg Opus from a packed data set (``parley data pack``)."""
    from ssm_engine.data.audio import COMPRESSED_SUFFIXES, read_audio

    if path.suffix.lower() not in COMPRESSED_SUFFIXES:
        return read_wav(path)
    x, rate = read_audio(path)
    return np.clip(np.round(x * 32768.0), -32768, 32767).astype(np.int16), rate


def turn_end_sample(pcm: np.ndarray, rate_hz: int, stop_s: float = TURN_STOP_S) -> int:
    """Where a call would end the turn on ``pcm`` (int16): the sample at which the shipped VAD
    (Silero, pipecat's state machine, ``stop_s``) calls its last stop, with the clip followed by
    silence until it does. A last word too short to start the VAD again is not cut off: the stop
    is then ``stop_s`` after the last window the VAD heard as speech (so too where a soft clip never
    starts it). A clip with no window heard as speech ends where it ends."""
    return turn_end_events(pcm, rate_hz, stop_s)[0]


def turn_end_events(pcm: np.ndarray, rate_hz: int,
                    stop_s: float = TURN_STOP_S) -> tuple[int, Pauses]:
    """``turn_end_sample``, and the VAD's pauses before it: each sample where its stop timer
    started (SPEAKING to STOPPING: True) or speech came again after it (False), as
    ``pipeline.vad.OnsetVADProcessor`` sends them to the recogniser."""
    import asyncio

    from pipecat.audio.vad.vad_analyzer import VADParams, VADState

    from pipeline.vad import InlineSileroVADAnalyzer

    class Heard(InlineSileroVADAnalyzer):
        last = 0.0                         # the last window's confidence

        def voice_confidence(self, buffer: bytes) -> float:
            self.last = super().voice_confidence(buffer)
            return self.last

    analyzer = Heard(sample_rate=rate_hz, params=VADParams(start_secs=TURN_START_S, stop_secs=stop_s))
    analyzer.set_sample_rate(rate_hz)
    window = analyzer.num_frames_required()
    padded = np.concatenate([pcm.astype(np.int16), np.zeros(int(3 * rate_hz), np.int16)])
    confidence = analyzer.params.confidence

    pauses: list[tuple[int, bool]] = []

    async def run() -> tuple[int | None, int | None]:
        stop = voiced = None
        before = VADState.QUIET
        for i in range(0, padded.size - window + 1, window):
            chunk = padded[i: i + window]
            state = await analyzer.analyze_audio(chunk.tobytes())
            if i < pcm.size and analyzer.last >= confidence:
                voiced = i + window
            if state == VADState.QUIET and before in (VADState.SPEAKING, VADState.STOPPING):
                stop = i + window
            pauses.extend((i + window, p) for p in analyzer.take_pauses())
            before = state
        return stop, voiced

    stop, voiced = asyncio.run(run())
    if voiced is None:
        return int(pcm.size), []
    end = min(padded.size, voiced + int(stop_s * rate_hz)) if stop is None or voiced > stop else stop
    return end, [(at, p) for at, p in pauses if at <= end]


def voices_of(manifest: str | Path) -> dict[Path, str]:
    """Each clip's voice from ``<manifest>_voices.tsv`` beside the manifest ({} without one)."""
    voice_file = Path(manifest).with_name(Path(manifest).stem + "_voices.tsv")
    return dict(read_manifest(voice_file)) if voice_file.exists() else {}


def evaluate(engine_name: str, manifest: str | Path, *, rate_hz: int = 8000,
             codec: Codec = "mulaw", limit: int | None = None, model_dir: str | None = None,
             decoder: str = "beam", lm_path: str | None = None,
             progress: bool = False, stride: int | None = None,
             compile: bool | None = None, final_pass: bool | None = None,
             final_decoder: str | None = None, turn_end: bool = False,
             vad_pauses: bool = True) -> STTEvalResult:
    """Run one engine over a manifest; see the module docstring for what is measured.
    ``vad_pauses``: with ``turn_end``, the VAD's pauses reach the recogniser (False: its early
    finals are begun by loudness alone).
    ``final_decoder`` ("whisper" or "ctc"; None: the model folder's choice) makes the SSM
    recogniser's finals (``SSMSTTEngine``)."""
    if rate_hz not in (8000, 16000):
        raise PipelineError(f"--rate must be 8000 or 16000, got {rate_hz}")
    rows = read_manifest(manifest)
    if limit is not None and len(rows) > limit:
        every = len(rows) / limit
        rows = [rows[int(i * every)] for i in range(limit)]
    voice_of = voices_of(manifest)
    clips, voices, paths = [], [], []
    for path, text in rows:
        paths.append(str(path))
        pcm, rate = _read_clip(path)
        heard = phone_channel(pcm, rate, rate_hz, codec)
        pauses: Pauses = ()
        if turn_end:
            end, pauses = turn_end_events(heard, rate_hz)
            pauses = pauses if vad_pauses else ()
            heard = np.concatenate([heard, np.zeros(max(0, end - heard.size), np.int16)])[:end]
        clips.append((heard, normalize_text(text), pauses))
        voices.append(voice_of.get(path, ""))
    engine = make_engine(engine_name, rate_hz, model_dir, decoder, lm_path, stride, compile,
                         final_pass, final_decoder)
    refs, hyps, finals = [], [], []
    busy_s = audio_s = 0.0
    it = clips
    if progress:
        from tqdm import tqdm
        it = tqdm(clips, desc=f"eval stt {engine_name}", unit="utt")
    try:
        engine.transcribe_timed(clips[0][0][: rate_hz // 2])          # warm-up
        for pcm, ref, pauses in it:
            t0 = time.perf_counter()
            hyp, final_s = engine.transcribe_timed(
                pcm, paced_from=max(0, pcm.size - int(PACED_S * rate_hz)) if turn_end else None,
                pauses=pauses)
            busy_s += time.perf_counter() - t0
            audio_s += len(pcm) / rate_hz
            refs.append(ref)
            hyps.append(normalize_text(hyp))
            finals.append(final_s * 1000.0)
    finally:
        engine.close()
    by_voice = {}
    for v in sorted(set(voices) - {""}):
        idx = [i for i, x in enumerate(voices) if x == v]
        r, h = [refs[i] for i in idx], [hyps[i] for i in idx]
        by_voice[v] = {"n": len(idx), "wer": round(wer(r, h), 4), "cer": round(cer(r, h), 4)}
    return STTEvalResult(
        engine=engine_name, decoder=decoder if engine_name == "ssm" else "",
        manifest=str(manifest), rate_hz=rate_hz, codec=codec, n=len(refs),
        wer=round(wer(refs, hyps), 4), cer=round(cer(refs, hyps), 4),
        rtf=round(busy_s / max(audio_s, 1e-9), 4),
        final_latency_ms_p50=round(float(np.percentile(finals, 50)), 2),
        final_latency_ms_p95=round(float(np.percentile(finals, 95)), 2),
        final_latency_ms_p99=round(float(np.percentile(finals, 99)), 2),
        audio_s=round(audio_s, 1), by_voice=by_voice,
        examples=[{"ref": r, "hyp": h} for r, h in list(zip(refs, hyps))[:5]],
        utterances=list(zip(paths, voices, refs, hyps)))


def write_hyps(res: STTEvalResult, path: str | Path) -> None:
    """Every clip's transcript beside its reference, worst first: a TSV of path, voice, word
    errors, reference words, reference, hypothesis (for reading what the engine gets wrong)."""
    rows = []
    for clip, voice, ref, hyp in res.utterances:
        errors = edit_distance(ref.split(), hyp.split())
        rows.append((errors, clip, voice, len(ref.split()), ref, hyp))
    rows.sort(key=lambda r: (-r[0] / max(1, r[3]), r[1]))
    with open(path, "w", encoding="utf-8") as f:
        f.write("path\tvoice\tword_errors\tref_words\tref\thyp\n")
        for errors, clip, voice, n, ref, hyp in rows:
            f.write(f"{clip}\t{voice}\t{errors}\t{n}\t{ref}\t{hyp}\n")


def register_cli(subparsers) -> None:
    """Add ``eval stt`` (under a shared ``eval`` group) to an argparse subparsers object."""
    from ssm_engine.stt.cli import group_subparsers

    group = group_subparsers(subparsers, "eval", "measure engines")
    p = group.add_parser("stt", help="WER/CER/RTF/final latency of an STT engine on a manifest")
    p.add_argument("--engine", choices=ENGINES, default="ssm")
    p.add_argument("--manifest", required=True, help="path<TAB>text lines")
    p.add_argument("--rate", type=int, choices=[8000, 16000], default=8000)
    p.add_argument("--codec", choices=["mulaw", "none"], default="mulaw")
    p.add_argument("--limit", type=int, default=None, help="evenly spread subset of N clips")
    p.add_argument("--model", default=None, help="SSM model folder (default models/stt)")
    p.add_argument("--decoder", choices=["beam", "char-beam", "phone-beam", "greedy"],
                   default="beam",
                   help="SSM finals: beam search with lexicon + LM (for a model with a phone head "
                   "and MODEL/lexicon.dict.gz, both heads' searches rescored together, else over "
                   "characters), one head's search alone (char-beam, phone-beam), or greedy "
                   "(default %(default)s)")
    p.add_argument("--lm", default=None, help="SSM beam LM (default MODEL/lm.arpa.gz)")
    p.add_argument("--stride", type=int, default=None, metavar="K",
                   help="SSM: run the model every K 20 ms steps, as one K-frame pass (default 5; "
                   "1 steps every frame)")
    p.add_argument("--compile", choices=["on", "off"],
                   default="off" if os.environ.get("PARLEY_STT_COMPILE") == "0" else "on",
                   help="SSM: compile the K-frame pass with torch.compile (default on, unless "
                   "PARLEY_STT_COMPILE=0)")
    p.add_argument("--out", default=None, help="also write the JSON object to this file")
    p.add_argument("--json", action="store_true", help="print one JSON object (no progress bar)")
    p.add_argument("--hyps", default=None, metavar="FILE.tsv",
                   help="also write every clip's reference and transcript, worst first (path, "
                   "voice, word errors, reference words, reference, hypothesis)")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    import torch

    torch.set_num_threads(1)
    res = evaluate(args.engine, args.manifest, rate_hz=args.rate, codec=args.codec,
                   limit=args.limit, model_dir=args.model, decoder=args.decoder, lm_path=args.lm,
                   progress=not args.json, stride=args.stride,
                   compile=args.compile == "on")
    if args.hyps:
        write_hyps(res, args.hyps)
    doc = asdict(res)
    del doc["utterances"]
    report(doc, out=args.out, as_json=args.json)
    return 0


def report(doc: dict, *, out: str | None, as_json: bool) -> None:
    """An eval's result: to ``out`` (pretty JSON) if given; one JSON line or aligned lines."""
    if out:
        Path(out).write_text(json.dumps(doc, indent=2) + "\n")
    if as_json:
        print(json.dumps(doc))
        return
    width = max(len(k) for k in doc)
    for k, v in doc.items():
        if k != "examples":
            print(f"{k:>{width}}: {v}")


def main(argv: list[str] | None = None) -> int:
    """``python -m harness.stt_eval eval stt ...`` before the command is wired into parley."""
    parser = argparse.ArgumentParser(prog="python -m harness.stt_eval")
    register_cli(parser.add_subparsers(dest="command", required=True, metavar="COMMAND"))
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
