"""Twilio call control over the REST API: hand a live call to a person, or hang it up.

    control = TwilioCallControl(account_sid, auth_token)
    await control.transfer(call_sid, "dial", "+15550100")          # <Dial>+15550100</Dial>
    await control.transfer(call_sid, "enqueue", "WW0123...")        # Flex: <Enqueue workflowSid=..>
    await control.transfer(call_sid, "sip", "sip:desk@pbx.example")  # <Dial><Sip>...</Sip></Dial>
    await control.hangup(call_sid)                                   # Status=completed
    await control.join_conference(call_sid, "warm-CA...")            # <Dial><Conference>: a warm transfer's join

Both POST to ``{api_base}/2010-04-01/Accounts/{AccountSid}/Calls/{CallSid}.json`` (form encoded,
HTTP basic auth with the account SID and auth token) and raise ``TelephonyError`` naming the call
and Twilio's own error message when the request fails, times out or is refused. Updating a call's
``Twiml`` ends its ``<Connect><Stream>``: the server sees the stream stop, and Twilio runs the new
TwiML with the caller still on the line.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import re
from xml.sax.saxutils import escape, quoteattr

import aiohttp

from pipeline.frames import TransferKind
from telephony.errors import TelephonyError

__all__ = ["TwilioCallControl", "conference_twiml", "handoff_twiml", "transfer_twiml"]

log = logging.getLogger(__name__)

_SID = re.compile(r"[A-Za-z0-9]{2,64}")
_ROOM = re.compile(r"[A-Za-z0-9_\-]{1,100}")


def transfer_twiml(kind: TransferKind, target: str) -> str:
    """The TwiML that hands the caller to ``target``."""
    if kind == "dial":
        if not re.fullmatch(r"\+?[0-9]{3,15}|client:[A-Za-z0-9_.\-]+", target):
            raise TelephonyError(f"cannot dial {target!r}: not a phone number")
        return f"<Response><Dial>{escape(target)}</Dial></Response>"
    if kind == "enqueue":
        if not re.fullmatch(r"WW[0-9a-fA-F]{32}", target):
            raise TelephonyError(f"cannot enqueue into {target!r}: not a TaskRouter workflow SID")
        return f"<Response><Enqueue workflowSid={quoteattr(target)}/></Response>"
    if kind == "sip":
        if not target.startswith(("sip:", "sips:")):
            raise TelephonyError(f"cannot dial {target!r}: not a sip: URI")
        return f"<Response><Dial><Sip>{escape(target)}</Sip></Dial></Response>"
    raise TelephonyError(f"unknown transfer kind {kind!r} (dial, enqueue or sip)")


def conference_twiml(room: str) -> str:
    """The TwiML that puts a call in conference ``room`` (a warm transfer's join): no beep, no
    wait music (parley's hold audio played until then), and the conference ends when this
    participant leaves (``endConferenceOnExit``), so either side hanging up ends the call."""
    if not _ROOM.fullmatch(room):
        raise TelephonyError(f"not a conference room name: {room[:120]!r}")
    return ('<Response><Dial><Conference beep="false" waitUrl="" startConferenceOnEnter="true" '
            f'endConferenceOnExit="true">{room}</Conference></Dial></Response>')


def handoff_twiml(kind: TransferKind, target: str, attributes: dict) -> str:
    """What answers ``<Connect action>`` when the agent handed the caller on: for a Flex workflow,
    ``<Enqueue workflowSid><Task>`` with ``attributes`` (JSON: what the person taking the call
    sees); otherwise the same TwiML as a REST transfer."""
    if kind == "enqueue":
        transfer_twiml(kind, target)              # the workflow SID is checked there
        task = escape(json.dumps(attributes, separators=(",", ":")))
        return f"<Response><Enqueue workflowSid={quoteattr(target)}><Task>{task}</Task></Enqueue></Response>"
    return transfer_twiml(kind, target)


class TwilioCallControl:
    """Changes live calls through Twilio's REST API (one small POST per action)."""

    def __init__(self, account_sid: str, auth_token: str, *,
                 api_base: str = "https://api.twilio.com", timeout_s: float = 10.0,
                 http: aiohttp.ClientSession | None = None):
        if not _SID.fullmatch(account_sid or ""):
            raise TelephonyError("a Twilio account SID is needed for call control")
        if not auth_token:
            raise TelephonyError("a Twilio auth token is needed for call control")
        self._account_sid = account_sid
        # built by hand: aiohttp.BasicAuth is deprecated (3.14) and its successor is newer than
        # the aiohttp versions we support
        token = base64.b64encode(f"{account_sid}:{auth_token}".encode()).decode("ascii")
        self._headers = {"Authorization": f"Basic {token}"}
        self._api_base = api_base.rstrip("/")
        self._timeout_s = timeout_s
        self._http = http

    def call_url(self, call_sid: str) -> str:
        if not _SID.fullmatch(call_sid or ""):
            raise TelephonyError(f"not a call SID: {call_sid!r}")
        return (f"{self._api_base}/2010-04-01/Accounts/{self._account_sid}"
                f"/Calls/{call_sid}.json")

    async def transfer(self, call_sid: str, kind: TransferKind, target: str) -> dict:
        """Replace the call's TwiML so Twilio connects the caller to ``target``."""
        twiml = transfer_twiml(kind, target)
        log.info("call %s: transfer (%s)", call_sid, kind)
        return await self._update(call_sid, {"Twiml": twiml}, f"transfer ({kind})")

    async def join_conference(self, call_sid: str, room: str) -> dict:
        """Replace the call's TwiML with ``<Dial><Conference>room``: its stream closes and the call
        joins the room (:func:`conference_twiml`)."""
        log.info("call %s: into conference %s", call_sid, room)
        return await self._update(call_sid, {"Twiml": conference_twiml(room)}, f"join conference {room}")

    async def hangup(self, call_sid: str) -> dict:
        """End the call for everyone on it."""
        log.info("call %s: hang up over REST", call_sid)
        return await self._update(call_sid, {"Status": "completed"}, "hang up")

    async def _update(self, call_sid: str, form: dict[str, str], what: str) -> dict:
        url = self.call_url(call_sid)
        own = self._http is None
        http = self._http or aiohttp.ClientSession()
        try:
            async with asyncio.timeout(self._timeout_s):
                async with http.post(url, data=form, headers=self._headers) as resp:
                    body = await resp.read()
                    status = resp.status
        except TimeoutError as exc:
            raise TelephonyError(f"call {call_sid}: {what} timed out after "
                                 f"{self._timeout_s:g} s") from exc
        except aiohttp.ClientError as exc:
            raise TelephonyError(f"call {call_sid}: {what} failed: {exc}") from exc
        finally:
            if own:
                await http.close()
        try:
            reply = json.loads(body) if body else {}
        except (UnicodeDecodeError, json.JSONDecodeError):
            reply = {"message": body[:200].decode("utf-8", "replace")}
        if status >= 400:
            message = reply.get("message") if isinstance(reply, dict) else None
            code = reply.get("code") if isinstance(reply, dict) else None
            raise TelephonyError(f"call {call_sid}: {what} refused by Twilio: HTTP {status}"
                                 + (f", error {code}" if code else "")
                                 + (f": {message}" if message else ""))
        return reply if isinstance(reply, dict) else {}
