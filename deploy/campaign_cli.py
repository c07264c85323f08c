"""``parley campaign``: call a list of contacts with an agent (run, resume, stop, status, export).

``run`` checks the contacts file whole (every problem, one line each) before anything is loaded,
writes the campaign into the call store (``--db``, as ``parley serve``'s), then runs a call server
for it as ``parley dial`` does: phone numbers through Twilio (Twilio reaches ``--public-url``),
``sip:`` URIs by parley's own SIP user agent. One line is printed per attempt's outcome and a
summary at the end. Killed, stopped or interrupted, it is resumed by ``resume NAME`` (or ``run``
with the same file and name): nobody is dialled twice (``telephony.campaign.runner``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import sys
import time
from collections import Counter
from pathlib import Path
from typing import get_args

from deploy.arg_types import float_in, int_in, port_number
from deploy.serve_args import DEFAULT_AGENT
from pipeline.options import SttKind, TtsKind

EPILOG = """\
examples:
  parley campaign run contacts.csv --agent agent/examples/receptionist.yaml --from +15550100 --dnc do-not-call.txt
  parley campaign run contacts.csv --name spring --window 10:00-19:30 --max-concurrent 4 --calls-per-minute 20
  parley campaign run contacts.csv --retry-on busy,no-answer,machine --max-attempts 3 --backoff 30m
  parley campaign status spring          # how far it is: contacts by state and outcome
  parley campaign stop spring            # a running campaign dials no one new (its calls run to their end)
  parley campaign resume spring          # goes on where it stopped, or where a killed run left it
  parley campaign export spring --format csv --out results.csv   # or --format json

the contacts file (CSV, a header line):
  to,timezone,first_name,account
  +15551230001,America/New_York,Ada,A-17
  sip:bob@10.0.0.5,Europe/London,Bob,B-2
to is whom to call (E.164, through Twilio; or a sip: URI, parley's own SIP user agent); timezone
an IANA zone (the calling window is the contact's local time; --timezone fills empty cells);
every other column reaches the agent as a call parameter, as POST /calls params do. A file with
a bad number, an unknown zone, a missing column or a contact twice is refused before any call,
each problem on one line: contacts.csv:7: '+1555' is neither a phone number in E.164 form ...

what it prints: one line per attempt, e.g.
  [ 12/53] line 14  +15...01  busy         attempt 1 of 3; next try in 1800 s
and a summary line at the end. Outcomes: answered, machine, busy, no-answer, declined, failed,
timeout, canceled, unknown (a call whose end could not be learned after a crash: never redialled),
dnc (on the do-not-call list: never dialled).
exit status: 0 every contact done, 1 stopped before that (resume it), 2 bad input or settings.

environment:
  TWILIO_ACCOUNT_SID, TWILIO_AUTH_TOKEN   Twilio's credentials, for phone numbers
  PARLEY_PUBLIC_URL   the https:// URL Twilio reaches this machine at (or --public-url)
  PARLEY_DB           where the call records and the campaign's state are kept
"""

_DURATION = re.compile(r"([0-9]+(?:\.[0-9]+)?)([smh]?)")


def duration_s(text: str) -> float:
    """``90``, ``90s``, ``30m``, ``2h`` in seconds."""
    match = _DURATION.fullmatch(text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(f"expected a duration (90s, 30m, 2h), got {text!r}")
    return float(match[1]) * {"": 1, "s": 1, "m": 60, "h": 3600}[match[2]]


def register_cli(sub: argparse._SubParsersAction) -> None:
    """``parley campaign run|resume|stop|status|export``."""
    p = sub.add_parser("campaign", help="call a list of contacts with an agent (outbound campaigns)",
                       description="Outbound campaigns: a contacts file called within calling windows, caps and "
                       "retries; its state kept in the call store, so a stopped or killed run resumes.",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    verbs = p.add_subparsers(dest="verb", required=True, metavar="VERB")
    run = verbs.add_parser("run", help="start a campaign from a contacts file (or go on with it)", epilog=EPILOG,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    run.add_argument("contacts", type=Path, metavar="CONTACTS.csv")
    run.add_argument("--name", default=None, help="the campaign's name (default: the file's name without .csv)")
    run.add_argument("--dnc", type=Path, default=None, metavar="FILE",
                     help="do-not-call list: one number or sip: URI a line; never dialled")
    run.add_argument("--timezone", default=None, metavar="ZONE", help="for rows with no timezone (America/Chicago)")
    run.add_argument("--window", default="09:00-20:00", metavar="HH:MM-HH:MM",
                     help="calling hours in each contact's time zone (default %(default)s; 00:00-24:00: any time)")
    run.add_argument("--max-concurrent", type=lambda t: int_in(t, 1, 1000, "a count", "1..1000"), default=2,
                     metavar="N", help="calls at once (default %(default)s; the server's --max-calls bounds it too)")
    run.add_argument("--calls-per-minute", type=lambda t: float_in(t, 0.01, 6000, "calls a minute"), default=10.0,
                     metavar="N", help="dials started in any minute (default %(default)s)")
    run.add_argument("--retry-on", default="busy,no-answer,machine", metavar="OUTCOMES",
                     help="outcomes tried again, comma-separated, of busy, no-answer, machine, timeout, failed "
                     "(default %(default)s; '' for none)")
    run.add_argument("--max-attempts", type=lambda t: int_in(t, 1, 20, "a count", "1..20"), default=3, metavar="N",
                     help="attempts per contact, the first included (default %(default)s)")
    run.add_argument("--backoff", type=duration_s, default=600.0, metavar="DURATION",
                     help="wait before the first retry, doubled for each next one, at most 4 h (default 10m)")
    run.add_argument("--from", dest="from_", default=None, metavar="NUMBER",
                     help="the Twilio number that calls (+15550100); for sip: targets, an optional From URI")
    run.add_argument("--agent", type=Path, default=DEFAULT_AGENT, metavar="SPEC.yaml",
                     help="the agent that talks (default: the receptionist example); 'echo' for the echo agent")
    run.add_argument("--ring-timeout", type=lambda t: int_in(t, 5, 600, "seconds", "5..600"), default=30, metavar="S",
                     help="give up on a call nobody answers in S seconds (default %(default)s)")
    run.add_argument("--max-call-s", type=lambda t: float_in(t, 1.0, 86_400.0, "seconds"), default=3600.0,
                     metavar="S", help="a call still going after this long counts as unknown (default %(default)s)")
    run.add_argument("--max-calls", type=lambda t: int_in(t, 1, 1000, "a count", "1..1000"), default=None,
                     metavar="N", help="the call server's admission limit (default: what this machine can run)")
    _server_args(run)
    resume = verbs.add_parser("resume", help="go on with a stopped or interrupted campaign")
    resume.add_argument("name")
    resume.add_argument("--dnc", type=Path, default=None, metavar="FILE", help="do-not-call list (checked again)")
    resume.add_argument("--agent", type=Path, default=DEFAULT_AGENT, metavar="SPEC.yaml")
    resume.add_argument("--max-calls", type=lambda t: int_in(t, 1, 1000, "a count", "1..1000"), default=None)
    _server_args(resume)
    for verb, text in (("stop", "a running campaign dials no one new"), ("status", "contacts by state and outcome")):
        q = verbs.add_parser(verb, help=text)
        q.add_argument("name")
        q.add_argument("--db", default=None, metavar="PATH")
    export = verbs.add_parser("export", help="each contact's outcome, attempts, slots and summary")
    export.add_argument("name")
    export.add_argument("--format", choices=("csv", "json"), default="csv")
    export.add_argument("--out", type=Path, default=None, metavar="FILE", help="(default: stdout)")
    export.add_argument("--db", default=None, metavar="PATH")
    p.set_defaults(func=_main)


def _server_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--public-url", default=os.environ.get("PARLEY_PUBLIC_URL"),
                   help="the https:// URL Twilio reaches this machine at (phone numbers)")
    p.add_argument("--host", default="127.0.0.1", help="the call server's address (default %(default)s)")
    p.add_argument("--port", type=port_number, default=8765, help="and its port (default %(default)s)")
    p.add_argument("--local-ip", default=None, help="our address for SIP and RTP (default: the route's)")
    p.add_argument("--sip-port", type=port_number, default=0, help="our SIP UDP port (default: any free one)")
    p.add_argument("--rtp-ports", default="10000-10999", metavar="LO-HI", help="RTP ports (default %(default)s)")
    p.add_argument("--stt", choices=[k for k in get_args(SttKind) if k != "remote"], default="ssm")
    p.add_argument("--tts", choices=[k for k in get_args(TtsKind) if k != "remote"], default="ssm")
    p.add_argument("--voice", default=None, metavar="NAME", help="with --tts ssm: joe or slt")
    p.add_argument("--db", default=None, metavar="PATH", help="call records and campaigns (default $PARLEY_DB or "
                   "~/.local/share/parley/calls.db)")
    p.add_argument("--log-level", default="WARNING", choices=["DEBUG", "INFO", "WARNING", "ERROR"])


def _open_store(args: argparse.Namespace):
    from agent.calls_cli import db_location, default_db_path
    from pipeline.call_stores import open_call_store

    return open_call_store(db_location(args.db) if args.db else default_db_path())


def _main(args: argparse.Namespace) -> int:
    from telephony.errors import ContactsError

    try:
        if args.verb == "run":
            return _run(args)
        if args.verb == "resume":
            return _resume(args)
        return _query(args)
    except ContactsError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        print(f"parley campaign: {len(exc.problems)} problem(s); nobody was called", file=sys.stderr)
        return 2


def _query(args: argparse.Namespace) -> int:
    from pipeline.campaigns import CampaignState
    from telephony.campaign import campaign_results, write_csv, write_json
    from telephony.errors import CampaignError

    store = _open_store(args)
    try:
        if store.campaign_get(args.name) is None:
            raise CampaignError(f"no campaign {args.name!r} in {args.db or 'the call store'}")
        if args.verb == "stop":
            store.campaign_set_state(args.name, CampaignState.STOPPED)
            print(f"campaign {args.name}: stopping (no new dials; calls in progress run to their end)")
            return 0
        rows = campaign_results(store, args.name)
        if args.verb == "status":
            row = store.campaign_get(args.name)
            counts = Counter(r["outcome"] or r["state"] for r in rows)
            done = sum(r["state"] == "done" for r in rows)
            print(f"campaign {args.name}: {row.state.value if row else '?'}; {done} of {len(rows)} contacts done; "
                  + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
            return 0
        out = args.out.open("w", encoding="utf-8", newline="") if args.out else sys.stdout
        try:
            (write_csv if args.format == "csv" else write_json)(rows, out)
        finally:
            if args.out:
                out.close()
        return 0
    finally:
        store.close()


def _config(args: argparse.Namespace):
    from telephony.campaign import CallingWindow, CampaignConfig, RetryPolicy

    retry_on = frozenset(o.strip() for o in args.retry_on.split(",") if o.strip())
    return CampaignConfig(from_=args.from_, agent=str(args.agent), window=CallingWindow.parse(args.window),
                          retry=RetryPolicy(retry_on=retry_on, max_attempts=args.max_attempts,
                                            backoff_s=args.backoff, max_backoff_s=max(args.backoff, 4 * 3600.0)),
                          max_concurrent=args.max_concurrent, calls_per_minute=args.calls_per_minute,
                          ring_timeout_s=args.ring_timeout, max_call_s=args.max_call_s)


def _run(args: argparse.Namespace) -> int:
    from telephony.campaign import load_dnc, open_campaign, read_contacts, valid_name

    contacts = read_contacts(args.contacts, default_timezone=args.timezone)   # before anything loads
    dnc = load_dnc(args.dnc) if args.dnc else frozenset()
    config = _config(args)
    name = valid_name(args.name or args.contacts.stem)
    _check_settings(args, [c.target for c in contacts], config.from_)
    store = _open_store(args)
    try:
        _, created = open_campaign(store, name, contacts, config, source=str(args.contacts))
        if not created:
            print(f"campaign {name}: already in the call store; going on where it was")
        return _go(args, store, name, dnc)
    finally:
        store.close()


def _resume(args: argparse.Namespace) -> int:
    from telephony.campaign import load_dnc
    from telephony.campaign.config import CampaignConfig
    from telephony.errors import CampaignError

    dnc = load_dnc(args.dnc) if args.dnc else frozenset()
    store = _open_store(args)
    try:
        row = store.campaign_get(args.name)
        if row is None:
            raise CampaignError(f"no campaign {args.name!r} in the call store (parley campaign run starts one)")
        config = CampaignConfig.from_dict(row.config)
        _check_settings(args, [c.target for c in store.campaign_contacts(args.name)], config.from_)
        return _go(args, store, args.name, dnc)
    finally:
        store.close()


def _check_settings(args: argparse.Namespace, targets: list[str], from_: str | None) -> None:
    from telephony.errors import CampaignError

    if any(not t.startswith("sip") for t in targets):
        if not os.environ.get("TWILIO_ACCOUNT_SID") or not os.environ.get("TWILIO_AUTH_TOKEN"):
            raise CampaignError("phone numbers are called through Twilio: set TWILIO_ACCOUNT_SID and TWILIO_AUTH_TOKEN")
        if not args.public_url:
            raise CampaignError("Twilio must reach this machine for the calls' streams and statuses: give "
                                "--public-url (or PARLEY_PUBLIC_URL)")
        if not from_:
            raise CampaignError("phone numbers need --from, a number of the Twilio account (+15550100)")


def _go(args: argparse.Namespace, store, name: str, dnc: frozenset[str]) -> int:
    from deploy.dial_cli import _agent_and_pipeline
    from deploy.logs import configure_logging

    configure_logging(args.log_level)
    store.close_orphans()      # the records a killed run left open
    agent_factory, pipeline, plans = _agent_and_pipeline(args)
    return asyncio.run(_campaign(args, store, name, dnc, agent_factory, pipeline, plans))


async def _campaign(args: argparse.Namespace, store, name: str, dnc: frozenset[str], agent_factory, pipeline,
                    plans) -> int:
    from deploy.dial_cli import source_ip_for
    from telephony.campaign import CampaignRunner, ServerPlacer
    from telephony.server import CallServer, ServerConfig, default_max_calls
    from telephony.sip import DialRequest, SipConfig, SipServer
    from telephony.sip.dialer import resolve_destination

    targets = [c.target for c in store.campaign_contacts(name)]
    twilio = any(not t.startswith("sip") for t in targets)
    token = os.environ.get("TWILIO_AUTH_TOKEN")
    max_calls = args.max_calls or default_max_calls()
    server = CallServer(ServerConfig(host=args.host, port=args.port, auth_token=token, public_url=args.public_url,
                                     pipeline=pipeline, twilio=twilio, max_calls=max_calls,
                                     twilio_account_sid=os.environ.get("TWILIO_ACCOUNT_SID"),
                                     twilio_api_base=os.environ.get("TWILIO_API_BASE", "https://api.twilio.com")),
                        agent_factory, store=store)
    server.answering_plans = plans    # Twilio's calls are screened as SIP's are
    sip = None
    sip_targets = [t for t in targets if t.startswith("sip")]
    if sip_targets:
        # the callees' requests (a BYE) are served: their addresses, and ours for SIP and RTP
        ips = sorted({(await resolve_destination(DialRequest(t)))[0] for t in sip_targets})
        lo, _, hi = args.rtp_ports.partition("-")
        sip = SipServer(SipConfig(host=args.local_ip or source_ip_for(ips[0]), port=args.sip_port,
                                  rtp_port_min=int(lo), rtp_port_max=int(hi or lo), max_calls=max_calls,
                                  allowed_networks=tuple(ips)),
                        agent_factory, store=store, pipeline_config=pipeline)
        sip.draining = True           # it places calls and answers none
        sip.answering_plans = plans
        server.sip = sip
    placer = ServerPlacer(server.outbound, lambda: sip, store, server.admission)
    runner = CampaignRunner(store, name, placer, dnc=dnc, on_outcome=_progress_printer(store, name))
    if twilio:
        await server.start()
    if sip is not None:
        await sip.start()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, runner.stop)
    try:
        counts = await runner.run()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        if sip is not None:
            await sip.stop()
        await server.stop()
    total = sum(counts.values())
    done = sum(v for k, v in counts.items() if k not in ("pending", "dialling"))
    summary = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    if done == total:
        print(f"campaign {name}: done, {total} contacts: {summary}; max {runner.max_active} calls at once. "
              f"Results: parley campaign export {name}", flush=True)
        return 0
    print(f"campaign {name}: stopped, {done} of {total} contacts done: {summary}. "
          f"Go on with: parley campaign resume {name}", flush=True)
    return 1


def _progress_printer(store, name: str):
    from telephony.campaign import Progress
    from telephony.campaign.config import CampaignConfig
    from telephony.twilio.outbound import masked

    row = store.campaign_get(name)
    max_attempts = CampaignConfig.from_dict(row.config).retry.max_attempts if row else 0
    width = len(str(len(store.campaign_contacts(name))))

    def show(p: Progress) -> None:
        c = p.contact
        who = masked(c.target) if not c.target.startswith("sip") else c.target.split("@")[-1]
        if p.final:
            note = f"final after {c.attempts} attempt(s)" if c.attempts else "not dialled"
        elif p.outcome == "not-placed":
            note = "not placed (Twilio refused the request); tried again later"
        else:
            note = f"attempt {c.attempts} of {max_attempts}; next try in {max(0, round(c.next_at - time.time()))} s"
        print(f"[{p.done:>{width}}/{p.total}] line {c.line:<4} {who:<12} {p.outcome:<10} {note}", flush=True)

    return show
