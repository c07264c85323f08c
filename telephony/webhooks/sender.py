"""Post-call webhooks, delivered from the durable outbox: signed, retried with capped backoff.

    sender = WebhookSender(config, outbox=store)      # store: a DurableCallStore (SQLite, PostgreSQL)
    await sender.start()
    sender.call_ended(record)                         # from the loop: cheap, never waits
    await sender.stop()

``call_ended`` builds the event (``event.py``) and queues it; the sender's writer task writes it
to the outbox on a worker thread at once (attempts in flight never hold it back), and its delivery
task claims due items (``pipeline.outbox``: a claim leases them, so
another server on the same database, or this one restarted, does not send them at once too) and
POSTs each to the URL configured now, signed (``signing.py``), ``batch`` at a time. A 2xx marks
the item delivered; anything else (refused, reset, a timeout, 3xx, 4xx, 5xx) schedules the next
attempt after the config's capped exponential backoff. Items outlive the process: a server
restarted with a webhook URL resumes the ones pending. Every network await (the POST, the
database) runs under ``asyncio.timeout``.

An event lost: one queued by ``call_ended`` in the last moment before the process is killed
(SIGKILL), not yet written. ``stop`` writes what is queued, and lets attempts in flight finish
(each is bounded by the attempt timeout): a stopped server does not send an event the receiver
took again, only a killed one does.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from typing import Any, TypeVar

import aiohttp

from pipeline.errors import PipelineError
from pipeline.outbox import Outbox, OutboxItem
from pipeline.records import CallRecord, CallStore
from telephony.log_limit import LogLimiter
from telephony.webhooks.config import WebhookConfig
from telephony.webhooks.event import delivery_id, event_body
from telephony.webhooks.signing import signed_headers

__all__ = ["CallEndHookStore", "WebhookSender"]

log = logging.getLogger(__name__)

DB_TIMEOUT_S = 15.0
LEASE_MARGIN_S = 30.0
STOP_MARGIN_S = 2.0      # past the attempt timeout: for the outbox's note of the answer
T = TypeVar("T")


class WebhookSender:
    def __init__(self, config: WebhookConfig, outbox: Outbox, *, clock: Callable[[], float] = time.time,
                 unit: Callable[[], float] = random.random):
        self.config = config
        self._outbox = outbox
        self._clock = clock
        self._unit = unit   # [0, 1): where in the jitter each wait falls
        self._queued: list[OutboxItem] = []
        self._in_flight: dict[str, OutboxItem] = {}
        self._wake = asyncio.Event()      # the delivery task: something new may be due
        self._to_write = asyncio.Event()  # the writer task: something is queued
        self._task: asyncio.Task | None = None
        self._writer: asyncio.Task | None = None
        self._stopping = False
        self._session: aiohttp.ClientSession | None = None
        self._once = LogLimiter()
        self.delivered = 0
        self.failed_attempts = 0

    # -- the call side -------------------------------------------------------------------------

    def call_ended(self, record: CallRecord) -> None:
        now = self._clock()
        self._queued.append(OutboxItem(delivery_id(record.call_sid), record.call_sid, self.config.url,
                                       event_body(record), created_at=now, next_at=now))
        self._to_write.set()

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        if self._task is not None:
            return
        self._stopping = False
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.config.timeout_s))
        loop = asyncio.get_running_loop()
        self._writer = loop.create_task(self._write(), name="webhooks-outbox")
        self._task = loop.create_task(self._run(), name="webhooks")
        log.info("post-call webhooks to %s", self.config.url_shown)

    async def stop(self) -> None:
        """Stop sending: attempts in flight get the attempt timeout (and ``STOP_MARGIN_S``) to
        finish, so a receiver that answers meanwhile is not sent the event again; those still
        unanswered then are abandoned (due again at once for the next sender). Events queued and
        not yet written are written."""
        if self._task is not None:
            self._stopping = True
            self._wake.set()
            try:
                await asyncio.wait([self._task], timeout=self.config.timeout_s + STOP_MARGIN_S)
            finally:
                tasks = [t for t in (self._task, self._writer) if t is not None]
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                self._task = self._writer = None
        now = self._clock()
        try:
            for item in list(self._in_flight.values()):
                await self._db(self._outbox.outbox_retry, item.delivery_id, item.attempts, now, "sender stopped")
            await self._persist()
        except (PipelineError, TimeoutError) as exc:
            log.error("webhooks: %d event(s) not written to the outbox at stop: %s", len(self._queued), exc)
        self._in_flight.clear()
        if self._session is not None:
            await self._session.close()
            self._session = None

    # -- the tasks -----------------------------------------------------------------------------

    async def _write(self) -> None:
        """Queued events into the outbox as they come, then tell the delivery task."""
        while True:
            await self._to_write.wait()
            self._to_write.clear()
            try:
                await self._persist()
            except (PipelineError, TimeoutError) as exc:   # the database: try again a while later
                if self._once("db-write"):
                    log.warning("webhooks: %d event(s) cannot be written to the outbox (%s); retrying every "
                                "%.0f s", len(self._queued), exc or "timed out", self.config.poll_s)
                await asyncio.sleep(self.config.poll_s)
                self._to_write.set()
                continue
            self._wake.set()

    async def _run(self) -> None:
        while True:
            self._wake.clear()
            try:
                if self._stopping:
                    return
                items = await self._db(self._outbox.outbox_claim, self._clock(), limit=self.config.batch,
                                       lease_s=self.config.timeout_s + LEASE_MARGIN_S)
                if items:
                    await asyncio.gather(*(self._attempt(item) for item in items))
                    continue
                due = await self._db(self._outbox.outbox_next_due)
            except (PipelineError, TimeoutError) as exc:   # the database: try again a while later
                if self._once("db"):
                    log.warning("webhooks: the outbox cannot be read or written (%s); retrying every %.0f s",
                                exc or "timed out", self.config.poll_s)
                due = None
            wait = self.config.poll_s if due is None else min(self.config.poll_s, max(0.0, due - self._clock()))
            try:
                async with asyncio.timeout(wait):
                    await self._wake.wait()
            except TimeoutError:
                pass

    async def _persist(self) -> None:
        while self._queued:
            item = self._queued[0]
            if not await self._db(self._outbox.outbox_add, item):
                log.info("[%s] webhook %s queued already", item.call_sid, item.delivery_id)
            self._queued.pop(0)

    async def _attempt(self, item: OutboxItem) -> None:
        assert self._session is not None
        self._in_flight[item.delivery_id] = item
        headers = signed_headers(self.config.secret, item.body, item.delivery_id, now=self._clock())
        error: str | None = None
        try:
            async with asyncio.timeout(self.config.timeout_s):
                async with self._session.post(self.config.url, data=item.body, headers=headers,
                                              allow_redirects=False) as resp:
                    if not 200 <= resp.status < 300:
                        error = f"HTTP {resp.status}"
        except TimeoutError:
            error = f"no answer within {self.config.timeout_s:g} s"
        except (aiohttp.ClientError, OSError) as exc:
            error = f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
        attempts = item.attempts + 1
        now = self._clock()
        if error is None:
            await self._db(self._outbox.outbox_delivered, item.delivery_id, now)
            self.delivered += 1
            log.info("[%s] webhook %s delivered (attempt %d)", item.call_sid, item.delivery_id, attempts)
        elif now - item.created_at > self.config.give_up_after_s:
            await self._db(self._outbox.outbox_give_up, item.delivery_id, now, error)
            log.error("[%s] webhook %s given up after %d attempts over %.0f s: %s", item.call_sid,
                      item.delivery_id, attempts, now - item.created_at, error)
        else:
            self.failed_attempts += 1
            wait = self.config.backoff_s(attempts, self._unit())
            await self._db(self._outbox.outbox_retry, item.delivery_id, attempts, now + wait, error)
            if self._once(f"fail:{error[:40]}"):
                log.warning("webhook to %s failed (%s); retrying with backoff up to %.0f s (logged once a "
                            "minute)", self.config.url_shown, error, self.config.backoff_cap_s)
        self._in_flight.pop(item.delivery_id, None)

    async def _db(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        async with asyncio.timeout(DB_TIMEOUT_S):
            return await asyncio.to_thread(fn, *args, **kwargs)


class CallEndHookStore:
    """A :class:`CallStore` that passes every write to ``inner`` and, the first time a call's
    record is written ended, hands it to ``on_ended`` (the one place every transport's calls
    pass through). Remembers the last ``max_calls`` ended calls."""

    def __init__(self, inner: CallStore, on_ended: Callable[[CallRecord], None], max_calls: int = 10_000):
        self.inner = inner
        self._on_ended = on_ended
        self._told: dict[str, None] = {}
        self._max_calls = max_calls

    def open(self, record: CallRecord) -> None:
        self.inner.open(record)
        self._check(record)

    def update(self, record: CallRecord) -> None:
        self.inner.update(record)
        self._check(record)

    def get(self, call_sid: str) -> CallRecord | None:
        return self.inner.get(call_sid)

    def list(self, *args: Any, **kwargs: Any) -> list[CallRecord]:
        return self.inner.list(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:   # close, close_orphans, the outbox: the inner store's
        return getattr(self.inner, name)

    def _check(self, record: CallRecord) -> None:
        if record.ended_at is None or record.call_sid in self._told:
            return
        self._told[record.call_sid] = None
        while len(self._told) > self._max_calls:
            del self._told[next(iter(self._told))]
        self._on_ended(record)
