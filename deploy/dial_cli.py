"""``parley dial``: place one outbound call with an agent and run it to its end.

A ``sip:`` target is dialled by parley's own SIP user agent (``telephony.sip.dialer``), directly
or through a trunk; once answered the agent runs as on an inbound SIP call. A phone number
(E.164) is dialled through Twilio (``deploy.dial_twilio``), the agent on its media stream. The outcome is one
JSON line on stdout; the exit status says how it went (0 answered, 1 not answered, 2 failed).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import socket
import sys
from pathlib import Path
from typing import get_args

from deploy.arg_types import float_in, port_number
from deploy.serve_args import DEFAULT_AGENT
from pipeline.options import SttKind, TtsKind

EPILOG = """\
examples:
  parley dial sip:alice@198.51.100.7:5060 --agent agent/examples/receptionist.yaml
  parley dial sip:+15551234567@sip.carrier.example --trunk sip.carrier.example --auth-user parley --from sip:+15550199@sip.carrier.example
                                        # through a trunk that asks for digest auth ($PARLEY_TRUNK_PASSWORD)
  parley dial sip:alice@127.0.0.1:5070 --agent echo --tts espeak --stt sphinx --ring-timeout 15
  parley dial sip:bob@10.0.0.5 --param customer_id=C-42 --param reason=renewal   # the agent's call parameters
  parley dial +15551234567 --from +15550100 --public-url https://parley.example.com --agent agent/examples/receptionist.yaml
                                        # through Twilio ($TWILIO_ACCOUNT_SID, $TWILIO_AUTH_TOKEN)

what it prints: one JSON line, e.g.
  {"outcome": "answered", "call_id": "...", "status": 200, "end_reason": "callee hung up (BYE)", "talk_s": 41.2, ...}
with a voicemail: section in the agent's spec, answered_by (human, machine or unknown; through
Twilio, its AnsweredBy when that decided: machine_end_beep, fax, ...) and voicemail_left (true
once a machine heard the whole message) say who answered.
outcome is answered, busy (486/600), no-answer (480/408, or nobody answered within
--ring-timeout and the INVITE was canceled), declined (603), failed (any other final answer:
see status and reason), timeout (nothing answered the INVITE in 32 s) or canceled (Ctrl-C
before an answer).
exit status: 0 answered, 1 not answered (busy, no-answer, declined, canceled), 2 failed,
timed out, or bad input (one line on stderr says which).

environment:
  PARLEY_TRUNK_USER, PARLEY_TRUNK_PASSWORD   digest credentials for the trunk (or --auth-user/--auth-password)
  PARLEY_DB           where the call's record is kept (as for parley serve)
  TWILIO_ACCOUNT_SID, TWILIO_AUTH_TOKEN      Twilio's credentials, for a phone number
  PARLEY_PUBLIC_URL   the https:// URL Twilio reaches this machine at (or --public-url)

A phone number (E.164) is called through Twilio: --from is a number of the account, and Twilio
must reach --public-url (proxied to --host/--port) for the call's stream and statuses. Outcomes
are Twilio's: answered, busy, no-answer, failed (its SIP code as status, when it gives one),
canceled.
"""

NOT_ANSWERED = ("busy", "no-answer", "declined", "canceled")


def register_cli(sub: argparse._SubParsersAction) -> None:
    """``parley dial``."""
    p = sub.add_parser(
        "dial",
        help="place an outbound call (SIP) with an agent",
        description="Dial TARGET with parley's own SIP user agent, run the agent on the call when it is "
        "answered, and print how it went as one JSON line.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("target", metavar="TARGET", help="whom to call: a SIP URI, sip:user@host[:port], or a "
                   "phone number, +15551234567 (through Twilio)")
    p.add_argument("--agent", type=Path, default=DEFAULT_AGENT, metavar="SPEC.yaml",
                   help="the agent that talks (default: the receptionist example); 'echo' for the echo agent")
    p.add_argument("--trunk", default=None, metavar="HOST[:PORT]",
                   help="send the INVITE (and the call's later requests) through this SIP trunk or outbound "
                   "proxy; the target stays the Request-URI (default: straight to the target's host)")
    p.add_argument("--from", dest="from_uri", default=None, metavar="URI",
                   help="our identity in From (default sip:USER@TRUNK with --auth-user and --trunk, else "
                   "sip:parley@OUR-ADDRESS); for a phone number, the account's number that calls (+15550100)")
    p.add_argument("--public-url", default=os.environ.get("PARLEY_PUBLIC_URL"),
                   help="for a phone number: the https:// URL Twilio reaches this machine at (what it signs)")
    p.add_argument("--host", default="127.0.0.1", help="for a phone number: the address the call's HTTP "
                   "server listens on (default %(default)s)")
    p.add_argument("--port", type=port_number, default=8765, help="and its port (default %(default)s)")
    p.add_argument("--no-amd", dest="amd", action="store_false",
                   help="for a phone number: ask Twilio for no answering-machine detection (with a voicemail: "
                   "section, parley's own detector alone decides who answered)")
    p.add_argument("--auth-user", default=os.environ.get("PARLEY_TRUNK_USER"),
                   help="digest user for a 401/407 challenge (default $PARLEY_TRUNK_USER)")
    p.add_argument("--auth-password", default=None,
                   help="digest password (default $PARLEY_TRUNK_PASSWORD, which keeps it out of the process list)")
    p.add_argument("--ring-timeout", type=lambda t: float_in(t, 1.0, 600.0, "seconds"), default=30.0, metavar="S",
                   help="CANCEL when nobody has answered in S seconds (default %(default)s)")
    p.add_argument("--max-call-s", type=lambda t: float_in(t, 1.0, 86_400.0, "seconds"), default=3600.0,
                   metavar="S", help="hang up (BYE) a call still going S seconds after the ring timeout "
                   "(default %(default)s)")
    p.add_argument("--param", action="append", default=[], metavar="K=V",
                   help="a parameter the agent gets with the call, as an inbound call's SIP X- headers (repeatable)")
    p.add_argument("--local-ip", default=None,
                   help="our address for SIP and RTP, put in Contact and SDP (default: the one the route to "
                   "the trunk or target leaves from)")
    p.add_argument("--sip-port", type=port_number, default=0, help="our SIP UDP port (default: any free one)")
    p.add_argument("--rtp-ports", default="10000-10999", metavar="LO-HI", help="RTP port range (default %(default)s)")
    p.add_argument("--stt", choices=[k for k in get_args(SttKind) if k != "remote"], default="ssm", help="recogniser, as for parley serve "
                   "(default %(default)s)")
    p.add_argument("--tts", choices=[k for k in get_args(TtsKind) if k != "remote"], default="ssm", help="voice, as for parley serve "
                   "(default %(default)s)")
    p.add_argument("--voice", default=None, metavar="NAME", help="with --tts ssm: joe or slt (default: the spec's)")
    p.add_argument("--db", default=None, metavar="PATH", help="call records (default $PARLEY_DB or "
                   "~/.local/share/parley/calls.db)")
    p.add_argument("--log-level", default="WARNING", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    p.set_defaults(func=_run)


def _params(items: list[str]) -> tuple[tuple[str, str], ...]:
    from telephony.sip import DialError

    out = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise DialError(f"--param expects K=V, got {item!r}")
        out.append((key, value))
    return tuple(out)


def _is_phone_number(target: str) -> bool:
    bare = target.removeprefix("tel:").replace("-", "").replace(" ", "")
    return bare.startswith("+") or (bare.isdigit() and not target.startswith("sip"))


def source_ip_for(ip: str) -> str:
    """The local address a datagram to ``ip`` leaves from (a connected UDP socket: nothing is sent)."""
    family = socket.AF_INET6 if ":" in ip else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        s.connect((ip, 9))
        return str(s.getsockname()[0])


def _run(args: argparse.Namespace) -> int:
    from deploy.logs import configure_logging
    from telephony.sip import DialRequest

    configure_logging(args.log_level)
    if _is_phone_number(args.target):
        from deploy.dial_twilio import dial_twilio

        outcome = dial_twilio(args, _params(args.param), _agent_and_pipeline)
        if isinstance(outcome, str):
            print(f"parley dial: {outcome}", file=sys.stderr)
            return 2
        return _report(outcome)
    request = DialRequest(args.target, trunk=args.trunk, from_uri=args.from_uri, auth_user=args.auth_user,
                          auth_password=(args.auth_password or os.environ.get("PARLEY_TRUNK_PASSWORD"))
                          if args.auth_user else None,
                          ring_timeout_s=args.ring_timeout, params=_params(args.param))
    from telephony.sip.dialer import resolve_destination

    dest_ip, _ = asyncio.run(resolve_destination(request))  # a host that does not resolve: said before the models load
    agent_factory, pipeline, plans = _agent_and_pipeline(args)
    from agent.calls_cli import db_location, default_db_path
    from pipeline.call_stores import open_call_store

    store = open_call_store(db_location(args.db) if args.db else default_db_path())
    try:
        result = asyncio.run(_dial(args, request, dest_ip, agent_factory, pipeline, store, plans))
    finally:
        store.close()
    return _report(result, credentials=args.auth_user is not None)


def _report(result, *, credentials: bool = True) -> int:
    """How the call went: one JSON line on stdout, one line on stderr unless answered; the exit
    status. A digest challenge left unanswered says whose credentials failed, or how to give them."""
    print(result.to_json(), flush=True)
    outcome = result.outcome.value
    if outcome == "answered" and not (result.end_reason or "").startswith("error:"):
        return 0
    why = f"{result.status} {result.reason}" if result.status else result.reason
    if result.status in (401, 407) and result.end_reason:
        why += f": {result.end_reason}" + ("" if credentials else ": give --auth-user and $PARLEY_TRUNK_PASSWORD")
    print(f"parley dial: {outcome}: {why or result.end_reason}", file=sys.stderr)
    return 1 if outcome in NOT_ANSWERED else 2


def _agent_and_pipeline(args: argparse.Namespace):
    """The agent factory (as parley serve makes it), the pipeline, its voice loaded now so the
    callee does not wait for it, and the answering plan factory (the spec's ``voicemail:``; None
    without one: the agent greets whoever answers)."""
    from deploy.serve_cli import _agent_factory, _load_agent_spec, _load_ssm_voice, _prewarm_ssm_stt
    from pipeline.builder import PipelineConfig
    from telephony.server import ServerConfig

    spec = _load_agent_spec(args.agent)
    agent_factory = _agent_factory(spec)
    plans = None
    if spec is not None and spec.voicemail is not None:
        from agent.voicemail import answering_plan

        plans = lambda info: answering_plan(spec, info.params)  # noqa: E731
    voice = args.voice or (spec.voice if spec is not None else None)
    tts_model_dir = None
    if args.tts == "ssm":
        import torch

        from pipeline.engines.ssm_voice import DEFAULT_MODEL_DIR
        from pipeline.voices import voice_dir

        torch.set_num_threads(1)
        tts_model_dir = str(voice_dir(voice)) if voice else None
        _load_ssm_voice(tts_model_dir or DEFAULT_MODEL_DIR, procs=False, compile=False)
    pipeline = PipelineConfig(stt=args.stt, tts=args.tts, tts_model_dir=tts_model_dir)
    if args.stt == "ssm":
        pipeline = _prewarm_ssm_stt(ServerConfig(pipeline=pipeline, twilio=False)).pipeline
    return agent_factory, pipeline, plans


async def _dial(args: argparse.Namespace, request, dest_ip: str, agent_factory, pipeline, store, plans=None):
    from telephony.sip import SipConfig, SipServer

    lo, _, hi = args.rtp_ports.partition("-")
    config = SipConfig(host=args.local_ip or source_ip_for(dest_ip), port=args.sip_port, rtp_port_min=int(lo),
                       rtp_port_max=int(hi or lo), allowed_networks=(dest_ip,))
    server = SipServer(config, agent_factory, store=store, pipeline_config=pipeline)
    server.draining = True  # this user agent places one call and answers none
    server.answering_plans = plans
    await server.start()
    loop = asyncio.get_running_loop()
    hanging_up: set[asyncio.Task] = set()

    def hang_up(reason: str) -> None:  # CANCEL while ringing, BYE once answered
        for call in list(server.live.values()):
            hanging_up.add(loop.create_task(call.hang_up(reason)))

    loop.add_signal_handler(signal.SIGINT, hang_up, "canceled by the user")
    loop.add_signal_handler(signal.SIGTERM, hang_up, "canceled (SIGTERM)")
    limit = loop.call_later(args.max_call_s + args.ring_timeout, hang_up, "the call reached --max-call-s")
    try:
        return await server.dial(request)
    finally:
        limit.cancel()
        loop.remove_signal_handler(signal.SIGINT)
        loop.remove_signal_handler(signal.SIGTERM)
        await asyncio.gather(*hanging_up, return_exceptions=True)
        await server.stop()
        logging.getLogger("parley").info("SIP user agent stopped")
