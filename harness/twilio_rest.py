"""A stand-in for Twilio's REST Calls API on loopback: it takes create-call requests and plays
each call as Twilio would, against a real parley server.

::

    async with TwilioRestStandIn(account_sid="AC...", auth_token=TOKEN) as twilio:   # start() ... stop()
        twilio.base_url                               # http://127.0.0.1:PORT
        twilio.faults.append(Fault(429, retry_after="1"))  # the next create request gets this instead
        twilio.scenarios.append(Scenario(answer="busy"))  # how the next call goes (default: a person answers)
        ... parley places a call with api_base=twilio.base_url ...
        call = await twilio.next_call()               # a StandInCall, once it is over (call.report: what was heard)
        twilio.scenario_for = lambda form: Scenario(answer="busy") if form["To"].endswith("7") else Scenario()
        twilio.max_in_flight                          # the most calls it had going at once
        call = await twilio.call_in(f"{parley}/twilio/voice", Scenario(...))   # an inbound call, played the same way
        twilio.update_faults.extend([None, Fault(500)])  # the second update request gets a 500
        twilio.rooms["warm-CA..."].participants        # who joined a conference, when, and what they heard before

What it implements: ``POST /2010-04-01/Accounts/{AccountSid}/Calls.json`` (HTTP basic auth with the
account SID and auth token: 401 otherwise, 404 for another account) taking To, From, Url (or Twiml),
StatusCallback with StatusCallbackEvent, MachineDetection with AsyncAmd and AsyncAmdStatusCallback,
Timeout. It answers 201 with Twilio-shaped JSON (``sid`` "CA...", ``status`` "queued"), and errors
as Twilio shapes them (``{"code", "message", "more_info", "status"}``). Then it plays the call:

1. status callbacks ``initiated`` and ``ringing`` (those asked for in StatusCallbackEvent), then
   ``ring_s`` of ringing (an update with ``Status`` cancels the call there);
2. a scenario of busy, no-answer or failed ends there with that status (sent when ``completed``
   was asked for, as Twilio sends every final status with it);
3. answered: the voice webhook ``Url`` (POST, ``Direction=outbound-api``), whose TwiML must be
   ``<Connect><Stream url>``; the ``answered`` callback (``CallStatus=in-progress``); the media
   stream opened by the scripted Twilio caller (``harness.callers.twilio``) with the TwiML's
   ``<Parameter>``s as its customParameters; the answering-machine callback (``AnsweredBy``:
   ``human``, ``machine_end_beep``, ``machine_end_silence``, ``machine_end_other``, ``fax`` or
   ``unknown``, as the scenario says; none with ``answered_by=None``) ``amd_delay_s`` after the
   answer, while the stream runs; and, when the caller hangs up, ``completed`` with CallDuration.
   The callee hears the agent (``report.agent_audio``, on the stream's own clock) and can stay on
   the line after it (``linger_s``: parley may hang up first) or hang up ``reply_timeout_s`` into
   what the agent says (a callee who leaves during a voicemail message).
   A scenario with ``stream=False`` is a short call without media: answered, the answering-machine
   callback, then ``completed`` ``talk_s`` later (many calls, no agent running: campaigns' tests).

``POST .../Calls/{CallSid}.json`` updates a live call as Twilio does: ``Status=completed`` (or
``canceled``) hangs it up (a ringing one is canceled); ``Twiml`` (or ``Url``, POSTed signed for
the TwiML) replaces what it runs, which closes its media stream (the scripted caller sends
``stop`` and the socket closes). ``<Dial><Conference>`` then puts it in that room (``rooms``: a
small conference model, no audio mixed: each :class:`Participant` with when it joined and left,
``endConferenceOnExit``, and what its stream received before it joined); the callee stays
``conference_s`` (None: until the conference ends), and a participant with
``endConferenceOnExit`` leaving ends the room for all. Other TwiML ends the call as completed.
A call not in progress gets Twilio's 400 (error 21220) for new TwiML; ``update_faults`` (each
``Fault``, or None for no fault) answer update requests in order. ``updates`` keeps every update
request: the call, its form, the HTTP status and the loop time. ``call_in`` plays an inbound call:
the voice webhook (``Direction=inbound``), then the stream, as for a call placed.

``GET .../Calls/{CallSid}.json`` answers the call's current ``status`` and ``answered_by``; ``GET
.../Calls.json?To=...`` lists the calls to a number, newest first. A status
callback that parley does not answer (its process killed) is noted with HTTP status 0 and the call
goes on, as Twilio's does.

Every callback is signed as Twilio signs it (X-Twilio-Signature: HMAC-SHA1 of the URL and the
sorted form, base64, keyed by the auth token); ``StandInCall.callbacks`` keeps what parley
answered to each.
"""

from __future__ import annotations

import asyncio
import base64
import hmac
import logging
import secrets
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal
from xml.etree import ElementTree

import aiohttp
from aiohttp import web

from harness.callers.script import CallerConfig, CallerUtterance, CallReport
from harness.callers.twilio import TwilioCaller
from harness.errors import CallerError
from telephony.twilio.signature import SIGNATURE_HEADER, compute_signature

__all__ = ["Fault", "Participant", "Room", "Scenario", "StandInCall", "TwilioRestStandIn", "Update"]

log = logging.getLogger(__name__)

IO_TIMEOUT_S = 5.0
Answer = Literal["human", "busy", "no-answer", "failed"]
FINAL = ("completed", "busy", "no-answer", "failed", "canceled")


@dataclass(frozen=True)
class Fault:
    """What the next create-call request gets instead of a call: an HTTP error, as Twilio shapes it."""

    status: int
    retry_after: str | None = None
    message: str = "injected by the stand-in"


@dataclass(frozen=True)
class Scenario:
    """How a call goes once placed."""

    answer: Answer = "human"
    answered_by: str | None = "human"  # the answering-machine callback's AnsweredBy; None: none sent
    amd_delay_s: float = 0.3
    ring_s: float = 0.05
    utterances: tuple[CallerUtterance, ...] = ()   # what the callee says (after the greeting)
    greeting_quiet_s: float = 5.0
    call_timeout_s: float = 30.0
    stream: bool = True               # False: answered without opening a media stream
    talk_s: float = 0.2               # with stream=False: answered to completed
    linger_s: float = 0.0             # after the agent's last words, stay on the line this long
    linger_until: Callable[[list[tuple[float, bytes]]], bool] | None = None   # ...or until this holds of what it heard
    reply_timeout_s: float = 20.0     # the longest the callee listens to one reply before hanging up
    conference_s: float | None = None  # in a conference, hang up after this long (None: stay until it ends)


@dataclass
class StandInCall:
    sid: str
    form: dict[str, str]
    scenario: Scenario
    direction: str = "outbound-api"
    twiml: str = ""
    stream_params: dict[str, str] = field(default_factory=dict)
    callbacks: list[tuple[str, str, int]] = field(default_factory=list)  # (kind, status or AnsweredBy, HTTP status)
    report: CallReport | None = None
    status: str = "queued"
    created: str = field(default_factory=lambda: time.strftime("%a, %d %b %Y %H:%M:%S +0000", time.gmtime()))
    error: str | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)
    caller: TwilioCaller | None = None     # its media stream's far end, while it streams
    replaced_by: str | None = None         # the TwiML an update gave it
    room: str | None = None                # the conference it joined
    hung_up: asyncio.Event = field(default_factory=asyncio.Event)   # an update hung it up (Status=)

    @property
    def media_received(self) -> list[tuple[float, bytes]]:
        """What its stream received (``media`` payloads) and when (loop time)."""
        return self.caller.media_received if self.caller is not None else []


@dataclass
class Participant:
    call_sid: str
    joined_at: float                       # loop time
    end_conference_on_exit: bool
    heard_before: list[tuple[float, bytes]]  # what its stream received before it joined
    left_at: float | None = None


@dataclass
class Room:
    """A conference: who joined, when; over once a participant with endConferenceOnExit left."""

    name: str
    participants: list[Participant] = field(default_factory=list)
    ended_at: float | None = None
    ended: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass(frozen=True)
class Update:
    call_sid: str
    form: dict[str, str]
    status: int
    at: float                              # loop time the request came


class TwilioRestStandIn:
    """A real HTTP server on loopback playing Twilio's part in calls parley places."""

    def __init__(self, account_sid: str, auth_token: str, *, host: str = "127.0.0.1"):
        self.account_sid = account_sid
        self.auth_token = auth_token
        self.host = host
        self.port: int | None = None
        self.faults: deque[Fault] = deque()
        self.scenarios: deque[Scenario] = deque()
        self.calls: list[StandInCall] = []
        self.requests: list[int] = []   # the HTTP status each create request got, in order
        self.scenario_for: Callable[[dict[str, str]], Scenario] | None = None   # before ``scenarios``
        self.in_flight = 0              # calls created and not yet over
        self.max_in_flight = 0
        self.update_faults: deque[Fault | None] = deque()
        self.updates: list[Update] = []
        self.rooms: dict[str, Room] = {}
        self._finished: asyncio.Queue[StandInCall] = asyncio.Queue()
        self._tasks: set[asyncio.Task] = set()
        self._runner: web.AppRunner | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> int:
        app = web.Application()
        app.router.add_post("/2010-04-01/Accounts/{account}/Calls.json", self._create)
        app.router.add_get("/2010-04-01/Accounts/{account}/Calls/{sid}.json", self._fetch)
        app.router.add_post("/2010-04-01/Accounts/{account}/Calls/{sid}.json", self._update)
        app.router.add_get("/2010-04-01/Accounts/{account}/Calls.json", self._list)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        return self.port

    async def __aenter__(self) -> TwilioRestStandIn:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def call(self, sid: str) -> StandInCall:
        return next(c for c in self.calls if c.sid == sid)

    async def call_in(self, voice_url: str, scenario: Scenario | None = None, *, from_: str = "+15550100",
                      to: str = "+15550199") -> StandInCall:
        """Play an inbound call to ``voice_url`` (parley's voice webhook); returns it at once
        (``call.done`` is set, and ``next_call`` gives it, once it is over)."""
        call = StandInCall(sid="CA" + secrets.token_hex(16), scenario=scenario or Scenario(), direction="inbound",
                           form={"To": to, "From": from_, "Url": voice_url})
        self.calls.append(call)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        self._spawn(self._play(call), f"stand-in-{call.sid}")
        return call

    def _spawn(self, coro, name: str) -> None:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def next_call(self, timeout_s: float = 30.0) -> StandInCall:
        """The next call to finish playing."""
        async with asyncio.timeout(timeout_s):
            return await self._finished.get()

    # -- the REST API ------------------------------------------------------------------------

    def _error(self, status: int, code: int, message: str, headers: dict[str, str] | None = None) -> web.Response:
        self.requests.append(status)
        return web.json_response({"code": code, "message": message, "status": status,
                                  "more_info": f"https://www.twilio.com/docs/errors/{code}"},
                                 status=status, headers=headers)

    @staticmethod
    def _get_error(status: int, code: int, message: str) -> web.Response:
        return web.json_response({"code": code, "message": message, "status": status}, status=status)

    def _authorized(self, request: web.Request) -> bool:
        token = base64.b64encode(f"{self.account_sid}:{self.auth_token}".encode()).decode("ascii")
        return hmac.compare_digest(request.headers.get("Authorization", "").encode(), f"Basic {token}".encode())

    async def _create(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return self._error(401, 20003, "Authenticate")
        if request.match_info["account"] != self.account_sid:
            return self._error(404, 20404, "The requested resource was not found")
        if self.faults:
            fault = self.faults.popleft()
            headers = {"Retry-After": fault.retry_after} if fault.retry_after is not None else None
            return self._error(fault.status, 20429 if fault.status == 429 else 20500, fault.message, headers)
        form = {k: str(v) for k, v in (await request.post()).items()}
        for name in ("To", "From"):
            if not form.get(name):
                return self._error(400, 21201 if name == "To" else 21603, f"A '{name}' phone number is required.")
        if not form.get("Url") and not form.get("Twiml"):
            return self._error(400, 21205, "Url or Twiml is required.")
        if self.scenario_for is not None:
            scenario = self.scenario_for(form)
        else:
            scenario = self.scenarios.popleft() if self.scenarios else Scenario()
        call = StandInCall(sid="CA" + secrets.token_hex(16), form=form, scenario=scenario)
        self.calls.append(call)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        self.requests.append(201)
        self._spawn(self._play(call), f"stand-in-{call.sid}")
        now = time.strftime("%a, %d %b %Y %H:%M:%S +0000", time.gmtime())
        return web.json_response({
            "sid": call.sid, "account_sid": self.account_sid, "to": form["To"], "from": form["From"],
            "status": "queued", "direction": "outbound-api", "api_version": "2010-04-01",
            "date_created": now, "date_updated": now, "start_time": None, "end_time": None, "duration": None,
            "uri": f"/2010-04-01/Accounts/{self.account_sid}/Calls/{call.sid}.json"}, status=201)

    def _resource(self, call: StandInCall) -> dict[str, object]:
        answered = call.status in ("in-progress", "completed") and call.scenario.answer == "human"
        return {"sid": call.sid, "status": call.status, "to": call.form["To"], "from": call.form["From"],
                "date_created": call.created, "answered_by": call.scenario.answered_by if answered else None}

    async def _fetch(self, request: web.Request) -> web.Response:
        if not self._authorized(request) or request.match_info["account"] != self.account_sid:
            return self._get_error(401, 20003, "Authenticate")
        call = next((c for c in self.calls if c.sid == request.match_info["sid"]), None)
        if call is None:
            return self._get_error(404, 20404, "The requested resource was not found")
        return web.json_response(self._resource(call))

    async def _list(self, request: web.Request) -> web.Response:
        if not self._authorized(request) or request.match_info["account"] != self.account_sid:
            return self._get_error(401, 20003, "Authenticate")
        to = request.query.get("To")
        calls = [self._resource(c) for c in reversed(self.calls) if to is None or c.form["To"] == to]
        return web.json_response({"calls": calls, "page": 0, "page_size": len(calls)})

    async def _update(self, request: web.Request) -> web.Response:
        """``POST .../Calls/{CallSid}.json``: hang a call up, or give it new TwiML (module docstring)."""
        if not self._authorized(request) or request.match_info["account"] != self.account_sid:
            return self._get_error(401, 20003, "Authenticate")
        form = {k: str(v) for k, v in (await request.post()).items()}
        sid = request.match_info["sid"]
        call = next((c for c in self.calls if c.sid == sid), None)

        def answer(status: int, response: web.Response) -> web.Response:
            self.updates.append(Update(sid, form, status, asyncio.get_running_loop().time()))
            return response

        fault = self.update_faults.popleft() if self.update_faults else None
        if fault is not None:
            headers = {"Retry-After": fault.retry_after} if fault.retry_after is not None else None
            code = 20429 if fault.status == 429 else 20500
            return answer(fault.status, web.json_response(
                {"code": code, "message": fault.message, "status": fault.status,
                 "more_info": f"https://www.twilio.com/docs/errors/{code}"}, status=fault.status, headers=headers))
        if call is None:
            return answer(404, self._get_error(404, 20404, "The requested resource was not found"))
        if form.get("Status") in ("completed", "canceled"):
            if call.status not in FINAL and not (form["Status"] == "canceled" and call.status == "in-progress"):
                call.hung_up.set()
                if call.caller is not None:
                    self._spawn(call.caller.end_stream(), f"stand-in-hangup-{sid}")
            return answer(200, web.json_response(self._resource(call)))
        twiml = form.get("Twiml")
        if twiml is None and form.get("Url"):
            async with aiohttp.ClientSession() as http:
                code, twiml = await self._signed_post(http, form["Url"], self._base_form(call, call.status))
            if code != 200:
                return answer(400, self._get_error(400, 21220, f"the Url answered HTTP {code}"))
        if not twiml:
            return answer(400, self._get_error(400, 21218, "Twiml, Url or Status is required."))
        if call.status != "in-progress":
            return answer(400, self._get_error(400, 21220, "Call is not in-progress. Cannot redirect."))
        try:
            ElementTree.fromstring(twiml)
        except ElementTree.ParseError:
            return answer(400, self._get_error(400, 12100, "Document parse failure"))
        call.replaced_by = twiml
        self._join_room(call, twiml)
        if call.caller is not None:   # its stream ends; the call goes on with the new TwiML (_answer)
            self._spawn(call.caller.end_stream(), f"stand-in-replace-{sid}")
        return answer(200, web.json_response(self._resource(call)))

    def _join_room(self, call: StandInCall, twiml: str) -> None:
        """``<Dial><Conference>``: the call is in the room from now (Twilio stops its stream)."""
        conference = ElementTree.fromstring(twiml).find("./Dial/Conference")
        name = (conference.text or "").strip() if conference is not None else ""
        if conference is None or not name:
            return
        room = self.rooms.setdefault(name, Room(name))
        call.room = name
        room.participants.append(Participant(call.sid, asyncio.get_running_loop().time(),
                                             conference.get("endConferenceOnExit", "false") == "true",
                                             list(call.media_received)))

    # -- playing the call ----------------------------------------------------------------------

    def _base_form(self, call: StandInCall, status: str) -> dict[str, str]:
        return {"CallSid": call.sid, "AccountSid": self.account_sid, "From": call.form["From"],
                "To": call.form["To"], "Direction": call.direction, "CallStatus": status, "ApiVersion": "2010-04-01"}

    async def _signed_post(self, http: aiohttp.ClientSession, url: str, form: dict[str, str]) -> tuple[int, str]:
        headers = {SIGNATURE_HEADER: compute_signature(self.auth_token, url, form)}
        async with asyncio.timeout(IO_TIMEOUT_S), http.post(url, data=form, headers=headers) as resp:
            return resp.status, await resp.text()

    async def _status(self, http: aiohttp.ClientSession, call: StandInCall, event: str, status: str,
                      **extra: str) -> None:
        if event == "completed" and call.status not in FINAL:
            self.in_flight -= 1        # over once Twilio says so, before parley has heard it
        call.status = status
        url = call.form.get("StatusCallback")
        if not url or event not in call.form.get("StatusCallbackEvent", "completed").split():
            return
        form = self._base_form(call, status) | {"CallbackSource": "call-progress-events",
                                                "SequenceNumber": str(len(call.callbacks)),
                                                "Timestamp": time.strftime("%a, %d %b %Y %H:%M:%S +0000"), **extra}
        try:
            code, _ = await self._signed_post(http, url, form)
        except (aiohttp.ClientError, TimeoutError):
            code = 0                   # nobody listening (parley killed): Twilio goes on with the call
        call.callbacks.append(("status", status, code))

    async def _play(self, call: StandInCall) -> None:
        scenario = call.scenario
        try:
            async with aiohttp.ClientSession() as http:
                await self._status(http, call, "initiated", "initiated")
                await self._status(http, call, "ringing", "ringing")
                if await self._ring(call):    # hung up over REST while it rang
                    await self._status(http, call, "completed", "canceled", CallDuration="0")
                    return
                if scenario.answer != "human":
                    extra = {"SipResponseCode": {"busy": "486", "no-answer": "487", "failed": "404"}[scenario.answer]}
                    await self._status(http, call, "completed", scenario.answer, CallDuration="0", **extra)
                    return
                if scenario.stream:
                    await self._answer(http, call)
                else:
                    await self._talk(http, call)
        except (aiohttp.ClientError, TimeoutError, CallerError, ElementTree.ParseError) as exc:
            call.error = f"{type(exc).__name__}: {exc}"
            log.warning("[%s] stand-in call broke off: %s", call.sid, call.error)
        finally:
            if call.status not in FINAL:   # broke off (or cancelled): over, as failed
                call.status = "failed"
                self.in_flight -= 1
            call.done.set()
            self._finished.put_nowait(call)

    @staticmethod
    async def _ring(call: StandInCall) -> bool:
        """Ring for ``ring_s``; True when an update hung the call up meanwhile."""
        try:
            async with asyncio.timeout(call.scenario.ring_s):
                await call.hung_up.wait()
        except TimeoutError:
            pass
        return call.hung_up.is_set()

    async def _answer(self, http: aiohttp.ClientSession, call: StandInCall) -> None:
        scenario = call.scenario
        answered_at = time.monotonic()
        if call.form.get("Url"):
            form = self._base_form(call, "in-progress" if call.direction != "inbound" else "ringing")
            code, call.twiml = await self._signed_post(http, call.form["Url"], form)
            call.callbacks.append(("voice", "in-progress", code))
            if code != 200:
                raise CallerError(f"the voice webhook answered HTTP {code}")
        else:
            call.twiml = call.form["Twiml"]
        stream = ElementTree.fromstring(call.twiml).find("./Connect/Stream")
        if stream is None or not stream.get("url"):
            raise CallerError(f"the TwiML does not connect a stream: {call.twiml[:200]}")
        call.stream_params = {p.get("name", ""): p.get("value", "") for p in stream.iter("Parameter")}
        await self._status(http, call, "answered", "in-progress")
        amd = None
        if call.form.get("MachineDetection") and call.form.get("AsyncAmdStatusCallback") and scenario.answered_by:
            amd = asyncio.get_running_loop().create_task(self._amd(http, call))
        caller = TwilioCaller(CallerConfig(url=str(stream.get("url")), utterances=scenario.utterances,
                                           auth_token=self.auth_token, webhook=False,
                                           greeting_quiet_s=scenario.greeting_quiet_s, timeout_s=scenario.call_timeout_s,
                                           linger_s=scenario.linger_s, linger_until=scenario.linger_until,
                                           reply_timeout_s=scenario.reply_timeout_s),
                              call_sid=call.sid, account_sid=self.account_sid, stream_params=call.stream_params,
                              keep_media=True)
        call.caller = caller
        try:
            call.report = await caller.run()
        finally:
            if amd is not None:
                await amd
        if call.room is not None:
            await self._run_replaced(call)
        await self._status(http, call, "completed", "completed",
                           CallDuration=str(max(1, round(time.monotonic() - answered_at))))

    async def _run_replaced(self, call: StandInCall) -> None:
        """A call an update put in a conference room (``_join_room``): there until the callee
        leaves (``conference_s``), it is hung up, or the room ends."""
        assert call.room is not None
        loop = asyncio.get_running_loop()
        room = self.rooms[call.room]
        me = next(p for p in room.participants if p.call_sid == call.sid)
        if room.ended.is_set():   # joined a room that was already over: out at once
            me.left_at = loop.time()
            return
        waits = [asyncio.ensure_future(room.ended.wait()), asyncio.ensure_future(call.hung_up.wait())]
        try:
            await asyncio.wait(waits, timeout=call.scenario.conference_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
        me.left_at = loop.time()
        if me.end_conference_on_exit and not room.ended.is_set():
            room.ended_at = me.left_at
            room.ended.set()

    async def _talk(self, http: aiohttp.ClientSession, call: StandInCall) -> None:
        """Answered, no media: the answered and answering-machine callbacks, then completed."""
        await self._status(http, call, "answered", "in-progress")
        if call.form.get("MachineDetection") and call.form.get("AsyncAmdStatusCallback") and call.scenario.answered_by:
            try:
                await self._amd(http, call)
            except (aiohttp.ClientError, TimeoutError):
                call.callbacks.append(("amd", call.scenario.answered_by, 0))
        await asyncio.sleep(max(0.0, call.scenario.talk_s - call.scenario.amd_delay_s))
        await self._status(http, call, "completed", "completed", CallDuration=str(max(1, round(call.scenario.talk_s))))

    async def _amd(self, http: aiohttp.ClientSession, call: StandInCall) -> None:
        answered_by = call.scenario.answered_by
        assert answered_by is not None
        await asyncio.sleep(call.scenario.amd_delay_s)
        form = self._base_form(call, "in-progress") | {"AnsweredBy": answered_by,
                                                       "MachineDetectionDuration": str(int(call.scenario.amd_delay_s * 1000))}
        code, _ = await self._signed_post(http, call.form["AsyncAmdStatusCallback"], form)
        call.callbacks.append(("amd", answered_by, code))
