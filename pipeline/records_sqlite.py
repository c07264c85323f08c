"""Call records that outlive the process: a :class:`CallStore` on SQLite.

    store = SQLiteCallStore("~/.local/share/parley/calls.db")
    store.open(record); store.update(record)       # each one a committed transaction
    store.get("CA..."); store.list(limit=20)        # most recent last, like MemoryCallStore

The database runs in WAL mode and every ``open``/``update`` commits before it returns, so a
process killed mid-call leaves the turns written so far readable by the next reader. Writes are
small (one call row, its turns) and take well under a millisecond on local disk, so calling them
from the event loop is fine; one connection behind a lock makes the store thread-safe.

Each row names the process that writes it (``owner``: host, pid and the pid's start time) and
when it last did (``updated_at``). A server killed mid-call (SIGKILL, a power cut) leaves its
calls open; :meth:`SQLiteCallStore.close_orphans`, run by ``parley serve`` at start, ends those
whose owner on this host is gone: ``end_reason`` "server stopped", ``ended_at`` their last write.

Rows are written and read back by ``records_codec`` (shared with the PostgreSQL store): columns
for what is searched or sorted, JSON for the rest. The same database holds the post-call webhooks'
durable outbox (``webhook_outbox``, :class:`pipeline.outbox.Outbox`; schema 3) and the outbound
campaigns' state (``campaigns``, ``campaign_contacts``, :mod:`pipeline.campaigns`; schema 4).
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

from pipeline.campaigns import CampaignTables, campaign_schema
from pipeline.errors import PipelineError
from pipeline.outbox import OUTBOX_COLUMNS, OutboxItem, OutboxItems
from pipeline.records import CallRecord
from pipeline.records_codec import CALL_COLUMNS, ORPHAN_REASON, decode, encode, owner_alive, process_owner

__all__ = ["SQLiteCallStore"]

log = logging.getLogger(__name__)

SCHEMA_VERSION = 4
_SCHEMA = """
CREATE TABLE IF NOT EXISTS calls (
    call_sid   TEXT PRIMARY KEY,
    transport  TEXT NOT NULL,
    started_at REAL NOT NULL,
    ended_at   REAL,
    end_reason TEXT,
    data       TEXT NOT NULL,
    owner      TEXT,
    updated_at REAL
);
CREATE INDEX IF NOT EXISTS calls_started_at ON calls (started_at);
CREATE TABLE IF NOT EXISTS turns (
    call_sid TEXT NOT NULL REFERENCES calls (call_sid) ON DELETE CASCADE,
    turn     INTEGER NOT NULL,
    data     TEXT NOT NULL,
    PRIMARY KEY (call_sid, turn)
);
CREATE TABLE IF NOT EXISTS webhook_outbox (
    delivery_id  TEXT PRIMARY KEY,
    call_sid     TEXT NOT NULL,
    url          TEXT NOT NULL,
    body         BLOB NOT NULL,
    created_at   REAL NOT NULL,
    attempts     INTEGER NOT NULL DEFAULT 0,
    next_at      REAL NOT NULL,
    delivered_at REAL,
    failed_at    REAL,
    last_error   TEXT
);
CREATE INDEX IF NOT EXISTS webhook_outbox_due ON webhook_outbox (next_at)
    WHERE delivered_at IS NULL AND failed_at IS NULL;
""" + campaign_schema(real="REAL")


class SQLiteCallStore(CampaignTables):
    """A durable, thread-safe :class:`pipeline.records.CallStore`."""

    def __init__(self, path: str | os.PathLike, *, timeout_s: float = 5.0, owner: str | None = None):
        self.path = Path(path).expanduser()
        self.owner = owner or process_owner()
        self._lock = threading.Lock()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, timeout=timeout_s, isolation_level=None,
                                       check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute("PRAGMA foreign_keys=ON")
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise PipelineError(f"{self.path}: call records of a newer schema "
                                    f"({version} > {SCHEMA_VERSION})")
            self._db.executescript(_SCHEMA)
            columns = {row[1] for row in self._db.execute("PRAGMA table_info(calls)")}
            for column, kind in (("owner", "TEXT"), ("updated_at", "REAL")):  # version 1 -> 2
                if column not in columns:
                    self._db.execute(f"ALTER TABLE calls ADD COLUMN {column} {kind}")
            self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        except (sqlite3.Error, OSError) as exc:
            raise PipelineError(f"{self.path}: cannot open the call records: {exc}") from exc

    # --- CallStore ------------------------------------------------------------------------

    def open(self, record: CallRecord) -> None:
        self._write(record)

    def update(self, record: CallRecord) -> None:
        self._write(record)

    def get(self, call_sid: str) -> CallRecord | None:
        with self._lock:
            row = self._db.execute(
                f"SELECT {', '.join(CALL_COLUMNS)}, data FROM calls WHERE call_sid = ?",
                (call_sid,)).fetchone()
            if row is None:
                return None
            turns = self._db.execute(
                "SELECT data FROM turns WHERE call_sid = ? ORDER BY turn", (call_sid,)).fetchall()
        return decode(row, [t[0] for t in turns])

    def list(self, limit: int | None = None) -> list[CallRecord]:
        """Calls in the order they started; with ``limit``, only the most recent ones."""
        with self._lock:
            rows = self._db.execute(
                f"SELECT {', '.join(CALL_COLUMNS)}, data FROM calls "
                "ORDER BY started_at DESC, rowid DESC LIMIT ?",
                (-1 if limit is None else limit,)).fetchall()
            turns: dict[str, list[str]] = {}
            for sid, data in self._db.execute(
                    "SELECT call_sid, data FROM turns ORDER BY call_sid, turn"):
                turns.setdefault(sid, []).append(data)
        return [decode(row, turns.get(row[0], [])) for row in reversed(rows)]

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def close_orphans(self) -> int:
        """End the calls left open by a process of this host that is gone (killed mid-call):
        ``end_reason`` "server stopped", ``ended_at`` their last write. Returns how many."""
        with self._lock:
            rows = self._db.execute(
                "SELECT call_sid, owner, started_at, updated_at FROM calls WHERE ended_at IS NULL").fetchall()
            orphans = [(updated or started, sid) for sid, owner, started, updated in rows
                       if owner != self.owner and not owner_alive(owner)]
            if orphans:
                self._db.execute("BEGIN IMMEDIATE")
                self._db.executemany(
                    f"UPDATE calls SET ended_at = ?, end_reason = '{ORPHAN_REASON}' "
                    "WHERE call_sid = ? AND ended_at IS NULL", orphans)
                self._db.execute("COMMIT")
        for _, sid in orphans:
            log.warning("[%s] left open by a server that stopped; recorded as ended (%s)", sid, ORPHAN_REASON)
        return len(orphans)

    # --- Outbox (pipeline.outbox) -----------------------------------------------------------

    def outbox_add(self, item: OutboxItem) -> bool:
        with self._lock:
            cur = self._execute(f"INSERT INTO webhook_outbox ({', '.join(OUTBOX_COLUMNS)}) "
                                "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (delivery_id) DO NOTHING", item.row())
            return cur.rowcount == 1

    def outbox_claim(self, now: float, *, limit: int, lease_s: float) -> OutboxItems:
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")   # one claimer at a time, across processes too
                rows = self._db.execute(
                    f"SELECT {', '.join(OUTBOX_COLUMNS)} FROM webhook_outbox WHERE delivered_at IS NULL "
                    "AND failed_at IS NULL AND next_at <= ? ORDER BY next_at, created_at LIMIT ?",
                    (now, limit)).fetchall()
                self._db.executemany("UPDATE webhook_outbox SET next_at = ? WHERE delivery_id = ?",
                                     [(now + lease_s, r[0]) for r in rows])
                self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise PipelineError(f"{self.path}: cannot read the webhook outbox: {exc}") from exc
        return [OutboxItem.from_row(r) for r in rows]

    def outbox_delivered(self, delivery_id: str, at: float) -> None:
        with self._lock:
            self._execute("UPDATE webhook_outbox SET delivered_at = ?, attempts = attempts + 1, "
                          "last_error = NULL WHERE delivery_id = ?", (at, delivery_id))

    def outbox_retry(self, delivery_id: str, attempts: int, next_at: float, error: str) -> None:
        with self._lock:
            self._execute("UPDATE webhook_outbox SET attempts = ?, next_at = ?, last_error = ? "
                          "WHERE delivery_id = ? AND delivered_at IS NULL", (attempts, next_at, error, delivery_id))

    def outbox_give_up(self, delivery_id: str, at: float, error: str) -> None:
        with self._lock:
            self._execute("UPDATE webhook_outbox SET failed_at = ?, last_error = ? WHERE delivery_id = ?",
                          (at, error, delivery_id))

    def outbox_next_due(self) -> float | None:
        with self._lock:
            row = self._execute("SELECT min(next_at) FROM webhook_outbox WHERE delivered_at IS NULL "
                                "AND failed_at IS NULL").fetchone()
        return row[0] if row else None

    def outbox_status(self, delivery_id: str) -> dict | None:
        with self._lock:
            row = self._execute("SELECT attempts, next_at, delivered_at, failed_at, last_error FROM webhook_outbox "
                                "WHERE delivery_id = ?", (delivery_id,)).fetchone()
        return None if row is None else dict(zip(("attempts", "next_at", "delivered_at", "failed_at",
                                                  "last_error"), row))

    def _execute(self, sql: str, args: tuple = ()) -> sqlite3.Cursor:
        try:
            return self._db.execute(sql, args)
        except sqlite3.Error as exc:
            raise PipelineError(f"{self.path}: webhook outbox: {exc}") from exc

    # --- Campaigns (pipeline.campaigns) ---------------------------------------------------------

    @contextlib.contextmanager
    def _campaign_db(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            try:
                yield self._db
            except sqlite3.Error as exc:
                raise PipelineError(f"{self.path}: campaigns: {exc}") from exc

    @contextlib.contextmanager
    def _campaign_tx(self) -> Iterator[sqlite3.Connection]:
        with self._campaign_db() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    # --- internals ------------------------------------------------------------------------

    def _write(self, record: CallRecord) -> None:
        call = encode(record)
        turn_rows = [(record.call_sid, t.turn, text) for t, text in zip(record.turns, call.turns)]
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                self._db.execute(
                    "INSERT INTO calls (call_sid, transport, started_at, ended_at, end_reason, "
                    "data, owner, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (call_sid) "
                    "DO UPDATE SET transport = excluded.transport, started_at = excluded.started_at, "
                    "ended_at = excluded.ended_at, end_reason = excluded.end_reason, "
                    "data = excluded.data, owner = excluded.owner, updated_at = excluded.updated_at",
                    (*call.row(), self.owner, time.time()))
                self._db.execute("DELETE FROM turns WHERE call_sid = ? AND turn > ?",
                                 (record.call_sid, len(record.turns)))
                self._db.executemany(
                    "INSERT INTO turns (call_sid, turn, data) VALUES (?, ?, ?) "
                    "ON CONFLICT (call_sid, turn) DO UPDATE SET data = excluded.data",
                    turn_rows)
                self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise PipelineError(f"{self.path}: cannot write call {record.call_sid}: "
                                    f"{exc}") from exc
