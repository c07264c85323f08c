"""``parley calls``: read the call records a server kept.

    parley calls list [--limit N] [--json] [--db PATH]
    parley calls show CALL_SID [--json] [--db PATH]

The database is ``--db``, else ``$PARLEY_DB``, else ``~/.local/share/parley/calls.db`` (what
:func:`default_db_path` returns; the server writes to the same place). ``list`` prints a table
of calls, newest first; ``show`` prints one call as a transcript, with tool calls and agent
events under the turn they happened in. ``--json`` prints the records as JSON instead.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from pipeline.call_stores import open_call_store
from pipeline.records import CallRecord
from pipeline.records_postgres import is_postgres_url

__all__ = ["default_db_path", "format_call", "format_table", "register_cli"]

DB_ENV = "PARLEY_DB"


def default_db_path(env: Mapping[str, str] | None = None) -> Path | str:
    """``$PARLEY_DB`` (a SQLite file, or a ``postgresql://`` URL, kept as written), else
    ``~/.local/share/parley/calls.db``."""
    env = os.environ if env is None else env
    if env.get(DB_ENV):
        return db_location(env[DB_ENV])
    return Path("~/.local/share/parley/calls.db").expanduser()


def db_location(text: str) -> Path | str:
    """A ``--db`` value: a PostgreSQL URL as it is (a Path would fold its ``//``), else a file path."""
    return text if is_postgres_url(text) else Path(text).expanduser()


def _when(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)) if ts else "-"


def _duration(record: CallRecord) -> str:
    if record.ended_at is None:
        return "live"
    seconds = max(0, round(record.ended_at - record.started_at))
    return f"{seconds // 60}:{seconds % 60:02d}"


def format_table(records: list[CallRecord]) -> str:
    """One line per call, newest first."""
    header = ("CALL", "STARTED", "LENGTH", "TURNS", "TRANSPORT", "END")
    rows = [header] + [
        (r.call_sid, _when(r.started_at), _duration(r), str(len(r.turns)), r.transport,
         r.end_reason or ("-" if r.ended else "in progress"))
        for r in sorted(records, key=lambda r: r.started_at, reverse=True)
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    return "\n".join(lines)


def _event_line(event: Mapping[str, Any]) -> str:
    kind = event.get("kind", "event")
    data = event.get("data", {k: v for k, v in event.items() if k != "kind"})
    if kind == "slot":
        return f"slot {data.get('name')} = {data.get('value')!r}"
    if kind == "transfer":
        return f"transfer ({data.get('kind')}) to {data.get('target')}"
    return f"{kind} {json.dumps(data, sort_keys=True, default=str)}"


def format_call(record: CallRecord) -> str:
    """A call as a readable transcript."""
    lines = [
        f"Call {record.call_sid} ({record.transport})",
        f"  started {_when(record.started_at)}, length {_duration(record)}, "
        f"ended: {record.end_reason or ('-' if record.ended else 'in progress')}",
    ]
    if record.params:
        lines.append("  params: " + ", ".join(f"{k}={v}" for k, v in sorted(record.params.items())))
    if record.answered_by is not None:
        left = "" if record.voicemail_left is None else \
            ", voicemail message left" if record.voicemail_left else ", no voicemail message left"
        lines.append(f"  answered by: {record.answered_by}{left}")
    if record.transfer:
        t = record.transfer
        how = f"{t.get('mode', '?')} transfer to {t.get('target', '?')}"
        if t.get("requested") and t["requested"] != t.get("mode"):
            how += f" ({t['requested']} asked for)"
        outcome = f": {t['outcome']}" if t.get("outcome") else ""
        detail = f" ({t['detail']})" if t.get("detail") else ""
        lines.append(f"  transfer: {how}{outcome}{detail}")
    if record.greeting:
        lines.append(f"  agent:  {record.greeting}")
    for turn in record.turns:
        lines.append(f"[{turn.turn}]")
        if turn.user_text:
            lines.append(f"  caller: {turn.user_text}")
        for call in getattr(turn, "tool_calls", []):
            outcome = (f"error: {call['error']}" if call.get("error") is not None
                       else json.dumps(call.get("result"), sort_keys=True, default=str))
            ms = call.get("duration_ms")
            lines.append(f"  tool:   {call.get('name')}"
                         f"({json.dumps(call.get('arguments', {}), sort_keys=True)}) -> "
                         f"{outcome}" + (f" [{ms:.0f} ms]" if isinstance(ms, (int, float)) else ""))
        for event in getattr(turn, "events", []):
            lines.append(f"  event:  {_event_line(event)}")
        if turn.agent_text:
            said = turn.agent_text
            if turn.interrupted and turn.agent_text_heard != turn.agent_text:
                said += f"  (caller heard: {turn.agent_text_heard!r})"
            lines.append(f"  agent:  {said}")
        latency = {k: v for k, v in turn.latency_ms.items() if v is not None}
        if latency:
            lines.append("  latency: " + ", ".join(f"{k} {v:.0f} ms" for k, v in latency.items()))
    for error in record.errors:
        lines.append(f"  error: {error}")
    return "\n".join(lines)


def _dict(record: CallRecord) -> dict:
    data = record.to_dict()
    data.setdefault("params", dict(record.params))
    return data


def _store(args: argparse.Namespace):
    where = db_location(args.db) if args.db else default_db_path()
    if isinstance(where, Path) and not where.exists():
        print(f"parley calls: no call records at {where} (set --db or ${DB_ENV})", file=sys.stderr)
        return None
    return open_call_store(where)


def _list(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    store = _store(args)
    if store is None:
        return 1
    try:
        records = store.list(limit=args.limit)
    finally:
        store.close()
    if args.json:
        json.dump([_dict(r) for r in reversed(records)], out, indent=2, default=str)
        out.write("\n")
    elif not records:
        out.write("no calls yet\n")
    else:
        out.write(format_table(records) + "\n")
    return 0


def _show(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    store = _store(args)
    if store is None:
        return 1
    try:
        record = store.get(args.call_sid)
    finally:
        store.close()
    if record is None:
        print(f"parley calls: no call {args.call_sid!r}", file=sys.stderr)
        return 1
    if args.json:
        json.dump(_dict(record), out, indent=2, default=str)
        out.write("\n")
    else:
        out.write(format_call(record) + "\n")
    return 0


def register_cli(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``calls list`` and ``calls show``; each sets ``func`` to an ``(args) -> exit code``."""
    p = subparsers.add_parser("calls", help="list past calls and show their transcripts",
                              description="Read the call records the server kept (SQLite).")
    sub = p.add_subparsers(dest="calls_command", required=True, metavar="ACTION")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--db", default=None, metavar="PATH",
                        help=f"the call records (default: ${DB_ENV}, else "
                             "~/.local/share/parley/calls.db)")
    common.add_argument("--json", action="store_true", help="print JSON instead of text")
    lp = sub.add_parser("list", parents=[common], help="one line per call, newest first")
    lp.add_argument("--limit", type=int, default=50, metavar="N",
                    help="show the N most recent calls (default: 50)")
    lp.set_defaults(func=_list)
    sp = sub.add_parser("show", parents=[common], help="one call's transcript")
    sp.add_argument("call_sid", metavar="CALL_SID")
    sp.set_defaults(func=_show)
    return p
