"""Call records on PostgreSQL, shared by several call servers: a :class:`CallStore`.

    store = PostgresCallStore("postgresql://parley@db.internal/parley")   # PARLEY_DB=postgresql://...
    store.open(record); store.update(record)       # queued: the writer thread commits them
    store.get("CA..."); store.list(limit=20)       # most recent last, like the SQLite store

Writes never wait on the network in the caller's thread (the event loop): ``open``/``update``
turn the record into rows (``records_codec``) and hand them to one writer thread, which keeps only
the newest rows of each call until it has committed them (a call's record, then its turns, in one
transaction). A write that fails (the database restarting, a failover of Aurora) is kept and
retried every second; nothing is dropped while the process lives, and the log says why once a
minute. ``get`` answers from the rows not yet written first, so a server reads its own calls
current; ``list`` waits for them (``flush``).

Schema: the SQLite store's tables (``calls``, ``turns``), created by numbered migrations recorded in
``parley_schema``; a database of a newer schema is refused. Rows name the process that wrote them
(``owner``) and ``close_orphans`` ends the calls a killed server of this host left open.

The post-call webhooks' durable outbox (:class:`pipeline.outbox.Outbox`, migration 2) is a table
of the same database. Its calls are few (one event a call) and come from the webhook sender's
worker thread, never the event loop: they go to the database at once, under the connection's
lock, and a claim takes rows with ``FOR UPDATE SKIP LOCKED``, so servers sharing the database
never hold one delivery at once. The outbound campaigns' state (:mod:`pipeline.campaigns`,
migration 3) lives there too, written at once under the same lock.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time

from pipeline.campaigns import CampaignTables, campaign_schema
from pipeline.errors import PipelineError
from pipeline.outbox import OUTBOX_COLUMNS, OutboxItem, OutboxItems
from pipeline.records import CallRecord
from pipeline.records_codec import CALL_COLUMNS, ORPHAN_REASON, EncodedCall, decode, encode, owner_alive, process_owner

__all__ = ["PostgresCallStore", "is_postgres_url"]

log = logging.getLogger(__name__)

MIGRATIONS = (
    # 1: the calls and their turns
    """
    CREATE TABLE IF NOT EXISTS calls (
        call_sid   TEXT PRIMARY KEY,
        transport  TEXT NOT NULL,
        started_at DOUBLE PRECISION NOT NULL,
        ended_at   DOUBLE PRECISION,
        end_reason TEXT,
        data       TEXT NOT NULL,
        owner      TEXT,
        updated_at DOUBLE PRECISION
    );
    CREATE INDEX IF NOT EXISTS calls_started_at ON calls (started_at);
    CREATE TABLE IF NOT EXISTS turns (
        call_sid TEXT NOT NULL REFERENCES calls (call_sid) ON DELETE CASCADE,
        turn     INTEGER NOT NULL,
        data     TEXT NOT NULL,
        PRIMARY KEY (call_sid, turn)
    );
    """,
    # 2: the post-call webhooks' outbox
    """
    CREATE TABLE IF NOT EXISTS webhook_outbox (
        delivery_id  TEXT PRIMARY KEY,
        call_sid     TEXT NOT NULL,
        url          TEXT NOT NULL,
        body         BYTEA NOT NULL,
        created_at   DOUBLE PRECISION NOT NULL,
        attempts     INTEGER NOT NULL DEFAULT 0,
        next_at      DOUBLE PRECISION NOT NULL,
        delivered_at DOUBLE PRECISION,
        failed_at    DOUBLE PRECISION,
        last_error   TEXT
    );
    CREATE INDEX IF NOT EXISTS webhook_outbox_due ON webhook_outbox (next_at)
        WHERE delivered_at IS NULL AND failed_at IS NULL;
    """,
    # 3: outbound campaigns and their contacts
    campaign_schema(real="DOUBLE PRECISION"),
)
RETRY_S = 1.0
MIGRATION_LOCK = int.from_bytes(b"parley")     # pg_advisory_xact_lock key


def _why(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def is_postgres_url(where: str) -> bool:
    return where.startswith(("postgresql://", "postgres://"))


class PostgresCallStore(CampaignTables):
    """A durable, thread-safe :class:`pipeline.records.CallStore` on PostgreSQL (psycopg 3)."""

    _PH = "%s"

    def __init__(self, dsn: str, *, owner: str | None = None, connect_timeout_s: float = 5.0):
        try:
            import psycopg
        except ImportError as exc:
            raise PipelineError("PostgreSQL call records need psycopg (pip install 'psycopg[binary]')") from exc
        self._psycopg = psycopg
        self._dsn = dsn
        self._connect_timeout = max(1, int(connect_timeout_s))
        self.dsn_shown = dsn.split("@")[-1]            # no password in logs
        self.owner = owner or process_owner()
        try:
            self._db = psycopg.connect(dsn, autocommit=True, connect_timeout=self._connect_timeout)
        except psycopg.Error as exc:
            raise PipelineError(f"PostgreSQL {self.dsn_shown}: cannot open the call records: "
                                f"{_why(exc)}") from exc
        try:
            self._migrate()
        except (psycopg.Error, PipelineError) as exc:
            self._db.close()
            if isinstance(exc, PipelineError):
                raise
            raise PipelineError(f"PostgreSQL {self.dsn_shown}: cannot set up the call records: "
                                f"{_why(exc)}") from exc
        self._db_lock = threading.Lock()               # one connection, used by the writer and readers
        self._cond = threading.Condition()
        self._pending: dict[str, EncodedCall] = {}     # call_sid -> the newest rows not yet committed
        self._writing: dict[str, EncodedCall] = {}     # taken by the writer, being committed
        self._closing = False
        self._last_warning = 0.0
        self._writer = threading.Thread(target=self._write_loop, name="pg-call-records", daemon=True)
        self._writer.start()

    @contextlib.contextmanager
    def _reading(self):
        """The connection for a read, ``_db_lock`` held; a database fault is a ``PipelineError``."""
        with self._db_lock:
            try:
                yield self._live()
            except self._psycopg.Error as exc:
                raise PipelineError(f"PostgreSQL {self.dsn_shown}: cannot read the call records: "
                                    f"{_why(exc)}") from exc

    def _live(self):
        """The connection, opened again if the server dropped it (a restart, a failover).
        Called with ``_db_lock`` held."""
        if self._db.closed or self._db.broken:
            self._db = self._psycopg.connect(self._dsn, autocommit=True, connect_timeout=self._connect_timeout)
            log.info("call records: reconnected to PostgreSQL %s", self.dsn_shown)
        return self._db

    def _migrate(self) -> None:
        with self._db.transaction():
            self._db.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))   # one server migrates at a time
            self._db.execute("CREATE TABLE IF NOT EXISTS parley_schema (version INTEGER NOT NULL)")
            row = self._db.execute("SELECT max(version) FROM parley_schema").fetchone()
            version = (row[0] if row else None) or 0
            if version > len(MIGRATIONS):
                raise PipelineError(f"PostgreSQL {self.dsn_shown}: call records of a newer schema "
                                    f"({version} > {len(MIGRATIONS)})")
            for number, sql in enumerate(MIGRATIONS[version:], start=version + 1):
                self._db.execute(sql)
                self._db.execute("INSERT INTO parley_schema (version) VALUES (%s)", (number,))
                log.info("call records: PostgreSQL schema migrated to version %d", number)

    # --- CallStore ------------------------------------------------------------------------

    def open(self, record: CallRecord) -> None:
        self._queue(record)

    def update(self, record: CallRecord) -> None:
        self._queue(record)

    def get(self, call_sid: str) -> CallRecord | None:
        with self._cond:
            queued = self._pending.get(call_sid) or self._writing.get(call_sid)
        if queued is not None:
            return decode(queued.row(), queued.turns)
        with self._reading() as db:
            row = db.execute(f"SELECT {', '.join(CALL_COLUMNS)}, data FROM calls WHERE call_sid = %s",
                             (call_sid,)).fetchone()
            if row is None:
                return None
            turns = db.execute("SELECT data FROM turns WHERE call_sid = %s ORDER BY turn", (call_sid,)).fetchall()
        return decode(row, [t[0] for t in turns])

    def list(self, limit: int | None = None) -> list[CallRecord]:
        """Calls in the order they started; with ``limit``, only the most recent ones."""
        self.flush()
        with self._reading() as db:
            rows = db.execute(f"SELECT {', '.join(CALL_COLUMNS)}, data FROM calls "
                              "ORDER BY started_at DESC, call_sid DESC LIMIT %s", (limit,)).fetchall()
            sids = [r[0] for r in rows]
            turns: dict[str, list[str]] = {}
            for sid, data in db.execute("SELECT call_sid, data FROM turns WHERE call_sid = ANY(%s) "
                                              "ORDER BY call_sid, turn", (sids,)):
                turns.setdefault(sid, []).append(data)
        return [decode(row, turns.get(row[0], [])) for row in reversed(rows)]

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Wait until every queued write is committed. -> whether it was."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._pending or self._writing:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def close(self) -> None:
        if not self.flush():
            log.warning("call records: %d call(s) not written to PostgreSQL before closing", len(self._pending))
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._writer.join(5.0)
        with self._db_lock:
            self._db.close()

    def close_orphans(self) -> int:
        """End the calls left open by a process of this host that is gone (killed mid-call):
        ``end_reason`` "server stopped", ``ended_at`` their last write. Returns how many."""
        with self._reading() as db:
            rows = db.execute(
                "SELECT call_sid, owner, started_at, updated_at FROM calls WHERE ended_at IS NULL").fetchall()
            orphans = [(updated or started, sid) for sid, owner, started, updated in rows
                       if owner != self.owner and not owner_alive(owner)]
            if orphans:
                with db.transaction(), db.cursor() as cur:
                    cur.executemany(f"UPDATE calls SET ended_at = %s, end_reason = '{ORPHAN_REASON}' "
                                    "WHERE call_sid = %s AND ended_at IS NULL", orphans)
        for _, sid in orphans:
            log.warning("[%s] left open by a server that stopped; recorded as ended (%s)", sid, ORPHAN_REASON)
        return len(orphans)

    # --- Outbox (pipeline.outbox) -----------------------------------------------------------

    @contextlib.contextmanager
    def _outbox(self, what: str = "webhook outbox"):
        """The connection, locked, for the outbox's (or the campaigns') statements."""
        with self._db_lock:
            try:
                yield self._live()
            except self._psycopg.Error as exc:
                raise PipelineError(f"PostgreSQL {self.dsn_shown}: {what}: {_why(exc)}") from exc

    def outbox_add(self, item: OutboxItem) -> bool:
        with self._outbox() as db:
            cur = db.execute(f"INSERT INTO webhook_outbox ({', '.join(OUTBOX_COLUMNS)}) VALUES "
                             "(%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (delivery_id) DO NOTHING", item.row())
            return cur.rowcount == 1

    def outbox_claim(self, now: float, *, limit: int, lease_s: float) -> OutboxItems:
        with self._outbox() as db:
            rows = db.execute(
                f"UPDATE webhook_outbox SET next_at = %s WHERE delivery_id IN (SELECT delivery_id FROM webhook_outbox "
                "WHERE delivered_at IS NULL AND failed_at IS NULL AND next_at <= %s ORDER BY next_at, created_at "
                f"LIMIT %s FOR UPDATE SKIP LOCKED) RETURNING {', '.join(OUTBOX_COLUMNS)}",
                (now + lease_s, now, limit)).fetchall()
        return sorted((OutboxItem.from_row(r) for r in rows), key=lambda i: i.created_at)

    def outbox_delivered(self, delivery_id: str, at: float) -> None:
        with self._outbox() as db:
            db.execute("UPDATE webhook_outbox SET delivered_at = %s, attempts = attempts + 1, last_error = NULL "
                       "WHERE delivery_id = %s", (at, delivery_id))

    def outbox_retry(self, delivery_id: str, attempts: int, next_at: float, error: str) -> None:
        with self._outbox() as db:
            db.execute("UPDATE webhook_outbox SET attempts = %s, next_at = %s, last_error = %s "
                       "WHERE delivery_id = %s AND delivered_at IS NULL", (attempts, next_at, error, delivery_id))

    def outbox_give_up(self, delivery_id: str, at: float, error: str) -> None:
        with self._outbox() as db:
            db.execute("UPDATE webhook_outbox SET failed_at = %s, last_error = %s WHERE delivery_id = %s",
                       (at, error, delivery_id))

    def outbox_next_due(self) -> float | None:
        with self._outbox() as db:
            row = db.execute("SELECT min(next_at) FROM webhook_outbox WHERE delivered_at IS NULL "
                             "AND failed_at IS NULL").fetchone()
        return row[0] if row else None

    def outbox_status(self, delivery_id: str) -> dict | None:
        with self._outbox() as db:
            row = db.execute("SELECT attempts, next_at, delivered_at, failed_at, last_error FROM webhook_outbox "
                             "WHERE delivery_id = %s", (delivery_id,)).fetchone()
        return None if row is None else dict(zip(("attempts", "next_at", "delivered_at", "failed_at",
                                                  "last_error"), row))

    # --- Campaigns (pipeline.campaigns) ---------------------------------------------------------

    def _campaign_db(self):
        return self._outbox("campaigns")

    @contextlib.contextmanager
    def _campaign_tx(self):
        with self._campaign_db() as db, db.transaction():
            yield db

    # --- the writer thread ------------------------------------------------------------------

    def _queue(self, record: CallRecord) -> None:
        encoded = encode(record)
        with self._cond:
            if self._closing:
                raise PipelineError("the PostgreSQL call records are closed")
            self._pending[record.call_sid] = encoded
            self._cond.notify_all()

    def _write_loop(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closing:
                    self._cond.wait()
                if not self._pending and self._closing:
                    return
                self._writing, self._pending = self._pending, {}
            failed: dict[str, EncodedCall] = {}
            for sid, call in self._writing.items():
                try:
                    self._commit(call)
                except self._psycopg.Error as exc:
                    failed[sid] = call
                    if time.monotonic() - self._last_warning > 60:
                        self._last_warning = time.monotonic()
                        log.warning("call records: PostgreSQL %s refused a write (%s); kept, retrying every "
                                    "%.0f s", self.dsn_shown, _why(exc),
                                    RETRY_S)
            with self._cond:
                for sid, call in failed.items():   # a newer snapshot queued meanwhile wins
                    self._pending.setdefault(sid, call)
                self._writing = {}
                self._cond.notify_all()
                if failed and not self._closing:
                    self._cond.wait(RETRY_S)

    def _commit(self, call: EncodedCall) -> None:
        with self._db_lock:
            db = self._live()
            with db.transaction(), db.cursor() as cur:
                self._upsert(cur, call)

    def _upsert(self, cur, call: EncodedCall) -> None:
        cur.execute(
            "INSERT INTO calls (call_sid, transport, started_at, ended_at, end_reason, data, owner, updated_at) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (call_sid) DO UPDATE SET "
            "transport = excluded.transport, started_at = excluded.started_at, ended_at = excluded.ended_at, "
            "end_reason = excluded.end_reason, data = excluded.data, owner = excluded.owner, "
            "updated_at = excluded.updated_at",
            (*call.row(), self.owner, time.time()))
        cur.execute("DELETE FROM turns WHERE call_sid = %s AND turn > %s", (call.call_sid, len(call.turns)))
        cur.executemany("INSERT INTO turns (call_sid, turn, data) VALUES (%s, %s, %s) "
                        "ON CONFLICT (call_sid, turn) DO UPDATE SET data = excluded.data",
                        [(call.call_sid, i + 1, t) for i, t in enumerate(call.turns)])
