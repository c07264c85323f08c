"""A durable outbox of messages to deliver (post-call webhooks), kept beside the call records.

    store.outbox_add(OutboxItem.new(delivery_id, call_sid, url, body, now))  # once: same id = no-op
    for item in store.outbox_claim(now, limit=8, lease_s=60):   # due items, leased to this caller
        ...  # try to deliver it
        store.outbox_delivered(item.delivery_id, now)           # or:
        store.outbox_retry(item.delivery_id, attempts, next_at, error)

The durable call stores (``records_sqlite``, ``records_postgres``) implement :class:`Outbox` on
their own database, so an event survives a restart of the process that queued it. A claim moves
the item's ``next_at`` a lease ahead in the same transaction: two senders (two servers on one
PostgreSQL, or one that restarted) never hold one item at once, and an item whose sender died
mid-attempt is due again when the lease ends. An item is delivered at most once by this outbox
(``delivered_at`` set once); a sender killed after the receiver answered and before it wrote
``delivered_at`` sends it again, with the same delivery id, for the receiver to drop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

__all__ = ["OUTBOX_COLUMNS", "Outbox", "OutboxItem", "OutboxItems"]

OUTBOX_COLUMNS = ("delivery_id", "call_sid", "url", "body", "created_at", "attempts", "next_at")


@dataclass(frozen=True, slots=True)
class OutboxItem:
    delivery_id: str
    call_sid: str
    url: str
    body: bytes
    created_at: float
    attempts: int = 0
    next_at: float = 0.0

    def row(self) -> tuple:
        return (self.delivery_id, self.call_sid, self.url, self.body, self.created_at, self.attempts,
                self.next_at or self.created_at)

    @classmethod
    def from_row(cls, row: tuple) -> OutboxItem:
        delivery_id, call_sid, url, body, created_at, attempts, next_at = row
        return cls(delivery_id, call_sid, url, bytes(body), created_at, attempts, next_at)


OutboxItems = list[OutboxItem]   # named here: inside a store class, ``list`` is its method


class Outbox(Protocol):
    def outbox_add(self, item: OutboxItem) -> bool:
        """Queue ``item`` (due at its ``next_at``); False when its delivery id is queued already."""

    def outbox_claim(self, now: float, *, limit: int, lease_s: float) -> OutboxItems:
        """Up to ``limit`` undelivered items due by ``now``, oldest first, each leased for ``lease_s``."""

    def outbox_delivered(self, delivery_id: str, at: float) -> None:
        """The receiver took it: never sent again."""

    def outbox_retry(self, delivery_id: str, attempts: int, next_at: float, error: str) -> None:
        """An attempt failed: try again at ``next_at``; ``attempts`` made so far."""

    def outbox_give_up(self, delivery_id: str, at: float, error: str) -> None:
        """Too old to send: kept for the record, never sent again."""

    def outbox_next_due(self) -> float | None:
        """When the next undelivered item is due (None: nothing waits)."""

    def outbox_status(self, delivery_id: str) -> dict | None:
        """``{attempts, next_at, delivered_at, failed_at, last_error}``, or None for no such item."""
