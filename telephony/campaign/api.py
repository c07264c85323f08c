"""Campaigns over the server's HTTP API, with ``POST /calls``'s bearer token.

::

    POST /campaigns                  {"name": "spring", "contacts": "to,timezone,...\\n...", "from": "+15550100",
                                      "dnc": ["+15551230009"], "window": "09:00-20:00", "max_concurrent": 2,
                                      "calls_per_minute": 10, "retry_on": ["busy", "no-answer"],
                                      "max_attempts": 3, "backoff_s": 600, "agent": "receptionist"}
        202 {"name": "spring", "state": "running", "contacts": 53, "created": true}
    GET  /campaigns/{name}           {"name", "state", "contacts", "done", "outcomes": {"answered": 30, ...}}
    POST /campaigns/{name}/stop      no new dials (calls in progress run to their end)
    POST /campaigns/{name}/resume    runs it again here (the resume rule of ``telephony.campaign.runner``)
    GET  /campaigns/{name}/results?format=csv|json

``contacts`` is the CSV text of a contacts file (``telephony.campaign.contacts``); a file with
problems is refused whole: 400 with ``problems``, one line each. The same name with the same
contacts resumes that campaign. The runner runs inside the server, under its admission limit.
A campaign is run by one process at a time: resume it on one server (or ``parley campaign
resume``), not on several at once. Answers: 401 without the token, 404 for no such campaign,
501 when the call store is not durable (campaigns need ``--db``), 409 for a resume of one
that runs here already.
"""

from __future__ import annotations

import asyncio
import io
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any, Final

from aiohttp import web

from pipeline.campaigns import CampaignState, CampaignStore
from telephony.calls_api import read_json_object
from telephony.campaign.book import open_campaign
from telephony.campaign.config import CampaignConfig
from telephony.campaign.contacts import is_target, normal_target, parse_contacts
from telephony.campaign.placer import ServerPlacer
from telephony.campaign.results import ResultsStore, campaign_results, write_csv
from telephony.campaign.runner import CampaignRunner
from telephony.campaign.schedule import CallingWindow, RetryPolicy
from telephony.errors import CampaignError, ContactsError

__all__ = ["CampaignsApi"]

log = logging.getLogger(__name__)

MAX_BODY_BYTES: Final = 2 * 1024 * 1024
BODY_TIMEOUT_S: Final = 30.0
FIELDS: Final = ("name", "contacts", "from", "agent", "dnc", "timezone", "window", "max_concurrent",
                 "calls_per_minute", "retry_on", "max_attempts", "backoff_s", "ring_timeout_s")


def _error(status: int, message: str, **extra: Any) -> web.Response:
    return web.json_response({"error": message, **extra}, status=status)


class CampaignsApi:
    def __init__(self, *, store: object, authorize: Callable[[web.Request], web.Response | None],
                 placer: Callable[[str | None], ServerPlacer],
                 agents: Callable[[str], Awaitable[str]] | None = None):
        self.store = store
        self._authorize = authorize
        self._placer = placer          # a placer for the campaign's agent key (None: the server's agent)
        self._agents = agents
        self.runners: dict[str, tuple[CampaignRunner, asyncio.Task]] = {}

    def register(self, app: web.Application) -> None:
        app.router.add_post("/campaigns", self.create)
        app.router.add_get("/campaigns/{name}", self.status)
        app.router.add_post("/campaigns/{name}/stop", self.stop_one)
        app.router.add_post("/campaigns/{name}/resume", self.resume)
        app.router.add_get("/campaigns/{name}/results", self.results)

    async def stop(self) -> None:
        """The server is stopping: no new dials; wait for the runners (their calls end with the server)."""
        for runner, _ in self.runners.values():
            runner.stop()
        await asyncio.gather(*(task for _, task in self.runners.values()), return_exceptions=True)

    def _gate(self, request: web.Request) -> tuple[web.Response | None, Any]:
        refusal = self._authorize(request)
        if refusal is not None:
            return refusal, None
        if not hasattr(self.store, "campaign_create"):
            return _error(501, "campaigns need a durable call store: start parley serve with --db (or PARLEY_DB)"), None
        return None, self.store

    async def create(self, request: web.Request) -> web.Response:
        refusal, store = self._gate(request)
        if refusal is not None:
            return refusal
        try:
            body = await self._body(request)
            config, contacts, dnc, name = self._parse(body)
        except ContactsError as exc:
            return _error(400, f"the contacts are refused: {len(exc.problems)} problem(s)", problems=exc.problems)
        except (ValueError, TypeError, CampaignError) as exc:
            return _error(400, str(exc))
        agent_key = None
        if isinstance(body.get("agent"), str):
            if self._agents is None:
                return _error(501, "this server runs one agent: leave out 'agent'")
            try:
                agent_key = await self._agents(body["agent"])
            except ValueError as exc:
                return _error(400, f"agent {body['agent'][:100]!r}: {exc}")
        if name in self.runners:
            return _error(409, f"campaign {name!r} is running here already")
        try:
            row, created = await asyncio.to_thread(open_campaign, store, name, contacts, config, source="POST /campaigns")
        except CampaignError as exc:
            return _error(409, str(exc))
        self._run(store, name, dnc, agent_key)
        return web.json_response({"name": name, "state": "running", "contacts": len(contacts), "created": created},
                                 status=202, headers={"Location": f"/campaigns/{name}"})

    def _run(self, store: CampaignStore, name: str, dnc: frozenset[str], agent_key: str | None) -> None:
        runner = CampaignRunner(store, name, self._placer(agent_key), dnc=dnc,
                                on_outcome=lambda p: log.info("campaign %s: line %d: %s (%d of %d done)", name,
                                                              p.contact.line, p.outcome, p.done, p.total))
        task = asyncio.get_running_loop().create_task(runner.run(), name=f"campaign-{name}")
        self.runners[name] = (runner, task)

        def ended(t: asyncio.Task) -> None:
            self.runners.pop(name, None)
            if not t.cancelled() and t.exception() is not None:
                log.error("campaign %s: the runner stopped on an error", name, exc_info=t.exception())

        task.add_done_callback(ended)

    async def _body(self, request: web.Request) -> dict:
        body = await read_json_object(request, MAX_BODY_BYTES, BODY_TIMEOUT_S,
                                      '{"name": ..., "contacts": "to,timezone\\n...", ...}')
        unknown = sorted(set(body) - set(FIELDS))
        if unknown:
            raise ValueError(f"unknown field {unknown[0][:40]!r} (fields: {', '.join(FIELDS)})")
        return body

    @staticmethod
    def _parse(body: dict) -> tuple[CampaignConfig, list, frozenset[str], str]:
        name, text = body.get("name"), body.get("contacts")
        if not isinstance(name, str) or not isinstance(text, str):
            raise ValueError("'name' and 'contacts' (the contacts file's CSV text) are needed")
        contacts = parse_contacts(text, "contacts", default_timezone=body.get("timezone"))
        dnc = body.get("dnc", [])
        if not isinstance(dnc, list) or not all(isinstance(d, str) and is_target(d) for d in dnc):
            raise ValueError("'dnc' is a list of phone numbers (E.164) or sip: URIs")
        retry = RetryPolicy(retry_on=frozenset(body.get("retry_on", ("busy", "no-answer", "machine"))),
                            max_attempts=int(body.get("max_attempts", 3)), backoff_s=float(body.get("backoff_s", 600)),
                            max_backoff_s=max(float(body.get("backoff_s", 600)), 4 * 3600.0))
        config = CampaignConfig(from_=body.get("from"), agent=body.get("agent"),
                                window=CallingWindow.parse(str(body.get("window", "09:00-20:00"))), retry=retry,
                                max_concurrent=int(body.get("max_concurrent", 2)),
                                calls_per_minute=float(body.get("calls_per_minute", 10)),
                                ring_timeout_s=int(body.get("ring_timeout_s", 30)))
        if any(not c.target.startswith("sip") for c in contacts) and not config.from_:
            raise ValueError("'from' is missing: calling phone numbers needs a number of the Twilio account")
        return config, contacts, frozenset(normal_target(d) for d in dnc), name

    async def _named(self, request: web.Request) -> tuple[web.Response | None, Any, str, Any]:
        """The gate, then the campaign the path names (404 when there is none): refusal, store,
        name, its row."""
        refusal, store = self._gate(request)
        name = request.match_info["name"]
        if refusal is not None:
            return refusal, None, name, None
        row = await asyncio.to_thread(store.campaign_get, name)
        if row is None:
            return _error(404, f"no campaign {name[:64]!r}"), None, name, None
        return None, store, name, row

    async def status(self, request: web.Request) -> web.Response:
        refusal, store, name, row = await self._named(request)
        if refusal is not None:
            return refusal
        contacts = await asyncio.to_thread(store.campaign_contacts, name)
        outcomes = Counter(c.outcome or c.state.value for c in contacts)
        return web.json_response({"name": name, "state": row.state.value, "running_here": name in self.runners,
                                  "contacts": len(contacts), "done": sum(c.outcome is not None for c in contacts),
                                  "outcomes": dict(outcomes)})

    async def stop_one(self, request: web.Request) -> web.Response:
        refusal, store, name, _ = await self._named(request)
        if refusal is not None:
            return refusal
        await asyncio.to_thread(store.campaign_set_state, name, CampaignState.STOPPED)
        if name in self.runners:
            self.runners[name][0].stop()
        return web.json_response({"name": name, "state": "stopped"}, status=202)

    async def resume(self, request: web.Request) -> web.Response:
        refusal, store, name, row = await self._named(request)
        if refusal is not None:
            return refusal
        if name in self.runners:
            return _error(409, f"campaign {name!r} is running here already")
        agent = row.config.get("agent")
        agent_key = await self._agents(agent) if agent and self._agents is not None else None
        self._run(store, name, frozenset(), agent_key)
        return web.json_response({"name": name, "state": "running"}, status=202)

    async def results(self, request: web.Request) -> web.Response:
        refusal, store, name, _ = await self._named(request)
        if refusal is not None:
            return refusal
        rows = await asyncio.to_thread(campaign_results, self._results_store(store), name)
        if request.query.get("format", "json") == "csv":
            out = io.StringIO()
            write_csv(rows, out)
            return web.Response(text=out.getvalue(), content_type="text/csv")
        return web.json_response(rows)

    @staticmethod
    def _results_store(store: Any) -> ResultsStore:
        return store
