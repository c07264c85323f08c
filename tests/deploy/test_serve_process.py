"""`parley serve` as a real process: killed mid-call, the turns so far stay readable and its engine
worker processes go with it; a dead engine worker is replaced, and /metrics says so."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import aiohttp

from pipeline.records_sqlite import SQLiteCallStore
from harness.callers.twilio import CallerConfig, CallerUtterance, run_call
from tests.deploy.conftest import calls_show
from tests.metrics_text import series as metric_series

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "process-test-token-0123456789"


def _free_port() -> int:
    """A TCP port free a moment ago, for an outside program that binds its own (haproxy): parley
    itself takes port 0 and says which it got (``--ready-file``)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _wait_port(port: int, proc: subprocess.Popen, timeout_s: float = 60.0) -> None:
    """Until an outside program (haproxy) accepts connections on ``port``."""
    for _ in range(int(timeout_s / 0.2)):
        assert proc.poll() is None, proc.stderr.read().decode()[-3000:] if proc.stderr else proc.returncode
        try:
            _, w = await asyncio.open_connection("127.0.0.1", port)
            w.close()
            return
        except OSError:
            await asyncio.sleep(0.2)
    raise TimeoutError(f"nothing listens on {port}")


class ServeProcess(subprocess.Popen):
    """`parley serve --port 0 --ready-file F`: ``await _wait_listening(proc)`` reads its ports back."""

    def __init__(self, args: list[str], ready_file: Path, **kwargs) -> None:
        super().__init__(args, **kwargs)
        self.ready_file = ready_file
        self.ports: dict[str, int | None] = {}


async def _wait_listening(proc: ServeProcess, timeout_s: float = 60.0) -> int:
    """Until the server has written its ready file: -> its HTTP port (``proc.ports`` holds all of them)."""
    for _ in range(int(timeout_s / 0.2)):
        assert proc.poll() is None, proc.stderr.read().decode()[-3000:]
        if proc.ready_file.exists():
            proc.ports = json.loads(proc.ready_file.read_text())
            assert proc.ports["pid"] == proc.pid
            return int(proc.ports["http_port"])
        await asyncio.sleep(0.2)
    raise TimeoutError("parley serve did not start")


def _serve(db: Path, *extra: str, env: dict[str, str] | None = None) -> ServeProcess:
    """`parley serve` on a port of its own choosing (``--sip-port 0`` in ``extra`` for SIP too)."""
    env = {**os.environ, "TWILIO_AUTH_TOKEN": TOKEN, **(env or {})}
    ready = db.parent / f"ready-{secrets.token_hex(4)}.json"
    return ServeProcess(
        [sys.executable, "-m", "deploy.cli", "serve", "--port", "0", "--ready-file", str(ready), "--db", str(db),
         "--agent", "echo", "--log-level", "WARNING", *extra],
        ready, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )


def _children(pid: int) -> dict[int, str]:
    """Live child processes of ``pid``: their command lines."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[1]) == pid and fields[0] != "Z":
            out[int(entry)] = cmd
    return out


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (OSError, IndexError):
        return False


async def _engine_series(port: int) -> dict[str, int]:
    async with aiohttp.ClientSession() as s:
        async with s.get(f"http://127.0.0.1:{port}/metrics") as r:
            text = await r.text()
    return {**metric_series(text, "parley_engine_workers"), **metric_series(text, "parley_engine_restarts_total")}


async def test_a_killed_voice_worker_is_replaced_and_metrics_show_it(tmp_path):
    db = tmp_path / "calls.db"
    proc = _serve(db, "--stt", "sphinx", "--stt-warm", "1:0")
    try:
        port = await _wait_listening(proc)
        series = await _engine_series(port)
        assert series == {'parley_engine_workers{engine="pocketsphinx"}': 1,
                          'parley_engine_workers{engine="ssm-voice"}': 1,
                          'parley_engine_restarts_total{engine="pocketsphinx"}': 0,
                          'parley_engine_restarts_total{engine="ssm-voice"}': 0}
        voice = [pid for pid, cmd in _children(proc.pid).items() if "voice_procs" in cmd]
        assert len(voice) == 1
        os.kill(voice[0], signal.SIGKILL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            series = await _engine_series(port)
            if series['parley_engine_restarts_total{engine="ssm-voice"}'] == 1 and \
                    series['parley_engine_workers{engine="ssm-voice"}'] == 1:
                break
            await asyncio.sleep(0.2)
        else:
            raise AssertionError(f"the voice worker was not replaced: {series}")
        # the replacement speaks: a call gets its greeting and a reply
        report = await run_call(CallerConfig(url=f"ws://127.0.0.1:{port}/twilio/stream", auth_token=TOKEN,
                                             timeout_s=60, utterances=(CallerUtterance(text="hello how are you"),)))
        assert report.turns and report.turns[0].agent_audio_bytes > 0
        assert proc.poll() is None  # the server never went down
        # the server's garbage-collector pauses are in /metrics too (its start-up heap frozen)
        async with aiohttp.ClientSession() as s:
            async with s.get(f"http://127.0.0.1:{port}/metrics") as r:
                text = await r.text()
        assert "# TYPE parley_gc_pause_ms histogram" in text
        counts = metric_series(text, "parley_gc_pause_ms_count")
        assert set(counts) == {f'parley_gc_pause_ms_count{{generation="{g}"}}' for g in "012"}
        assert counts['parley_gc_pause_ms_count{generation="0"}'] > 0   # a call makes garbage
        # the workers' own request times, merged in (pipeline.engines.worker_metrics): the decoder's
        # feeds, and the voice's requests, the replaced worker's among them
        requests = metric_series(text, "parley_engine_request_ms_count")
        assert requests.get('parley_engine_request_ms_count{engine="pocketsphinx",op="feed"}', 0) > 0, requests
        assert requests.get('parley_engine_request_ms_count{engine="ssm-voice",op="req"}', 0) > 0, requests
    finally:
        proc.kill()
        proc.wait(10)
        proc.stderr.close()


async def test_killed_mid_call_the_turns_so_far_are_readable(tmp_path):
    db = tmp_path / "calls.db"
    proc = _serve(db)
    try:
        port = await _wait_listening(proc)
        url = f"ws://127.0.0.1:{port}/twilio/stream"
        call = asyncio.create_task(run_call(CallerConfig(url=url, auth_token=TOKEN, timeout_s=60, utterances=(
            CallerUtterance(text="hello how are you"), CallerUtterance(text="i would like to check my account"),
            CallerUtterance(text="can you help me please"),
        ))))
        sid = None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 90
        while loop.time() < deadline:  # until the call is recorded and its first turn answered
            await asyncio.sleep(0.2)
            if not db.exists():
                continue
            store = SQLiteCallStore(db)  # a second reader beside the server (WAL)
            try:
                calls = store.list()
            finally:
                store.close()
            if calls:
                sid = calls[0].call_sid
                if calls[0].turns and calls[0].turns[0].agent_text_heard:  # the reply played out
                    break
        assert sid is not None
        engines = _children(proc.pid)  # the SSM recognizer's worker (the default) and the voice
        assert sum("runner_procs" in c for c in engines.values()) == 1, engines
        assert sum("voice_procs" in c for c in engines.values()) == 1, engines
        proc.send_signal(signal.SIGKILL)  # no clean-up of any kind
        proc.wait(10)
        deadline = time.monotonic() + 30  # they see their socket close and exit: no orphans
        while any(_alive(pid) for pid in engines) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert not [pid for pid in engines if _alive(pid)], "engine workers outlived the server"
        report = await asyncio.wait_for(call, 60)  # the caller sees the socket drop and ends cleanly
        assert report.call_sid == sid and report.connection_lost  # and knows the server went away
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        proc.stderr.close()
    record = calls_show(sid, db)
    assert record["call_sid"] == sid
    assert record["turns"] and record["turns"][0]["user_text"]  # what was said so far is there
    assert record["turns"][0]["agent_text"].startswith("You said")
    assert record["greeting"]


async def test_without_a_cxx_compiler_the_recognizer_serves_eagerly_and_says_why(tmp_path):
    """torch.compile needs a C++ compiler; a machine without one still answers calls. Only the
    pure SSM recogniser compiles its step (the default one, on Whisper's encoder, runs eagerly)."""
    db = tmp_path / "calls.db"
    proc = _serve(db, "--stt", "ssm", "--stt-model", "models/stt-ssm", "--stt-compile", "on",
                  env={"CXX": str(tmp_path / "no-such-g++"),
                       "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")})  # no cached kernels
    try:
        port = await _wait_listening(proc, timeout_s=120)
        report = await run_call(CallerConfig(url=f"ws://127.0.0.1:{port}/twilio/stream", auth_token=TOKEN,
                                             timeout_s=60, utterances=(CallerUtterance(text="hello how are you"),)))
        assert report.turns and report.turns[0].agent_audio_bytes > 0
        assert proc.poll() is None
    finally:
        proc.terminate()
        proc.wait(30)
        log = proc.stderr.read().decode()
        proc.stderr.close()
    assert "the compiled step is unavailable" in log and "No working C++ compiler" in log, log[-3000:]
    assert "running it eagerly instead" in log


async def test_emf_lines_carry_each_turns_first_byte_and_the_live_calls_for_cloudwatch(tmp_path):
    """`parley serve --emf FILE`: a real call's turns reach the file as CloudWatch EMF lines, the
    last interval flushed when SIGTERM ends the server."""
    db, emf = tmp_path / "calls.db", tmp_path / "emf.jsonl"
    proc = _serve(db, "--emf", str(emf), "--emf-deployment", "voice-test", "--emf-interval-s", "0.5")
    try:
        port = await _wait_listening(proc)
        report = await run_call(CallerConfig(url=f"ws://127.0.0.1:{port}/twilio/stream", auth_token=TOKEN,
                                             timeout_s=60, utterances=(CallerUtterance(text="hello how are you"),
                                                                       CallerUtterance(text="goodbye"))))
        assert report.call_sid
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
        assert not proc.ready_file.exists()   # a clean exit takes its ready file with it
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        proc.stderr.close()
    docs = [json.loads(line) for line in emf.read_text().splitlines()]
    assert docs and all(d["Deployment"] == "voice-test" and d["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "Parley"
                        for d in docs)
    first_bytes = [v for d in docs for v in d.get("FirstByteMs", [])]
    assert first_bytes and all(0 < v < 5000 for v in first_bytes)
    assert max(d.get("LiveCalls", 0) for d in docs) == 1 and docs[-1]["LiveCalls"] == 0
