"""``parley``: the command line. Each package contributes its own subcommands (``register_cli``);
``parley serve``, the composition root, is ``deploy.serve_cli`` (its options: ``deploy.serve_args``).
"""

from __future__ import annotations

import argparse
import sys

from deploy.arg_types import OneLineParser
from deploy.logs import configure_logging

EPILOG = """\
examples:
  parley serve                          # answer calls on 127.0.0.1:8765 (needs TWILIO_AUTH_TOKEN)
  parley serve --insecure-dev           # local work: Twilio signatures not checked
  parley serve --public-url https://abc.example.com   # behind a tunnel/proxy: the URL Twilio signs
  parley serve --agent agent/examples/order_status.yaml   # another agent, from its spec
  parley call --twilio ws://127.0.0.1:8765/twilio/stream --auth-token dev --say "hello there" --say "goodbye"
                                        # (against --insecure-dev any token; else $TWILIO_AUTH_TOKEN)
  parley serve --tts espeak             # speak with the espeak-ng baseline instead of parley's SSM voice
  parley serve --voice slt              # the other shipped voice (joe is the default; or `voice: slt` in the spec)
  parley say "Your order ships on Tuesday." --out reply.wav --voice slt --rate 8000   # hear a voice
  parley eval tts --engine ssm --sentences FILE --json   # first-audio latency, RTF, intelligibility
                                        # (FILE: one sentence a line)
  parley serve --sip-port 5060          # also answer SIP trunks (loopback callers by default;
                                        # without TWILIO_AUTH_TOKEN: SIP and the browser page only)
  parley dial sip:alice@198.51.100.7 --agent agent/examples/receptionist.yaml   # call out over SIP
  parley campaign run contacts.csv --from +15550100 --public-url https://parley.example.com
                                        # call a list of contacts (windows, caps, retries, resume)
  parley calls list                     # call records; parley calls show CALL_SID
  parley chat --agent agent/examples/receptionist.yaml   # talk to an agent in text (#1 presses 1)
  parley test agent/examples/receptionist.scenarios.yaml   # scenario tests (--junit FILE for CI)
  open http://127.0.0.1:8765/           # call the agent from the browser (WebRTC)

environment:
  TWILIO_AUTH_TOKEN   the account's auth token: signs and checks Twilio requests (server and caller)
  TWILIO_ACCOUNT_SID  with the token, lets the agent transfer calls (Twilio's REST API)
  PARLEY_DB           where call records are kept: a SQLite file, or postgresql://... (several servers)
  PARLEY_SIP_USER, PARLEY_SIP_PASSWORD   digest credentials SIP callers must present
  PARLEY_GENESYS_API_KEY, PARLEY_GENESYS_CLIENT_SECRET   serve Genesys Cloud's Audio Connector at
                      /genesys/audiohook: the integration's API key and client secret (base64)
"""



def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("parley-voice")
    except PackageNotFoundError:
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    from agent.calls_cli import register_cli as register_calls
    from agent.chat_cli import register_cli as register_chat
    from agent.scenario_cli import register_cli as register_test
    from ssm_engine.stt.cli import register_cli as register_stt
    from deploy.aws.cli import register_cli as register_deploy
    from deploy.model_server.cli import register_cli as register_model_server
    from pipeline.say_cli import register_cli as register_say
    from ssm_engine.tts.cli import register_cli as register_tts
    from deploy.dial_cli import register_cli as register_dial
    from deploy.campaign_cli import register_cli as register_campaign
    from deploy.serve_args import register_cli as register_serve

    parser = OneLineParser(
        prog="parley",
        description="parley: a real-time voice agent for phone and browser calls.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"parley {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    register_serve(sub)  # parley serve
    register_dial(sub)  # parley dial (an outbound SIP call)
    register_campaign(sub)  # parley campaign (outbound campaigns)
    register_calls(sub)
    register_chat(sub)  # parley chat (an agent in text)
    register_test(sub)  # parley test (scenario tests for agents)
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
    configure_logging("WARNING")  # before pipecat is imported: no banner or import-time debug lines
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
