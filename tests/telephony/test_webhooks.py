"""Post-call webhooks over loopback: a real aiohttp receiver, the SQLite outbox, the real sender.

The receiver's signature check is the one docs/webhooks.md tells receivers to copy, run as written."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import time
from collections import Counter
from pathlib import Path

import pytest
from aiohttp import web

from pipeline.records import CallRecord, MemoryCallStore, TurnRecord
from pipeline.records_sqlite import SQLiteCallStore
from telephony.errors import ConfigError
from telephony.webhooks import CallEndHookStore, WebhookConfig, WebhookSender, delivery_id, verify

SECRET = "whsec-0123456789abcdef0123"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "webhooks.md"


def docs_verifier():
    """``parley_signature_ok`` from docs/webhooks.md's code block, executed as a receiver would."""
    block = re.search(r"```python\n(.*?)```", DOCS.read_text(), re.S)
    assert block is not None
    namespace: dict = {}
    exec(block.group(1), namespace)  # noqa: S102 - our own document's snippet
    return namespace["parley_signature_ok"]


class Receiver:
    """An HTTP receiver on 127.0.0.1: answers ``status`` (200 unless told), keeps what it took."""

    def __init__(self, port: int = 0):
        self.port = port
        self.status = 200
        self.answer_delay_s = 0.0                      # stores the event, then answers this much later
        self.accepted: list[tuple[dict, bytes]] = []   # (headers, body) answered 2xx
        self.refused = 0                               # answered non-2xx
        self.check = docs_verifier()
        self.bad_signatures = 0
        self._runner: web.AppRunner | None = None

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        if not self.check(SECRET, request.headers, body):
            self.bad_signatures += 1
            return web.Response(status=401)
        if self.status != 200:
            self.refused += 1
            return web.Response(status=self.status)
        self.accepted.append((dict(request.headers), body))
        await asyncio.sleep(self.answer_delay_s)
        return web.Response(status=204)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/hook", self.handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port)
        await site.start()
        self.port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def delivery_ids(self) -> Counter:
        return Counter(h["X-Parley-Delivery"] for h, _ in self.accepted)


class HangingReceiver(Receiver):
    """A receiver that takes each request (``arrived``) and answers only once ``release`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.arrived, self.release = asyncio.Event(), asyncio.Event()

    async def handle(self, request: web.Request) -> web.Response:
        self.arrived.set()
        await self.release.wait()
        return web.Response(status=204)

    async def stop(self) -> None:
        self.release.set()
        await super().stop()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ended_call(sid: str, **kw) -> CallRecord:
    record = CallRecord(call_sid=sid, transport="twilio", params={"From": "+15550100", "To": "+15550199"},
                        started_at=1000.0, ended_at=1072.5, end_reason="agent ended the call", **kw)
    record.turns = [TurnRecord(turn=1, user_text="hello", agent_text="hi there, how can I help",
                               agent_text_heard="hi there", interrupted=True,
                               latency_ms={"transport_first_byte": 300.0},
                               events=[{"kind": "slot", "data": {"name": "name", "value": "Ada"}}]),
                    TurnRecord(turn=2, user_text="goodbye", agent_text="goodbye",
                               agent_text_heard="goodbye", latency_ms={"transport_first_byte": 500.0})]
    return record


def fast(url: str, **kw) -> WebhookConfig:
    return WebhookConfig(url=url, secret=SECRET, **{"timeout_s": 2.0, "backoff_base_s": 0.05, "backoff_cap_s": 0.2,
                                                    "poll_s": 0.1, **kw})


async def until(predicate, timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def test_an_ended_call_arrives_signed_with_its_transcript(tmp_path):
    receiver = Receiver()
    await receiver.start()
    store = SQLiteCallStore(tmp_path / "calls.db")
    sender = WebhookSender(fast(receiver.url), outbox=store)
    await sender.start()
    try:
        sender.call_ended(ended_call("CA1"))
        await until(lambda: receiver.accepted)
    finally:
        await sender.stop()
        await receiver.stop()
    headers, body = receiver.accepted[0]
    assert receiver.bad_signatures == 0
    assert verify(SECRET, headers["X-Parley-Timestamp"], headers["X-Parley-Signature"], body, now=time.time())
    assert headers["X-Parley-Delivery"] == delivery_id("CA1") and headers["X-Parley-Event"] == "call.ended"
    event = json.loads(body)
    assert event["call_sid"] == "CA1" and event["delivery_id"] == delivery_id("CA1")
    assert (event["from"], event["to"], event["transport"]) == ("+15550100", "+15550199", "twilio")
    assert event["duration_s"] == 72.5 and event["outcome"] == "completed"
    assert event["slots"] == {"name": "Ada"}
    assert [t["agent_heard"] for t in event["transcript"]] == ["hi there", "goodbye"]
    assert event["transcript"][0]["interrupted"] is True
    assert event["latency_ms"] == {"turns": 2, "p50": 500.0, "p95": 500.0, "max": 500.0}
    assert event["recording_url"] is None
    status = store.outbox_status(delivery_id("CA1"))
    assert status is not None and status["delivered_at"] is not None and status["attempts"] == 1
    store.close()


def test_a_tampered_body_or_a_stale_timestamp_does_not_verify():
    check = docs_verifier()
    from telephony.webhooks import signed_headers

    body = b'{"call_sid":"CA1"}'
    headers = signed_headers(SECRET, body, "d1", now=time.time())
    assert check(SECRET, headers, body)
    assert not check(SECRET, headers, body.replace(b"CA1", b"CA2"))
    assert not check("another-secret-0123456789", headers, body)
    old = signed_headers(SECRET, body, "d1", now=time.time() - 600)
    assert not check(SECRET, old, body)
    assert not verify(SECRET, old["X-Parley-Timestamp"], old["X-Parley-Signature"], body, now=time.time())
    assert not check(SECRET, {**headers, "X-Parley-Timestamp": "soon"}, body)


async def test_a_receiver_refusing_then_failing_then_up_gets_every_event_once(tmp_path):
    port = free_port()                       # nothing listens there yet: connection refused
    store = SQLiteCallStore(tmp_path / "calls.db")
    sender = WebhookSender(fast(f"http://127.0.0.1:{port}/hook"), outbox=store)
    await sender.start()
    receiver = Receiver(port)
    try:
        for n in range(5):
            sender.call_ended(ended_call(f"CA{n}"))
        await until(lambda: sender.failed_attempts >= 10)          # refused, retried, refused, ...
        receiver.status = 500
        await receiver.start()                                      # up, but failing
        await until(lambda: receiver.refused >= 10)
        assert not receiver.accepted
        receiver.status = 200                                       # and well again
        await until(lambda: len(receiver.accepted) >= 5)
        await asyncio.sleep(0.5)                                    # nothing more comes
    finally:
        await sender.stop()
        await receiver.stop()
    assert receiver.delivery_ids() == Counter({delivery_id(f"CA{n}"): 1 for n in range(5)})
    assert receiver.bad_signatures == 0
    for n in range(5):
        status = store.outbox_status(delivery_id(f"CA{n}"))
        assert status is not None and status["delivered_at"] is not None and status["attempts"] > 2, status
    assert store.outbox_next_due() is None
    store.close()


async def test_a_restarted_sender_delivers_what_was_pending(tmp_path):
    port = free_port()
    db = tmp_path / "calls.db"
    store = SQLiteCallStore(db)
    first = WebhookSender(fast(f"http://127.0.0.1:{port}/hook", backoff_base_s=0.5, backoff_cap_s=1.0), outbox=store)
    await first.start()
    for n in range(3):
        first.call_ended(ended_call(f"CA{n}"))
    await until(lambda: first.failed_attempts >= 3)                  # each tried once, refused
    first.call_ended(ended_call("CA-late"))                          # queued in the instant before the stop
    await first.stop()
    store.close()

    receiver = Receiver(port)
    await receiver.start()
    store = SQLiteCallStore(db)                                      # the server started again
    assert store.outbox_next_due() is not None
    second = WebhookSender(fast(receiver.url), outbox=store)
    await second.start()
    try:
        await until(lambda: len(receiver.accepted) >= 4)
        await asyncio.sleep(0.5)
    finally:
        await second.stop()
        await receiver.stop()
    sids = ["CA0", "CA1", "CA2", "CA-late"]
    assert receiver.delivery_ids() == Counter({delivery_id(s): 1 for s in sids})
    assert {json.loads(b)["call_sid"] for _, b in receiver.accepted} == set(sids)
    store.close()


async def test_a_stopped_sender_lets_the_attempt_in_flight_finish_and_the_next_one_does_not_resend(tmp_path):
    """Regression: ``stop`` (the server's SIGTERM) cancelled attempts in flight, so a slow receiver
    that had stored the event got it again from the restarted server, the same delivery id twice
    (benchmarks/bench_webhooks.py, its restart_sigterm part). Only a kill may do that now."""
    receiver = Receiver()
    receiver.answer_delay_s = 0.5
    await receiver.start()
    store = SQLiteCallStore(tmp_path / "calls.db")
    first = WebhookSender(fast(receiver.url), outbox=store)
    await first.start()
    try:
        first.call_ended(ended_call("CA1"))
        await until(lambda: len(receiver.accepted) == 1)              # stored; the 204 is half a second off
        started = time.monotonic()
        await first.stop()
        stop_s = time.monotonic() - started
        status = store.outbox_status(delivery_id("CA1"))
        second = WebhookSender(fast(receiver.url), outbox=store)      # the server started again
        await second.start()
        await asyncio.sleep(0.5)
        await second.stop()
    finally:
        await receiver.stop()
    assert status is not None and status["delivered_at"] is not None and status["attempts"] == 1, status
    assert receiver.delivery_ids() == Counter({delivery_id("CA1"): 1})
    assert stop_s < first.config.timeout_s                             # it waited for the answer, no more
    store.close()


async def test_an_event_is_written_to_the_outbox_while_an_attempt_hangs(tmp_path):
    """Regression: the sender wrote queued events only between its batches of attempts, so while a
    receiver held an attempt (up to the 10 s timeout) the events of calls ending meanwhile were in
    memory only, and a SIGKILL then lost them; docs/webhooks.md promises only "the instant before"."""
    receiver = HangingReceiver()
    store = SQLiteCallStore(tmp_path / "calls.db")
    await receiver.start()
    sender = WebhookSender(fast(receiver.url, timeout_s=10.0), outbox=store)
    await sender.start()
    try:
        sender.call_ended(ended_call("CA1"))
        await until(receiver.arrived.is_set)                         # the receiver holds it
        sender.call_ended(ended_call("CA2"))
        await until(lambda: store.outbox_status(delivery_id("CA2")) is not None, timeout_s=2.0)
    finally:
        receiver.release.set()
        await sender.stop()
        await receiver.stop()
    store.close()


async def test_a_receiver_that_never_answers_times_out_and_is_retried(tmp_path):
    receiver = HangingReceiver()
    store = SQLiteCallStore(tmp_path / "calls.db")
    await receiver.start()
    sender = WebhookSender(fast(receiver.url, timeout_s=0.3), outbox=store)
    await sender.start()
    try:
        sender.call_ended(ended_call("CA1"))
        await until(lambda: sender.failed_attempts >= 2, timeout_s=10)

        def recorded() -> dict | None:
            st = store.outbox_status(delivery_id("CA1"))
            return st if st is not None and st["attempts"] >= 2 else None

        # read before stopping: a stop with an attempt in flight records "sender stopped"
        await until(lambda: recorded() is not None, timeout_s=10)
        status = recorded()
    finally:
        receiver.release.set()
        await sender.stop()
        await receiver.stop()
    assert status is not None and status["attempts"] >= 2
    assert "no answer within 0.3 s" in status["last_error"]
    store.close()


def test_the_hook_store_tells_once_per_call_when_it_ends():
    told: list[str] = []
    store = CallEndHookStore(MemoryCallStore(), lambda r: told.append(r.call_sid))
    record = CallRecord(call_sid="CA1", transport="sip")
    store.open(record)
    store.update(record)
    assert told == []
    record.ended_at, record.end_reason = time.time(), "caller hung up (BYE)"
    store.update(record)
    store.update(record)
    assert told == ["CA1"] and store.get("CA1") is record


def test_the_backoff_doubles_to_its_cap_and_an_hours_outage_is_not_given_up():
    config = WebhookConfig(url="https://example.com/h", secret=SECRET)
    waits = [config.backoff_s(n) for n in range(1, 14)]
    assert waits[:4] == [1.0, 2.0, 4.0, 8.0] and waits[-1] == 300.0 and max(waits) == 300.0
    assert config.backoff_s(20, unit=0.0) == 240.0 and config.backoff_s(20, unit=0.999) < 360.0
    assert config.give_up_after_s > 3600 and sum(waits) < 3600 + 300


@pytest.mark.parametrize("url, secret, words", [
    ("crm.example.com/hook", SECRET, "http:// or https://"),
    ("ftp://crm.example.com/hook", SECRET, "http:// or https://"),
    ("https:///hook", SECRET, "with a host"),
    ("https://crm.example.com:99999/hook", SECRET, "port"),
    ("https://crm.example.com/hook", "", "--webhook-secret"),
    ("https://crm.example.com/hook", "short", "at least 16"),
])
def test_bad_webhook_settings_are_one_line(url, secret, words):
    with pytest.raises(ConfigError) as info:
        WebhookConfig(url=url, secret=secret)
    assert words in str(info.value) and "\n" not in str(info.value)


async def test_parley_serves_store_masks_the_record_and_the_webhook(tmp_path):
    """parley serve's composition (deploy.serve_cli._calls_store): what a call writes is masked in
    the database and in the webhook's body, the sensitive slot included; the live record is not."""
    from deploy.serve_cli import _calls_store
    from pipeline.redaction import Redactor

    card = "4111111111111111"
    receiver = Receiver()
    await receiver.start()
    db = SQLiteCallStore(tmp_path / "calls.db")
    sender = WebhookSender(fast(receiver.url), outbox=db)
    store = _calls_store(db, Redactor(frozenset({"member"})), sender)
    await sender.start()
    try:
        record = ended_call("CA-pii")
        record.ended_at = None
        store.open(record)
        record.turns[0].user_text = f"my card is {card} and member number 55501234"
        record.turns[0].events.append({"kind": "slot", "data": {"name": "member", "value": "55501234"}})
        record.ended_at = 1072.5
        store.update(record)
        await until(lambda: receiver.accepted)
    finally:
        await sender.stop()
        await receiver.stop()
    (_, body), = receiver.accepted
    event = json.loads(body)
    assert event["transcript"][0]["caller"] == "my card is ************1111 and member number ****1234"
    assert event["slots"] == {"name": "Ada", "member": "****1234"}
    assert card not in body.decode() and "55501234" not in body.decode()
    assert db.get("CA-pii").turns[0].user_text == event["transcript"][0]["caller"]
    assert card in record.turns[0].user_text
    db.close()
