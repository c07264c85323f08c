"""``parley``: the command line, and the process's composition root.

Imports run downward only (deploy -> agent | telephony -> pipeline -> ssm_engine), and a server
that answers calls needs both the telephony entry and an agent, so the command line that wires
them together sits at the top, here. Each package contributes its own subcommands.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, get_args

from pipeline.options import Aggregation, SttDecoder, SttKind, TtsKind, TurnKind, VadKind

if TYPE_CHECKING:  # the engines load only when a command needs them
    from telephony.emf import EmfPublisher
    from telephony.metrics import Metrics
    from pipeline.engines.sphinx import SphinxPool
    from pipeline.engines.sphinx_procs import SphinxProcessPool

DEFAULT_AGENT = Path(__file__).resolve().parent.parent / "agent" / "examples" / "receptionist.yaml"

EPILOG = """\
examples:
  parley serve                          # answer calls on 127.0.0.1:8765 (needs TWILIO_AUTH_TOKEN)
  parley serve --insecure-dev           # local work: Twilio signatures not checked
  parley serve --public-url https://abc.example.com   # behind a tunnel/proxy: the URL Twilio signs
  parley serve --agent agent/examples/order_status.yaml   # another agent, from its spec
  parley call --twilio ws://127.0.0.1:8765/twilio/stream --say "hello there" --say "goodbye"
  parley serve --tts espeak             # speak with the espeak-ng baseline instead of parley's SSM voice
  parley serve --voice joe              # the male voice (or `voice: joe` in the agent spec)
  parley say "Your order ships on Tuesday." --out reply.wav --voice joe --rate 8000   # hear a voice
  parley eval tts --engine ssm --sentences FILE --json   # first-audio latency, RTF, intelligibility
  parley serve --sip-port 5060          # also answer SIP trunks (loopback callers by default;
                                        # without TWILIO_AUTH_TOKEN: SIP and the browser page only)
  parley calls list                     # call records; parley calls show CALL_SID
  open http://127.0.0.1:8765/           # call the agent from the browser (WebRTC)

environment:
  TWILIO_AUTH_TOKEN   the account's auth token: signs and checks Twilio requests (server and caller)
  TWILIO_ACCOUNT_SID  with the token, lets the agent transfer calls (Twilio's REST API)
  PARLEY_DB           where call records are kept: a SQLite file, or postgresql://... (several servers)
  PARLEY_SIP_USER, PARLEY_SIP_PASSWORD   digest credentials SIP callers must present
  PARLEY_GENESYS_API_KEY, PARLEY_GENESYS_CLIENT_SECRET   serve Genesys Cloud's Audio Connector at
                      /genesys/audiohook: the integration's API key and client secret (base64)
"""


def _configure_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper()),
        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s",
        stream=sys.stderr,
        force=True,
    )
    try:  # pipecat logs through loguru at DEBUG per frame; keep it to warnings unless asked
        from loguru import logger

        logger.remove()
        logger.add(sys.stderr, level="DEBUG" if level.upper() == "DEBUG" else "WARNING")
    except ImportError:
        pass


def _add_serve(sub: argparse._SubParsersAction) -> None:
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
    p.add_argument("--port", type=_port, default=8765, help="port to listen on (default %(default)s; 0 = any)")
    p.add_argument("--public-url", default=os.environ.get("PARLEY_PUBLIC_URL"),
                   help="the https:// URL Twilio reaches this server at (what it signs)")
    p.add_argument("--insecure-dev", action="store_true",
                   help="do not check X-Twilio-Signature (local work only; logged loudly)")
    p.add_argument("--vad", choices=get_args(VadKind), default="silero",
                   help="voice activity detector (default %(default)s; see benchmarks/bench_vad.py)")
    p.add_argument("--stt", choices=get_args(SttKind), default="ssm",
                   help="speech recognizer: parley's streaming SSM model (models/stt; finals "
                   "~10 ms after the caller stops, biased each turn toward what the agent "
                   "expects; on recorded people still far behind Whisper: WER 1.05 against "
                   "0.34, benchmarks/bench_stt_human.py), the pocketsphinx baseline, or Whisper "
                   "tiny.en (not streaming: finals ~0.5-1 s after the caller stops, most "
                   "accurate; one shared model a process), or remote: the SSM recogniser on the "
                   "model tier (--model-url) (default %(default)s)")
    p.add_argument("--stt-warm", type=_warm_counts, default=(4, 1), metavar="PHONE[:BROWSER]",
                   help="with --stt sphinx: pocketsphinx decoders built before the first call, "
                   "for phone calls (8 kHz) and browser calls (16 kHz); set them to the calls you expect at once. "
                   "Each costs ~0.4 s of start-up and ~90 MB; a call that finds none idle builds "
                   "one, which stalls every live call for ~0.4 s (pocketsphinx holds Python's "
                   "GIL). Finished calls give theirs back (default 4:1)")
    p.add_argument("--stt-procs", type=_proc_count, default=DEFAULT_STT_PROCS, metavar="N",
                   help="worker processes for the recognizer, so its work never waits for Python's "
                   "GIL behind the calls' event loop (pocketsphinx holds the GIL while it decodes): "
                   "pocketsphinx decoders are spread over N; the SSM recognizer's batched model "
                   "runs in one. 0 runs it all in the server process (default: one per core but "
                   "one, at least 1, at most 8: %(default)s here)")
    p.add_argument("--stt-compile", choices=["on", "off"],
                   default="off" if os.environ.get("PARLEY_STT_COMPILE") == "0" else "on",
                   help="with --stt ssm: compile the recognizer's 5-frame step with torch.compile "
                   "(~3x less CPU per lone call; ~30 s at the first start, a few seconds later from "
                   "the compile cache; needs a C++ compiler: without one the server logs why and "
                   "runs the step eagerly). Default %(default)s (PARLEY_STT_COMPILE=0 turns it off)")
    p.add_argument("--stt-decoder", choices=get_args(SttDecoder),
                   default="beam",
                   help="with --stt ssm: how finals are decoded: both heads' beam searches with "
                   "the lexicon and LM, rescored together (beam), greedy CTC, or one head's "
                   "search alone (default %(default)s)")
    p.add_argument("--tts", choices=get_args(TtsKind), default="ssm",
                   help="the agent's voice: parley's streaming SSM voice (--tts-model; Whisper "
                   "hears it as well as its festival teacher, 6 ms to first audio), or the "
                   "espeak-ng baseline (1 ms, far less intelligible), or remote: the SSM voice on the "
                   "model tier (--model-url) (default %(default)s)")
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
    p.add_argument("--voice", default=None, metavar="NAME",
                   help="with --tts ssm (or remote: the model servers' voice): which shipped voice "
                   "speaks: slt (female, distilled from festival's HTS voice) or joe (male, "
                   "distilled from Piper's neural voice); default: the agent spec's `voice:`, else "
                   "slt. Hear them with `parley say`")
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
    p.add_argument("--max-calls", type=lambda t: _int_in(t, 1, 100_000, "a number of calls", "at least 1"),
                   default=None, metavar="N",
                   help="calls in progress at once, every transport together; beyond it a Twilio call "
                   "gets <Reject reason=busy>, a browser 503 and a SIP INVITE 503 with Retry-After, "
                   "each counted in /metrics (default: 8 per CPU core, what one core was measured to "
                   "carry)")
    p.add_argument("--heap-profile", type=int, default=0, metavar="FRAMES",
                   help="hunt a leak: trace allocations (tracemalloc, FRAMES deep; costs CPU); SIGUSR1 "
                   "takes a baseline, the next ones log the places grown most since (default off)")
    p.add_argument("--drain-s", type=float, default=30.0,
                   help="on SIGTERM: how long live calls may go on before being ended politely "
                   "(default %(default)s s)")
    p.add_argument("--sip-port", type=_port, default=None,
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
    p.add_argument("--emf", metavar="PATH", default=None,
                   help="write the call tier's CloudWatch metrics (first byte per turn, live calls, dropped "
                   "frames) as Embedded Metric Format lines to PATH ('-': stdout) every --emf-interval-s; "
                   "parley deploy's alarms and dashboard read them")
    p.add_argument("--emf-deployment", default="parley-voice", metavar="NAME",
                   help="the Deployment dimension of those metrics: the endpoint name (default %(default)s)")
    p.add_argument("--emf-interval-s", type=float, default=60.0, help="(default %(default)s)")
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    p.set_defaults(func=_serve)


def _load_agent_spec(spec_path: Path):
    """The agent spec at ``spec_path`` (validated), or None for the built-in ``echo`` agent."""
    if str(spec_path) == "echo":
        return None
    from agent.spec import load_spec

    spec = load_spec(spec_path, env=os.environ)
    logging.getLogger("parley").info("agent %r from %s (%s backend)", spec.name, spec_path, spec.llm.backend)
    return spec


def _agent_factory(spec, *, llm_check: bool = True):
    """One agent processor per call, from a loaded spec (None: the echo agent); checked now,
    before taking calls, that its LLM backend can serve a call (``agent.preflight``)."""
    if spec is None:
        from agent.echo import EchoAgentProcessor

        return lambda _info: EchoAgentProcessor()
    from agent.factory import build_agent

    if spec.llm.backend != "embedded":
        from agent.preflight import check_llm

        asyncio.run(check_llm(spec, env=os.environ, probe=llm_check))
    if spec.llm.backend == "embedded" and spec.knowledge:
        from agent.semantic import SentenceEncoder

        encoder = SentenceEncoder.default()   # loaded and the knowledge embedded before any call
        if encoder is not None:
            encoder.encode([k.question for k in spec.knowledge] + [k.answer for k in spec.knowledge])
    return lambda info: build_agent(spec, call_sid=info.call_sid, params=info.params, env=os.environ)


def _voice_folder(args: argparse.Namespace, spec) -> str | None:
    """The SSM voice's folder: --tts-model, else --voice, else the agent spec's ``voice:``, else
    None (the default voice)."""
    from pipeline.voices import voice_dir

    if args.tts_model and args.voice:
        from pipeline.errors import ConfigError

        raise ConfigError("--voice and --tts-model both name the voice: give one")
    if args.tts_model:
        return str(args.tts_model)
    name = args.voice or (spec.voice if spec is not None else None)
    return str(voice_dir(name)) if name else None


def _remote_voice(args: argparse.Namespace, spec) -> str:
    """With --tts remote: the model servers' voice id, by name (--voice, else the agent spec's
    ``voice:``; "": the servers' default voice). A folder cannot travel to a model server."""
    if args.tts != "remote":
        return ""
    from pipeline.errors import ConfigError
    from pipeline.voices import VOICES

    if args.tts_model:
        raise ConfigError("--tts-model names a local voice folder: with --tts remote, pick the model "
                          f"servers' voice by name (--voice {' or '.join(VOICES)})")
    name = args.voice or (spec.voice if spec is not None else None) or ""
    if name and name not in VOICES:
        raise ConfigError(f"--tts remote speaks the model servers' shipped voices by name ({', '.join(VOICES)}), "
                          f"not {name!r}")
    return name


def _sip_credentials() -> tuple[str | None, str | None]:
    """PARLEY_SIP_USER / PARLEY_SIP_PASSWORD: both set, or neither. One without the other (an
    empty password included) would silently switch digest auth off: refuse to start instead."""
    from telephony.sip import SipConfigError

    user, password = os.environ.get("PARLEY_SIP_USER") or None, os.environ.get("PARLEY_SIP_PASSWORD") or None
    if (user is None) != (password is None):
        have, missing = ("PARLEY_SIP_USER", "PARLEY_SIP_PASSWORD") if user else ("PARLEY_SIP_PASSWORD",
                                                                              "PARLEY_SIP_USER")
        raise SipConfigError(f"{have} is set but {missing} is empty or unset: SIP digest auth needs both "
                             "(unset both to answer SIP callers without auth)")
    return user, password


def _sip_server(args: argparse.Namespace, agent_factory, server):
    """SIP beside HTTP, sharing the store, pipeline config and metrics. Credentials from the env:
    PARLEY_SIP_USER / PARLEY_SIP_PASSWORD make every INVITE answer a digest challenge."""
    from telephony.sip import SipConfig, SipServer

    lo, _, hi = args.sip_rtp_ports.partition("-")
    user, password = _sip_credentials()
    config = SipConfig(
        host=args.sip_host or args.host,
        port=args.sip_port,
        advertised_ip=args.sip_advertised_ip,
        rtp_port_min=int(lo),
        rtp_port_max=int(hi or lo),
        allowed_networks=tuple(args.sip_allow) if args.sip_allow else SipConfig().allowed_networks,
        max_calls=args.max_calls or SipConfig().max_calls,
        credentials=((user, password),) if user and password else (),
        rtp_timeout_s=args.sip_rtp_timeout_s,
    )
    return SipServer(config, agent_factory, store=server.store, pipeline_config=server.config.pipeline,
                     metrics=server.metrics)


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


def _int_in(text: str, lo: int, hi: int, what: str, out_of_range: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if not lo <= n <= hi:
        raise argparse.ArgumentTypeError(f"{out_of_range}, got {n}")
    return n


def _port(text: str) -> int:
    """A TCP/UDP port, 0..65535 (0: any free one)."""
    return _int_in(text, 0, 65535, "a port number", "a port is 0..65535")


def _proc_count(text: str) -> int:
    """``--stt-procs``: 0..8 worker processes."""
    return _int_in(text, 0, 8, "a number of processes", "expected 0..8 processes")


def _register_engines(metrics, sphinx_procs, voice_proc, *, ssm_stt_procs: bool) -> None:
    """Engine worker processes in ``/metrics``: how many are up, how many were replaced."""
    if sphinx_procs is not None:
        metrics.register_engine("pocketsphinx", lambda: len(sphinx_procs.worker_pids()),
                                lambda: sphinx_procs.restarts)
    if voice_proc is not None:
        metrics.register_engine("ssm-voice", lambda: voice_proc.workers_up, lambda: voice_proc.restarts)
    if ssm_stt_procs:  # the recognizer's process starts with the first call
        from pipeline.engines.runner_procs import RunnerProcess
        from pipeline.services.ssm_stt import SSMSTTEngine

        def runners() -> list[RunnerProcess]:
            return [e.runner for e in SSMSTTEngine.shared_engines() if isinstance(e.runner, RunnerProcess)]

        metrics.register_engine("ssm-stt", lambda: sum(r.workers_up for r in runners()),
                                lambda: sum(r.restarts for r in runners()))


def _prewarm_ssm_stt(config):
    """Load (and compile) the shared SSM recogniser before the first call; the config it runs with.

    Compiling needs a C++ compiler: without one the server runs the step eagerly (about twice the
    CPU per call) rather than not at all. A model that cannot load raises either way."""
    from pipeline.errors import EngineUnavailableError
    from pipeline.services.ssm_stt import DEFAULT_MODEL_DIR, SSMSTTEngine

    log = logging.getLogger("parley")
    p = config.pipeline
    t0 = time.perf_counter()
    if p.stt_compile:
        log.info("compiling the recogniser's step (about 30 s at the first start, seconds from "
                 "the compile cache later; --stt-compile off skips it)")
    try:
        SSMSTTEngine.shared(DEFAULT_MODEL_DIR, p.stt_decoder, compile=p.stt_compile, runner=p.stt_runner)
    except EngineUnavailableError as exc:
        if not p.stt_compile:
            raise
        log.warning("SSM recognizer: the compiled step is unavailable (%s); running it eagerly "
                    "instead (--stt-compile off skips the attempt)", exc)
        p = replace(p, stt_compile=False)
        config = replace(config, pipeline=p)
        SSMSTTEngine.shared(DEFAULT_MODEL_DIR, p.stt_decoder, compile=False, runner=p.stt_runner)
    log.info("SSM recognizer ready %s in %.1f s (step %s)",
             "in a worker process" if p.stt_runner == "process" else "in the server process",
             time.perf_counter() - t0, "compiled" if p.stt_compile else "eager")
    return config


def _serve(args: argparse.Namespace) -> int:
    from agent.calls_cli import db_location, default_db_path
    from pipeline.builder import PipelineConfig
    from pipeline.call_stores import open_call_store
    from telephony.genesys import GenesysConfig
    from telephony.server import CallServer, ServerConfig, default_max_calls, serve_forever

    _configure_logging(args.log_level)
    if args.sip_port is not None:
        _sip_credentials()  # before anything slow: a half-set pair refuses to start at once
    voice_proc = None
    spec = _load_agent_spec(args.agent)
    remote_voice = _remote_voice(args, spec)
    tts_model_dir = _voice_folder(args, spec) if args.tts != "remote" else None
    if args.tts == "ssm":  # load the voice now: a missing or bad model fails before any call
        import torch

        from pipeline.engines.ssm_voice import DEFAULT_MODEL_DIR, SSMVoiceEngine

        torch.set_num_threads(1)  # FACTS: small model steps run 5-40x slower on 2 threads here

        voice_dir = tts_model_dir or DEFAULT_MODEL_DIR
        if args.tts_procs:  # the voice's model steps get a GIL (and a core) of their own
            from pipeline.engines.voice_procs import VoiceProcess

            voice_proc = VoiceProcess(voice_dir)
            SSMVoiceEngine.register_shared(voice_dir, voice_proc)
            logging.getLogger("parley").info("SSM voice loaded in its own process (pid %d) in "
                                             "%.2f s", voice_proc.pid, voice_proc.load_s)
        else:
            engine = SSMVoiceEngine.shared(voice_dir)
            logging.getLogger("parley").info("SSM voice loaded in %.2f s", engine.load_s)
    agent_factory = _agent_factory(spec, llm_check=not args.no_llm_check)
    db_path = db_location(args.db) if args.db else default_db_path()
    store = open_call_store(db_path)
    orphans = store.close_orphans()  # calls a killed server left "in progress"
    shown = str(db_path).rpartition("@")[2]  # a PostgreSQL URL's password stays out of the log
    logging.getLogger("parley").info("call records: %s%s", shown,
                                     f" ({orphans} left open by a stopped server, now ended)" if orphans else "")
    token = os.environ.get("TWILIO_AUTH_TOKEN")
    model_urls = tuple(u.strip() for u in args.model_url.split(",") if u.strip())
    bridge = None
    if "remote" in (args.stt, args.tts):  # sagemaker://ENDPOINT: streams go through the bridge process
        from deploy.sagemaker_stream.launcher import bridge_for

        bridge, model_urls = bridge_for(model_urls)
    config = ServerConfig(
        host=args.host,
        port=args.port,
        max_calls=args.max_calls or default_max_calls(),
        auth_token=token,
        # SIP without a Twilio account: serve SIP (and the browser page), not Twilio
        twilio=bool(token) or args.insecure_dev or args.sip_port is None,
        insecure_dev=args.insecure_dev,
        public_url=args.public_url,
        drain_grace_s=args.drain_s,
        twilio_account_sid=os.environ.get("TWILIO_ACCOUNT_SID"),
        twilio_api_base=os.environ.get("TWILIO_API_BASE", "https://api.twilio.com"),
        genesys=GenesysConfig.from_env(os.environ.get("PARLEY_GENESYS_API_KEY"),
                                       os.environ.get("PARLEY_GENESYS_CLIENT_SECRET")),
        pipeline=(
            PipelineConfig.stock_pipecat(stt=args.stt, tts=args.tts, tts_model_dir=tts_model_dir,
                                         model_urls=model_urls)
            if args.stock_pipecat
            else PipelineConfig(vad=args.vad, turn=args.turn, vad_stop_s=args.silence_ms / 1000.0,
                                turn_hold_s=args.hold_ms / 1000.0,
                                text_aggregation=args.text_aggregation, stt=args.stt,
                                tts=args.tts, tts_model_dir=tts_model_dir, model_urls=model_urls)
        ),
    )
    config = replace(config, pipeline=replace(
        config.pipeline, stt_decoder=args.stt_decoder, stt_compile=args.stt_compile == "on",
        stt_runner="process" if args.stt_procs > 0 else "thread", remote_voice=remote_voice))
    sphinx_procs = None
    if config.pipeline.stt == "ssm":
        config = _prewarm_ssm_stt(config)
    if config.pipeline.stt == "sphinx":
        from pipeline.engines.sphinx import SPHINX_POOL, set_default_pool

        pool: SphinxPool | SphinxProcessPool = SPHINX_POOL
        if args.stt_procs > 0:
            from pipeline.engines.sphinx_procs import SphinxProcessPool

            pool = sphinx_procs = SphinxProcessPool(args.stt_procs, max_idle=SPHINX_MAX_IDLE)
            set_default_pool(pool)
        t0 = time.perf_counter()
        phone, browser = args.stt_warm
        built = (pool.prewarm(config.pipeline.sample_rate_hz, phone) + pool.prewarm(16000, browser))
        where = (f"in {args.stt_procs} worker process(es)" if sphinx_procs is not None
                 else "in the server process")
        logging.getLogger("parley").info("pocketsphinx: %d decoders warm %s in %.1f s", built,
                                         where, time.perf_counter() - t0)
    server = CallServer(config, agent_factory=agent_factory, store=store)
    _register_engines(server.metrics, sphinx_procs, voice_proc,
                      ssm_stt_procs=config.pipeline.stt == "ssm" and args.stt_procs > 0)
    sip = _sip_server(args, agent_factory, server) if args.sip_port is not None else None
    emf = _emf(args, server.metrics)
    heap = None
    if args.heap_profile:
        from deploy.heap import HeapProfile

        heap = HeapProfile(args.heap_profile)

    async def serve() -> None:
        if heap is not None:
            heap.install(asyncio.get_running_loop())
        await serve_forever(server, sip=sip, emf=emf)

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        pass
    finally:
        store.close()
        if bridge is not None:
            bridge.close()
        if sphinx_procs is not None:
            sphinx_procs.close()
        if voice_proc is not None:
            voice_proc.close()
    return 0


def _emf(args: argparse.Namespace, metrics: "Metrics") -> "EmfPublisher | None":
    """``--emf PATH``: the call tier's CloudWatch metrics as EMF lines (telephony.emf)."""
    if args.emf is None:
        return None
    from telephony.emf import EmfPublisher

    if args.emf == "-":
        def write(line: str) -> None:
            print(line, flush=True)
    else:
        try:
            out = open(args.emf, "a", buffering=1)  # noqa: SIM115 - open for the process's life
        except OSError as exc:
            from pipeline.errors import ConfigError

            raise ConfigError(f"--emf {args.emf}: {exc.strerror or exc}") from None

        def write(line: str) -> None:
            out.write(line + "\n")
    return EmfPublisher(metrics, args.emf_deployment, write, interval_s=args.emf_interval_s)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("parley-voice")
    except PackageNotFoundError:
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    from agent.calls_cli import register_cli as register_calls
    from ssm_engine.stt.cli import register_cli as register_stt
    from deploy.aws.cli import register_cli as register_deploy
    from deploy.model_server.cli import register_cli as register_model_server
    from pipeline.say_cli import register_cli as register_say
    from ssm_engine.tts.cli import register_cli as register_tts

    parser = argparse.ArgumentParser(
        prog="parley",
        description="parley: a real-time voice agent for phone and browser calls.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"parley {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_serve(sub)
    register_calls(sub)
    register_stt(sub)  # parley data stt, parley train stt
    register_tts(sub)  # parley data tts, parley train tts
    register_say(sub)  # parley say (hear a voice)
    register_model_server(sub)  # parley model-server (the model tier)
    register_deploy(sub)  # parley deploy (SageMaker endpoints)
    _register_plugins(sub)  # parley call, parley eval stt|tts (the harness)
    return parser


PLUGIN_GROUP = "parley.commands"


def _register_plugins(sub: argparse._SubParsersAction) -> None:
    """Commands of other installed packages. Each entry point of the group ``parley.commands``
    names a ``register_cli(subparsers)``; parley's own harness (``parley call``, ``parley eval``)
    comes this way, so the product never imports it. A plug-in that cannot be loaded is one line
    on stderr, and every other command still works."""
    from importlib.metadata import entry_points

    for ep in sorted(entry_points(group=PLUGIN_GROUP), key=lambda e: e.name):
        try:
            register = ep.load()
        except ImportError as exc:
            print(f"parley: commands of {ep.name!r} ({ep.value}) not loaded: {exc}", file=sys.stderr)
            continue
        register(sub)


def main(argv: list[str] | None = None) -> int:
    _configure_logging("WARNING")  # before pipecat is imported: no banner or import-time debug lines
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except Exception as exc:  # the command line's edge: one clear line, not a traceback
        from agent.errors import AgentError
        from deploy.errors import DeployError
        from pipeline.errors import PipelineError
        from ssm_engine.errors import SSMEngineError
        from telephony.errors import TelephonyError

        if isinstance(exc, (TelephonyError, PipelineError, AgentError, SSMEngineError, DeployError)):
            print(f"parley {args.command}: {exc}", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    raise SystemExit(main())
