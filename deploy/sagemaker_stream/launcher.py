"""The call server's side of ``sagemaker://``: start the bridge process and keep it up.

    bridge, urls = bridge_for("sagemaker://parley-models?region=us-east-1,ws://10.0.1.5:8080")
    # urls == ("ws://127.0.0.1:41235/t/0", "ws://10.0.1.5:8080"): what the remote engines dial
    ...
    bridge.close()

The bridge (``deploy.sagemaker_stream.bridge``) runs in the Python 3.12 venv ``.venv-aws`` (or
``PARLEY_AWS_PYTHON``): AWS's HTTP/2 streaming client does not run on the call server's Python.
It is started before the server listens (a missing venv, Region or credentials refuses to start,
in one line) and, should it die, started again on the same port: the engines' streams fail over
to it as to any replica.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from deploy.errors import BridgeError
from deploy.sagemaker_stream.targets import Target, is_sagemaker_url

__all__ = ["AWS_PYTHON_ENV", "StreamBridge", "aws_python", "bridge_for"]

log = logging.getLogger("parley")

ROOT = Path(__file__).resolve().parents[2]
AWS_PYTHON_ENV = "PARLEY_AWS_PYTHON"
START_TIMEOUT_S = 30.0
RESTART_BACKOFF_S = (0.2, 1.0, 5.0, 30.0)
YOUNG_S = 10.0          # a bridge that dies sooner than this after starting is restarted more slowly
_RUN_BRIDGE = ("import runpy, sys; sys.path.append(sys.argv.pop(1)); "
               "runpy.run_module('deploy.sagemaker_stream.bridge', run_name='__main__', alter_sys=True)")


def aws_python() -> Path:
    """The bridge's interpreter: ``PARLEY_AWS_PYTHON``, else ``.venv-aws/bin/python``."""
    named = os.environ.get(AWS_PYTHON_ENV)
    path = Path(named) if named else ROOT / ".venv-aws" / "bin" / "python"
    if not path.exists():
        raise BridgeError(f"sagemaker:// needs the Python 3.12 venv with AWS's HTTP/2 client at {path}: "
                          f"run `make install` (it builds .venv-aws), or set {AWS_PYTHON_ENV}")
    return path


class StreamBridge:
    """The bridge process for ``targets``, restarted on the same port if it dies."""

    def __init__(self, targets: tuple[Target, ...], python: Path | None = None,
                 start_timeout_s: float = START_TIMEOUT_S) -> None:
        self.targets = targets
        self.python = python or aws_python()
        self.start_timeout_s = start_timeout_s
        self.port = 0
        self.restarts = 0
        self._proc: subprocess.Popen[str] | None = None
        self._closing = threading.Event()
        self._watcher: threading.Thread | None = None
        self._started_at = 0.0

    @property
    def urls(self) -> tuple[str, ...]:
        return tuple(f"ws://127.0.0.1:{self.port}/t/{i}" for i in range(len(self.targets)))

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def start(self) -> tuple[str, ...]:
        self._spawn()
        self._watcher = threading.Thread(target=self._watch, name="sagemaker-bridge", daemon=True)
        self._watcher.start()
        names = ", ".join(t.url() for t in self.targets)
        log.info("sagemaker:// bridge (pid %s) streams to %s through 127.0.0.1:%d", self.pid, names, self.port)
        return self.urls

    def _spawn(self) -> None:
        # parley's folder goes *after* the bridge venv's own packages: where parley is installed
        # (not a checkout) that folder is the call server's site-packages, built for its Python
        command = [str(self.python), "-c", _RUN_BRIDGE, str(ROOT), "--port", str(self.port),
                   "--parent-pid", str(os.getpid()), "--log-level",
                   "DEBUG" if log.isEnabledFor(logging.DEBUG) else "INFO"]
        for t in self.targets:
            command += ["--target", t.url()]
        self._started_at = time.monotonic()
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                text=True)
        self._proc = proc
        ready = _first_line(proc, self.start_timeout_s)
        if ready is None:
            code = proc.poll()
            if code is None:
                proc.kill()
            proc.wait(5)
            assert proc.stderr is not None
            said = [x.strip() for x in proc.stderr.read().splitlines() if x.strip()]
            proc.stderr.close()
            reason = said[-1].removeprefix("parley: ") if said else (
                f"did not start within {self.start_timeout_s:.0f} s" if code is None else f"exited ({code})")
            raise BridgeError(reason if said else f"the sagemaker:// bridge {reason}")
        self.port = int(ready["port"])   # type: ignore[call-overload]
        # from now on the bridge's lines go to the server's log, as they come
        threading.Thread(target=_copy_lines, args=(proc,), name="sagemaker-bridge-log", daemon=True).start()

    def _watch(self) -> None:
        """Restart the bridge when it dies: at once the first time, then 1, 5, 30 s apart while it
        keeps dying young (within ``YOUNG_S`` of its start) or failing to start."""
        failures = 0
        while not self._closing.is_set():
            proc = self._proc
            assert proc is not None
            code = proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
            if self._closing.is_set():
                return
            failures = failures + 1 if time.monotonic() - self._started_at < YOUNG_S else 0
            delay = RESTART_BACKOFF_S[min(failures, len(RESTART_BACKOFF_S) - 1)]
            log.warning("sagemaker:// bridge exited (%s); starting it again on port %d in %.1f s",
                        code, self.port, delay)
            if self._closing.wait(delay):
                return
            try:
                self._spawn()
            except BridgeError as exc:   # the dead process is waited on again: the next delay is longer
                log.warning("sagemaker:// bridge: %s", exc)
                continue
            self.restarts += 1

    def close(self) -> None:
        self._closing.set()
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        if proc is not None and proc.stdout is not None:
            proc.stdout.close()
        if self._watcher is not None:
            self._watcher.join(5)


def _first_line(proc: subprocess.Popen[str], timeout_s: float) -> dict[str, object] | None:
    """The bridge's ready line, or None if it exited or stayed silent for ``timeout_s``."""
    assert proc.stdout is not None
    box: list[str] = []
    reader = threading.Thread(target=lambda: box.append(proc.stdout.readline() if proc.stdout else ""),
                              daemon=True)
    reader.start()
    reader.join(timeout_s)
    if not box or not box[0].strip():
        return None
    try:
        ready = json.loads(box[0])
    except ValueError:
        return None
    return ready if isinstance(ready, dict) and ready.get("ready") else None


def _copy_lines(proc: subprocess.Popen[str]) -> None:
    assert proc.stderr is not None
    with proc.stderr:
        for line in proc.stderr:
            sys.stderr.write(line)


def bridge_for(model_urls: str | tuple[str, ...]) -> tuple[StreamBridge | None, tuple[str, ...]]:
    """``--model-url`` with ``sagemaker://`` entries -> (the started bridge, the URLs the engines
    dial: each sagemaker:// one replaced by the bridge's loopback URL, the rest unchanged)."""
    items = tuple(u.strip() for u in (model_urls.split(",") if isinstance(model_urls, str) else model_urls)
                  if u.strip())
    targets = tuple(Target.parse(u) for u in items if is_sagemaker_url(u))
    if not targets:
        return None, items
    bridge = StreamBridge(targets)
    loopback = iter(bridge.start())
    return bridge, tuple(next(loopback) if is_sagemaker_url(u) else u for u in items)
