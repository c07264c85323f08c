"""Post-call webhooks through a receiver outage and server restarts: does every call's event arrive,
verified, once, and how long after the receiver is back?

    .venv/bin/python benchmarks/bench_webhooks.py [--calls 20] [--concurrent 4] [--outage-s 60]
        [--refuse-503-s 20] [--restart-calls 4] [--slow-answer-s 5] [--deadline-s 150]

A real ``parley serve`` on loopback (the echo agent, pocketsphinx, espeak-ng, webrtcvad: the
cheapest engines that still make real calls) sends its post-call webhooks, with the defaults
``parley serve`` has (no flag sets the backoff), to an HTTP receiver run here. The receiver checks
every request's signature with ``telephony.webhooks.verify`` (what docs/webhooks.md's snippet
does), keeps each event once per delivery id, and answers 204. Three parts, one after another:

- **outage**: the receiver is down for ``--outage-s`` from the first call: its port closed
  (connection refused), then answering 503 for the last ``--refuse-503-s`` of it, then up. Meanwhile
  ``--calls`` Twilio calls (``--concurrent`` at a time; the scripted caller says one sentence, hears
  the echo, hangs up). Then wait, up to ``--deadline-s`` after the receiver is back, for every
  event. Reported: calls placed and ended inside the outage, events received, unique delivery ids,
  duplicates, every signature verified, lost; the delay from the receiver's return to each event
  (calls that ended inside the outage) and from each call's end, p50/p95/p99; attempts per event
  (the outbox's count); ``drain_s``, the receiver's return to the last event.
- **restart_sigterm** and **restart_sigkill**: the receiver refuses while ``--restart-calls``
  calls end (their events wait in the outbox), then comes back slow (it stores the event, then
  answers 204 after ``--slow-answer-s``); at its first request the server gets SIGTERM (a deploy)
  or SIGKILL (a crash) with attempts in flight. A new server on the same database then sends what
  was pending. Reported: events pending and attempts in flight at the signal, how many of those
  the old server saw answered before it exited, events received, duplicates (``explained``: an
  attempt in flight at the signal whose 204 the old server never noted, the at-least-once case
  docs/webhooks.md describes; any other is ``unexplained``), lost, and the new server's start to
  the last event.

The sender's settings in force are printed (backoff base, cap, jitter, attempt timeout, lease).
The default run takes about 3 minutes. One JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import sqlite3
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from aiohttp import web

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from common import git_sha, percentiles  # noqa: E402

from benchmarks.serve_process import ServeProcess, free_port  # noqa: E402
from harness.callers.twilio import CallerConfig, CallerUtterance, TwilioCaller  # noqa: E402
from harness.errors import CallerError  # noqa: E402
from telephony.webhooks import WebhookConfig, delivery_id, verify  # noqa: E402
from telephony.webhooks.sender import LEASE_MARGIN_S  # noqa: E402
from telephony.webhooks.signing import DELIVERY_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER  # noqa: E402

TOKEN = "bench-webhooks-" + "0" * 17
SECRET = "bench-webhooks-secret-0123456789abcdef"
PHRASES = ("hello how are you", "i would like to check my order", "can you help me please",
           "what are your opening hours")
Mode = Literal["closed", "503", "ok", "slow"]


# -- the receiver ---------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Stored:
    delivery_id: str
    call_sid: str
    ended_at: float      # the event's own field (the server's clock: this machine's)
    at: float            # when the receiver stored it


class Receiver:
    """The customer's endpoint on 127.0.0.1:``port``: ``closed`` (nothing listens: refused),
    ``503``, ``ok`` (store, answer 204) or ``slow`` (store, answer 204 ``answer_delay_s`` later)."""

    def __init__(self, port: int, answer_delay_s: float) -> None:
        self.port, self.answer_delay_s = port, answer_delay_s
        self.mode: Mode = "closed"
        self.stored: list[Stored] = []
        self.answered: set[str] = set()    # delivery ids answered 204 (the handler returned)
        self.bad_signatures = 0
        self.answered_503 = 0
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/parley/calls"

    def ids(self) -> Counter[str]:
        return Counter(s.delivery_id for s in self.stored)

    async def set_mode(self, mode: Mode) -> None:
        if mode == "closed" and self._runner is not None:
            await self._runner.cleanup()        # stops listening and drops kept-alive connections
            self._runner = None
        elif mode != "closed" and self._runner is None:
            app = web.Application()
            app.router.add_post("/parley/calls", self._handle)
            self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
            await self._runner.setup()
            await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
        self.mode = mode

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        headers = request.headers
        did = headers.get(DELIVERY_HEADER, "")
        ok = verify(SECRET, headers.get(TIMESTAMP_HEADER, ""), headers.get(SIGNATURE_HEADER, ""), body,
                    now=time.time())
        event = json.loads(body) if ok else {}
        if not ok or event.get("delivery_id") != did or event.get("type") != headers.get("X-Parley-Event"):
            self.bad_signatures += 1
            return web.Response(status=401)
        if self.mode in ("503", "closed"):
            self.answered_503 += 1
            return web.Response(status=503)
        self.stored.append(Stored(did, event["call_sid"], float(event["ended_at"]), time.time()))
        if self.mode == "slow":
            await asyncio.sleep(self.answer_delay_s)
        self.answered.add(did)
        return web.Response(status=204)

    async def close(self) -> None:
        await self.set_mode("closed")


# -- the server, the calls, the outbox ------------------------------------------------------------

def start_server(args: argparse.Namespace, tmp: Path, db: Path, receiver: Receiver, n: int) -> ServeProcess:
    port = free_port()
    return ServeProcess(f"parley-{n}", [
        "-m", "deploy.cli", "serve", "--agent", "echo", "--stt", args.stt, "--tts", args.tts, "--vad", "webrtc",
        "--turn", "silence", "--port", str(port), "--db", str(db), "--max-calls", str(args.concurrent + 2),
        "--webhook-url", receiver.url], port=port, log_path=tmp / f"parley-{n}.log",
        env={"TWILIO_AUTH_TOKEN": TOKEN, "PARLEY_WEBHOOK_SECRET": SECRET})


@dataclass(frozen=True, slots=True)
class Placed:
    call_sid: str
    ok: bool              # the call ran and the server's record says it ended
    ended_at: float       # when the caller was done (this machine's clock)


async def place_calls(port: int, n: int, concurrent: int, first: int) -> list[Placed]:
    gate = asyncio.Semaphore(concurrent)

    async def one(k: int) -> Placed:
        async with gate:
            caller = TwilioCaller(CallerConfig(
                url=f"ws://127.0.0.1:{port}/twilio/stream", auth_token=TOKEN, timeout_s=60,
                utterances=(CallerUtterance(text=PHRASES[k % len(PHRASES)]),)))
            try:
                report = await caller.run()
                ok = bool(report.server_record_ended) and not report.timed_out
            except CallerError:
                ok = False
            return Placed(caller.call_sid, ok, time.time())

    return list(await asyncio.gather(*(one(first + k) for k in range(n))))


def outbox(db: Path) -> dict[str, tuple[int, float | None]]:
    """delivery id -> (attempts, delivered_at), read as an operator would (docs/webhooks.md)."""
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)) as con:
        rows = con.execute("SELECT delivery_id, attempts, delivered_at FROM webhook_outbox").fetchall()
    return {r[0]: (r[1], r[2]) for r in rows}


def drained(db: Path, receiver: Receiver, ids: set[str]) -> bool:
    """Every event stored by the receiver and noted delivered in the outbox (nothing left to resend)."""
    rows = outbox(db)
    return ids <= receiver.ids().keys() and all(i in rows and rows[i][1] is not None for i in ids)


async def until(predicate, deadline: float, poll_s: float = 0.2) -> bool:
    while not predicate():
        if time.time() > deadline:
            return False
        await asyncio.sleep(poll_s)
    return True


def received(receiver: Receiver, ids: set[str]) -> dict:
    counts = {k: v for k, v in receiver.ids().items() if k in ids}
    return {"events_received": sum(counts.values()), "unique_delivery_ids": len(counts),
            "duplicates": sum(counts.values()) - len(counts), "lost": len(ids - counts.keys())}


def first_arrivals(receiver: Receiver, ids: set[str]) -> dict[str, Stored]:
    first: dict[str, Stored] = {}
    for s in receiver.stored:
        if s.delivery_id in ids and s.delivery_id not in first:
            first[s.delivery_id] = s
    return first


# -- the three parts -------------------------------------------------------------------------------

async def outage(args, server: ServeProcess, receiver: Receiver, db: Path) -> dict:
    await receiver.set_mode("closed")
    bad_before = receiver.bad_signatures
    down_at = time.time()
    up_at = down_at + args.outage_s

    async def schedule() -> None:
        await asyncio.sleep(max(0.0, up_at - args.refuse_503_s - time.time()))
        await receiver.set_mode("503")
        await asyncio.sleep(max(0.0, up_at - time.time()))
        await receiver.set_mode("ok")

    async with asyncio.TaskGroup() as tg:
        tg.create_task(schedule())
        calls_task = tg.create_task(place_calls(server.port, args.calls, args.concurrent, 0))
    calls = calls_task.result()
    ids = {delivery_id(c.call_sid) for c in calls}
    met = await until(lambda: drained(db, receiver, ids), up_at + args.deadline_s)
    await asyncio.sleep(1.0)                   # a late duplicate would show now
    first = first_arrivals(receiver, ids)
    rows = outbox(db)
    ended_in = [s for s in first.values() if s.ended_at < up_at]
    return {"calls_placed": len(calls), "calls_ok": sum(c.ok for c in calls),
            "calls_ended_during_outage": sum(c.ended_at < up_at for c in calls),
            "last_call_ended_s_before_up": round(up_at - max(c.ended_at for c in calls), 1),
            **received(receiver, ids), "delivered_ratio": round(len(first) / len(ids), 3),
            "all_verified": receiver.bad_signatures == bad_before, "bad_signatures": receiver.bad_signatures - bad_before,
            "answered_503": receiver.answered_503, "deadline_met": met,
            "delay_after_up_s": percentiles([s.at - up_at for s in ended_in], digits=2),
            "end_to_delivery_s": percentiles([s.at - s.ended_at for s in first.values()], digits=2),
            "attempts": {**percentiles([rows[i][0] for i in ids if i in rows], digits=1),
                         "max": max((rows[i][0] for i in ids if i in rows), default=None)},
            "drain_s": round(max(s.at for s in first.values()) - up_at, 1) if first else None}


def worker_pids(pid: int) -> list[int]:
    """The server's child processes (its engine workers), read from /proc."""
    kids: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            kids += [int(p) for p in (task / "children").read_text().split()]
    return kids


def alive(pids: list[int]) -> list[int]:
    return [p for p in pids if Path(f"/proc/{p}").exists()]


async def restart(args, sig: signal.Signals, server: ServeProcess, receiver: Receiver, db: Path, tmp: Path,
                  n: int) -> tuple[ServeProcess, dict]:
    await receiver.set_mode("closed")
    bad_before = receiver.bad_signatures
    calls = await place_calls(server.port, args.restart_calls, args.restart_calls, 100 * n)
    ids = {delivery_id(c.call_sid) for c in calls}
    written = await until(lambda: ids <= outbox(db).keys(), time.time() + 30)
    receiver.answer_delay_s = args.slow_answer_s
    await receiver.set_mode("slow")
    await until(lambda: bool(ids & receiver.ids().keys()), time.time() + 60, poll_s=0.05)
    await asyncio.sleep(0.2)                   # the sender's batch: every attempt due now is in flight
    rows = outbox(db)
    pending = {i for i in ids if i in rows and rows[i][1] is None}
    in_flight = (ids & receiver.ids().keys()) - receiver.answered    # stored, the 204 not yet sent
    workers = worker_pids(server.proc.pid)
    signalled = time.perf_counter()
    server.proc.send_signal(sig)
    try:
        await asyncio.to_thread(server.proc.wait, 60)
    except Exception:  # noqa: BLE001 - subprocess.TimeoutExpired: report it, kill it
        server.proc.kill()
    exit_s = time.perf_counter() - signalled
    await until(lambda: not alive(workers), time.time() + 5)
    workers_left = alive(workers)              # past 5 s: reported
    for p in workers_left:                     # ours: a container's stop would take them too
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, signal.SIGKILL)
    rows = outbox(db)
    noted = {i for i in in_flight if rows[i][1] is not None}     # the old server saw the 204 before it went
    await receiver.set_mode("ok")
    new = start_server(args, tmp, db, receiver, n)
    await new.wait_ready(120)
    ready_at = time.time()
    met = await until(lambda: drained(db, receiver, ids), ready_at + args.deadline_s)
    await asyncio.sleep(1.0)
    counts = receiver.ids()
    dups = {i for i in ids if counts[i] > 1}
    arrivals = [s.at for s in receiver.stored if s.delivery_id in ids and s.at > ready_at]
    return new, {"signal": sig.name, "calls_placed": len(calls), "calls_ok": sum(c.ok for c in calls),
                 "written_before_signal": written, "pending_at_signal": len(pending),
                 "in_flight_at_signal": len(in_flight), "in_flight_finished_before_exit": len(noted),
                 "delivered_before_signal": len(ids) - len(pending), "exit_s": round(exit_s, 2),
                 "workers_left_5s_after_exit": len(workers_left), **received(receiver, ids),
                 "duplicates_explained": len(dups & (in_flight - noted)),
                 "unexplained_duplicates": len(dups - (in_flight - noted)),
                 "all_verified": receiver.bad_signatures == bad_before, "deadline_met": met,
                 "restart_to_last_s": round(max(arrivals) - ready_at, 1) if arrivals else None}


async def run(args: argparse.Namespace) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="bench-webhooks-"))
    db = tmp / "calls.db"
    receiver = Receiver(free_port(), args.slow_answer_s)
    config = WebhookConfig(url=receiver.url, secret=SECRET)   # what `parley serve --webhook-url` builds
    out: dict = {"sender": {"timeout_s": config.timeout_s, "backoff_base_s": config.backoff_base_s,
                            "backoff_cap_s": config.backoff_cap_s, "jitter": config.jitter,
                            "lease_s": config.timeout_s + LEASE_MARGIN_S, "batch": config.batch}}
    server = start_server(args, tmp, db, receiver, 0)
    try:
        await server.wait_ready(120)
        out["outage"] = await outage(args, server, receiver, db)
        for n, sig in enumerate((signal.SIGTERM, signal.SIGKILL), start=1):
            server, out[f"restart_{sig.name.lower()}"] = await restart(args, sig, server, receiver, db, tmp, n)
    finally:
        server.stop()
        await receiver.close()
    if args.keep_logs:
        out["logs"] = str(tmp)
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=20, help="calls during the outage (default %(default)s)")
    ap.add_argument("--concurrent", type=int, default=4,
                    help="calls at a time (default %(default)s: 20 calls end in about 40 s)")
    ap.add_argument("--outage-s", type=float, default=60.0,
                    help="the receiver down from the first call, this long (default %(default)s)")
    ap.add_argument("--refuse-503-s", type=float, default=20.0,
                    help="the outage's last seconds answered 503 rather than refused (default %(default)s)")
    ap.add_argument("--restart-calls", type=int, default=4,
                    help="calls whose events are pending at each restart (default %(default)s)")
    ap.add_argument("--slow-answer-s", type=float, default=5.0,
                    help="at a restart, how long the receiver holds each 204 (the signal falls inside "
                    "it; default %(default)s)")
    ap.add_argument("--deadline-s", type=float, default=150.0,
                    help="give up waiting this long after the receiver is back or the server restarted "
                    "(default %(default)s; an event still missing then is reported lost)")
    ap.add_argument("--stt", default="sphinx", help="the server's recogniser (default %(default)s)")
    ap.add_argument("--tts", default="espeak", help="the server's voice (default %(default)s)")
    ap.add_argument("--keep-logs", action="store_true", help="say where the servers' logs and database are")
    args = ap.parse_args(argv)
    if not 0 <= args.refuse_503_s <= args.outage_s:
        ap.error("--refuse-503-s must be within --outage-s")
    started = time.perf_counter()
    result = asyncio.run(run(args))
    print(json.dumps({"bench": "webhooks", "git_sha": git_sha(), "config": {
        "calls": args.calls, "concurrent": args.concurrent, "outage_s": args.outage_s,
        "refuse_503_s": args.refuse_503_s, "restart_calls": args.restart_calls,
        "slow_answer_s": args.slow_answer_s, "agent": "echo", "stt": args.stt, "tts": args.tts,
        "cpus": os.cpu_count()}, **result, "wall_s": round(time.perf_counter() - started, 1)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
