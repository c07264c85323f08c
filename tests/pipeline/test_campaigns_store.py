"""Campaign state in the durable call stores, SQLite and a real PostgreSQL (skipped where Debian's
postgresql-15 is not installed): written whole, read back in file order, a claim won once."""

from __future__ import annotations

import shutil
import threading
import time
from dataclasses import replace

import pytest

from pipeline.campaigns import CampaignRow, CampaignState, ContactRow, ContactState
from tests.pipeline.test_records_postgres import PG_BIN


@pytest.fixture(scope="module")
def pg_cluster():
    if not (PG_BIN / "initdb").exists() or shutil.which("runuser") is None:
        pytest.skip("PostgreSQL 15 is not installed (apt-get install postgresql-15)")
    pytest.importorskip("psycopg")
    from tests.pipeline.test_records_postgres import Cluster

    cluster = Cluster()
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(cluster.dir, ignore_errors=True)


@pytest.fixture(params=["sqlite", "postgres"])
def stores(request, tmp_path):
    """Two stores on one database (two runners, or one restarted), closed after the test."""
    if request.param == "sqlite":
        from pipeline.records_sqlite import SQLiteCallStore

        made = [SQLiteCallStore(tmp_path / "calls.db", owner=f"h:{i}:1") for i in (1, 2)]
    else:
        import psycopg

        from pipeline.records_postgres import PostgresCallStore

        cluster = request.getfixturevalue("pg_cluster")
        name = f"c{time.monotonic_ns()}"
        with psycopg.connect(cluster.url, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        made = [PostgresCallStore(cluster.url_for(name), owner=f"h:{i}:1") for i in (1, 2)]
    yield made
    for store in made:
        store.close()


def campaign(name: str = "spring") -> tuple[CampaignRow, list[ContactRow]]:
    row = CampaignRow(name, 1000.0, {"max_concurrent": 2, "window": "09:00-20:00"}, "contacts.csv")
    contacts = [ContactRow(name, f"+1555123000{i}", i + 2, f"+1555123000{i}", "UTC", {"n": str(i)})
                for i in (3, 1, 2)]
    return row, contacts


def test_a_campaign_is_written_whole_and_read_back_in_file_order(stores):
    a, b = stores
    row, contacts = campaign()
    assert a.campaign_create(row, contacts)
    assert not b.campaign_create(row, contacts[:1])          # the name is taken: nothing written
    assert b.campaign_get("spring") == row
    assert [c.line for c in b.campaign_contacts("spring")] == [3, 4, 5]    # written 5, 3, 4
    assert b.campaign_contacts("spring")[0] == contacts[1]
    assert [r.campaign_id for r in b.campaign_list()] == ["spring"]
    a.campaign_set_state("spring", CampaignState.STOPPED)
    assert b.campaign_get("spring").state is CampaignState.STOPPED
    assert b.campaign_get("autumn") is None


def test_a_claim_is_won_once_and_a_saved_outcome_reads_back(stores):
    a, b = stores
    row, contacts = campaign()
    a.campaign_create(row, contacts)
    target = contacts[0]
    won: list[ContactRow | None] = []
    threads = [threading.Thread(target=lambda s=s: won.append(s.campaign_claim(target, None, 5.0)))
               for s in (a, b, a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [w for w in won if w is not None]
    assert len(winners) == 1 and winners[0].state is ContactState.DIALLING and winners[0].attempts == 1
    [stored] = [c for c in b.campaign_contacts("spring") if c.key == target.key]
    assert (stored.state, stored.attempts, stored.next_at) == (ContactState.DIALLING, 1, 5.0)
    assert a.campaign_claim(target, None, 6.0) is None         # stale: it is dialling now
    done = replace(winners[0], state=ContactState.DONE, outcome="answered", call_id="CA1",
                   history=({"attempt": 1, "call_id": "CA1", "outcome": "answered"},))
    a.campaign_save(done)
    assert [c for c in b.campaign_contacts("spring") if c.key == target.key] == [done]


def test_a_name_taken_in_the_other_store_is_refused_by_both(stores):
    a, b = stores
    row, contacts = campaign("one")
    assert a.campaign_create(row, contacts)
    other = replace(row, config={"max_concurrent": 9})
    assert not b.campaign_create(other, contacts)
    assert a.campaign_get("one").config == row.config
