"""The call tier on more than one machine's worth of processes: two `parley serve` behind a real
haproxy (HTTP and WebSocket, health-checked on /healthz), their call records in one PostgreSQL.
The webhook and the stream of one Twilio call land on different servers and the call goes on; the
server holding a live call is drained (SIGTERM): haproxy takes it out, new calls go to the other
server, the live call finishes there, and every record is complete in the shared database."""

from __future__ import annotations

import asyncio
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from harness.callers.twilio import CallerConfig, CallerUtterance, run_call
from tests.deploy.test_serve_process import TOKEN, _free_port, _serve, _wait_listening, _wait_port
from tests.pipeline.test_records_postgres import PG_BIN

pytest.importorskip("psycopg")
pytestmark = pytest.mark.skipif(shutil.which("haproxy") is None or not (PG_BIN / "initdb").exists()
                                or shutil.which("flite") is None,
                                reason="haproxy, PostgreSQL 15 and flite are needed (scripts/install-system-deps)")

HAPROXY_CFG = """global
    log stderr format raw local0 info
defaults
    mode http
    log global
    option httplog
    timeout connect 2s
    timeout client 60s
    timeout server 60s
    timeout tunnel 1h
frontend calls
    bind 127.0.0.1:{port}
    default_backend parley
backend parley
    balance roundrobin
    option httpchk GET /healthz
    http-check expect status 200
    default-server inter 300ms fall 1 rise 2
    server a 127.0.0.1:{a} check
    server b 127.0.0.1:{b} check
"""


def _haproxy(cfg: Path) -> subprocess.Popen:
    return subprocess.Popen(["haproxy", "-f", str(cfg), "-db"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _stop(servers: list[subprocess.Popen]) -> None:
    for proc in servers:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        proc.stderr.close()


def _records(url: str) -> dict:
    """Every call record in the shared database, by call id."""
    from pipeline.records_postgres import PostgresCallStore

    store = PostgresCallStore(url)
    try:
        return {r.call_sid: r for r in store.list()}
    finally:
        store.close()


def _owner_pid(url: str, call_sid: str) -> int | None:
    import psycopg

    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT owner FROM calls WHERE call_sid = %s", (call_sid,)).fetchone()
    return int(row[0].split(":")[1]) if row and row[0] else None


async def test_two_servers_behind_haproxy_share_records_and_one_drains_mid_call(postgres, tmp_path):
    from pipeline.records_postgres import PostgresCallStore

    servers = [_serve(tmp_path / "unused.db", "--db", postgres, "--stt", "sphinx", "--stt-warm", "2:0",
                      "--stt-procs", "0", "--tts", "espeak", "--drain-s", "60") for _ in range(2)]
    proxy_port = _free_port()                            # haproxy binds its own port
    haproxy = None
    calls = []
    try:
        ports = [await _wait_listening(proc) for proc in servers]
        cfg = tmp_path / "haproxy.cfg"
        cfg.write_text(HAPROXY_CFG.format(port=proxy_port, a=ports[0], b=ports[1]))
        haproxy = _haproxy(cfg)
        await _wait_port(proxy_port, haproxy)
        await asyncio.sleep(1.5)                         # both servers pass haproxy's health check

        def call(*said: str):
            return asyncio.create_task(run_call(CallerConfig(
                url=f"ws://127.0.0.1:{proxy_port}/twilio/stream", auth_token=TOKEN, timeout_s=90,
                calls_base_url=f"http://127.0.0.1:{proxy_port}",
                utterances=tuple(CallerUtterance(text=t) for t in said))))

        first = call("hello how are you", "i would like to check my order", "thank you very much")
        sid = None
        for _ in range(150):                             # until its record is in the shared database
            await asyncio.sleep(0.1)
            store = PostgresCallStore(postgres)
            try:
                live = [r for r in store.list() if not r.ended]
            finally:
                store.close()
            if live:
                sid = live[0].call_sid
                break
        assert sid is not None
        holder = next(p for p in servers if p.pid == _owner_pid(postgres, sid))
        other = next(p for p in servers if p is not holder)
        holder.send_signal(signal.SIGTERM)               # drain: its live call goes on
        await asyncio.sleep(1.5)                         # /healthz 503: haproxy takes it out
        second = await call("hello are you there")
        calls.append(second)
        assert second.turns and second.turns[0].agent_audio_bytes > 0
        assert _owner_pid(postgres, second.call_sid) == other.pid      # the new call went to the other
        report = await asyncio.wait_for(first, 120)
        calls.append(report)
        assert len(report.turns) == 3 and all(t.agent_audio_bytes > 0 for t in report.turns)
        assert not report.connection_lost                # the drained server let it finish
        assert await asyncio.to_thread(holder.wait, 30) == 0
        assert other.poll() is None
    finally:
        _stop(servers)
        if haproxy is not None:
            haproxy.terminate()
            haproxy.wait(10)
    records = _records(postgres)
    for report in calls:
        record = records[report.call_sid]
        assert record.ended and record.end_reason == "caller hung up (stop)"
        assert len(record.turns) == len(report.turns) and all(t.user_text for t in record.turns)


async def test_sip_calls_through_kamailio_reach_two_servers_and_a_drained_one_leaves_the_dispatcher(
        postgres, tmp_path, flite_speech):
    """Two `parley serve --sip-port` behind Kamailio's dispatcher (OPTIONS probing), records in one
    PostgreSQL. Calls go through the dispatcher (signalling Record-Routed through it, RTP straight to
    the server); the server holding a live call is drained (SIGTERM): its OPTIONS answer 503,
    Kamailio marks it inactive, new calls go to the other, and the live call finishes where it is."""
    from harness.callers.sip import SipCaller, SipCallerConfig
    from tests.telephony.sip.test_sip_dispatcher import dispatcher

    servers = [_serve(tmp_path / "unused.db", "--db", postgres, "--sip-port", "0",
                      "--sip-rtp-ports", f"{20000 + 1000 * i}-{20999 + 1000 * i}", "--stt", "sphinx",
                      "--stt-warm", "2:0", "--stt-procs", "0", "--tts", "espeak", "--drain-s", "60",
                      "--log-level", "INFO")
               for i in range(2)]
    said = [flite_speech(t, 8000, "kal") for t in ("hello how are you", "i would like to check my order",
                                                   "thank you very much")]
    reports = []
    try:
        for proc in servers:
            await _wait_listening(proc)
        sip = [int(proc.ports["sip_port"]) for proc in servers]
        async with dispatcher(sip, tmp_path / "kamailio") as (proxy_port, kamailio_log):
            await asyncio.sleep(2.5)                      # both answer OPTIONS: both active

            def caller(*speech):
                return SipCaller(SipCallerConfig(host="127.0.0.1", port=proxy_port, utterances=tuple(speech),
                                                 greeting_wait_s=2.0, timeout_s=90))

            first = caller(*said)
            first_run = asyncio.create_task(first.run())
            owner = None
            for _ in range(150):                          # until its record is in the shared database
                await asyncio.sleep(0.1)
                owner = _owner_pid(postgres, first.call_id)
                if owner is not None:
                    break
            holder = next(p for p in servers if p.pid == owner)
            other = next(p for p in servers if p is not holder)
            holder.send_signal(signal.SIGTERM)            # drain: its live call goes on
            await asyncio.sleep(2.5)                      # its OPTIONS answer 503: Kamailio marks it inactive
            for _ in range(2):                            # new calls: all to the other server
                second = caller(said[0])
                reports.append(await second.run())
                assert _owner_pid(postgres, second.call_id) == other.pid
            report = await asyncio.wait_for(first_run, 120)
            reports.insert(0, report)
            log = kamailio_log.read_text(errors="replace")
        assert len(report.turns) == 3 and all(t.v2v_ms is not None for t in report.turns), report.turns
        assert not report.timed_out and "bye-200" in report.history    # our BYE went through the proxy
        assert await asyncio.to_thread(holder.wait, 30) == 0
        assert other.poll() is None
        assert f"DISPATCH INVITE {first.call_id}" in log
    finally:
        _stop(servers)
    records = _records(postgres)
    for r in reports:
        record = records[r.call_id]
        assert record.ended and record.transport == "sip", record
        assert len(record.turns) == len(r.turns) and all(t.user_text for t in record.turns)
