"""``parley dial +15551234567``: one call placed through Twilio, the agent on it.

The command runs a call server as ``parley serve`` does (HTTP on ``--host``/``--port``, reached by
Twilio at ``--public-url``) for the one call: Twilio fetches the voice webhook when the callee
answers, opens the media stream and posts the call's statuses there. Credentials come from
``TWILIO_ACCOUNT_SID`` and ``TWILIO_AUTH_TOKEN`` (``TWILIO_API_BASE`` points at another API host).
It ends when Twilio reports the call over; Ctrl-C, SIGTERM or ``--max-call-s`` hang it up over REST.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from telephony.errors import PlacementError, TelephonyError
from telephony.sip.dialer import DialOutcome, DialResult
from telephony.twilio.outbound import TwilioDialRequest

if TYPE_CHECKING:
    from pipeline.builder import PipelineConfig
    from telephony.calls import AgentFactory
    from telephony.server import CallServer

__all__ = ["dial_twilio"]

log = logging.getLogger("parley")
HANG_UP_WAIT_S = 15.0  # after a REST hang-up, how long Twilio's final status may take


def dial_twilio(args: argparse.Namespace, params: tuple[tuple[str, str], ...],
                agent_and_pipeline: Callable[[argparse.Namespace], tuple[AgentFactory, PipelineConfig, Any]],
                ) -> DialResult | str:
    """Place the call and run it to its end: how it went, or why it could not start (one line).
    ``agent_and_pipeline`` loads them (slow: called once the settings are checked)."""
    sid, token = os.environ.get("TWILIO_ACCOUNT_SID"), os.environ.get("TWILIO_AUTH_TOKEN")
    if not sid or not token:
        return "dialling a phone number goes through Twilio: set TWILIO_ACCOUNT_SID and TWILIO_AUTH_TOKEN"
    if not args.public_url:
        return ("Twilio must reach this machine for the call's stream and statuses: give --public-url "
                "(or PARLEY_PUBLIC_URL), e.g. https://parley.example.com proxied to --host/--port")
    try:
        request = TwilioDialRequest(args.target.removeprefix("tel:"), args.from_uri or "", params=params,
                                    ring_timeout_s=max(5, round(args.ring_timeout)),
                                    machine_detection=args.amd)
    except PlacementError as exc:
        return str(exc)
    from agent.calls_cli import db_location, default_db_path
    from pipeline.call_stores import open_call_store
    from telephony.server import CallServer, ServerConfig

    # the spec's voicemail: plan: who answered is screened (Twilio's AnsweredBy, parley's detector)
    agent_factory, pipeline, plans = agent_and_pipeline(args)
    config = ServerConfig(host=args.host, port=args.port, auth_token=token, public_url=args.public_url,
                          pipeline=pipeline, twilio_account_sid=sid,
                          twilio_api_base=os.environ.get("TWILIO_API_BASE", "https://api.twilio.com"))
    store = open_call_store(db_location(args.db) if args.db else default_db_path())
    try:
        server = CallServer(config, agent_factory, store=store)
        server.answering_plans = plans
        return asyncio.run(_dial(server, request, args.max_call_s))
    finally:
        store.close()


async def _dial(server: CallServer, request: TwilioDialRequest, max_call_s: float) -> DialResult | str:
    await server.start()
    loop = asyncio.get_running_loop()
    try:
        try:
            placed = await server.outbound.place(request)
        except PlacementError as exc:
            return str(exc)
        stop = asyncio.Event()
        loop.add_signal_handler(signal.SIGINT, stop.set)
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        limit = loop.call_later(request.ring_timeout_s + max_call_s, stop.set)
        try:
            over = loop.create_task(placed.done.wait())
            stopping = loop.create_task(stop.wait())
            await asyncio.wait({over, stopping}, return_when=asyncio.FIRST_COMPLETED)
            stopping.cancel()
            if not placed.done.is_set():  # Ctrl-C or --max-call-s: hang up, then hear Twilio's last word
                log.info("[%s] hanging up over Twilio's REST API", placed.call_sid)
                assert server.call_control is not None
                try:
                    await server.call_control.hangup(placed.call_sid)
                except TelephonyError as exc:
                    log.warning("[%s] hang-up refused: %s", placed.call_sid, exc)
                try:
                    async with asyncio.timeout(HANG_UP_WAIT_S):
                        await over
                except TimeoutError:
                    over.cancel()
                    placed.outcome = placed.outcome or DialOutcome.CANCELED
                    placed.reason = placed.reason or "hung up; Twilio's final status did not come"
        finally:
            limit.cancel()
            loop.remove_signal_handler(signal.SIGINT)
            loop.remove_signal_handler(signal.SIGTERM)
        for _ in range(50):  # noqa: ASYNC110 - the stream's end may still be being written (a plain dict)
            if placed.call_sid not in server.live:
                break
            await asyncio.sleep(0.1)
        return server.outbound.result(placed)
    finally:
        await server.stop()
