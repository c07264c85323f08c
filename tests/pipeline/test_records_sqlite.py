"""Call records in SQLite: durable across connections, across a killed writer, thread-safe."""

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from pipeline.errors import PipelineError
from pipeline.records import CallRecord, TurnRecord
from pipeline.records_sqlite import SQLiteCallStore

ROOT = Path(__file__).resolve().parents[2]


def make_record(sid: str = "CA1", started_at: float = 1000.0) -> CallRecord:
    return CallRecord(call_sid=sid, transport="twilio", started_at=started_at,
                      params={"caller": "+15550123"}, greeting="Hello.")


def test_round_trip_through_a_new_connection(tmp_path):
    db = tmp_path / "calls.db"
    store = SQLiteCallStore(db)
    record = make_record()
    store.open(record)
    t1 = record.turn(1)
    t1.user_text, t1.agent_text = "where is my order", "Order 1 2 3 has shipped."
    t1.latency_ms = {"total": 612.5, "stt": None}
    t1.tool_calls.append({"name": "lookup_order", "arguments": {"order_number": "123"},
                          "result": {"status": "shipped"}, "duration_ms": 41.0})
    t1.events.append({"kind": "slot", "data": {"name": "order_number", "value": "123"}})
    store.update(record)
    record.turn(2).user_text = "goodbye"
    record.ended_at, record.end_reason = 1030.0, "caller said goodbye"
    record.errors.append("tts hiccup")
    store.update(record)
    store.close()

    again = SQLiteCallStore(db).get("CA1")
    assert again == record
    assert again.turns[0].tool_calls[0]["result"] == {"status": "shipped"}
    assert again.ended and again.params == {"caller": "+15550123"}


def test_get_unknown_and_list_order(tmp_path):
    store = SQLiteCallStore(tmp_path / "calls.db")
    assert store.get("nope") is None and store.list() == []
    for i, sid in enumerate(["CA_b", "CA_a", "CA_c"]):
        store.open(make_record(sid, started_at=100.0 + i))
    assert [r.call_sid for r in store.list()] == ["CA_b", "CA_a", "CA_c"]
    assert [r.call_sid for r in store.list(limit=2)] == ["CA_a", "CA_c"]


def test_turns_shrink_when_the_record_does(tmp_path):
    store = SQLiteCallStore(tmp_path / "calls.db")
    record = make_record()
    record.turn(3)
    store.update(record)
    record.turns = record.turns[:1]
    store.update(record)
    assert [t.turn for t in store.get("CA1").turns] == [1]


def test_wal_mode(tmp_path):
    store = SQLiteCallStore(tmp_path / "calls.db")
    assert store._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_fields_unknown_to_this_version_are_ignored(tmp_path):
    store = SQLiteCallStore(tmp_path / "calls.db")
    store.open(make_record())
    store._db.execute("""UPDATE calls SET data = json_set(data, '$.future', 1)""")
    store._db.execute("""INSERT INTO turns VALUES ('CA1', 1, '{"turn": 1, "future": 2}')""")
    assert store.get("CA1").turns == [TurnRecord(turn=1)]


WRITER = textwrap.dedent("""
    import sys, time
    from pipeline.records import CallRecord
    from pipeline.records_sqlite import SQLiteCallStore
    store = SQLiteCallStore(sys.argv[1])
    record = CallRecord(call_sid="CAkilled", transport="twilio")
    store.open(record)
    for n in (1, 2, 3):
        t = record.turn(n)
        t.user_text, t.agent_text = f"caller {n}", f"agent {n}"
        store.update(record)
    print("written", flush=True)
    time.sleep(60)
""")


@contextlib.contextmanager
def killed_writer(db: Path):
    """A process that has written call CAkilled (three turns, not ended) to ``db``, and is
    SIGKILLed when the block ends."""
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(db)], cwd=ROOT,
                            stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert proc.stdout.readline().strip() == "written"
        yield proc
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL


def test_a_killed_writer_leaves_its_turns_readable(tmp_path):
    db = tmp_path / "calls.db"
    with killed_writer(db):
        pass
    record = SQLiteCallStore(db).get("CAkilled")
    assert record is not None and not record.ended
    assert [(t.user_text, t.agent_text) for t in record.turns] == [
        ("caller 1", "agent 1"), ("caller 2", "agent 2"), ("caller 3", "agent 3")]


def test_calls_a_killed_server_left_open_are_ended_by_the_next_one(tmp_path):
    """Regression: a call whose server was SIGKILLed stayed "in progress" forever."""
    db = tmp_path / "calls.db"
    with killed_writer(db):
        live_writer = SQLiteCallStore(db)  # this process: alive, its open call must stay open
        live_writer.open(make_record("CAlive", started_at=2000.0))
        other_host = SQLiteCallStore(db, owner="another-host:1:1")  # cannot be told from here: kept
        other_host.open(make_record("CAelsewhere", started_at=2001.0))
        before = SQLiteCallStore(db)
        assert before.close_orphans() == 0  # the writer still runs
    store = SQLiteCallStore(db)
    assert store.close_orphans() == 1 and store.close_orphans() == 0
    killed = store.get("CAkilled")
    assert killed.ended and killed.end_reason == "server stopped" and killed.ended_at >= killed.started_at
    assert len(killed.turns) == 3  # what it said so far stays
    assert not store.get("CAlive").ended and not store.get("CAelsewhere").ended


def test_many_threads_write_safely(tmp_path):
    store = SQLiteCallStore(tmp_path / "calls.db")

    def call(i: int) -> None:
        record = make_record(f"CA{i}", started_at=float(i))
        store.open(record)
        for n in range(1, 6):
            record.turn(n).user_text = f"turn {n}"
            store.update(record)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    records = store.list()
    assert len(records) == 8 and all(len(r.turns) == 5 for r in records)


def test_unopenable_path_is_a_pipeline_error(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(PipelineError, match="cannot open the call records"):
        SQLiteCallStore(tmp_path / "file" / "calls.db")
