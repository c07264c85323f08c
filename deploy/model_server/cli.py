"""``parley model-server``: the command line of the model tier."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
from pathlib import Path

from deploy.arg_types import int_in, port_number

from .server import ModelServer, ModelServerConfig, default_model_dir

log = logging.getLogger("parley.model_server")

EPILOG = """\
what it serves (port 8080 by default, as SageMaker expects):
  GET  /ping               200 once the models are loaded and a real inference ran through each
  GET  /metrics            Prometheus: first-audio and final latency, live streams, batch sizes
  POST /invocations        one TTS request (JSON) -> newline-delimited JSON audio events
  WS   /tts/websocket      Cartesia's streaming TTS API (pipecat's CartesiaTTSService works)
  WS   /stt/websocket      Cartesia's streaming STT API (pipecat's CartesiaSTTService works)
  WS   /invocations-bidirectional-stream   SageMaker's bidirectional path: routed by the
                           X-Amzn-SageMaker-Model-Invocation-Path header (tts/websocket, stt/websocket)

voices: every shipped voice the model folder holds (tts-joe/ is joe, the default; tts/ is slt), each
request picking one by Cartesia's voice id: {"voice": {"mode": "id", "id": "slt"}} ("default" or none:
the default voice). parley serve --tts remote --voice slt asks for slt.

examples:
  parley model-server                          # models from /opt/ml/model, else the repo's models/
  parley model-server --port 9000 --model-dir /mnt/efs/parley-models
  parley model-server --device cuda            # fail at start, in one line, if torch sees no GPU
  parley serve --stt remote --tts remote --model-url ws://10.0.1.5:8080,ws://10.0.2.7:8080

SIGTERM drains: /ping turns 503, new streams are refused, live ones get a "goaway" message and are
served until they leave or --grace-s ends (SageMaker kills an instance 30 s after SIGTERM).
"""


def register_cli(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("model-server", help="serve the speech models to call servers (the model tier)",
                       description="Serve parley's SSM voice and recogniser to many streams at once, on "
                                   "SageMaker's container contract and Cartesia's WebSocket API.",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--host", default="0.0.0.0", help="address to listen on (default 0.0.0.0)")
    p.add_argument("--port", type=port_number, default=8080, help="port (default 8080; 0 picks a free one and logs it)")
    p.add_argument("--model-dir", type=Path, default=None,
                   help="folder holding stt/ and tts/ (default: $PARLEY_MODEL_DIR, else /opt/ml/model when it "
                        "has them, else the repository's models/)")
    p.add_argument("--grace-s", type=float, default=25.0,
                   help="how long a drain serves live streams after SIGTERM (default 25)")
    p.add_argument("--max-streams", type=lambda t: int_in(t, 1, 100_000, "a number of streams", "at least 1"), default=256, help="streams open at once before 503 (default 256)")
    p.add_argument("--stt-compile", action=argparse.BooleanOptionalAction, default=True,
                   help="compile the recogniser's step before taking traffic (default on; slow at a cold start)")
    p.add_argument("--tts-compile", action=argparse.BooleanOptionalAction, default=True,
                   help="compile each voice's steps for a lone stream before taking traffic (less CPU "
                        "for a stream that speaks alone; batches stay eager; default on; slow at a cold "
                        "start)")
    p.add_argument("--device", default="auto", metavar="auto|cpu|cuda[:N]",
                   help="where the models run: auto takes the GPU when torch sees one (a CUDA build of torch "
                        "and a driver), else the CPU; cuda without a GPU is an error (default auto)")
    p.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING (default INFO)")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    logging.getLogger().setLevel(args.log_level.upper())
    model_dir = args.model_dir or (Path(os.environ["PARLEY_MODEL_DIR"]) if os.environ.get("PARLEY_MODEL_DIR")
                                   else default_model_dir())
    missing = [d for d in ("stt", "tts") if not (model_dir / d).is_dir()]
    if missing:
        from pipeline.errors import EngineUnavailableError

        raise EngineUnavailableError(f"no {' or '.join(missing)} model under {model_dir} (--model-dir: a folder "
                                     f"holding stt/ and tts/, as the repository's models/ does)")
    config = ModelServerConfig(host=args.host, port=args.port, model_dir=model_dir, grace_s=args.grace_s,
                               max_streams=args.max_streams, stt_compile=args.stt_compile, tts_compile=args.tts_compile,
                               device=args.device)
    return asyncio.run(_serve(config))


async def _serve(config: ModelServerConfig) -> int:
    server = ModelServer(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    try:
        await server.start()
    except OSError as exc:
        from pipeline.errors import ConfigError

        raise ConfigError(f"cannot listen on {config.host}:{config.port}: {exc.strerror or exc}") from None
    warm = asyncio.create_task(server.warm(), name="warm")
    stopped = asyncio.create_task(stop.wait(), name="stop")
    try:
        await asyncio.wait({warm, stopped}, return_when=asyncio.FIRST_COMPLETED)
        if warm.done() and warm.exception() is not None:
            return 2                    # logged by warm(): one line
        await stopped
        log.info("SIGTERM: draining")
        await server.drain()
    finally:
        warm.cancel()
        stopped.cancel()
        await server.stop()
    log.info("model server stopped")
    return 0
