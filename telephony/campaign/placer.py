"""A campaign's calls placed by a call server: phone numbers through Twilio (``OutboundCalls``),
``sip:`` URIs by the SIP user agent beside it; the server's admission decides when one may start.

How a call's end becomes an attempt's outcome: Twilio's final status (answered, busy, no-answer,
failed, canceled) or the SIP dial's; an answered call whose answering-machine result is a machine
(``machine_*``, ``fax``; parley's own screening: ``machine``) is ``machine``. Twilio refusing the
create request with 429 or 5xx (after its own retries), or not being reachable at all, is
``not-placed`` (no attempt spent); a request that may have reached Twilio (it timed out) is
``unknown``; any other refusal (a bad number, a 400) is ``failed``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Final

from pipeline.campaigns import ContactRow
from pipeline.records import CallStore
from telephony.campaign.config import CampaignConfig
from telephony.campaign.runner import NOT_PLACED, AttemptResult
from telephony.calls_api import AGENT_PARAM
from telephony.errors import PlacementError
from telephony.sip import DialError, DialRequest, SipServer
from telephony.sip.server import new_call_id
from telephony.twilio.outbound import TERMINAL, OutboundCalls, TwilioDialer, TwilioDialRequest

__all__ = ["ServerPlacer", "outcome_of"]

log = logging.getLogger(__name__)

ASK_EVERY_S: Final = 2.0       # resolving a call left in 'dialling': how often to ask Twilio
END_GRACE_S: Final = 60.0      # beyond ring + max_call_s: how long a final status may still take


def outcome_of(status: str, answered_by: str | None) -> str:
    """An attempt's outcome from the dial's outcome and the answering-machine result."""
    if status == "answered" and answered_by and (answered_by.startswith("machine") or answered_by == "fax"):
        return "machine"
    return status


class ServerPlacer:
    def __init__(self, outbound: OutboundCalls, sip: Callable[[], SipServer | None], store: CallStore,
                 admit: Callable[[], str | None], *, agent_key: str | None = None):
        self.outbound = outbound
        self._sip = sip
        self.store = store
        self._admit = admit
        self.agent_key = agent_key   # the server's key of the campaign's agent (calls_api.AGENT_PARAM)

    def admit(self) -> str | None:
        return self._admit()

    def call_id_for(self, target: str) -> str | None:
        return new_call_id() if target.startswith("sip") else None

    def _params(self, contact: ContactRow) -> tuple[tuple[str, str], ...]:
        params = dict(contact.params)
        if self.agent_key is not None:
            params[AGENT_PARAM] = self.agent_key
        return tuple(params.items())

    async def dial(self, contact: ContactRow, config: CampaignConfig, call_id: str | None,
                   on_placed: Callable[[str], Awaitable[None]]) -> AttemptResult:
        if contact.target.startswith("sip"):
            return await self._dial_sip(contact, config, call_id or new_call_id())
        try:
            request = TwilioDialRequest(contact.target, config.from_ or "", params=self._params(contact),
                                        ring_timeout_s=config.ring_timeout_s)
            placed = await self.outbound.place(request)
        except PlacementError as exc:
            if exc.maybe_placed:
                return AttemptResult("unknown", None, str(exc))
            if exc.status is None or exc.status == 429 or exc.status >= 500:
                return AttemptResult(NOT_PLACED, None, str(exc))
            return AttemptResult("failed", None, str(exc))
        await on_placed(placed.call_sid)
        try:
            result = await self.outbound.wait(placed, config.ring_timeout_s + config.max_call_s + END_GRACE_S)
        except TimeoutError:
            return AttemptResult("unknown", placed.call_sid, "Twilio's final status never came")
        return AttemptResult(outcome_of(result.outcome.value, placed.answered_by), placed.call_sid,
                             placed.reason)

    async def _dial_sip(self, contact: ContactRow, config: CampaignConfig, call_id: str) -> AttemptResult:
        sip = self._sip()
        if sip is None:
            return AttemptResult("failed", None, "this server cannot dial sip: URIs (no SIP user agent)")
        try:
            request = DialRequest(contact.target, from_uri=config.from_ if (config.from_ or "").startswith("sip")
                                  else None, params=self._params(contact), ring_timeout_s=config.ring_timeout_s)
            async with asyncio.timeout(config.ring_timeout_s + config.max_call_s + END_GRACE_S):
                result = await sip.dial(request, call_id=call_id)
        except DialError as exc:
            return AttemptResult("failed", call_id, str(exc))
        except TimeoutError:
            return AttemptResult("unknown", call_id, "the SIP call did not end in time")
        return AttemptResult(outcome_of(result.outcome.value, result.answered_by), call_id,
                             f"{result.status or ''} {result.reason}".strip())

    async def resolve(self, contact: ContactRow, config: CampaignConfig) -> AttemptResult | None:
        if contact.target.startswith("sip"):
            record = self.store.get(contact.call_id) if contact.call_id else None
            if record is not None and (record.turns or record.greeting_heard):
                return AttemptResult(outcome_of("answered", record.answered_by), contact.call_id, "from its record")
            return None                      # no record, or one that never talked: not knowable
        dialer = self.outbound.dialer
        record = self.store.get(contact.call_id) if contact.call_id else None
        if record is not None and record.dial.get("outcome"):
            return AttemptResult(outcome_of(record.dial["outcome"], record.dial.get("answered_by")),
                                 contact.call_id, "from its record")
        if dialer is None:
            return None
        call_sid = contact.call_id
        try:
            if not call_sid:                 # killed between the claim and Twilio's answer
                earlier = {h.get("call_id") for h in contact.history}
                found = [c for c in await dialer.calls_to(contact.target, since=contact.next_at)
                         if c.get("sid") not in earlier]
                if not found:
                    return AttemptResult(NOT_PLACED, None, "Twilio has no call to it since the claim", retry_in_s=0.0)
                if len(found) > 1:
                    return None
                call_sid = str(found[0].get("sid"))
            return await self._follow(dialer, call_sid, config)
        except PlacementError as exc:
            log.warning("campaign: line %d: %s", contact.line, exc)
            return None

    async def _follow(self, dialer: TwilioDialer, call_sid: str, config: CampaignConfig) -> AttemptResult | None:
        """Ask Twilio about the call until it is over (None: still going after ``resolve_timeout_s``)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + config.resolve_timeout_s
        while True:
            call = await dialer.fetch(call_sid)
            status = str(call.get("status", ""))
            if status in TERMINAL:
                answered_by = call.get("answered_by")
                return AttemptResult(outcome_of(TERMINAL[status].value, answered_by if isinstance(answered_by, str)
                                                else None), call_sid, f"asked Twilio: {status}")
            if loop.time() + ASK_EVERY_S > deadline:
                return None
            await asyncio.sleep(ASK_EVERY_S)
