"""ChildClient's lifecycle on a tiny echo child: replies, a death, the restart and its delay.

The child is this module run as ``python -m tests.pipeline.test_child FD``: it answers every
request with its own head, and exits with code 3 on ``{"op": "die"}``.
"""

from __future__ import annotations

import os
import socket
import sys
from concurrent.futures import Future

import pytest

from pipeline.engines.child import MAX_DELAY_S, ChildClient, restart_delay_s
from pipeline.engines.framing import pack, recv_frame, send_frame, spawn_child, unpack
from tests.pipeline.child_procs import wait_until


class Unavailable(Exception):
    pass


class Echo(ChildClient):
    label = "the echo process"
    unavailable = Unavailable

    def __init__(self) -> None:
        super().__init__([])
        self.spawned: list[int] = []

    def _spawn(self):
        sock, proc = spawn_child("tests.pipeline.test_child", [])
        self.spawned.append(proc.pid)
        return sock, proc

    def _deliver(self, fut: Future, kind: str, head: dict, payload: memoryview) -> None:
        fut.set_result(head["echo"])


def exited(pid: int) -> bool:
    try:
        return open(f"/proc/{pid}/stat").read().split(") ")[1][0] == "Z"
    except (OSError, IndexError):
        return True


@pytest.fixture
def echo():
    client = Echo()
    client._start()
    yield client
    client.close()


@pytest.mark.parametrize("lived_s, previous_s, delay_s", [
    (60.0, 0.0, 0.0), (60.0, 16.0, 0.0),         # a full life: restart at once, forget the delay
    (0.5, 0.0, 1.0), (0.5, 1.0, 2.0), (0.5, 4.0, 8.0),  # dying young: 1, 2, 4, 8 ...
    (0.5, 16.0, MAX_DELAY_S), (0.5, MAX_DELAY_S, MAX_DELAY_S),
])
def test_restart_delay_grows_only_for_children_that_die_young(lived_s, previous_s, delay_s):
    assert restart_delay_s(lived_s, previous_s) == delay_s


def test_replies_complete_their_futures(echo):
    futures = [echo._request({"op": "hi", "n": i}) for i in range(20)]
    assert [f.result(10)["n"] for f in futures] == list(range(20))
    assert echo.workers_up == 1 and echo.restarts == 0


def test_a_child_that_lived_is_replaced_at_once(echo):
    echo._started_at -= 60  # as if it had run a minute
    first = echo.pid
    with pytest.raises(Unavailable, match=rf"the echo process \(pid {first}\) exited with code 3"):
        echo._request({"op": "die"}).result(10)
    wait_until(lambda: echo.restarts == 1 and echo.workers_up == 1, "the replacement")
    assert echo.pid != first and echo._delay_s == 0
    assert echo._request({"op": "hi"}).result(10) == {"op": "hi", "id": 2}


def test_a_child_that_dies_young_waits_and_close_cancels_the_restart(echo):
    echo._delay_s = MAX_DELAY_S  # it has died young before: the next restart waits 30 s
    first = echo.pid
    with pytest.raises(Unavailable, match="exited with code 3"):
        echo._request({"op": "die"}).result(10)
    wait_until(lambda: echo._delay_s == MAX_DELAY_S and echo.workers_up == 0, "the death")
    with pytest.raises(Unavailable, match="died and is restarting"):
        echo._request({"op": "hi"})
    echo.close()  # wakes the waiting restart, which gives up
    wait_until(lambda: not echo._reader.is_alive(), "the reader to end")
    assert echo.spawned == [first] and echo.restarts == 0 and exited(first)


# ---- the child ----------------------------------------------------------------------------


def _child(fd: int) -> int:
    sock = socket.socket(fileno=fd)
    send_frame(sock, pack({"id": 0, "ok": 0.0}))
    while True:
        try:
            head, _ = unpack(recv_frame(sock))
        except (OSError, ValueError):
            return 0
        if head.get("op") == "die":
            os._exit(3)
        send_frame(sock, pack({"id": head["id"], "echo": head}))


if __name__ == "__main__":
    raise SystemExit(_child(int(sys.argv[1])))
