"""What the durable call stores (SQLite, PostgreSQL) share: a record as rows, rows as a record,
and which process wrote a row (so a server can end the calls a killed one left open).

Columns hold what is searched or sorted (sid, transport, times, end reason); everything else
(greeting, params, errors, stats, each turn) is JSON, so fields added to ``CallRecord`` or
``TurnRecord`` later are kept without a migration, and unknown ones are ignored when read back.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass, fields
from pathlib import Path

from pipeline.errors import PipelineError
from pipeline.records import CallRecord, TurnRecord

__all__ = ["CALL_COLUMNS", "ORPHAN_REASON", "EncodedCall", "decode", "encode", "owner_alive", "process_owner"]

ORPHAN_REASON = "server stopped"
CALL_COLUMNS = ("call_sid", "transport", "started_at", "ended_at", "end_reason")
_CALL_FIELDS = {f.name for f in fields(CallRecord)}
_TURN_FIELDS = {f.name for f in fields(TurnRecord)}


@dataclass(frozen=True)
class EncodedCall:
    """A record as the stores write it: the call's columns, its JSON, one JSON text a turn."""

    call_sid: str
    transport: str
    started_at: float
    ended_at: float | None
    end_reason: str | None
    data: str
    turns: tuple[str, ...]

    def row(self) -> tuple:
        return (self.call_sid, self.transport, self.started_at, self.ended_at, self.end_reason, self.data)


def encode(record: CallRecord) -> EncodedCall:
    call = vars(record)
    extra = {k: v for k, v in call.items() if k not in CALL_COLUMNS and k != "turns"}
    try:
        return EncodedCall(record.call_sid, record.transport, record.started_at, record.ended_at, record.end_reason,
                           json.dumps(extra, default=str),
                           tuple(json.dumps(vars(t), default=str) for t in record.turns))
    except (TypeError, ValueError) as exc:
        raise PipelineError(f"call {record.call_sid}: record is not JSON-able: {exc}") from exc


def decode(row: tuple, turns: list[str] | tuple[str, ...]) -> CallRecord:
    """``row``: (call_sid, transport, started_at, ended_at, end_reason, data)."""
    sid, transport, started_at, ended_at, end_reason, data = row
    extra = {k: v for k, v in json.loads(data).items() if k in _CALL_FIELDS}
    record = CallRecord(call_sid=sid, transport=transport, started_at=started_at,
                        ended_at=ended_at, end_reason=end_reason, **extra)
    for text in turns:
        values = {k: v for k, v in json.loads(text).items() if k in _TURN_FIELDS}
        record.turns.append(TurnRecord(**values))
    return record


def _start_ticks(pid: int) -> str:
    """The process's start time in clock ticks since boot (Linux), "" where unknown: with the
    pid it names one process, even after the pid is reused."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rpartition(")")[2].split()[19]  # field 22, counted after the command name


def process_owner(pid: int | None = None) -> str:
    pid = os.getpid() if pid is None else pid
    return f"{socket.gethostname()}:{pid}:{_start_ticks(pid)}"


def owner_alive(owner: str | None) -> bool:
    """Whether the process an ``owner`` names still runs. Another host's: assumed so (it cannot
    be told from here). No owner (rows of schema 1): gone, as its writer was an older server."""
    if not owner:
        return False
    host, _, rest = owner.partition(":")
    pid_s, _, ticks = rest.partition(":")
    if host != socket.gethostname():
        return True
    try:
        pid = int(pid_s)
        os.kill(pid, 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:  # someone else's process: it exists
        pass
    return not ticks or _start_ticks(pid) in ("", ticks)
