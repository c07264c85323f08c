"""A campaign's results: one row a contact, its outcome, attempts and what the calls gathered.

    rows = campaign_results(store, "spring")    # dicts, file order
    write_csv(rows, sys.stdout); write_json(rows, sys.stdout)

Each row: the contact's file ``line``, ``to``, ``timezone``, ``state`` (done, pending, dialling),
``outcome`` (the final one; empty until done), ``attempts``, ``call_ids`` (every attempt's), and from
the record of the last call that was answered: ``answered_by``, ``slots`` (what the agent
collected, ``{name: value}``), ``turns`` and ``summary`` (how it ended, in a few words). The
contact's own columns come under ``params``. CSV puts ``slots`` and ``params`` in JSON cells.
"""

from __future__ import annotations

import csv
import json
from typing import Any, TextIO

from pipeline.campaigns import CampaignStore, ContactRow
from pipeline.records import CallRecord, CallStore

__all__ = ["FIELDS", "campaign_results", "write_csv", "write_json"]

FIELDS = ("line", "to", "timezone", "state", "outcome", "attempts", "call_ids", "answered_by", "turns", "slots",
          "summary", "params")


class ResultsStore(CampaignStore, CallStore):
    pass


def _slots(record: CallRecord) -> dict[str, Any]:
    slots: dict[str, Any] = {}
    for turn in record.turns:
        for event in turn.events:
            data = event.get("data")
            if event.get("kind") == "slot" and isinstance(data, dict) and "name" in data:
                slots[str(data["name"])] = data.get("value")
    return slots


def _summary(record: CallRecord) -> str:
    said = sum(1 for t in record.turns if t.user_text)
    how = record.end_reason or ("still going" if not record.ended else "ended")
    return f"{len(record.turns)} turn(s), the callee spoke in {said}; {how}"


def _row(store: CallStore, contact: ContactRow) -> dict[str, Any]:
    call_ids = [h["call_id"] for h in contact.history if h.get("call_id")]
    answered = [h["call_id"] for h in contact.history if h.get("call_id") and h.get("outcome") in ("answered", "machine")]
    record = store.get(answered[-1]) if answered else None
    return {"line": contact.line, "to": contact.target, "timezone": contact.timezone, "state": contact.state.value,
            "outcome": contact.outcome or "", "attempts": contact.attempts, "call_ids": call_ids,
            "answered_by": (record.answered_by or record.dial.get("answered_by")) if record else None,
            "turns": len(record.turns) if record else 0, "slots": _slots(record) if record else {},
            "summary": _summary(record) if record else "", "params": dict(contact.params)}


def campaign_results(store: ResultsStore, campaign_id: str) -> list[dict[str, Any]]:
    return [_row(store, c) for c in store.campaign_contacts(campaign_id)]


def write_json(rows: list[dict[str, Any]], out: TextIO) -> None:
    json.dump(rows, out, indent=1)
    out.write("\n")


def write_csv(rows: list[dict[str, Any]], out: TextIO) -> None:
    writer = csv.DictWriter(out, fieldnames=FIELDS, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow(row | {"call_ids": " ".join(row["call_ids"]), "slots": json.dumps(row["slots"]),
                               "params": json.dumps(row["params"]), "answered_by": row["answered_by"] or ""})
