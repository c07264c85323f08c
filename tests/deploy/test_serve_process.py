"""`parley serve` as a real process: killed mid-call, the turns so far stay readable."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

from pipeline.records_sqlite import SQLiteCallStore
from telephony.caller import CallerConfig, Utterance, run_call

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "process-test-token-0123456789"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _wait_listening(port: int, proc: subprocess.Popen, timeout_s: float = 60.0) -> None:
    for _ in range(int(timeout_s / 0.2)):
        assert proc.poll() is None, proc.stderr.read().decode()[-3000:]
        try:
            _, w = await asyncio.open_connection("127.0.0.1", port)
            w.close()
            return
        except OSError:
            await asyncio.sleep(0.2)
    raise TimeoutError("parley serve did not start")


def _serve(port: int, db: Path, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "TWILIO_AUTH_TOKEN": TOKEN}
    return subprocess.Popen(
        [sys.executable, "-m", "deploy.cli", "serve", "--port", str(port), "--db", str(db), "--agent", "echo",
         "--log-level", "WARNING", *extra],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )


async def test_killed_mid_call_the_turns_so_far_are_readable(tmp_path):
    port, db = _free_port(), tmp_path / "calls.db"
    proc = _serve(port, db)
    try:
        await _wait_listening(port, proc)
        url = f"ws://127.0.0.1:{port}/twilio/stream"
        call = asyncio.create_task(run_call(CallerConfig(url=url, auth_token=TOKEN, timeout_s=60, utterances=(
            Utterance(text="hello how are you"), Utterance(text="i would like to check my account"),
            Utterance(text="can you help me please"),
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
        proc.send_signal(signal.SIGKILL)  # no clean-up of any kind
        proc.wait(10)
        report = await asyncio.wait_for(call, 60)  # the caller sees the socket drop and ends cleanly
        assert report.call_sid == sid
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        proc.stderr.close()
    shown = subprocess.run([sys.executable, "-m", "deploy.cli", "calls", "show", sid, "--json", "--db", str(db)],
                           cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    record = json.loads(shown.stdout)
    assert record["call_sid"] == sid
    assert record["turns"] and record["turns"][0]["user_text"]  # what was said so far is there
    assert record["turns"][0]["agent_text"].startswith("You said")
    assert record["greeting"]
