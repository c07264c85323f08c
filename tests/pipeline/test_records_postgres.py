"""Call records on a real PostgreSQL server (Debian's postgresql-15, a throw-away cluster started
here): what one server writes another reads, the writer keeps writes through a database restart,
the schema migrates once and refuses a newer one, orphans are ended, and `parley calls` reads it."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from pipeline.errors import PipelineError
from pipeline.records import CallRecord, TurnRecord

PG_BIN = Path("/usr/lib/postgresql/15/bin")
ROOT = Path(__file__).resolve().parents[2]

pytest.importorskip("psycopg")
pytestmark = pytest.mark.skipif(not (PG_BIN / "initdb").exists() or shutil.which("runuser") is None,
                                reason="PostgreSQL 15 is not installed (apt-get install postgresql-15)")


def _as_postgres(*cmd: str) -> list[str]:
    return list(cmd) if os.getuid() != 0 else ["runuser", "-u", "postgres", "--", *cmd]


class Cluster:
    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="parley-pg-"))
        if os.getuid() == 0:
            shutil.chown(self.dir, "postgres", "postgres")
        # no TCP at all: the server listens on a Unix socket in its own folder, so no port is
        # picked (and raced for); the port number only names the socket file
        self.port = 5432
        subprocess.run(_as_postgres(str(PG_BIN / "initdb"), "-D", str(self.dir / "data"), "-A", "trust",
                                    "-U", "postgres"), check=True, capture_output=True)

    @property
    def url(self) -> str:
        return self.url_for("postgres")

    def url_for(self, database: str) -> str:
        """A libpq URL for ``database`` over the cluster's Unix socket."""
        return f"postgresql://postgres@/{database}?host={self.dir}&port={self.port}"

    def start(self) -> None:
        subprocess.run(_as_postgres(str(PG_BIN / "pg_ctl"), "-D", str(self.dir / "data"), "-l",
                                    str(self.dir / "log"), "-w", "-o",
                                    f"-p {self.port} -k {self.dir} -c listen_addresses=''", "start"),
                       check=True, capture_output=True)

    def stop(self) -> None:
        subprocess.run(_as_postgres(str(PG_BIN / "pg_ctl"), "-D", str(self.dir / "data"), "-m", "fast", "-w",
                                    "stop"), capture_output=True)


@pytest.fixture(scope="module")
def cluster():
    c = Cluster()
    c.start()
    try:
        yield c
    finally:
        c.stop()
        shutil.rmtree(c.dir, ignore_errors=True)


@pytest.fixture
def db(cluster):
    """A fresh database for the test."""
    import psycopg

    name = f"t{time.monotonic_ns()}"
    with psycopg.connect(cluster.url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return cluster.url_for(name)


def _record(sid: str, turns: int = 2, **kwargs) -> CallRecord:
    record = CallRecord(call_sid=sid, transport="twilio", params={"from": "+1555"}, greeting="Hello.", **kwargs)
    for i in range(turns):
        record.turns.append(TurnRecord(turn=i + 1, user_text=f"question {i}", agent_text=f"answer {i}",
                                       latency_ms={"transport_first_byte": 300.0 + i},
                                       events=[{"kind": "slot", "data": {"name": "n", "value": i}}]))
    return record


def test_what_one_server_writes_another_reads(db):
    from pipeline.records_postgres import PostgresCallStore

    a = PostgresCallStore(db, owner="host-a:1:1")
    b = PostgresCallStore(db, owner="host-b:2:2")    # a second server: migrations ran once
    try:
        record = _record("CA1")
        a.open(record)
        record.turns.append(TurnRecord(turn=3, user_text="bye"))
        record.ended_at, record.end_reason = time.time(), "caller hung up"
        a.update(record)
        assert a.get("CA1").turns[-1].user_text == "bye"       # its own, before the writer commits
        assert a.flush()
        got = b.get("CA1")
        assert got == record
        b.open(_record("CA2", turns=0, started_at=record.started_at + 1))
        assert b.flush()
        assert [r.call_sid for r in a.list()] == ["CA1", "CA2"]
        assert [r.call_sid for r in a.list(limit=1)] == ["CA2"]
        record.turns = record.turns[:1]                          # turns removed are removed there too
        a.update(record)
        assert a.flush() and len(b.get("CA1").turns) == 1
    finally:
        a.close()
        b.close()


def test_writes_wait_out_a_database_restart_and_nothing_is_lost(cluster, db):
    from pipeline.records_postgres import PostgresCallStore

    store = PostgresCallStore(db)
    try:
        cluster.stop()
        record = _record("CA-restart")
        store.open(record)                       # does not block or raise: queued
        assert store.get("CA-restart") == record
        assert not store.flush(timeout_s=1.5)    # the database is down: not written yet
        cluster.start()
        assert store.flush(timeout_s=20)         # the writer reconnected and wrote it
    finally:
        store.close()
    reader = PostgresCallStore(db)
    try:
        assert reader.get("CA-restart") == record
    finally:
        reader.close()


def test_a_newer_schema_is_refused_and_orphans_of_a_dead_server_are_ended(db):
    import psycopg

    from pipeline.records_postgres import PostgresCallStore

    store = PostgresCallStore(db, owner=f"{socket.gethostname()}:999999:1")   # a pid that does not run
    store.open(_record("CA-orphan"))
    store.close()
    survivor = PostgresCallStore(db)
    try:
        assert survivor.close_orphans() == 1
        orphan = survivor.get("CA-orphan")
        assert orphan.ended and orphan.end_reason == "server stopped"
    finally:
        survivor.close()
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("INSERT INTO parley_schema (version) VALUES (99)")
    with pytest.raises(PipelineError, match="newer schema"):
        PostgresCallStore(db)


def test_parley_calls_reads_postgres_and_a_bad_url_is_one_line(db, monkeypatch, capsys):
    """``parley calls list`` through the command line's own ``main`` (in this process: a process
    of its own costs ~5 s of imports), its error edge included."""
    from deploy import cli
    from pipeline.records_postgres import PostgresCallStore

    store = PostgresCallStore(db)
    store.open(_record("CA-cli"))
    store.close()
    monkeypatch.setattr(cli, "configure_logging", lambda level: None)  # keep pytest's logging
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("PARLEY_DB", db)
    code = cli.main(["calls", "list"])
    out, err = capsys.readouterr()
    assert code == 0 and "CA-cli" in out, err[-2000:]
    monkeypatch.setenv("PARLEY_DB", "postgresql://nobody@127.0.0.1:1/none")
    code = cli.main(["calls", "list"])            # a traceback would raise here
    _, err = capsys.readouterr()
    assert code == 2 and "cannot open the call records" in err
    assert "Traceback" not in err and not Path("postgresql:").exists()


def test_the_webhook_outbox_leases_each_item_to_one_server_and_survives_a_restart(db):
    """Two servers on one database claim pending webhooks at once: no item goes to both; what is
    left undelivered is due again for a server started later."""
    import threading

    from pipeline.outbox import OutboxItem
    from pipeline.records_postgres import PostgresCallStore

    a = PostgresCallStore(db, owner="host-a:1:1")
    b = PostgresCallStore(db, owner="host-b:2:2")
    now = time.time()
    try:
        for n in range(40):
            assert a.outbox_add(OutboxItem(f"d{n}", f"CA{n}", "https://x/h", b'{"n": %d}' % n, now + n * 1e-3))
        assert not b.outbox_add(OutboxItem("d0", "CA0", "https://x/h", b"{}", now))   # one id: queued once
        claimed: dict[str, list[str]] = {"a": [], "b": []}

        def claim(name, store):
            while items := store.outbox_claim(now + 1, limit=3, lease_s=60):
                claimed[name] += [i.delivery_id for i in items]

        threads = [threading.Thread(target=claim, args=(n, s)) for n, s in (("a", a), ("b", b))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert sorted(claimed["a"] + claimed["b"], key=lambda d: int(d[1:])) == [f"d{n}" for n in range(40)]
        assert not set(claimed["a"]) & set(claimed["b"])
        assert a.outbox_claim(now + 30, limit=10, lease_s=60) == []          # leased: not due again yet
        a.outbox_delivered("d0", now + 2)
        a.outbox_retry("d1", 1, now + 5, "HTTP 500")
        assert a.outbox_status("d0")["delivered_at"] == now + 2
        assert a.outbox_status("d1") == {"attempts": 1, "next_at": now + 5, "delivered_at": None,
                                         "failed_at": None, "last_error": "HTTP 500"}
    finally:
        a.close()
        b.close()
    c = PostgresCallStore(db)                                                  # a server started later
    try:
        (item,) = c.outbox_claim(now + 10, limit=10, lease_s=60)               # the retry is due
        assert (item.delivery_id, item.attempts, item.body) == ("d1", 1, b'{"n": 1}')
        later = c.outbox_claim(now + 100, limit=100, lease_s=60)              # every lease ran out
        assert sorted(i.delivery_id for i in later) == sorted(f"d{n}" for n in range(1, 40))   # all but d0
    finally:
        c.close()
