"""Real ``parley model-server`` processes on loopback, and the pool the deploy tests share them from."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parents[2]


class ModelServerProcess:
    def __init__(self, *extra: str, command: list[str] | None = None, env: dict[str, str] | None = None) -> None:
        command = command or [sys.executable, "-m", "deploy.cli", "model-server"]
        self.proc = subprocess.Popen(
            [*command, "--host", "127.0.0.1", "--port", "0", "--no-stt-compile", "--no-tts-compile", "--log-level", "INFO", *extra],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.log: list[str] = []
        self.port = 0
        self._reader: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    async def ready(self, timeout_s: float = 90.0) -> None:
        """Read the bound port from the log, then wait for /ping 200. The rest of the log is read
        as it comes (a server kept for many tests never blocks on a full pipe)."""
        assert self.proc.stderr is not None
        deadline = time.monotonic() + timeout_s
        while not self.port:
            line = await asyncio.wait_for(asyncio.to_thread(self.proc.stderr.readline), deadline - time.monotonic())
            assert line, f"model server exited: {''.join(self.log)[-2000:]}"
            self.log.append(line)
            if m := re.search(r"listening on http://127\.0\.0\.1:(\d+)", line):
                self.port = int(m[1])
        self._reader = threading.Thread(target=self._read_log, name=f"model-server log {self.port}", daemon=True)
        self._reader.start()
        async with aiohttp.ClientSession() as s:
            while time.monotonic() < deadline:
                async with s.get(f"http://127.0.0.1:{self.port}/ping") as r:
                    if r.status == 200:
                        return
                await asyncio.sleep(0.2)
        raise TimeoutError("model server did not become ready")

    def _read_log(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.log.append(line)

    def rest_of_log(self) -> str:
        """The whole log, once the process has exited."""
        assert self.proc.stderr is not None
        if self._reader is None:
            return "".join(self.log) + self.proc.stderr.read()
        self._reader.join(10)
        return "".join(self.log)

    async def serving(self) -> bool:
        """Alive and ready (/ping 200): not killed, not draining."""
        if self.proc.poll() is not None or not self.port:
            return False
        try:
            async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{self.port}/ping",
                                                           timeout=aiohttp.ClientTimeout(total=5)) as r:
                return r.status == 200
        except (aiohttp.ClientError, TimeoutError):
            return False

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        if self._reader is not None:
            self._reader.join(5)
        if self.proc.stderr is not None:
            self.proc.stderr.close()


class ServerPool:
    """Model servers that tests share (a start is ~10 s of CPU): ``await pool.take(n)`` -> ``n``
    ready servers, those earlier tests left serving first, fresh ones for the rest. A test may kill
    or drain what it took; the next ``take`` leaves those out."""

    def __init__(self) -> None:
        self.servers: list[ModelServerProcess] = []

    async def take(self, n: int) -> list[ModelServerProcess]:
        for s in list(self.servers):
            if not await s.serving():
                s.stop()
                self.servers.remove(s)
        fresh = [ModelServerProcess() for _ in range(n - len(self.servers))]
        self.servers.extend(fresh)
        await asyncio.gather(*(s.ready() for s in fresh))
        return self.servers[:n]

    def close(self) -> None:
        for s in self.servers:
            s.stop()
        self.servers.clear()
