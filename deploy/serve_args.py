"""``parley serve``'s options: what each one does, its default and its range (``--help`` reads
these). What they wire together is ``deploy.serve_cli``, imported only when the command runs.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import get_args

from deploy.arg_types import float_in, int_in, port_number
from pipeline.options import Aggregation, RecordingFormat, SttDecoder, SttKind, TtsKind, TurnKind, VadKind

DEFAULT_AGENT = Path(__file__).resolve().parent.parent / "agent" / "examples" / "receptionist.yaml"


def register_cli(sub: argparse._SubParsersAction) -> None:
    """``parley serve``."""
    p = sub.add_parser(
        "serve",
        help="answer calls (Twilio, browser WebRTC, SIP) with an agent",
        description="Start the call server. Point a Twilio number's voice webhook at "
        "POST {public-url}/twilio/voice; Twilio then opens the media stream at /twilio/stream.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--agent", type=Path, default=DEFAULT_AGENT, metavar="SPEC.yaml",
                   help="the agent to answer with (default: the receptionist example, %(default)s); "
                   "'echo' for the minimal echo agent")
    p.add_argument("--db", default=None, metavar="PATH",
                   help="call records: a SQLite file, or postgresql://USER@HOST/DB shared by several servers; "
                   "default $PARLEY_DB or ~/.local/share/parley/calls.db")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default %(default)s)")
    p.add_argument("--port", type=port_number, default=8765, help="port to listen on (default %(default)s; 0 = any)")
    p.add_argument("--public-url", default=os.environ.get("PARLEY_PUBLIC_URL"),
                   help="the https:// URL Twilio reaches this server at (what it signs)")
    p.add_argument("--api-token", default=None, metavar="TOKEN",
                   help="turn on POST /calls (place a call: docs/operations.md) for clients that send "
                   "Authorization: Bearer TOKEN (at least 16 characters); default $PARLEY_API_TOKEN (the "
                   "environment keeps it out of the process list); without one POST /calls is off. The same token "
                   "opens the call pages at /ui/calls (docs/call-pages.md), which without one are open on a "
                   "loopback --host only")
    p.add_argument("--insecure-dev", action="store_true",
                   help="do not check X-Twilio-Signature (local work only; logged loudly)")
    p.add_argument("--vad", choices=get_args(VadKind), default="silero",
                   help="voice activity detector (default %(default)s; see benchmarks/bench_vad.py)")
    p.add_argument("--stt", choices=get_args(SttKind), default="ssm",
                   help="speech recognizer: parley's streaming recogniser (models/stt: Whisper tiny.en's "
                   "encoder run as a stream, Mamba-2 layers on it; finals moments after the caller "
                   "stops, biased each turn toward what the agent expects; on recorded people "
                   "still behind Whisper's own decoding: benchmarks/RESULTS.md), "
                   "the pocketsphinx baseline, or Whisper tiny.en (not streaming: finals come "
                   "after a whole-utterance pass; more accurate; one shared model a process), or "
                   "remote: the SSM recogniser on the model tier (--model-url) (default %(default)s)")
    p.add_argument("--stt-model", default=None, metavar="DIR",
                   help="with --stt ssm: the recogniser's folder (default models/stt, the "
                   "recogniser on Whisper tiny.en's streamed encoder; models/stt-ssm is the pure "
                   "SSM recogniser, kept for comparison)")
    p.add_argument("--stt-warm", type=_warm_counts, default=(4, 1), metavar="PHONE[:BROWSER]",
                   help="with --stt sphinx: pocketsphinx decoders built before the first call, "
                   "for phone calls (8 kHz) and browser calls (16 kHz); set them to the calls you expect at once. "
                   "Each costs start-up time and memory; a call that finds none idle builds "
                   "one, which stalls every live call meanwhile (pocketsphinx holds Python's "
                   "GIL). Finished calls give theirs back (default 4:1)")
    p.add_argument("--stt-procs", type=_proc_count, default=DEFAULT_STT_PROCS, metavar="N",
                   help="worker processes for the recognizer, so its work never waits for Python's "
                   "GIL behind the calls' event loop (pocketsphinx holds the GIL while it decodes): "
                   "pocketsphinx decoders are spread over N; the SSM recognizer's batched model "
                   "runs in one. 0 runs it all in the server process (default: one per core but "
                   "one, at least 1, at most 8: %(default)s here)")
    p.add_argument("--stt-compile", choices=["on", "off"],
                   default="off" if os.environ.get("PARLEY_STT_COMPILE") == "0" else "on",
                   help="with --stt ssm: compile the pure SSM recognizer's 5-frame step with torch.compile "
                   "(the recogniser on Whisper's encoder runs eagerly) "
                   "(less CPU per call; slow at the first start, quicker later from the compile "
                   "cache; needs a C++ compiler: without one the server logs why and "
                   "runs the step eagerly). Default %(default)s (PARLEY_STT_COMPILE=0 turns it off)")
    p.add_argument("--stt-decoder", choices=get_args(SttDecoder),
                   default="beam",
                   help="with --stt ssm: how finals are decoded: both heads' beam searches with "
                   "the lexicon and LM, rescored together (beam), greedy CTC, or one head's "
                   "search alone (default %(default)s)")
    p.add_argument("--tts", choices=get_args(TtsKind), default="ssm",
                   help="the agent's voice: parley's streaming SSM voice (--voice, --tts-model), or "
                   "the espeak-ng baseline (far less intelligible), or remote: the SSM voice on the "
                   "model tier (--model-url) (default %(default)s; figures: benchmarks/RESULTS.md)")
    p.add_argument("--model-url", default="", metavar="URL[,URL...]",
                   help="with --stt remote / --tts remote: the model servers (`parley model-server`), "
                   "ws://HOST:PORT each, or SageMaker endpoints serving it (`parley deploy`), "
                   "sagemaker://ENDPOINT[?region=R] each, reached by AWS's HTTP/2 streaming client "
                   "in a helper process (.venv-aws, made by make install; credentials as for the "
                   "AWS CLI); a stream that breaks, stalls or is told to move goes on on another "
                   "(on an endpoint: a new stream, which SageMaker routes to a live instance) with "
                   "no word lost")
    p.add_argument("--tts-procs", type=int, choices=(0, 1), default=1,
                   help="1 runs the SSM voice in a process of its own, so its model steps never "
                   "wait for Python's GIL behind the calls' event loop; 0 runs it on a thread of "
                   "the server (default %(default)s)")
    p.add_argument("--tts-compile", choices=["on", "off"],
                   default="off" if os.environ.get("PARLEY_TTS_COMPILE") == "0" else "on",
                   help="with --tts ssm: compile the voice's steps for a lone reply with "
                   "torch.compile (less CPU per reply, first audio sooner; slow at the first "
                   "start, quicker later from the compile cache; needs a C++ "
                   "compiler: without one the server logs why and runs them eagerly). Default "
                   "%(default)s (PARLEY_TTS_COMPILE=0 turns it off)")
    p.add_argument("--voice", default=None, metavar="NAME",
                   help="with --tts ssm (or remote: the model servers' voice): which shipped voice "
                   "speaks: joe (the default: male, distilled from Piper's neural voice) or slt "
                   "(female, distilled from festival's HTS voice); default: the agent spec's "
                   "`voice:`, else joe. Hear them with `parley say`")
    p.add_argument("--tts-model", type=Path, default=None, metavar="DIR",
                   help="with --tts ssm: a voice's folder, config.json + model.safetensors, in "
                   "place of --voice (a voice trained with `parley train tts`)")
    p.add_argument("--turn", choices=get_args(TurnKind), default="hold",
                   help="end of turn: the silence timer, held --hold-ms longer when the words so "
                   "far cannot end a turn (\"hello,\", \"I would like to\"), so a comma pause "
                   "does not cut the caller off; the plain silence timer; or pipecat's "
                   "smart-turn v3 model (default %(default)s)")
    p.add_argument("--hold-ms", type=int, default=450,
                   help="with --turn hold: the extra wait on an unfinished turn (default "
                   "%(default)s ms)")
    p.add_argument("--silence-ms", type=int, default=200,
                   help="silence that ends the caller's turn (default %(default)s ms)")
    p.add_argument("--text-aggregation", choices=get_args(Aggregation), default="phrase",
                   help="speak the agent's text phrase by phrase, or wait for whole sentences "
                   "(default %(default)s)")
    p.add_argument("--stock-pipecat", action="store_true",
                   help="pipecat's stock set-up instead (Silero, smart-turn v3, sentences): the "
                   "baseline benchmarks/bench_call.py compares against")
    p.add_argument("--no-llm-check", action="store_true",
                   help="start even if the agent's LLM server does not answer now (by default "
                   "parley serve asks it once, GET {llm.base_url}/models, and refuses to start "
                   "without an answer; a missing API key or model always refuses)")
    p.add_argument("--max-calls", type=lambda t: int_in(t, 1, 100_000, "a number of calls", "at least 1"),
                   default=None, metavar="N",
                   help="calls in progress at once, every transport together; beyond it a Twilio call "
                   "gets <Reject reason=busy>, a browser 503 and a SIP INVITE 503 with Retry-After, "
                   "each counted in /metrics (default: what this machine answers in time, from its cores and "
                   "the engines' steps timed at start, about a second: the log's \"admitting at most N "
                   "calls\" line shows the sum)")
    p.add_argument("--heap-profile", type=int, default=0, metavar="FRAMES",
                   help="hunt a leak: trace allocations (tracemalloc, FRAMES deep; costs CPU); SIGUSR1 "
                   "takes a baseline, the next ones log the places grown most since (default off)")
    p.add_argument("--ready-file", type=Path, default=None, metavar="PATH",
                   help="once every socket listens, write {\"pid\", \"http_port\", \"sip_port\"} to PATH as "
                   "JSON (atomically; removed at exit): how a supervisor or a test that passed --port 0 "
                   "learns the ports")
    p.add_argument("--drain-s", type=lambda t: float_in(t, 0.0, 3600.0, "seconds"), default=30.0,
                   help="on SIGTERM: how long live calls may go on before being ended politely "
                   "(default %(default)s s)")
    p.add_argument("--sip-port", type=port_number, default=None,
                   help="also answer SIP calls on this UDP port (e.g. 5060; off by default)")
    p.add_argument("--sip-host", default=None, help="address for SIP and RTP (default: --host)")
    p.add_argument("--sip-advertised-ip", default=None,
                   help="the address put in SDP/Contact (needed when listening on 0.0.0.0)")
    p.add_argument("--sip-rtp-ports", default="10000-10999", metavar="LO-HI",
                   help="RTP port range (default %(default)s)")
    p.add_argument("--sip-allow", action="append", metavar="CIDR",
                   help="source networks allowed to call (repeatable; default loopback only)")
    p.add_argument("--sip-rtp-timeout-s", type=float, default=30.0, metavar="S",
                   help="end a SIP call whose caller has sent no RTP for S seconds: a PBX that crashed "
                   "or a network that went sends no BYE (0: never; on hold with no media: 300 s; "
                   "default %(default)s)")
    p.add_argument("--recordings", type=Path, default=None, metavar="DIR",
                   help="record every call in DIR/YYYY-MM-DD/CALL.opus: two channels (the caller; the agent as the "
                   "caller heard it, cut where a barge-in cut it), written as the call goes; default off, "
                   "or ~/.local/share/parley/recordings when the agent spec says recording: {enabled: true}")
    p.add_argument("--recording-format", choices=get_args(RecordingFormat), default=None,
                   help="the recordings' files: opus (Ogg/Opus, 32 kbit/s, about 240 kB a minute) or wav "
                   "(16-bit PCM, CALL.wav, eight times the size at 8 kHz); default the agent spec's "
                   "recording.format, else opus")
    p.add_argument("--recordings-s3", default=None, metavar="s3://BUCKET/PREFIX",
                   help="upload each recording to S3 once its call ends (multipart, encrypted at rest, "
                   "verified, then removed from disk); a failed upload stays on disk and is sent at the next "
                   "start; implies recording (--recordings, else the default folder); default the agent "
                   "spec's recording.s3, else off (docs/operations.md, Recordings)")
    p.add_argument("--recordings-kms-key", default=None, metavar="KEY",
                   help="with --recordings-s3: SSE-KMS with this key id, ARN or alias (default the spec's "
                   "recording.kms_key, else SSE-S3, AES256)")
    p.add_argument("--keep-local", action="store_true",
                   help="with --recordings-s3: keep each recording on disk after its verified upload "
                   "(or the spec's recording.keep_local: true)")
    p.add_argument("--webhook-url", default=None, metavar="URL",
                   help="POST a signed JSON event to URL when each call ends (ids, numbers, times, outcome, "
                   "slots, transcript, latencies, recording), retried from a durable outbox in the call "
                   "records' database until the receiver answers 2xx (docs/webhooks.md); default "
                   "$PARLEY_WEBHOOK_URL, else off")
    p.add_argument("--webhook-secret", default=None, metavar="SECRET",
                   help="the key that signs each webhook (HMAC-SHA256, at least 16 characters); default "
                   "$PARLEY_WEBHOOK_SECRET (the environment keeps it out of the process list)")
    p.add_argument("--emf", metavar="PATH", default=None,
                   help="write the call tier's CloudWatch metrics (first byte per turn, live calls, dropped "
                   "frames) as Embedded Metric Format lines to PATH ('-': stdout) every --emf-interval-s; "
                   "parley deploy's alarms and dashboard read them")
    p.add_argument("--emf-deployment", default="parley-voice", metavar="NAME",
                   help="the Deployment dimension of those metrics: the endpoint name (default %(default)s)")
    p.add_argument("--emf-interval-s", type=float, default=60.0, help="(default %(default)s)")
    p.add_argument("--otlp-endpoint", default=None, metavar="URL",
                   help="send each call as a trace (a span per turn) to an OpenTelemetry collector over "
                   "OTLP/HTTP, e.g. http://localhost:4318 (docs/operations.md, Traces); default "
                   "$OTEL_EXPORTER_OTLP_ENDPOINT, else off")
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    p.set_defaults(func=_run)


SPHINX_MAX_IDLE = 16  # pipeline.engines.sphinx.SphinxPool's default max_idle (not imported: slow)


def _warm_counts(text: str) -> tuple[int, int]:
    """``--stt-warm``: "PHONE" or "PHONE:BROWSER" (browser defaults to 1), each >= 0."""
    phone, _, browser = text.partition(":")
    try:
        counts = (int(phone), int(browser) if browser else 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected PHONE or PHONE:BROWSER counts, got {text!r}") from None
    if min(counts) < 0 or max(counts) > SPHINX_MAX_IDLE:
        raise argparse.ArgumentTypeError(f"counts must be 0..{SPHINX_MAX_IDLE} (the pool keeps "
                                         f"at most that many idle), got {text!r}")
    return counts


DEFAULT_STT_PROCS = min(8, max(1, (os.cpu_count() or 2) - 1))
"""pocketsphinx decoding takes ~0.28 core per caller speaking: a worker per core, one core left
to the server's event loop."""


def _proc_count(text: str) -> int:
    """``--stt-procs``: 0..8 worker processes."""
    return int_in(text, 0, 8, "a number of processes", "expected 0..8 processes")


def _run(args: argparse.Namespace) -> int:
    from deploy.serve_cli import serve

    return serve(args)
