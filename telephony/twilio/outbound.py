"""Calls parley places through Twilio: the Calls API request, and the call's statuses as they come.

::

    dialer = TwilioDialer(account_sid, auth_token, public_url="https://parley.example.com")
    calls = OutboundCalls(store, live=server.live, dialer=dialer)
    placed = await calls.place(TwilioDialRequest("+15551234567", "+15550100", params=(("customer", "C-42"),)))
    placed.call_sid                      # Twilio's CallSid: the call record's id
    result = await calls.wait(placed)    # a DialResult (telephony.sip.dialer) once the call is over

``place`` POSTs ``{api_base}/2010-04-01/Accounts/{AccountSid}/Calls.json`` (form encoded, HTTP basic
auth) with ``Url``: parley's own voice webhook, ``{public_url}/twilio/voice?param.NAME=VALUE...``.
When the callee answers, Twilio POSTs it (signed, over the whole URL, query included) and gets the
same ``<Connect><Stream>`` an inbound call gets, the parameters as ``<Parameter>``s: the stream
then runs as an inbound call's does. A request with its own ``twiml`` (a warm transfer's call to
the person, :mod:`telephony.twilio.warm`) sends that as ``Twiml`` instead of ``Url``. ``StatusCallback`` (initiated, ringing, answered, completed)
and ``AsyncAmdStatusCallback`` (``MachineDetection=DetectMessageEnd``, ``AsyncAmd=true``) both
come to ``{public_url}/twilio/dial-status?dial=ID``, signed; ``OutboundCalls.on_status`` writes
each on the call record (``record.dial``), wherever it is: on the live call, or in the store. The
answering-machine result (``AnsweredBy``) is also handed to the live call, which acts on it
(:class:`~telephony.twilio.call.TwilioCall`); one that came before the stream is read from
``record.dial`` when the stream starts.

Twilio's statuses become the dialer's outcomes: in-progress and completed ``answered``, busy,
no-answer, failed and canceled as they are. REST errors: 401 and 404 (wrong credentials, wrong
account) fail at once, as do other 4xx; 429 waits the Retry-After Twilio asks for (up to
``max_retry_wait_s``) and 5xx or a refused connection back off exponentially, both for
``max_attempts`` in all; a request that times out is not sent again (Twilio may have placed the
call). Each refusal is one log line; the last one is the :class:`PlacementError` raised.
"""

from __future__ import annotations

import asyncio
import base64
import email.utils
import json
import logging
import re
import secrets
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol
from urllib.parse import urlencode

import aiohttp

from pipeline.records import CallRecord, CallStore
from telephony.errors import PlacementError
from telephony.sip.dialer import DialOutcome, DialResult
from telephony.twilio.twiml import PARAM_PREFIX

__all__ = ["OutboundCalls", "PlacedCall", "TwilioDialRequest", "TwilioDialer", "is_phone_number", "masked"]

log = logging.getLogger(__name__)

E164: Final = re.compile(r"\+[1-9][0-9]{6,14}")
_PARAM_NAME: Final = re.compile(r"[A-Za-z0-9_\-]{1,64}")
MAX_PARAMS: Final = 20
MAX_PARAM_CHARS: Final = 500
STATUS_EVENTS: Final = "initiated ringing answered completed"
TERMINAL: Final = {"completed": DialOutcome.ANSWERED, "busy": DialOutcome.BUSY,
                   "no-answer": DialOutcome.NO_ANSWER, "failed": DialOutcome.FAILED,
                   "canceled": DialOutcome.CANCELED}
MAX_FOLLOWED: Final = 10_000


def is_phone_number(text: str) -> bool:
    """E.164: a plus, then 7 to 15 digits."""
    return bool(E164.fullmatch(text))


def masked(number: str) -> str:
    """A phone number as logs show it (no caller PII): its country prefix and last two digits."""
    return f"{number[:3]}...{number[-2:]}" if len(number) > 6 else "..."


@dataclass(frozen=True)
class TwilioDialRequest:
    """One call to place through Twilio. ``params`` reach the agent with the call (beside
    Twilio's CallSid, From, To and Direction, ``outbound-api``)."""

    to: str
    from_: str                        # a number of the account (or a verified caller id)
    params: tuple[tuple[str, str], ...] = ()
    ring_timeout_s: int = 30          # Twilio's Timeout: 5..600 s
    machine_detection: bool = True
    twiml: str | None = None          # what Twilio runs when the callee answers (None: the voice webhook)

    def __post_init__(self) -> None:
        if not is_phone_number(self.to):
            raise PlacementError(f"to {self.to[:40]!r} is not a phone number in E.164 form (+15551234567)")
        if not is_phone_number(self.from_):
            raise PlacementError(f"from {self.from_[:40]!r} is not a phone number in E.164 form: give a "
                                 "number of the Twilio account")
        if not 5 <= self.ring_timeout_s <= 600:
            raise PlacementError(f"ring timeout {self.ring_timeout_s} s is outside Twilio's 5..600 s")
        if len(self.params) > MAX_PARAMS:
            raise PlacementError(f"{len(self.params)} parameters: at most {MAX_PARAMS}")
        for name, value in self.params:
            if not _PARAM_NAME.fullmatch(name):
                raise PlacementError(f"parameter name {name[:70]!r}: 1-64 letters, digits, '_' or '-'")
            if len(value) > MAX_PARAM_CHARS:
                raise PlacementError(f"parameter {name!r}: value over {MAX_PARAM_CHARS} characters")


class TwilioDialer:
    """Places calls with Twilio's Calls API (one create request, retried where that is safe)."""

    def __init__(self, account_sid: str, auth_token: str, public_url: str, *,
                 api_base: str = "https://api.twilio.com", timeout_s: float = 10.0, max_attempts: int = 4,
                 backoff_s: float = 0.5, max_retry_wait_s: float = 30.0):
        if not account_sid or not auth_token:
            raise PlacementError("dialling through Twilio needs TWILIO_ACCOUNT_SID and TWILIO_AUTH_TOKEN")
        if not public_url.startswith(("https://", "http://")):
            raise PlacementError("dialling through Twilio needs the public URL Twilio reaches parley at "
                                 "(--public-url or PARLEY_PUBLIC_URL)")
        self.account_sid = account_sid
        token = base64.b64encode(f"{account_sid}:{auth_token}".encode()).decode("ascii")
        self._headers = {"Authorization": f"Basic {token}"}
        self.public_url = public_url.rstrip("/")
        self.calls_url = f"{api_base.rstrip('/')}/2010-04-01/Accounts/{account_sid}/Calls.json"
        self.timeout_s = timeout_s
        self.max_attempts = max_attempts
        self.backoff_s = backoff_s
        self.max_retry_wait_s = max_retry_wait_s

    def form(self, request: TwilioDialRequest, dial_id: str) -> dict[str, str]:
        """The create-call request's form fields."""
        if request.twiml is not None:
            answer = {"Twiml": request.twiml}
        else:
            voice = f"{self.public_url}/twilio/voice"
            if request.params:
                voice += "?" + urlencode([(PARAM_PREFIX + k, v) for k, v in request.params])
            answer = {"Url": voice, "Method": "POST"}
        status = f"{self.public_url}/twilio/dial-status?dial={dial_id}"
        form = {"To": request.to, "From": request.from_, **answer,
                "StatusCallback": status, "StatusCallbackMethod": "POST",
                "StatusCallbackEvent": STATUS_EVENTS, "Timeout": str(request.ring_timeout_s)}
        if request.machine_detection:
            form |= {"MachineDetection": "DetectMessageEnd", "AsyncAmd": "true",
                     "AsyncAmdStatusCallback": status, "AsyncAmdStatusCallbackMethod": "POST"}
        return form

    async def create(self, request: TwilioDialRequest, dial_id: str) -> dict[str, Any]:
        """POST the create-call request; Twilio's JSON (``sid``, ``status``...) or PlacementError."""
        form = self.form(request, dial_id)
        who = f"call to {masked(request.to)} ({dial_id})"
        for attempt in range(1, self.max_attempts + 1):
            try:
                status, reply, retry_after = await self._post(form)
            except TimeoutError as exc:
                raise PlacementError(f"{who}: Twilio did not answer in {self.timeout_s:g} s; not sent again, as "
                                     "the call may have been placed", maybe_placed=True) from exc
            except aiohttp.ClientConnectionError as exc:
                if not isinstance(exc, aiohttp.ClientConnectorError) or attempt == self.max_attempts:
                    # connected, then cut off: the request may have been taken
                    raise PlacementError(f"{who}: Twilio could not be reached: {exc}",
                                         maybe_placed=not isinstance(exc, aiohttp.ClientConnectorError)) from exc
                status, reply, retry_after = 0, {"message": str(exc)}, None
            if 200 <= status < 300 and isinstance(reply.get("sid"), str):
                return reply
            detail = _detail(status, reply)
            if status in (401, 403):
                raise PlacementError(f"{who}: Twilio refused the credentials ({detail}): check "
                                     "TWILIO_ACCOUNT_SID and TWILIO_AUTH_TOKEN", status=status)
            if status == 404:
                raise PlacementError(f"{who}: Twilio has no account {self.account_sid} at {self.calls_url} "
                                     f"({detail})", status=status)
            if status != 429 and not (status == 0 or status >= 500):
                raise PlacementError(f"{who}: Twilio refused it ({detail})", status=status)
            wait_s = self.backoff_s * 2 ** (attempt - 1)
            if status == 429 and retry_after is not None:
                wait_s = retry_after
            if attempt == self.max_attempts:
                raise PlacementError(f"{who}: {detail}, {attempt} times; gave up", status=status or None)
            if wait_s > self.max_retry_wait_s:
                raise PlacementError(f"{who}: {detail} and asked for a wait of {wait_s:.0f} s (over "
                                     f"{self.max_retry_wait_s:.0f} s); gave up", status=status)
            log.warning("%s: %s; try %d of %d in %.1f s", who, detail, attempt + 1, self.max_attempts, wait_s)
            await asyncio.sleep(wait_s)
        raise AssertionError("unreachable")  # pragma: no cover

    async def fetch(self, call_sid: str) -> dict[str, Any]:
        """Twilio's resource for one call (``status``, ``answered_by``...); PlacementError when it
        cannot be read. A campaign resumed after a crash asks how a call it placed went."""
        return await self._get(f"{self.calls_url.removesuffix('.json')}/{call_sid}.json", f"call {call_sid}")

    async def calls_to(self, to: str, since: float) -> list[dict[str, Any]]:
        """The calls to ``to`` created at epoch second ``since`` or later (Twilio's list, filtered
        by ``To``; its dates are RFC 2822). A campaign resumed after a crash between its claim and
        Twilio's answer learns this way whether the call was placed."""
        reply = await self._get(f"{self.calls_url}?{urlencode({'To': to, 'PageSize': '50'})}",
                                f"calls to {masked(to)}")
        calls = reply.get("calls")
        if not isinstance(calls, list):
            raise PlacementError(f"calls to {masked(to)}: Twilio's list has no 'calls'")
        found = []
        for call in calls:
            try:
                created = email.utils.parsedate_to_datetime(str(call.get("date_created"))).timestamp()
            except (TypeError, ValueError):
                continue
            if created >= since - 1.0:   # its dates are whole seconds
                found.append(call)
        return found

    async def _get(self, url: str, what: str) -> dict[str, Any]:
        try:
            async with aiohttp.ClientSession() as http, asyncio.timeout(self.timeout_s):
                async with http.get(url, headers=self._headers) as resp:
                    status, body = resp.status, await resp.read()
            reply = json.loads(body) if body else {}
        except (aiohttp.ClientError, TimeoutError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise PlacementError(f"{what}: Twilio could not be asked: {exc}") from exc
        if not isinstance(reply, dict):
            reply = {}
        if status != 200:
            raise PlacementError(f"{what}: Twilio answered {_detail(status, reply)}", status=status)
        return reply

    async def _post(self, form: dict[str, str]) -> tuple[int, dict[str, Any], float | None]:
        async with aiohttp.ClientSession() as http, asyncio.timeout(self.timeout_s):
            async with http.post(self.calls_url, data=form, headers=self._headers) as resp:
                body = await resp.read()
                status, retry_after = resp.status, _retry_after_s(resp.headers.get("Retry-After"))
        try:
            reply = json.loads(body) if body else {}
        except (UnicodeDecodeError, json.JSONDecodeError):
            reply = {"message": body[:200].decode("utf-8", "replace")}
        return status, reply if isinstance(reply, dict) else {}, retry_after


def _detail(status: int, reply: Mapping[str, Any]) -> str:
    if status == 0:
        return f"connection refused ({reply.get('message', '')})"
    code, message = reply.get("code"), reply.get("message")
    return f"HTTP {status}" + (f", error {code}" if code else "") + (f": {str(message)[:200]}" if message else "")


def _retry_after_s(value: str | None) -> float | None:
    """Retry-After in seconds: a number, or an HTTP date (RFC 9110 10.2.3)."""
    if not value:
        return None
    if value.strip().isdigit():
        return float(value.strip())
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


class LiveCall(Protocol):
    record: CallRecord

    def sync(self) -> None: ...

    def answered_by_reported(self, answered_by: str) -> None: ...


@dataclass
class PlacedCall:
    """A call placed through Twilio, followed until Twilio says it is over."""

    dial_id: str
    request: TwilioDialRequest
    call_sid: str = ""
    statuses: list[str] = field(default_factory=list)
    answered_by: str | None = None
    sip_code: int | None = None
    duration_s: float = 0.0
    outcome: DialOutcome | None = None
    reason: str = ""
    done: asyncio.Event = field(default_factory=asyncio.Event)


class OutboundCalls:
    """The calls this server placed through Twilio, and every status Twilio reports on one
    (``on_status``), written on the call's record."""

    def __init__(self, store: CallStore, live: Mapping[str, LiveCall], dialer: TwilioDialer | None = None):
        self.store = store
        self.live = live
        self.dialer = dialer
        self.placed: OrderedDict[str, PlacedCall] = OrderedDict()   # by dial id

    async def place(self, request: TwilioDialRequest) -> PlacedCall:
        """Place the call; its record is open (``record.dial``) once Twilio took it."""
        if self.dialer is None:
            raise PlacementError("dialling through Twilio needs TWILIO_ACCOUNT_SID, TWILIO_AUTH_TOKEN and the "
                                 "public URL (--public-url or PARLEY_PUBLIC_URL)")
        placed = PlacedCall(dial_id="D" + secrets.token_hex(8), request=request)
        self.placed[placed.dial_id] = placed
        while len(self.placed) > MAX_FOLLOWED:
            self.placed.popitem(last=False)
        try:
            reply = await self.dialer.create(request, placed.dial_id)
        except PlacementError as exc:
            self._finish(placed, DialOutcome.FAILED, str(exc))
            raise
        placed.call_sid = reply["sid"]
        log.info("[%s] placed through Twilio: call to %s (%s), status %s", placed.call_sid, masked(request.to),
                 placed.dial_id, reply.get("status"))
        dial: dict[str, Any] = {"via": "twilio", "dial_id": placed.dial_id, "to": request.to, "from": request.from_,
                "statuses": [], "outcome": None, "answered_by": None}
        if self.store.get(placed.call_sid) is None:  # a status callback may have come first
            self.store.open(CallRecord(call_sid=placed.call_sid, transport="twilio", dial=dial,
                                       params={"Direction": "outbound-api", **dict(request.params)}))
        for status in list(placed.statuses):
            self._write(placed.call_sid, {"CallStatus": status}, placed)
        return placed

    def on_status(self, dial_id: str, form: Mapping[str, str]) -> None:
        """A status or answering-machine callback from Twilio (its signature already checked)."""
        call_sid = form.get("CallSid", "")
        placed = self.placed.get(dial_id)
        if placed is not None and not placed.call_sid:
            placed.call_sid = call_sid
        status, answered_by = form.get("CallStatus", ""), form.get("AnsweredBy")
        log.info("[%s] Twilio: %s%s", call_sid or dial_id, status or "-", f", answered by {answered_by}" if answered_by else "")
        if placed is not None:
            if answered_by:
                placed.answered_by = answered_by
            elif status:
                placed.statuses.append(status)
            if form.get("SipResponseCode", "").isdigit():
                placed.sip_code = int(form["SipResponseCode"])
            if form.get("CallDuration", "").isdigit():
                placed.duration_s = float(form["CallDuration"])
            if status in TERMINAL and not answered_by:
                outcome = TERMINAL[status]
                if status == "completed" and "in-progress" not in placed.statuses and placed.sip_code \
                        and placed.sip_code >= 300:
                    outcome = DialOutcome.FAILED
                self._finish(placed, outcome, status)
        if call_sid:
            self._write(call_sid, form, placed)

    def _write(self, call_sid: str, form: Mapping[str, str], placed: PlacedCall | None) -> None:
        live = self.live.get(call_sid)
        record = live.record if live is not None else self.store.get(call_sid)
        if record is None:
            if placed is None:  # not ours, or long gone: nothing to write it on
                log.info("[%s] a Twilio status for a call without a record ignored", call_sid[:64])
                return
            return  # place() opens the record when Twilio's answer comes, and writes what came before
        dial: dict[str, Any] = record.dial
        dial.setdefault("via", "twilio")
        status, answered_by = form.get("CallStatus", ""), form.get("AnsweredBy")
        if answered_by:
            dial["answered_by"] = answered_by
            if live is not None:   # its stream is running: the call acts on it (TwilioCall)
                live.answered_by_reported(answered_by)
        elif status:
            dial.setdefault("statuses", []).append({"status": status, "at": round(time.time(), 3)})
            if form.get("SipResponseCode", "").isdigit():
                dial["sip_code"] = int(form["SipResponseCode"])
            if status in TERMINAL:
                dial["outcome"] = placed.outcome.value if placed and placed.outcome else TERMINAL[status].value
                if form.get("CallDuration", "").isdigit():
                    dial["duration_s"] = int(form["CallDuration"])
                if live is None and not record.ended:  # never streamed (busy...), or its stream is over
                    record.ended_at = time.time()
                    record.end_reason = status if status == "completed" else f"{dial['outcome']} (Twilio: {status})"
        if live is not None:
            live.sync()
        else:
            self.store.update(record)

    @staticmethod
    def _finish(placed: PlacedCall, outcome: DialOutcome, reason: str) -> None:
        if placed.outcome is None:
            placed.outcome, placed.reason = outcome, reason
        placed.done.set()

    async def wait(self, placed: PlacedCall, timeout_s: float | None = None) -> DialResult:
        """Wait until Twilio reports the call over (TimeoutError after ``timeout_s``); how it went."""
        async with asyncio.timeout(timeout_s):
            await placed.done.wait()
        return self.result(placed)

    def result(self, placed: PlacedCall) -> DialResult:
        record = self.store.get(placed.call_sid) if placed.call_sid else None
        history = tuple(placed.statuses) + ((f"answered-by:{placed.answered_by}",) if placed.answered_by else ())
        # the call's screening (TwilioCall) says who it acted on; else Twilio's answer, recorded only
        answered_by = record.answered_by if record is not None and record.answered_by else placed.answered_by
        return DialResult(outcome=placed.outcome or DialOutcome.CANCELED, call_id=placed.call_sid or placed.dial_id,
                          target=placed.request.to, status=placed.sip_code, reason=placed.reason,
                          end_reason=record.end_reason if record is not None else None, history=history,
                          talk_s=placed.duration_s, answered_by=answered_by,
                          voicemail_left=record.voicemail_left if record is not None else None)
