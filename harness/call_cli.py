"""``parley call``: the scripted caller's command line (the caller itself is ``harness.callers.twilio``)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from pathlib import Path
from typing import Any

from harness.callers.twilio import CallerConfig, CallerUtterance, run_call
from harness.errors import CallerError

log = logging.getLogger("harness.callers.twilio")


# --- command line -------------------------------------------------------------------------------


class _AppendUtterance(argparse.Action):
    """--say/--wav/--dtmf append to one ordered list."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        items = list(getattr(namespace, self.dest) or [])
        items.append((self.const, values))
        setattr(namespace, self.dest, items)


CALL_EPILOG = """\
example (against `make serve`, which runs --insecure-dev: any token will do):
  parley call --twilio ws://127.0.0.1:8765/twilio/stream --auth-token dev --say "hello" --say "goodbye"

each turn's line, and where its latencies count from:
  v2v_ms        the caller's clock: from the last speech frame it sent to the first agent audio
                it received (the whole round trip, network and jitter buffer included)
  stt_final_ms  the server's clock: from the end of the caller's speech as the server's VAD placed
                it (its stop less the silence it waited) to the final transcript
  tts_ttfa_ms   the server's clock, from the same end of speech: to the voice's first audio
The two clocks start at different moments (the VAD can place the end of speech before the last
frame the caller sent, or a final can come after the reply began), so v2v_ms may be smaller than
stt_final_ms on a turn.
"""


def register_cli(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``call`` subcommand; it sets ``func`` to a ``(args) -> exit code`` callable."""
    p = subparsers.add_parser(
        "call",
        help="call a parley server as Twilio would, with a scripted caller",
        description="Speak scripted utterances over a Twilio Media Stream; "
        "print one JSON line per turn.",
        epilog=CALL_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--twilio", required=True, metavar="WS_URL",
                   help="the server's Media Streams URL")
    p.add_argument("--say", dest="utterances", action=_AppendUtterance, const="text",
                   metavar="TEXT",
                   help="speak TEXT with flite (repeatable, in order with --wav/--dtmf)")
    p.add_argument("--wav", dest="utterances", action=_AppendUtterance, const="wav", metavar="FILE",
                   help="speak a WAV file (any rate; stereo is mixed down)")
    p.add_argument("--dtmf", dest="utterances", action=_AppendUtterance, const="dtmf",
                   metavar="KEY",
                   help="press a key at this point of the script")
    p.add_argument("--barge-in-ms", type=int, default=None, metavar="N",
                   help="from the 2nd utterance on, talk N ms after the reply starts arriving")
    p.add_argument("--record", type=Path, default=None, metavar="OUT.wav",
                   help="write what the caller heard (8 kHz 16-bit WAV)")
    p.add_argument("--auth-token", default=None,
                   help="Twilio auth token (default: $TWILIO_AUTH_TOKEN)")
    p.add_argument("--param", action="append", default=[], metavar="K=V", help="a customParameter")
    p.add_argument("--voice", default="slt", help="flite voice (default: slt)")
    p.add_argument("--timeout-s", type=float, default=60.0, help="whole-call limit (default: 60)")
    p.add_argument("--calls-url", default=None, metavar="HTTP_BASE",
                   help="where GET /calls/{sid} is served (default: the ws URL's host)")
    p.add_argument("--log-level", default="WARNING",
                   choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                   help="logging on stderr (default: WARNING); turn lines go to stdout")
    p.set_defaults(func=_cli_main)
    return p


def config_from_args(args: argparse.Namespace) -> CallerConfig:
    """Build a ``CallerConfig`` from parsed ``call`` arguments (reads $TWILIO_AUTH_TOKEN)."""
    token = args.auth_token or os.environ.get("TWILIO_AUTH_TOKEN", "")
    params = {}
    for item in args.param:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--param expects K=V, got {item!r}")
        params[key] = value
    utterances = tuple(CallerUtterance(**{kind: value}) for kind, value in (args.utterances or []))
    return CallerConfig(
        url=args.twilio,
        utterances=utterances,
        auth_token=token,
        params=params,
        voice=args.voice,
        barge_in_ms=args.barge_in_ms,
        record_path=args.record,
        timeout_s=args.timeout_s,
        calls_base_url=args.calls_url,
    )


def _cli_main(args: argparse.Namespace) -> int:
    logging.basicConfig(level=getattr(logging, args.log_level), stream=sys.stderr,
                        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s")
    try:
        config = config_from_args(args)
    except ValueError as exc:
        print(f"parley call: {exc}", file=sys.stderr)
        return 2
    try:
        report = asyncio.run(run_call(config))
    except CallerError as exc:
        print(f"parley call: {exc}", file=sys.stderr)
        return 1
    for turn in report.turns:
        print(turn.to_json_line(), flush=True)
    if report.connection_lost:
        print("parley call: the server went away mid-call (the connection dropped without a close)",
              file=sys.stderr)
        return 1
    return 1 if report.timed_out else 0
