"""Which durable call store a setting names (``--db``, ``PARLEY_DB``)."""

from __future__ import annotations

import os

from pipeline.records import DurableCallStore

__all__ = ["open_call_store"]


def open_call_store(where: str | os.PathLike, *, owner: str | None = None) -> DurableCallStore:
    """The durable store ``where`` names: ``postgresql://...`` (or ``postgres://``) a PostgreSQL
    database shared by several servers (``records_postgres``), anything else a SQLite file
    (``records_sqlite``; its folder is made). Raises ``PipelineError`` in one line when it cannot."""
    text = os.fspath(where)
    if text.startswith(("postgresql://", "postgres://")):
        from pipeline.records_postgres import PostgresCallStore

        return PostgresCallStore(text, owner=owner)
    from pipeline.records_sqlite import SQLiteCallStore

    return SQLiteCallStore(text, owner=owner)
