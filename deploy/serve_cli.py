"""``parley serve``: the process it wires together (the composition root; its options are
``deploy.serve_args``).

Imports run downward only (deploy -> agent | telephony -> pipeline -> ssm_engine), and a server
that answers calls needs both the telephony entry and an agent, so the command that wires them
together sits at the top, here: the agent's spec and LLM back end, the engines (in worker
processes by default, warmed before the first call), the call server with SIP and Genesys beside
it, and the CloudWatch metrics lines.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import json
import logging
import os
import shutil
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from deploy.logs import configure_logging, redact_logs
from pipeline.engines.worker_metrics import ENV as WORKER_METRICS_ENV
from pipeline.options import RecordingFormat

if TYPE_CHECKING:  # the engines load only when a command needs them
    from telephony.emf import EmfPublisher
    from telephony.metrics import Metrics
    from pipeline.records import CallStore
    from pipeline.recordings_s3 import RecordingsS3Config
    from pipeline.redaction import Redactor
    from pipeline.tracing import CallTracing
    from telephony.webhooks import WebhookConfig, WebhookSender
    from pipeline.engines.sphinx import SphinxPool
    from pipeline.engines.sphinx_procs import SphinxProcessPool

# at stop, how long the recordings' uploads still queued may go on (each call's end already gave
# its own upload a few seconds; ECS's stop timeout is 120 s, parley-calls.yaml's drain at most 115)
UPLOADS_AT_STOP_S = 5.0

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
        max_calls=server.config.max_calls,
        credentials=((user, password),) if user and password else (),
        rtp_timeout_s=args.sip_rtp_timeout_s,
    )
    return SipServer(config, agent_factory, store=server.store, pipeline_config=server.config.pipeline,
                     metrics=server.metrics)


def _api_token(args: argparse.Namespace) -> str | None:
    """--api-token, else PARLEY_API_TOKEN (None: POST /calls is off); ConfigError when too short."""
    token = args.api_token or os.environ.get("PARLEY_API_TOKEN") or None
    if token is not None and len(token) < 16:
        from pipeline.errors import ConfigError

        raise ConfigError("the API token (--api-token or PARLEY_API_TOKEN) must be at least 16 characters")
    return token


def _webhook_config(args: argparse.Namespace) -> "WebhookConfig | None":
    """--webhook-url / --webhook-secret, else PARLEY_WEBHOOK_URL / PARLEY_WEBHOOK_SECRET (read here,
    at the command line's edge); None when no URL is set. A bad one raises ``ConfigError``."""
    url = args.webhook_url or os.environ.get("PARLEY_WEBHOOK_URL")
    secret = args.webhook_secret or os.environ.get("PARLEY_WEBHOOK_SECRET") or ""
    if not url:
        if secret and args.webhook_secret:
            from telephony.errors import ConfigError

            raise ConfigError("--webhook-secret without --webhook-url (or PARLEY_WEBHOOK_URL): where to?")
        return None
    from telephony.webhooks import WebhookConfig

    return WebhookConfig(url=url, secret=secret)


def _tracing(args: argparse.Namespace, spec) -> "CallTracing | None":
    """--otlp-endpoint, else OTEL_EXPORTER_OTLP_ENDPOINT: each call a trace (None: off). The
    exporter reads the other standard variables itself (OTEL_EXPORTER_OTLP_HEADERS for a
    backend's key, OTEL_EXPORTER_OTLP_TIMEOUT, ...)."""
    from urllib.parse import urlsplit

    endpoint = args.otlp_endpoint or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or None
    if endpoint is None:
        return None
    if urlsplit(endpoint).scheme not in ("http", "https") or not urlsplit(endpoint).netloc:
        from pipeline.errors import ConfigError

        raise ConfigError(f"the OTLP endpoint must be an http:// or https:// URL, not {endpoint!r}")
    from pipeline.tracing import CallTracing, trace_exporter_url

    url = trace_exporter_url(endpoint)
    logging.getLogger("parley").info("traces: each call to %s (OTLP/HTTP)", url)
    return CallTracing.otlp(url, agent_name=spec.name if spec is not None else "echo")


def _redactor(spec) -> "Redactor":
    """What is masked in records, webhooks and logs: numbers always, and the spec's sensitive slots."""
    from pipeline.redaction import Redactor

    return Redactor(frozenset(s.name for s in spec.slots if s.sensitive) if spec is not None else frozenset())


def _calls_store(store, redactor: "Redactor", webhooks: "WebhookSender | None") -> "CallStore":
    """The store every transport writes to: each record masked (``redactor``) on its way in, then
    kept in ``store`` and, the first time it is written ended, handed to ``webhooks`` (masked)."""
    from pipeline.redaction import RedactingCallStore

    inner: CallStore = store
    if webhooks is not None:
        from telephony.webhooks import CallEndHookStore

        inner = CallEndHookStore(store, webhooks.call_ended)
    return RedactingCallStore(inner, redactor)


def _recordings(args: argparse.Namespace, spec, *, s3: bool = False) -> tuple[str | None, object]:
    """Where calls are recorded (--recordings, else the spec's ``recording: {enabled: true}`` or an
    S3 upload (``s3``) in the default folder, else None) and the spec with its recording announcement
    put before the greeting; recordings past the spec's ``retention_days`` are deleted now."""
    from telephony.core.recorder import prune_recordings

    recording = spec.recording if spec is not None else None
    folder = args.recordings
    if folder is None and (s3 or (recording is not None and recording.enabled)):
        folder = Path("~/.local/share/parley/recordings")
    if folder is None:
        return None, spec
    folder = folder.expanduser()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        from pipeline.errors import ConfigError

        raise ConfigError(f"--recordings {folder}: {exc.strerror or exc}") from None
    log = logging.getLogger("parley")
    if recording is not None and recording.retention_days:
        removed = prune_recordings(folder, recording.retention_days)
        log.info("recordings: %s (kept %d days; %d older removed)", folder, recording.retention_days, removed)
    else:
        log.info("recordings: %s", folder)
    if recording is not None and recording.announce:
        spec = replace(spec, greeting=f"{recording.announce} {spec.greeting}")
    return str(folder), spec


def _recordings_s3(args: argparse.Namespace, spec) -> "RecordingsS3Config | None":
    """--recordings-s3 (with --recordings-kms-key, --keep-local), else the spec's ``recording.s3``
    (with its ``kms_key``, ``keep_local``), else None."""
    from pipeline.errors import ConfigError
    from pipeline.recordings_s3 import RecordingsS3Config

    recording = spec.recording if spec is not None else None
    url = args.recordings_s3 or (recording.s3 if recording is not None else None)
    if url is None:
        return None
    kms_key = args.recordings_kms_key or (recording.kms_key if recording is not None else None)
    keep_local = args.keep_local or (recording is not None and recording.keep_local)
    try:
        return RecordingsS3Config.parse(url, kms_key_id=kms_key, keep_local=keep_local)
    except ConfigError as exc:
        raise ConfigError(f"{'--recordings-s3' if args.recordings_s3 else 'recording.s3'}: {exc}") from None


def _sweep_recordings(s3: "RecordingsS3Config", folder: str, store: "CallStore") -> None:
    """Queue for upload the recordings a stopped server left on disk (an upload that failed, a
    process that died first); each one stored puts its s3:// URL in its call's record (the file is
    named after the call)."""
    from pipeline.errors import PipelineError
    from telephony.core.uploads import RecordingUploader

    log = logging.getLogger("parley")

    def uploaded(path: Path, url: str) -> None:
        try:
            record = store.get(path.stem)
            if record is not None and record.recording and Path(record.recording).resolve() == path.resolve():
                record.recording = url
                store.update(record)
        except PipelineError as exc:
            log.warning("recordings: %s stored at %s, but its call's record not updated: %s", path, url, exc)

    queued = RecordingUploader.shared(s3, folder).sweep(uploaded)
    log.info("recordings: uploaded to %s (%s%s); %d on disk queued (any stored already is only checked)",
             s3.url, s3.encryption, ", kept on disk" if s3.keep_local else "", queued)


async def _finish_uploads(s3: "RecordingsS3Config", folder: str) -> None:
    """At stop, the calls over: the recordings' uploads still queued get ``UPLOADS_AT_STOP_S`` to
    finish (on the loop, so their records get their URLs); what is left stays on disk for the next
    start (a container's disk goes with it: hence the wait)."""
    from telephony.core.uploads import RecordingUploader

    left = await asyncio.to_thread(RecordingUploader.shared(s3, folder).wait_idle, UPLOADS_AT_STOP_S)
    if left:
        logging.getLogger("parley").warning("recordings: %d upload(s) not done at stop; they stay in %s for the "
                                            "next start", left, folder)


def _recording_format(args: argparse.Namespace, spec) -> RecordingFormat:
    """--recording-format, else the spec's ``recording.format``, else Ogg/Opus."""
    if args.recording_format is not None:
        return args.recording_format
    return spec.recording.format if spec is not None else "opus"


def _register_engines(metrics, sphinx_procs, voice_proc, *, ssm_stt_procs: bool) -> None:
    """Engine worker processes in ``/metrics``: how many are up, how many were replaced."""
    if sphinx_procs is not None:
        metrics.register_engine("pocketsphinx", lambda: len(sphinx_procs.worker_pids()),
                                lambda: sphinx_procs.restarts)
    if voice_proc is not None:
        metrics.register_engine("ssm-voice", lambda: voice_proc.workers_up, lambda: voice_proc.restarts)
    if ssm_stt_procs:  # the recognizer's process starts with the first call
        from pipeline.engines.runner_procs import RunnerProcess
        from pipeline.engines.ssm_recognizer import SSMSTTEngine

        def runners() -> list[RunnerProcess]:
            return [e.runner for e in SSMSTTEngine.shared_engines() if isinstance(e.runner, RunnerProcess)]

        metrics.register_engine("ssm-stt", lambda: sum(r.workers_up for r in runners()),
                                lambda: sum(r.restarts for r in runners()))

        def finals() -> list:
            return [proc for e in SSMSTTEngine.shared_engines() for proc in e.final_procs]

        metrics.register_engine("ssm-stt-final", lambda: sum(f.workers_up for f in finals()),
                                lambda: sum(f.restarts for f in finals()))


def _prewarm_ssm_stt(config):
    """Load (and compile) the shared SSM recogniser before the first call; the config it runs with.

    Compiling needs a C++ compiler: without one the server runs the step eagerly (about twice the
    CPU per call) rather than not at all. A model that cannot load raises either way."""
    from pipeline.errors import EngineUnavailableError
    from pipeline.engines.ssm_recognizer import DEFAULT_MODEL_DIR, SSMSTTEngine

    log = logging.getLogger("parley")
    p = config.pipeline
    model_dir = p.stt_model_dir or DEFAULT_MODEL_DIR
    t0 = time.perf_counter()
    if p.stt_compile:
        log.info("compiling the recogniser's step (about 30 s at the first start, seconds from "
                 "the compile cache later; --stt-compile off skips it)")
    try:
        SSMSTTEngine.shared(model_dir, p.stt_decoder, compile=p.stt_compile, runner=p.stt_runner)
    except EngineUnavailableError as exc:
        if not p.stt_compile:
            raise
        log.warning("SSM recognizer: the compiled step is unavailable (%s); running it eagerly "
                    "instead (--stt-compile off skips the attempt)", exc)
        p = replace(p, stt_compile=False)
        config = replace(config, pipeline=p)
        SSMSTTEngine.shared(model_dir, p.stt_decoder, compile=False, runner=p.stt_runner)
    engine = SSMSTTEngine.shared(model_dir, p.stt_decoder, compile=p.stt_compile, runner=p.stt_runner)
    log.info("SSM recognizer ready %s in %.1f s (step %s%s)",
             "in a worker process" if p.stt_runner == "process" else "in the server process",
             time.perf_counter() - t0, "compiled" if p.stt_compile else "eager",
             "; finals from the final pass " + (f"in {len(engine.final_procs)} worker process(es) of its own"
                                                 if engine.final_procs else "in a thread")
             if engine.has_final_pass else "")
    return config


def _load_ssm_voice(voice_dir, *, procs: bool, compile: bool):
    """Load the SSM voice (in a process of its own with ``procs``: the ``VoiceProcess``
    returned, else None), its steps compiled when asked and possible: without a C++ compiler it
    runs them eagerly (about 1.5x the CPU per reply) rather than not at all."""
    from pipeline.engines.ssm_voice import SSMVoiceEngine
    from pipeline.errors import EngineUnavailableError

    log = logging.getLogger("parley")

    def load(compiled: bool):
        steps = "compiled" if compiled else "eager"
        if procs:  # the voice's model steps get a GIL (and a core) of their own
            from pipeline.engines.voice_procs import VoiceProcess

            proc = VoiceProcess(voice_dir, compile=compiled)
            SSMVoiceEngine.register_shared(voice_dir, proc)
            log.info("SSM voice loaded in its own process (pid %d) in %.2f s (steps %s)",
                     proc.pid, proc.load_s, steps)
            return proc
        engine = SSMVoiceEngine.shared(voice_dir, compile=compiled)
        log.info("SSM voice loaded in %.2f s (steps %s)", engine.load_s, steps)
        return None

    if compile:
        log.info("compiling the voice's steps (about 20 s at the first start, seconds from the "
                 "compile cache later; --tts-compile off skips it)")
        try:
            return load(True)
        except EngineUnavailableError as exc:
            if "compil" not in str(exc):
                raise
            log.warning("SSM voice: the compiled steps are unavailable (%s); running them "
                        "eagerly instead (--tts-compile off skips the attempt)", exc)
    return load(False)


def _admission_cap(args: argparse.Namespace, pipeline) -> int:
    """Calls taken at once: ``--max-calls``, else what this machine answers in time, the shipped
    engines' steps timed here (``pipeline.capacity``, about a second); said in one log line."""
    log = logging.getLogger("parley")
    if args.max_calls:
        log.info("admitting at most %d calls: --max-calls", args.max_calls)
        return args.max_calls
    from pipeline.capacity import calibrate, engine_probes

    probes = engine_probes(pipeline.vad, pipeline.stt, pipeline.tts, stt_model_dir=pipeline.stt_model_dir,
                           voice_dir=pipeline.tts_model_dir)
    capacity = calibrate(pipeline.vad, pipeline.stt, pipeline.tts, pipeline.turn, probes)
    log.info("%s", capacity.line())
    return capacity.max_calls


def serve(args: argparse.Namespace) -> int:
    """Run ``parley serve`` as ``args`` (``deploy.serve_args``) say, until SIGTERM or SIGINT."""
    from agent.calls_cli import db_location, default_db_path
    from pipeline.builder import PipelineConfig
    from pipeline.call_stores import open_call_store
    from telephony.genesys import GenesysConfig
    from telephony.server import CallServer, ServerConfig, default_max_calls, serve_forever

    configure_logging(args.log_level)
    check_ports(args)  # before the models load (tens of seconds): a port in use is said at once
    ready_file = ReadyFile(args.ready_file) if args.ready_file is not None else None
    if args.sip_port is not None:
        _sip_credentials()  # before anything slow: a half-set pair refuses to start at once
    webhook_config = _webhook_config(args)  # a bad URL or secret: one line now, not after the models load
    api_token = _api_token(args)  # a short one: said now, before the models load
    # engine workers write their own metrics (request times) where /metrics reads them
    worker_metrics = share_worker_metrics()
    atexit.register(unshare_worker_metrics, worker_metrics)
    voice_proc = None
    spec = _load_agent_spec(args.agent)
    tracing = _tracing(args, spec)  # a bad endpoint refuses to start before the models load
    recordings_s3 = _recordings_s3(args, spec)  # so does a bad s3:// URL
    remote_voice = _remote_voice(args, spec)
    tts_model_dir = _voice_folder(args, spec) if args.tts != "remote" else None
    if args.tts == "ssm":  # load the voice now: a missing or bad model fails before any call
        import torch

        from pipeline.engines.ssm_voice import DEFAULT_MODEL_DIR

        torch.set_num_threads(1)  # FACTS: small model steps run 5-40x slower on 2 threads here

        voice_dir = tts_model_dir or DEFAULT_MODEL_DIR
        voice_proc = _load_ssm_voice(voice_dir, procs=bool(args.tts_procs),
                                     compile=args.tts_compile == "on")
    recordings_dir, spec = _recordings(args, spec, s3=recordings_s3 is not None)
    from deploy.agent_catalog import AgentCatalog

    # the spec's agent, or one POST /calls named for the call
    agent_factory = AgentCatalog(_agent_factory(spec, llm_check=not args.no_llm_check),
                                 build=lambda path: _agent_factory(_load_agent_spec(path),
                                                                   llm_check=not args.no_llm_check))
    db_path = db_location(args.db) if args.db else default_db_path()
    store = open_call_store(db_path)
    orphans = store.close_orphans()  # calls a killed server left "in progress"
    shown = str(db_path).rpartition("@")[2]  # a PostgreSQL URL's password stays out of the log
    logging.getLogger("parley").info("call records: %s%s", shown,
                                     f" ({orphans} left open by a stopped server, now ended)" if orphans else "")
    if recordings_s3 is not None and recordings_dir is not None:
        _sweep_recordings(recordings_s3, recordings_dir, store)
    redactor = _redactor(spec)
    redact_logs(redactor)
    webhooks = None
    if webhook_config is not None:
        from telephony.webhooks import WebhookSender

        webhooks = WebhookSender(webhook_config, outbox=store)
    calls_store = _calls_store(store, redactor, webhooks)
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
        api_token=api_token,
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
        stt_model_dir=args.stt_model,
        stt_runner="process" if args.stt_procs > 0 else "thread", remote_voice=remote_voice,
        recordings_dir=recordings_dir, recording_format=_recording_format(args, spec),
        recordings_s3=recordings_s3))
    sphinx_procs = None
    if config.pipeline.stt == "ssm":
        config = _prewarm_ssm_stt(config)
    if config.pipeline.stt == "sphinx":
        from pipeline.engines.sphinx import SPHINX_POOL, set_default_pool

        pool: SphinxPool | SphinxProcessPool = SPHINX_POOL
        if args.stt_procs > 0:
            from pipeline.engines.sphinx_procs import SphinxProcessPool

            pool = sphinx_procs = SphinxProcessPool(args.stt_procs, max_idle=SPHINX_POOL.max_idle)
            set_default_pool(pool)
        t0 = time.perf_counter()
        phone, browser = args.stt_warm
        built = (pool.prewarm(config.pipeline.sample_rate_hz, phone) + pool.prewarm(16000, browser))
        where = (f"in {args.stt_procs} worker process(es)" if sphinx_procs is not None
                 else "in the server process")
        logging.getLogger("parley").info("pocketsphinx: %d decoders warm %s in %.1f s", built,
                                         where, time.perf_counter() - t0)
    config = replace(config, max_calls=_admission_cap(args, config.pipeline))
    server = CallServer(config, agent_factory=agent_factory, store=calls_store, agents=agent_factory.load,
                        tracing=tracing)
    server.metrics.read_worker_metrics(worker_metrics)
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
        await serve_forever(server, sip=sip, emf=emf, webhooks=webhooks,
                            listening=ready_file.write if ready_file is not None else None)
        if recordings_s3 is not None and recordings_dir is not None:
            await _finish_uploads(recordings_s3, recordings_dir)

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        pass
    finally:
        if ready_file is not None:
            ready_file.remove()
        store.close()
        if tracing is not None:  # what is queued is posted, each post bounded by its timeout
            tracing.shutdown()
        if bridge is not None:
            bridge.close()
        if sphinx_procs is not None:
            sphinx_procs.close()
        if voice_proc is not None:
            voice_proc.close()
    return 0


def check_ports(args: argparse.Namespace) -> None:
    """Refuse at once, in the server's own words, a port another process holds (HTTP on TCP, SIP
    on UDP), before anything slow loads. Each socket is bound as the server binds it and closed
    again; the server binds for real once the models are loaded (port 0 is not checked)."""
    import socket

    from telephony.errors import TelephonyError
    from telephony.sip import SipConfigError

    checks = [(socket.SOCK_STREAM, args.host, args.port, "", TelephonyError)]
    if args.sip_port is not None:
        checks.append((socket.SOCK_DGRAM, args.sip_host or args.host, args.sip_port, "SIP on udp://",
                       SipConfigError))
    for kind, host, port, what, error in checks:
        if not port:
            continue
        try:
            infos = socket.getaddrinfo(host, port, type=kind, flags=socket.AI_PASSIVE)
        except OSError:
            continue  # an address that does not resolve: the server's own bind says so
        family, _, _, _, address = infos[0]
        with socket.socket(family, kind) as sock:
            if kind == socket.SOCK_STREAM:  # as asyncio's TCP server does on POSIX
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(address)
            except OSError as exc:
                where = f"listen for {what}{host}:{port}" if what else f"listen on {host}:{port}"
                raise error(f"cannot {where}: {exc.strerror or exc}") from exc


def share_worker_metrics() -> Path:
    """A fresh folder for the workers' metric files, named in this process's environment so that
    every worker spawned from now on writes there. ``unshare_worker_metrics`` removes it."""
    import prometheus_client  # noqa: F401 - imported first: this process's own metrics stay in memory

    folder = Path(tempfile.mkdtemp(prefix="parley-worker-metrics-"))
    os.environ[WORKER_METRICS_ENV] = str(folder)
    return folder


def unshare_worker_metrics(folder: Path) -> None:
    if os.environ.get(WORKER_METRICS_ENV) == str(folder):
        del os.environ[WORKER_METRICS_ENV]
    shutil.rmtree(folder, ignore_errors=True)


class ReadyFile:
    """``--ready-file``: the bound ports as JSON, written whole (a reader never sees half a file)."""

    def __init__(self, path: Path) -> None:
        if not path.parent.is_dir():  # said before the server starts, not after
            from pipeline.errors import ConfigError

            raise ConfigError(f"--ready-file {path}: no folder {path.parent}")
        self.path = path

    def write(self, ports: dict[str, int | None]) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            tmp.write_text(json.dumps({"pid": os.getpid(), **ports}) + "\n")
            tmp.replace(self.path)
        except OSError as exc:
            from pipeline.errors import ConfigError

            raise ConfigError(f"--ready-file {self.path}: {exc.strerror or exc}") from None
        logging.getLogger("parley").info("ports written to %s", self.path)

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


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
