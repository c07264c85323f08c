"""A server command run as a child process for a benchmark: started, waited for, stopped.

    port = free_port()
    server = ServeProcess("parley", ["-m", "deploy.cli", "serve", "--port", str(port)], port=port,
                          log_path=tmp / "parley.log", env={"TWILIO_AUTH_TOKEN": token})
    await server.wait_ready()          # the HTTP port accepts connections (or RuntimeError + log)
    ...
    server.stop()                      # SIGTERM, then SIGKILL after 10 s
    print(server.log_tail())

The child's stderr goes to a file, never to a pipe: a pipe nobody reads fills up under load (a
busy server logs warnings) and then stalls the server it was meant to observe. ``args`` follow
the Python interpreter (``sys.executable``); ``env`` is added to this process's environment.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    """A port on 127.0.0.1 free right now (TCP by default; ``socket.SOCK_DGRAM`` for UDP)."""
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServeProcess:
    def __init__(self, name: str, args: list[str], *, port: int, log_path: Path,
                 env: dict[str, str] | None = None) -> None:
        self.name, self.port, self.log_path = name, port, Path(log_path)
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen([sys.executable, *args], cwd=ROOT, env={**os.environ, **(env or {})},
                                         stdout=subprocess.DEVNULL, stderr=log)

    async def wait_ready(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} server exited: {self.log_tail()}")
            try:
                _, w = await asyncio.open_connection("127.0.0.1", self.port)
                w.close()
                return
            except OSError:
                await asyncio.sleep(0.2)
        raise TimeoutError(f"{self.name} server did not start in {timeout_s:.0f} s: {self.log_tail()}")

    def log_tail(self, chars: int = 2000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:]

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
