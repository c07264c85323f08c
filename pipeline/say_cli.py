"""``parley say``: hear a voice without writing code.

    parley say "Your order ships on Tuesday." --out reply.wav
    parley say "Your order ships on Tuesday." --out reply.wav --voice joe --rate 8000
    echo "One moment, please." | parley say - --out moment.wav --codec mulaw

The text goes through the same streaming path a call uses (text in, 20 ms chunks out), so the
first-audio time printed is the one a caller waits for on this machine (one thread). ``--rate
8000`` halves the rate with the service's own filter (what a phone call carries), and ``--codec
mulaw`` also takes it through G.711 mu-law and back: the WAV is then what the caller hears.
Prints one JSON line: the file, the voice, seconds of audio, first audio in ms, the real-time
factor, and the words with their start times.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["register_cli", "say"]


def say(text: str, voice: str | Path, *, rate_hz: int = 16000, codec: str = "pcm",
        pace: float = 1.0, question_rise_st: float | None = None,
        postfilter: float | None = None) -> dict[str, Any]:
    """Speak ``text`` with a shipped voice (a name) or a voice folder. Returns the int16 samples
    (``"pcm"``) and the figures ``parley say`` prints. ``question_rise_st``: how far a yes/no
    question's end rises (None: the voice's default, ``synth.QUESTION_RISE_ST``);
    ``postfilter``: how much the vocoder deepens the spectral envelope (None: the voice's own)."""
    import torch

    from pipeline.audio.g711 import ulaw_decode, ulaw_encode
    from pipeline.audio.pcm import float_to_int16
    from pipeline.engines.ssm_voice import HalfRateFilter, check_voice_dir
    from pipeline.errors import ConfigError
    from pipeline.voices import voice_dir
    from ssm_engine.tts.errors import TTSError
    from ssm_engine.tts.synth import QUESTION_RISE_ST, TTSVoice

    if rate_hz not in (8000, 16000):
        raise ConfigError(f"--rate must be 8000 or 16000, not {rate_hz}")
    if codec == "mulaw" and rate_hz != 8000:
        raise ConfigError("--codec mulaw is the phone line's: use it with --rate 8000")
    if not text.strip():
        raise ConfigError("nothing to say: the text is empty")
    folder = check_voice_dir(voice_dir(voice))
    torch.set_num_threads(1)
    try:
        tts = TTSVoice.load(folder)
    except (OSError, TTSError) as exc:
        raise ConfigError(f"cannot load the voice at {folder}: {exc}") from exc
    tts.synthesize("Hello.")        # warm-up: the first step pays for allocations
    t0 = time.perf_counter()
    rise = QUESTION_RISE_ST if question_rise_st is None else question_rise_st
    sharpen = tts.postfilter if postfilter is None else postfilter
    try:
        stream = tts.open_stream(pace=pace, question_rise_st=rise, postfilter=sharpen)
    except TTSError as exc:
        raise ConfigError(str(exc).replace("question_rise_st", "--question-rise", 1)
                          .replace("postfilter", "--postfilter", 1)
                          .replace("pace", "--pace", 1)) from exc
    stream.push_text(text)
    stream.end_text()
    if stream.n_tokens == 0:
        raise ConfigError(f"nothing to say in {text[:60]!r}: no words after normalisation")
    chunks, first_s = [], None
    for chunk in stream.iter_pull():
        if first_s is None:
            first_s = time.perf_counter() - t0
        chunks.append(chunk)
    wall_s = time.perf_counter() - t0
    pcm = np.concatenate([c.pcm for c in chunks]) if chunks else np.zeros(0, np.float32)
    seconds = len(pcm) / tts.sample_rate_hz
    if rate_hz == 8000:
        pcm = HalfRateFilter().process(pcm)
    out = float_to_int16(pcm)
    if codec == "mulaw":
        out = ulaw_decode(ulaw_encode(out))
    return {"pcm": out, "voice": str(voice), "folder": str(folder), "rate_hz": rate_hz,
            "codec": codec, "pace": pace, "question_rise_st": rise,
            "postfilter": sharpen, "postfilter_from": tts.model.config.postfilter_from,
            "seconds": round(seconds, 3),
            "first_audio_ms": round((first_s or wall_s) * 1000, 2),
            "rtf": round(wall_s / max(seconds, 1e-9), 4),
            "words": [[w, round(s, 3)] for c in chunks for w, s in c.words]}


def register_cli(subparsers: Any) -> None:
    from pipeline.voices import DEFAULT_VOICE, VOICES

    shipped = "; ".join(f"{v.name}{' (the default)' if v.name == DEFAULT_VOICE else ''}: {v.gender}, "
                        f"from {v.teacher}" for v in VOICES.values())
    p = subparsers.add_parser(
        "say", help="speak a text with one of parley's voices into a WAV file",
        description="Speak TEXT with parley's streaming SSM voice and write it to a WAV file, "
        "through the same streaming path a call uses. Shipped voices: " + shipped + ".",
        epilog="examples:\n"
        "  parley say \"Your order ships on Tuesday.\" --out reply.wav\n"
        "  parley say \"Your order ships on Tuesday.\" --out reply.wav --voice slt --rate 8000\n"
        "  echo \"One moment, please.\" | parley say - --out moment.wav --rate 8000 --codec mulaw\n"
        "  parley say \"Thanks for calling.\" --out t.wav --voice runs/tts/v2/best   # a voice folder",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("text", help="what to say; - reads it from stdin")
    p.add_argument("--out", required=True, type=Path, help="the WAV file to write (16-bit mono)")
    p.add_argument("--voice", default=DEFAULT_VOICE,
                   help=f"a shipped voice ({', '.join(VOICES)}) or a voice folder "
                   "(default %(default)s)")
    p.add_argument("--rate", type=int, choices=(8000, 16000), default=16000,
                   help="sample rate of the file: 16000 (the voice's own) or 8000 (a phone "
                   "call's) (default %(default)s)")
    p.add_argument("--codec", choices=("pcm", "mulaw"), default="pcm",
                   help="mulaw: through G.711 mu-law and back, as a caller hears it (with "
                   "--rate 8000) (default %(default)s)")
    p.add_argument("--pace", type=float, default=1.0,
                   help="phone durations times this: 1.2 speaks 20%% slower (0.5-2.0, default "
                   "%(default)s: the voice's own pace)")
    p.add_argument("--question-rise", type=float, default=None, metavar="SEMITONES",
                   help="how far the end of a yes/no question (\"Is that right?\") rises, 0-12 "
                   "semitones; 0 leaves it as the model says it (default 6)")
    p.add_argument("--postfilter", type=float, default=None, metavar="AMOUNT",
                   help="how much the vocoder deepens the voice's formants against the valleys "
                   "between them, 0-1: the model's envelopes come out flatter than speech, which "
                   "the phone line blurs further; 0 plays them as predicted (default: the "
                   "voice's own, from its config.json: joe 0.6 from c4, slt 0)")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from pipeline.audio.wav import write_wav

    folder = args.out.parent if str(args.out.parent) else Path(".")
    if not folder.is_dir():         # before the work, and before wave leaves a half-open writer
        print(f"parley say: cannot write {args.out}: no folder {folder}", file=sys.stderr)
        return 2
    text = sys.stdin.read() if args.text == "-" else args.text
    result = say(text, args.voice, rate_hz=args.rate, codec=args.codec, pace=args.pace,
                 question_rise_st=args.question_rise, postfilter=args.postfilter)
    try:
        write_wav(args.out, result.pop("pcm"), args.rate)
    except OSError as exc:
        print(f"parley say: cannot write {args.out}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    print(json.dumps({"out": str(args.out)} | result))
    return 0
