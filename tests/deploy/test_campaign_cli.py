"""``parley campaign run`` as a user runs it, against the Twilio REST stand-in on loopback: 53
contacts with busy, no-answer, machine and failed calls, Twilio answering 429 (Retry-After) and
500, the runner SIGKILLed mid-campaign and run again. Every contact ends with one final outcome,
nobody is called twice for one attempt, the do-not-call list is never dialled, the caps hold."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections import Counter
from pathlib import Path

from deploy.cli import main
from harness.twilio_rest import Fault, Scenario, TwilioRestStandIn
from tests.deploy.test_dial_twilio import ACCOUNT, ROOT, TOKEN, free_port

ZONES = ("America/New_York", "Europe/London", "Asia/Tokyo")
N = 53
DNC = {5, 17, 33}
MAX_CONCURRENT = 4


def number(i: int) -> str:
    return f"+1555020{i:04d}"


def scenario_for(dials: Counter):
    """By the contact's index: 1 busy then answers, 2 never answers, 3 a machine then a person,
    4 fails (not retried); the rest answer at once. Short calls, no media."""

    def pick(form: dict[str, str]) -> Scenario:
        i = int(form["To"][-4:])
        dials[form["To"]] += 1
        first = dials[form["To"]] == 1
        quick = {"stream": False, "talk_s": 0.3, "amd_delay_s": 0.05, "ring_s": 0.05}
        if i % 10 == 1 and first:
            return Scenario(answer="busy", **quick)
        if i % 10 == 2:
            return Scenario(answer="no-answer", **quick)
        if i % 10 == 3 and first:
            return Scenario(answered_by="machine_end_beep", **quick)
        if i % 10 == 4:
            return Scenario(answer="failed", **quick)
        return Scenario(**quick)

    return pick


EXPECTED = {1: ("answered", 2), 2: ("no-answer", 3), 3: ("answered", 2), 4: ("failed", 1)}


def write_contacts(tmp_path: Path) -> tuple[Path, Path]:
    contacts = tmp_path / "contacts.csv"
    rows = ["to,timezone,first_name"] + [f"{number(i)},{ZONES[i % 3]},Name{i}" for i in range(N)]
    contacts.write_text("\n".join(rows) + "\n")
    dnc = tmp_path / "dnc.txt"
    dnc.write_text("# never call these\n" + "\n".join(number(i) for i in sorted(DNC)) + "\n")
    return contacts, dnc


async def start_run(twilio: TwilioRestStandIn, contacts: Path, dnc: Path, db: Path, port: int):
    env = os.environ | {"TWILIO_ACCOUNT_SID": ACCOUNT, "TWILIO_AUTH_TOKEN": TOKEN, "TWILIO_API_BASE": twilio.base_url}
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "deploy.cli", "campaign", "run", str(contacts), "--name", "spring",
        "--dnc", str(dnc), "--agent", "echo", "--stt", "sphinx", "--tts", "espeak", "--from", "+15550100",
        "--public-url", f"http://127.0.0.1:{port}", "--port", str(port), "--db", str(db),
        "--window", "00:00-24:00", "--max-concurrent", str(MAX_CONCURRENT), "--calls-per-minute", "600",
        "--max-attempts", "3", "--backoff", "0.5", "--ring-timeout", "10", "--max-calls", "8",
        cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)


async def test_a_campaign_killed_mid_way_resumes_without_calling_anyone_twice(tmp_path):
    contacts, dnc = write_contacts(tmp_path)
    db, port, dials = tmp_path / "calls.db", free_port(), Counter()
    async with TwilioRestStandIn(ACCOUNT, TOKEN) as twilio:
        twilio.scenario_for = scenario_for(dials)
        twilio.faults.extend([Fault(429, retry_after="1"), Fault(500)])
        first = await start_run(twilio, contacts, dnc, db, port)
        assert first.stdout is not None
        lines: list[str] = []
        async with asyncio.timeout(40):
            while len(lines) < 20:
                line = (await first.stdout.readline()).decode()
                assert line, (await first.stderr.read()).decode()[-3000:]   # type: ignore[union-attr]
                if line.startswith("["):
                    lines.append(line)
        first.send_signal(signal.SIGKILL)
        await first.wait()
        killed_with = len(twilio.calls)
        second = await start_run(twilio, contacts, dnc, db, port)
        async with asyncio.timeout(60):
            out, err = await second.communicate()
        assert second.returncode == 0, err.decode()[-3000:]
        assert killed_with < len(twilio.calls)                  # it was killed mid-way, and went on
        progress = [line for line in out.decode().splitlines() if line.startswith("[")]
        assert out.decode().splitlines()[-1].startswith("campaign spring: done, 53 contacts")

    results = tmp_path / "results.json"
    assert main(["campaign", "export", "spring", "--format", "json", "--out", str(results), "--db", str(db)]) == 0
    rows = {r["to"]: r for r in json.loads(results.read_text())}
    assert len(rows) == N and all(r["state"] == "done" and r["outcome"] for r in rows.values())
    # the do-not-call list: never dialled, recorded as such
    for i in DNC:
        assert dials[number(i)] == 0 and rows[number(i)]["outcome"] == "dnc"
    # every call Twilio placed is one attempt of the campaign's (none dialled behind its back)
    by_number: dict[str, list[str]] = {}
    for call in twilio.calls:
        by_number.setdefault(call.form["To"], []).append(call.sid)
    for to, sids in by_number.items():
        assert sorted(sids) == sorted(rows[to]["call_ids"]), to
    # nobody who answered was called again, and outcomes are what the callee did
    for i in set(range(N)) - DNC:
        row = rows[number(i)]
        if row["outcome"] == "unknown":
            continue   # a call cut off with the runner: not redialled (the rule), counted below
        outcome, calls = EXPECTED.get(i % 10, ("answered", 1))
        assert (row["outcome"], dials[number(i)]) == (outcome, calls), (i, row)
    assert sum(r["outcome"] == "unknown" for r in rows.values()) <= MAX_CONCURRENT
    assert twilio.max_in_flight <= MAX_CONCURRENT
    assert twilio.requests[:3] == [429, 500, 201]            # Twilio's refusals were retried, not failures
    # one progress line per attempt across both runs; the contact's own columns reached the call
    assert len(lines) + len(progress) >= N
    assert rows[number(7)]["params"] == {"first_name": "Name7"}
    assert any(c.form["Url"].endswith("param.first_name=Name7") for c in twilio.calls if c.form["To"] == number(7))


def test_a_bad_contacts_file_is_refused_whole_before_any_call(tmp_path, capsys):
    contacts = tmp_path / "bad.csv"
    contacts.write_text("to,timezone,first name\n+1555,America/New_York,a\n+15551234567,Mars/Olympus,b\n"
                        "+15551234568,Europe/London,c\nsip:bob@10.0.0.5,,d\n+15551234568,Asia/Tokyo,e\n")
    assert main(["campaign", "run", str(contacts), "--db", str(tmp_path / "calls.db")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"{contacts}:1: column 'first name': a parameter's name is 1-64 letters, digits, '_' or '-'",
        f"{contacts}:2: '+1555' is neither a phone number in E.164 form (+15551234567) nor a sip: URI",
        f"{contacts}:3: unknown time zone 'Mars/Olympus' (an IANA name, e.g. America/New_York)",
        f"{contacts}:5: no time zone (fill 'timezone' or give a default)",
        f"{contacts}:6: +15551234568 is a duplicate of line 4",
        "parley campaign: 5 problem(s); nobody was called",
    ]
    assert not (tmp_path / "calls.db").exists()


def test_status_and_export_of_a_campaign_that_is_not_there(tmp_path, capsys):
    assert main(["campaign", "status", "nope", "--db", str(tmp_path / "calls.db")]) == 2
    assert "no campaign 'nope'" in capsys.readouterr().err
