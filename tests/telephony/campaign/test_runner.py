"""The campaign runner on a real SQLite call store with a scripted placer (the outside party):
caps, calling windows, admission refusals, retries, Twilio's refusals, and the resume rule."""

from __future__ import annotations

import asyncio
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from pipeline.campaigns import ContactState
from pipeline.records_sqlite import SQLiteCallStore
from telephony.campaign import CallingWindow, CampaignConfig, CampaignRunner, RetryPolicy, open_campaign, parse_contacts
from telephony.campaign.runner import NOT_PLACED, AttemptResult
from telephony.errors import CampaignError


class ScriptedPlacer:
    """Each dial of a target takes its next scripted outcome (default answered) after ``call_s``."""

    def __init__(self, outcomes: dict[str, list[str]] | None = None, *, refusals: int = 0, call_s: float = 0.02):
        self.outcomes = outcomes or {}
        self.refusals = refusals
        self.call_s = call_s
        self.dials: list[str] = []
        self.active = self.max_active = 0
        self.resolved: dict[str, AttemptResult | None] = {}
        self.asked: list[str] = []

    def admit(self) -> str | None:
        if self.refusals:
            self.refusals -= 1
            return "capacity"
        return None

    def call_id_for(self, target: str) -> str | None:
        return None

    async def dial(self, contact, config, call_id, on_placed) -> AttemptResult:
        self.dials.append(contact.target)
        call = f"CA{len(self.dials)}"
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        try:
            script = self.outcomes.get(contact.target, [])
            outcome = script.pop(0) if script else "answered"
            if outcome != NOT_PLACED:
                await on_placed(call)
            await asyncio.sleep(self.call_s)
            return AttemptResult(outcome, None if outcome == NOT_PLACED else call)
        finally:
            self.active -= 1

    async def resolve(self, contact, config) -> AttemptResult | None:
        self.asked.append(contact.target)
        return self.resolved.get(contact.target)


def numbers(n: int) -> list[str]:
    return [f"+1555777{i:04d}" for i in range(n)]


@pytest.fixture
def store(tmp_path):
    s = SQLiteCallStore(tmp_path / "calls.db")
    yield s
    s.close()


def make(store, targets: list[str], zones: list[str] | None = None, **config) -> str:
    zones = zones or ["UTC"] * len(targets)
    text = "to,timezone,row\n" + "".join(f"{t},{z},{i}\n" for i, (t, z) in enumerate(zip(targets, zones)))
    settings = {"window": CallingWindow.parse("00:00-24:00"),
                "retry": RetryPolicy(backoff_s=0.0, max_attempts=3)} | config
    open_campaign(store, "c", parse_contacts(text, "c.csv"), CampaignConfig(**settings))
    return "c"


async def test_every_contact_ends_once_retries_follow_the_policy_and_the_concurrency_cap_holds(store):
    targets = numbers(12)
    placer = ScriptedPlacer({targets[0]: ["busy", "answered"], targets[1]: ["no-answer"] * 3,
                             targets[2]: ["machine", "busy", "machine"], targets[3]: ["failed"]})
    runner = CampaignRunner(store, make(store, targets, max_concurrent=3, calls_per_minute=6000), placer)
    counts = await asyncio.wait_for(runner.run(), 10)
    assert counts == {"answered": 9, "no-answer": 1, "machine": 1, "failed": 1}
    assert placer.max_active == 3 and runner.max_active == 3
    assert [placer.dials.count(t) for t in targets[:5]] == [2, 3, 3, 1, 1]
    rows = {c.target: c for c in store.campaign_contacts("c")}
    assert [h["outcome"] for h in rows[targets[2]].history] == ["machine", "busy", "machine"]
    assert rows[targets[0]].call_id == rows[targets[0]].history[-1]["call_id"]
    assert store.campaign_get("c").state.value == "done"


async def test_the_calls_per_minute_cap_holds_dials_back_and_stop_leaves_the_rest_pending(store):
    placer = ScriptedPlacer()
    runner = CampaignRunner(store, make(store, numbers(5), max_concurrent=5, calls_per_minute=3), placer)
    task = asyncio.create_task(runner.run())
    await asyncio.sleep(1.0)
    runner.stop()
    await asyncio.wait_for(task, 5)
    assert len(placer.dials) == 3
    assert [c.state for c in store.campaign_contacts("c")].count(ContactState.PENDING) == 2
    assert store.campaign_get("c").state.value == "stopped"


async def test_admission_refusals_and_twilio_refusing_the_request_spend_no_attempt(store):
    target = numbers(1)
    placer = ScriptedPlacer({target[0]: [NOT_PLACED, NOT_PLACED, "answered"]}, refusals=3)
    runner = CampaignRunner(store, make(store, target, not_placed_wait_s=0.0), placer)
    assert await asyncio.wait_for(runner.run(), 10) == {"answered": 1}
    [row] = store.campaign_contacts("c")
    assert row.attempts == 1 and [h["outcome"] for h in row.history] == [NOT_PLACED, NOT_PLACED, "answered"]
    assert placer.refusals == 0


async def test_a_contact_outside_its_window_waits_while_one_inside_is_called(store):
    now = datetime(2026, 6, 1, 7, 0, tzinfo=ZoneInfo("UTC")).timestamp()   # 03:00 New York, 16:00 Tokyo
    ny, tokyo = numbers(2)
    placer = ScriptedPlacer()
    name = make(store, [ny, tokyo], ["America/New_York", "Asia/Tokyo"], window=CallingWindow.parse("09:00-20:00"))
    runner = CampaignRunner(store, name, placer, clock=lambda: now)
    task = asyncio.create_task(runner.run())
    await asyncio.sleep(0.5)
    runner.stop()
    await asyncio.wait_for(task, 5)
    assert placer.dials == [tokyo]
    assert {c.target: c.state for c in store.campaign_contacts(name)}[ny] is ContactState.PENDING


async def test_on_resume_a_dialling_contact_is_resolved_never_redialled_and_dnc_is_never_called(store):
    lost, busy, opted_out, fresh = numbers(4)
    name = make(store, [lost, busy, opted_out, fresh])
    for target in (lost, busy):                                # claimed by a runner that was killed
        [row] = [c for c in store.campaign_contacts(name) if c.target == target]
        assert store.campaign_claim(row, "CA-old", 1.0) is not None
    placer = ScriptedPlacer()
    placer.resolved = {lost: None, busy: AttemptResult("busy", "CA-old", "asked Twilio: busy")}
    runner = CampaignRunner(store, name, placer, dnc=frozenset({opted_out}))
    counts = await asyncio.wait_for(runner.run(), 10)
    rows = {c.target: c for c in store.campaign_contacts(name)}
    assert sorted(placer.asked) == sorted([lost, busy])
    assert placer.dials.count(lost) == 0 and rows[lost].outcome == "unknown" and rows[lost].attempts == 1
    assert placer.dials.count(busy) == 1 and rows[busy].attempts == 2 and rows[busy].outcome == "answered"
    assert opted_out not in placer.dials and rows[opted_out].outcome == "dnc" and rows[opted_out].attempts == 0
    assert counts == {"unknown": 1, "answered": 2, "dnc": 1}


def test_a_name_taken_by_other_contacts_is_refused_and_the_same_contacts_resume(store):
    name = make(store, numbers(2))
    config = CampaignConfig()
    same = parse_contacts("to,timezone\n" + "".join(f"{t},UTC\n" for t in numbers(2)), "again.csv")
    row, created = open_campaign(store, name, same, config)
    assert not created and row.config["max_concurrent"] == 2
    with pytest.raises(CampaignError, match="exists with other contacts"):
        open_campaign(store, name, same[:1], config)
    with pytest.raises(CampaignError, match="campaign name"):
        open_campaign(store, "no spaces", same, config)
