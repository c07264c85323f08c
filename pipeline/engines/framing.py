"""Length-prefixed frames over Unix sockets, and child processes that speak them.

The engines that run in worker processes (``sphinx_procs``, ``voice_procs``, ``runner_procs``)
share this: a frame is a 4-byte big-endian length and a body; a child is ``python -m MODULE FD
ARGS...`` with one end of a socket pair passed as file descriptor ``FD``.

    mine, proc = spawn_child("pipeline.engines.voice_procs", ["models/tts"])
    send_frame(mine, pack({"op": "req"}, b"payload"))
    head, payload = unpack(recv_frame(mine))   # ConnectionResetError when the child has gone
"""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
from pathlib import Path

from pipeline.errors import WorkerProtocolError

HEADER = struct.Struct(">I")
MAX_FRAME = 64 << 20  # a frame larger than this is a broken peer, not audio
_ROOT = Path(__file__).resolve().parents[2]


def send_frame(sock: socket.socket, body: bytes) -> None:
    sock.sendall(HEADER.pack(len(body)) + body)


def recv_exact(sock: socket.socket, n: int) -> bytes:
    parts = []
    while n:
        chunk = sock.recv(min(n, 1 << 20))
        if not chunk:
            raise ConnectionResetError("peer closed the socket")
        parts.append(chunk)
        n -= len(chunk)
    return b"".join(parts)


def recv_frame(sock: socket.socket) -> bytes:
    (size,) = HEADER.unpack(recv_exact(sock, HEADER.size))
    if size > MAX_FRAME:
        raise ConnectionResetError(f"frame of {size} bytes (limit {MAX_FRAME})")
    return recv_exact(sock, size)


def pack(head: dict, payload: bytes = b"") -> bytes:
    """A frame body of a JSON head and a binary payload: 4-byte head length, head, payload."""
    raw = json.dumps(head).encode()
    return HEADER.pack(len(raw)) + raw + payload


def unpack(body: bytes) -> tuple[dict, memoryview]:
    """``pack``'s inverse: the head and a view of the payload (``ValueError`` if malformed)."""
    if len(body) < HEADER.size:
        raise WorkerProtocolError(f"a {len(body)}-byte body has no head")
    (n,) = HEADER.unpack_from(body)
    return json.loads(body[HEADER.size:HEADER.size + n]), memoryview(body)[HEADER.size + n:]


def spawn_child(module: str, args: list[str], *,
                kind: int = socket.SOCK_STREAM) -> tuple[socket.socket, subprocess.Popen]:
    """Start ``python -m module FD *args`` with its end of a new socket pair as ``FD``; return
    this end and the process. The child finds this checkout first on its ``PYTHONPATH``."""
    mine, theirs = socket.socketpair(socket.AF_UNIX, kind)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_ROOT), env.get("PYTHONPATH")) if p)
    try:
        proc = subprocess.Popen([sys.executable, "-m", module, str(theirs.fileno()), *args],
                                pass_fds=(theirs.fileno(),), env=env, stdin=subprocess.DEVNULL)
    except OSError:
        mine.close()
        raise
    finally:
        theirs.close()
    return mine, proc


def ignore_stop_signals() -> None:
    """In a child: leave SIGINT and SIGTERM to the server, which decides when the child stops
    (a draining server keeps its engines); the child exits when its socket closes."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
