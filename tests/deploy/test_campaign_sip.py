"""``parley campaign run`` with ``sip:`` contacts, as a user runs it, against real sipp callees on
loopback: one answers (and hangs up), one is busy (486), one rings until parley gives up
(CANCEL, 487). sipp fails its scenario on any message it did not expect, and its message logs say
independently of parley how many times each contact was dialled and how many calls overlapped."""

from __future__ import annotations

import asyncio
import shutil
import sys
from collections import defaultdict
from datetime import datetime
from pathlib import Path

import pytest

from telephony.sip.headers import SipUri
from telephony.sip.message import SipRequest
from tests.deploy.conftest import parley_json
from tests.deploy.test_dial_cli import ECHO, ROOT
from tests.telephony.sip.conftest import callee, sipp_messages

pytestmark = pytest.mark.skipif(shutil.which("sipp") is None, reason="sipp not installed (apt-get install sip-tester)")

MAX_CONCURRENT = 3
MAX_ATTEMPTS = 2
ANSWERS, BUSY, RINGS_OUT = ("ann1", "ann2", "ann3"), ("busy1", "busy2"), ("ring1", "ring2")


def dials_and_spans(logs: list[Path]) -> tuple[dict[str, set[str]], list[tuple[datetime, datetime]]]:
    """From sipp's logs: each callee user's Call-IDs (one a dial; retransmissions share theirs),
    and each call's span from its INVITE's arrival to the last message sipp sent on it (parley
    holds the call's slot over all of it)."""
    calls: dict[str, set[str]] = defaultdict(set)
    start: dict[str, datetime] = {}
    end: dict[str, datetime] = {}
    for log in logs:
        for m in sipp_messages(log):
            msg = m.message
            if isinstance(msg, SipRequest) and msg.method == "INVITE" and not m.sent:
                calls[SipUri.parse(msg.uri).user or ""].add(msg.call_id)
                start.setdefault(msg.call_id, m.at)
            elif m.sent:
                end[msg.call_id] = m.at
    return calls, [(start[c], end.get(c, start[c])) for c in start]


def most_at_once(spans: list[tuple[datetime, datetime]]) -> int:
    edges = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans], key=lambda x: (x[0], x[1]))
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


async def test_a_sip_campaign_gives_each_contact_one_outcome_and_dials_it_as_the_retry_policy_says(tmp_path):
    logs = {name: tmp_path / name / "messages.log" for name in ("answers", "busy", "rings")}
    for name in logs:
        (tmp_path / name).mkdir()
    async with callee("callee_answers.xml", tmp_path / "answers", calls=len(ANSWERS), timeout_s=50,
                      message_log=logs["answers"]) as answers, \
            callee("callee_busy.xml", tmp_path / "busy", calls=len(BUSY) * MAX_ATTEMPTS, timeout_s=50,
                   message_log=logs["busy"]) as busy, \
            callee("callee_rings_out.xml", tmp_path / "rings", calls=len(RINGS_OUT) * MAX_ATTEMPTS, timeout_s=50,
                   message_log=logs["rings"]) as rings:
        def uri(user: str, port: int) -> str:
            return f"sip:{user}@127.0.0.1:{port}"

        targets = {u: uri(u, answers.port) for u in ANSWERS} | {u: uri(u, busy.port) for u in BUSY} | \
            {u: uri(u, rings.port) for u in RINGS_OUT} | {"optout": uri("optout", busy.port)}
        order = ["ann1", "busy1", "ring1", "ann2", "busy2", "ring2", "optout", "ann3"]
        contacts = tmp_path / "contacts.csv"
        contacts.write_text("to,timezone,first_name\n" + "".join(f"{targets[u]},UTC,{u}\n" for u in order))
        dnc = tmp_path / "dnc.txt"
        dnc.write_text(targets["optout"] + "\n")
        db = tmp_path / "calls.db"
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "deploy.cli", "campaign", "run", str(contacts), "--name", "sipcamp",
            "--dnc", str(dnc), *ECHO, "--db", str(db), "--window", "00:00-24:00",
            "--max-concurrent", str(MAX_CONCURRENT), "--calls-per-minute", "600", "--retry-on", "busy,no-answer",
            "--max-attempts", str(MAX_ATTEMPTS), "--backoff", "0.5", "--ring-timeout", "5",
            cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        async with asyncio.timeout(60):
            out, err = await proc.communicate()
        assert proc.returncode == 0, err.decode()[-3000:]
        for peer in (answers, busy, rings):      # every call went as its scenario says, on the wire
            sipp = await peer.result()
            assert sipp.returncode == 0, sipp.stderr[-2000:]

    summary = out.decode().splitlines()[-1]
    assert summary.startswith("campaign sipcamp: done, 8 contacts: answered 3, busy 2, dnc 1, no-answer 2;"), summary
    progress = [line for line in out.decode().splitlines() if line.startswith("[")]
    assert len(progress) == len(ANSWERS) + (len(BUSY) + len(RINGS_OUT)) * MAX_ATTEMPTS + 1   # + the dnc line

    rows = {r["to"]: r for r in parley_json("campaign", "export", "sipcamp", "--format", "json", "--db", str(db))}
    assert len(rows) == len(order) and all(r["state"] == "done" for r in rows.values())

    calls, spans = dials_and_spans(list(logs.values()))
    expected = {u: ("answered", 1) for u in ANSWERS} | {u: ("busy", MAX_ATTEMPTS) for u in BUSY} | \
        {u: ("no-answer", MAX_ATTEMPTS) for u in RINGS_OUT} | {"optout": ("dnc", 0)}
    for user, (outcome, dials) in expected.items():
        row = rows[targets[user]]
        assert (row["outcome"], row["attempts"], len(calls.get(user, ()))) == (outcome, dials, dials), (user, row)
        assert sorted(row["call_ids"]) == sorted(calls.get(user, ())), user   # each dial is an attempt of its
    assert sum(len(c) for c in calls.values()) == 11
    # the cap, seen from the callees: never more than MAX_CONCURRENT calls at once, and it was reached
    assert most_at_once(spans) == MAX_CONCURRENT
    assert f"max {MAX_CONCURRENT} calls at once" in summary
