"""Outbound campaigns' durable state, kept beside the call records (as the webhook outbox is).

    store.campaign_create(CampaignRow(...), [ContactRow(...), ...])   # False: that name exists
    store.campaign_claim(contact)          # 'dialling' committed BEFORE the dial; False: not ours
    store.campaign_save(contact)           # an attempt's outcome, the next try, the final outcome
    store.campaign_contacts("spring-renewals")                        # every contact, file order

The durable call stores (``records_sqlite``, ``records_postgres``) implement :class:`CampaignStore`
with the SQL of :class:`CampaignTables` on their own database. A claim is a compare-and-set: it
moves one contact from ``pending`` with ``attempts`` attempts made to ``dialling`` with one more,
in one committed statement, so two runners (a restarted one, or two servers on one PostgreSQL)
never both dial a contact, and a runner killed after the claim leaves the contact in
``dialling``: the runner that resumes it resolves that attempt from the call's record or the
provider, never by dialling again (``telephony.campaign.runner``).
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, Protocol

__all__ = ["CampaignRow", "CampaignState", "CampaignStore", "CampaignTables", "ContactRow", "ContactState",
           "campaign_schema"]


class CampaignState(Enum):
    RUNNING = "running"
    STOPPED = "stopped"      # stop asked: no new dials; resume sets it running again
    DONE = "done"            # every contact has its final outcome


class ContactState(Enum):
    PENDING = "pending"      # due at next_at (a first try, or a retry)
    DIALLING = "dialling"    # an attempt claimed: placed, or about to be, or its outcome not yet known
    DONE = "done"            # its final outcome is in ``outcome``


@dataclass(frozen=True)
class CampaignRow:
    campaign_id: str
    created_at: float
    config: dict[str, Any]              # the settings it runs with (telephony.campaign.CampaignConfig)
    source: str = ""                    # the contacts file it came from
    state: CampaignState = CampaignState.RUNNING


@dataclass(frozen=True)
class ContactRow:
    campaign_id: str
    key: str                            # the target, as dialled: unique in its campaign
    line: int                           # its line in the contacts file
    target: str
    timezone: str
    params: dict[str, str] = field(default_factory=dict)
    state: ContactState = ContactState.PENDING
    attempts: int = 0
    next_at: float = 0.0                # when due (PENDING); when claimed (DIALLING)
    outcome: str | None = None          # the final outcome once DONE
    call_id: str | None = None          # the current (or last) attempt's call
    history: tuple[dict[str, Any], ...] = ()   # one entry an attempt: {attempt, call_id, outcome, at, detail}

    def row(self) -> tuple:
        return (self.campaign_id, self.key, self.line, self.target, self.timezone, json.dumps(self.params),
                self.state.value, self.attempts, self.next_at, self.outcome, self.call_id,
                json.dumps(list(self.history)))

    @classmethod
    def from_row(cls, row: tuple) -> ContactRow:
        cid, key, line, target, tz, params, state, attempts, next_at, outcome, call_id, history = row
        return cls(cid, key, line, target, tz, json.loads(params), ContactState(state), attempts, next_at,
                   outcome, call_id, tuple(json.loads(history)))

    def claimed(self, call_id: str | None, at: float) -> ContactRow:
        return replace(self, state=ContactState.DIALLING, attempts=self.attempts + 1, call_id=call_id, next_at=at)


CONTACT_COLUMNS = ("campaign_id", "key", "line", "target", "timezone", "params", "state", "attempts", "next_at",
                   "outcome", "call_id", "history")


def campaign_schema(real: str) -> str:
    """The two tables, for SQLite (``real="REAL"``) or PostgreSQL (``"DOUBLE PRECISION"``)."""
    return f"""
    CREATE TABLE IF NOT EXISTS campaigns (
        campaign_id TEXT PRIMARY KEY,
        created_at  {real} NOT NULL,
        state       TEXT NOT NULL,
        config      TEXT NOT NULL,
        source      TEXT NOT NULL
    );
    CREATE TABLE IF NOT EXISTS campaign_contacts (
        campaign_id TEXT NOT NULL REFERENCES campaigns (campaign_id) ON DELETE CASCADE,
        key         TEXT NOT NULL,
        line        INTEGER NOT NULL,
        target      TEXT NOT NULL,
        timezone    TEXT NOT NULL,
        params      TEXT NOT NULL,
        state       TEXT NOT NULL,
        attempts    INTEGER NOT NULL,
        next_at     {real} NOT NULL,
        outcome     TEXT,
        call_id     TEXT,
        history     TEXT NOT NULL,
        PRIMARY KEY (campaign_id, key)
    );
    """


class CampaignStore(Protocol):
    def campaign_create(self, campaign: CampaignRow, contacts: list[ContactRow]) -> bool:
        """Write the campaign and its contacts in one transaction; False when the name exists."""

    def campaign_get(self, campaign_id: str) -> CampaignRow | None: ...

    def campaign_list(self) -> list[CampaignRow]: ...

    def campaign_set_state(self, campaign_id: str, state: CampaignState) -> None: ...

    def campaign_contacts(self, campaign_id: str) -> list[ContactRow]:
        """Every contact of the campaign, in the file's order."""

    def campaign_claim(self, contact: ContactRow, call_id: str | None, at: float) -> ContactRow | None:
        """Claim the contact's next attempt (committed before this returns): the claimed row, or
        None when it is no longer ``pending`` with ``contact.attempts`` attempts (someone else's)."""

    def campaign_save(self, contact: ContactRow) -> None:
        """Write the contact's state, attempts, next try, outcome, call and history."""


class CampaignTables:
    """:class:`CampaignStore` in portable SQL. A store mixes it in and gives ``_campaign_db``
    (the connection, locked, database faults raised as ``PipelineError``), ``_campaign_tx`` (the
    same inside one transaction) and ``_PH``, its driver's placeholder."""

    _PH = "?"

    def _campaign_db(self) -> contextlib.AbstractContextManager[Any]:
        raise NotImplementedError

    def _campaign_tx(self) -> contextlib.AbstractContextManager[Any]:
        raise NotImplementedError

    def _sql(self, text: str) -> str:
        return text.replace("?", self._PH)

    def campaign_create(self, campaign: CampaignRow, contacts: list[ContactRow]) -> bool:
        with self._campaign_tx() as db:
            cur = db.execute(self._sql("INSERT INTO campaigns (campaign_id, created_at, state, config, source) "
                                       "VALUES (?, ?, ?, ?, ?) ON CONFLICT (campaign_id) DO NOTHING"),
                             (campaign.campaign_id, campaign.created_at, campaign.state.value,
                              json.dumps(campaign.config), campaign.source))
            if cur.rowcount != 1:
                return False
            marks = ", ".join("?" * len(CONTACT_COLUMNS))
            sql = self._sql(f"INSERT INTO campaign_contacts ({', '.join(CONTACT_COLUMNS)}) VALUES ({marks})")
            for contact in contacts:
                db.execute(sql, contact.row())
        return True

    def campaign_get(self, campaign_id: str) -> CampaignRow | None:
        rows = self._campaign_rows("WHERE campaign_id = ?", (campaign_id,))
        return rows[0] if rows else None

    def campaign_list(self) -> list[CampaignRow]:
        return self._campaign_rows("", ())

    def _campaign_rows(self, where: str, args: tuple) -> list[CampaignRow]:
        with self._campaign_db() as db:
            rows = db.execute(self._sql(f"SELECT campaign_id, created_at, config, source, state FROM campaigns "
                                        f"{where} ORDER BY created_at"), args).fetchall()
        return [CampaignRow(cid, created, json.loads(config), source, CampaignState(state))
                for cid, created, config, source, state in rows]

    def campaign_set_state(self, campaign_id: str, state: CampaignState) -> None:
        with self._campaign_db() as db:
            db.execute(self._sql("UPDATE campaigns SET state = ? WHERE campaign_id = ?"), (state.value, campaign_id))

    def campaign_contacts(self, campaign_id: str) -> list[ContactRow]:
        with self._campaign_db() as db:
            rows = db.execute(self._sql(f"SELECT {', '.join(CONTACT_COLUMNS)} FROM campaign_contacts "
                                        "WHERE campaign_id = ? ORDER BY line"), (campaign_id,)).fetchall()
        return [ContactRow.from_row(tuple(r)) for r in rows]

    def campaign_claim(self, contact: ContactRow, call_id: str | None, at: float) -> ContactRow | None:
        with self._campaign_db() as db:
            cur = db.execute(self._sql(
                "UPDATE campaign_contacts SET state = ?, attempts = attempts + 1, call_id = ?, next_at = ? "
                "WHERE campaign_id = ? AND key = ? AND state = ? AND attempts = ?"),
                (ContactState.DIALLING.value, call_id, at, contact.campaign_id, contact.key,
                 ContactState.PENDING.value, contact.attempts))
            return contact.claimed(call_id, at) if cur.rowcount == 1 else None

    def campaign_save(self, contact: ContactRow) -> None:
        with self._campaign_db() as db:
            db.execute(self._sql("UPDATE campaign_contacts SET state = ?, attempts = ?, next_at = ?, outcome = ?, "
                                 "call_id = ?, history = ? WHERE campaign_id = ? AND key = ?"),
                       (contact.state.value, contact.attempts, contact.next_at, contact.outcome, contact.call_id,
                        json.dumps(list(contact.history)), contact.campaign_id, contact.key))
