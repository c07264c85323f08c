"""Runs a campaign kept in the call store: dials its contacts within their windows and the caps,
retries what the policy retries, and gives every contact exactly one final outcome.

::

    runner = CampaignRunner(store, "spring-renewals", placer, dnc=load_dnc(path), on_outcome=print_line)
    counts = await runner.run()        # {"answered": 31, "busy": 4, ...} once every contact is done
    runner.stop()                      # no new dials; calls in progress run to their end

Caps: at most ``max_concurrent`` calls at once (a call holds its slot from its claim to its final
status) and at most ``calls_per_minute`` dials started in any 60 s. Before each dial the server's
admission is asked (``Placer.admit``): a refusal ("capacity", "draining") holds the dial back and
costs no attempt; so does Twilio refusing the create request with 429 or 5xx after its own retries
(outcome ``not-placed`` in the history, tried again ``not_placed_wait_s`` later).

The rule against dialling anyone twice:

1. An attempt is claimed in the store (``pending`` -> ``dialling``, attempts + 1, committed) before
   anything is sent; a claim is a compare-and-set, so only one runner wins it.
2. The call's id is written on the contact as soon as it is known: a SIP call's Call-ID before the
   INVITE (it is chosen here), a Twilio call's CallSid once Twilio answers the create request; the
   claim's time is kept with it.
3. A runner that starts (a resume after a crash, a kill, a stop) and finds a contact in
   ``dialling`` never dials it again blindly. It resolves that attempt: from the call's record
   (the outcome Twilio's status callbacks wrote there), else by asking Twilio about the CallSid
   (for up to ``resolve_timeout_s`` while the call still rings or talks). Killed between the claim
   and Twilio's answer, no CallSid was written: Twilio's list of calls to the number since the
   claim says whether the call exists (then it is followed as above) or not (``not-placed``: no
   attempt spent, dialled later). A SIP call whose record shows turns was answered. Resolved, the attempt counts as any other (a busy one may be retried:
   a new attempt, decided by the policy). Not resolved (no call id was written, the record and the
   provider know nothing final), the contact's final outcome is ``unknown``: it is not called again.
4. A do-not-call target is never claimed: its outcome is ``dnc``, checked again at every start.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, replace
from typing import Any, Protocol, TypeVar

from pipeline.campaigns import CampaignState, CampaignStore, ContactRow, ContactState
from telephony.campaign.config import CampaignConfig
from telephony.errors import CampaignError

__all__ = ["NOT_PLACED", "AttemptResult", "CampaignRunner", "Placer", "Progress"]

log = logging.getLogger(__name__)

NOT_PLACED = "not-placed"      # the call was never placed (admission, Twilio's 429/5xx): no attempt spent
T = TypeVar("T")
POLL_S = 1.0                   # how often the loop looks at the store's state (a stop from elsewhere)


@dataclass(frozen=True)
class AttemptResult:
    outcome: str                 # one of schedule.OUTCOMES, or NOT_PLACED
    call_id: str | None
    detail: str = ""
    retry_in_s: float | None = None   # NOT_PLACED: when to dial (None: the config's not_placed_wait_s)


class Placer(Protocol):
    """Places one call and follows it to its end (``telephony.campaign.placer`` for a server)."""

    def admit(self) -> str | None:
        """Why no call may start now (the server's admission), or None."""

    def call_id_for(self, target: str) -> str | None:
        """The call's id when it is chosen before the dial (a SIP Call-ID), else None."""

    async def dial(self, contact: ContactRow, config: CampaignConfig, call_id: str | None,
                   on_placed: Callable[[str], Awaitable[None]]) -> AttemptResult:
        """Dial and wait for the final status; ``on_placed(call_id)`` once the provider took it."""

    async def resolve(self, contact: ContactRow, config: CampaignConfig) -> AttemptResult | None:
        """How the attempt left in 'dialling' went, from the record or the provider; None: unknown."""


@dataclass(frozen=True)
class Progress:
    """One attempt's outcome, as the progress line says it."""

    contact: ContactRow          # after the outcome: DONE, or PENDING with its next try
    outcome: str
    done: int                    # contacts with their final outcome
    total: int

    @property
    def final(self) -> bool:
        return self.contact.state is ContactState.DONE


class CampaignRunner:
    def __init__(self, store: CampaignStore, campaign_id: str, placer: Placer, *, dnc: frozenset[str] = frozenset(),
                 on_outcome: Callable[[Progress], None] | None = None, clock: Callable[[], float] = time.time):
        self.store = store
        self.campaign_id = campaign_id
        self.placer = placer
        self.dnc = dnc
        self.on_outcome = on_outcome
        self.clock = clock
        self.contacts: dict[str, ContactRow] = {}
        self.max_active = 0                       # the most calls this runner held at once
        self._active: dict[str, asyncio.Task] = {}
        self._dials: collections.deque[float] = collections.deque()   # monotonic starts, last 60 s
        self._wake = asyncio.Event()
        self._stopping = False
        self._refused_logged = 0.0

    def stop(self) -> None:
        """Dial no one new; the calls in progress run to their end, then ``run`` returns."""
        self._stopping = True
        self._wake.set()

    async def _db(self, fn: Callable[..., T], *args: object) -> T:
        return await asyncio.to_thread(fn, *args)   # PostgreSQL may wait on the network: off the loop

    async def run(self) -> dict[str, int]:
        """Run until every contact has its final outcome or ``stop``; counts of final outcomes."""
        campaign = await self._db(self.store.campaign_get, self.campaign_id)
        if campaign is None:
            raise CampaignError(f"no campaign {self.campaign_id!r} in the call store")
        config = CampaignConfig.from_dict(campaign.config)
        await self._db(self.store.campaign_set_state, self.campaign_id, CampaignState.RUNNING)
        self.contacts = {c.key: c for c in await self._db(self.store.campaign_contacts, self.campaign_id)}
        for contact in list(self.contacts.values()):
            if contact.state is ContactState.PENDING and contact.key in self.dnc:
                await self._finish(replace(contact, state=ContactState.DONE, outcome="dnc"), "dnc")
            elif contact.state is ContactState.DIALLING:   # left by a runner that stopped or died
                self._start(contact, self._resolve(contact, config))
        try:
            while not self._stopping:
                if not self._active and not any(c.state is ContactState.PENDING for c in self.contacts.values()):
                    if all(c.state is ContactState.DONE for c in self.contacts.values()):
                        await self._db(self.store.campaign_set_state, self.campaign_id, CampaignState.DONE)
                    break   # else: the rest are another runner's, dialling
                wait_s = await self._dial_due(config)
                row = await self._db(self.store.campaign_get, self.campaign_id)
                if row is not None and row.state is CampaignState.STOPPED:
                    log.info("campaign %s: stopped from elsewhere; no new dials", self.campaign_id)
                    self._stopping = True
                    break
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait_s):
                        await self._wake.wait()
                self._wake.clear()
        finally:
            if self._active:
                await asyncio.gather(*self._active.values(), return_exceptions=True)
        if self._stopping:
            await self._db(self.store.campaign_set_state, self.campaign_id, CampaignState.STOPPED)
        return self.counts()

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = collections.Counter(c.outcome or c.state.value for c in self.contacts.values())
        return dict(out)

    async def _dial_due(self, config: CampaignConfig) -> float:
        """Start the calls that are due and allowed; how long to sleep before looking again."""
        now, mono = self.clock(), time.monotonic()
        while self._dials and mono - self._dials[0] >= 60.0:
            self._dials.popleft()
        wait_s = POLL_S
        due = sorted((c for c in self.contacts.values() if c.state is ContactState.PENDING and c.key not in self._active),
                     key=lambda c: (c.next_at, c.line))
        for contact in due:
            at = max(contact.next_at, config.window.opens_at(max(now, contact.next_at), contact.timezone))
            if at > now:
                wait_s = min(wait_s, at - now)
                continue
            if len(self._active) >= config.max_concurrent:
                break
            if len(self._dials) >= config.calls_per_minute:
                wait_s = min(wait_s, 60.0 - (mono - self._dials[0]))
                break
            refusal = self.placer.admit()
            if refusal is not None:     # the server is full or draining: a wait, not an attempt
                if mono - self._refused_logged > 60:
                    self._refused_logged = mono
                    log.info("campaign %s: the server refuses new calls (%s); waiting", self.campaign_id, refusal)
                break
            if contact.key in self.dnc:
                await self._finish(replace(contact, state=ContactState.DONE, outcome="dnc"), "dnc")
                continue
            call_id = self.placer.call_id_for(contact.target)
            claimed = await self._db(self.store.campaign_claim, contact, call_id, now)
            if claimed is None:
                log.warning("campaign %s: line %d was claimed elsewhere; left to that runner", self.campaign_id,
                            contact.line)
                self.contacts[contact.key] = replace(contact, state=ContactState.DIALLING)
                continue
            self.contacts[claimed.key] = claimed
            self._dials.append(mono)
            self._start(claimed, self._attempt(claimed, config, call_id))
        return max(0.01, wait_s)

    def _start(self, contact: ContactRow, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work, name=f"campaign-line-{contact.line}")
        self._active[contact.key] = task
        self.max_active = max(self.max_active, len(self._active))

        def done(_: asyncio.Task) -> None:
            self._active.pop(contact.key, None)
            self._wake.set()

        task.add_done_callback(done)

    async def _attempt(self, contact: ContactRow, config: CampaignConfig, call_id: str | None) -> None:
        async def on_placed(placed_id: str) -> None:
            self.contacts[contact.key] = replace(self.contacts[contact.key], call_id=placed_id)
            await self._db(self.store.campaign_save, self.contacts[contact.key])

        try:
            result = await self.placer.dial(contact, config, call_id, on_placed)
        except Exception as exc:  # noqa: BLE001 - one contact's fault must not end the campaign
            log.exception("campaign %s: line %d: the dial failed", self.campaign_id, contact.line)
            result = AttemptResult("unknown", self.contacts[contact.key].call_id, f"{type(exc).__name__}: {exc}")
        await self._record(self.contacts[contact.key], result, config)

    async def _resolve(self, contact: ContactRow, config: CampaignConfig) -> None:
        result = await self.placer.resolve(contact, config)
        if result is None:
            result = AttemptResult("unknown", contact.call_id, "left in 'dialling' by a runner that stopped; its "
                                   "outcome could not be learned, so it is not called again")
        await self._record(contact, result, config)

    async def _record(self, contact: ContactRow, result: AttemptResult, config: CampaignConfig) -> None:
        now = self.clock()
        entry = {"attempt": contact.attempts, "call_id": result.call_id, "outcome": result.outcome,
                 "at": round(now, 3), "detail": result.detail[:300]}
        row = replace(contact, call_id=result.call_id or contact.call_id, history=contact.history + (entry,))
        if result.outcome == NOT_PLACED:
            row = replace(row, state=ContactState.PENDING, attempts=contact.attempts - 1,
                          next_at=now + (config.not_placed_wait_s if result.retry_in_s is None else result.retry_in_s))
        else:
            wait_s = config.retry.next_try_s(result.outcome, contact.attempts)
            row = replace(row, state=ContactState.DONE, outcome=result.outcome) if wait_s is None else \
                replace(row, state=ContactState.PENDING, next_at=now + wait_s)
        await self._finish(row, result.outcome)

    async def _finish(self, row: ContactRow, outcome: str) -> None:
        await self._db(self.store.campaign_save, row)
        self.contacts[row.key] = row
        if self.on_outcome is not None:
            done = sum(c.state is ContactState.DONE for c in self.contacts.values())
            self.on_outcome(Progress(row, outcome, done, len(self.contacts)))
