"""What engine worker processes measure, read by the server's ``/metrics`` (prometheus_client's
multiprocess mode).

    # the server (``parley serve``: deploy.serve_cli), before it starts its workers:
    folder = share_worker_metrics()               # a fresh folder, named to every child it spawns
    metrics.read_worker_metrics(folder)           # telephony.metrics: merged into each scrape
    # a worker:
    timer = RequestTimer("ssm-stt")               # does nothing unless the server shared a folder
    timer.observe("submit", 4.2)                  # ms from the request's arrival to its reply

    parley_engine_request_ms{engine,op}   histogram, in the workers: how long each request took
                                          from its arrival in the worker to its reply (the
                                          model's share of a turn's latency, without the socket
                                          and the server's event loop)

A worker's samples go to memory-mapped files in the shared folder (``PROMETHEUS_MULTIPROC_DIR``
in its environment), one per process, so a worker that died and was replaced still counts what
it did. The server's own metrics stay in its memory: the command line sets the variable after
its prometheus_client was imported, for the children (``spawn_child`` copies the environment).
The variable is prometheus_client's own switch; a worker reads it only to skip measuring when
the server shares no folder.
"""

from __future__ import annotations

import os

ENV = "PROMETHEUS_MULTIPROC_DIR"
REQUEST_BUCKETS_MS = (1, 2, 5, 10, 20, 35, 50, 75, 100, 150, 250, 500, 1000, 2500)


class RequestTimer:
    """A worker's ``parley_engine_request_ms`` for its ``engine``; a no-op when not shared."""

    def __init__(self, engine: str) -> None:
        self.engine = engine
        self._histogram = None
        if os.environ.get(ENV):
            from prometheus_client import Histogram

            self._histogram = Histogram(
                "parley_engine_request_ms", "Engine worker requests: arrival in the worker to reply.",
                ["engine", "op"], buckets=REQUEST_BUCKETS_MS, registry=None)

    @property
    def active(self) -> bool:
        return self._histogram is not None

    def observe(self, op: str, ms: float) -> None:
        if self._histogram is not None:
            self._histogram.labels(engine=self.engine, op=op).observe(ms)
