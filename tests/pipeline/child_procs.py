"""Helpers for the tests of engines in child processes (runner, voice, ChildClient)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from types import ModuleType


def wait_until(ready: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    """Poll ``ready`` until it holds (a deadline, not a timing claim)."""
    deadline = time.monotonic() + timeout_s
    while not ready():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up after {timeout_s} s waiting for {what}")
        time.sleep(0.01)


def record_spawns(monkeypatch, module: ModuleType) -> list[subprocess.Popen]:
    """Every child ``module.spawn_child`` starts from now on (replacements too), in order."""
    procs: list[subprocess.Popen] = []
    real = module.spawn_child

    def spawn(name: str, args: list[str]):
        sock, proc = real(name, args)
        procs.append(proc)
        return sock, proc

    monkeypatch.setattr(module, "spawn_child", spawn)
    return procs
