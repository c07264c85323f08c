"""Engine workers' own metrics reach the server's /metrics: a worker process writes its request
times into the shared folder, the server's scrape merges them, a dead worker's count stays, and
without a shared folder a worker measures nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from deploy.serve_cli import share_worker_metrics, unshare_worker_metrics
from pipeline.engines.worker_metrics import ENV, RequestTimer
from telephony.metrics import Metrics
from tests.metrics_text import sample

ROOT = Path(__file__).resolve().parents[2]
WORKER = """
import sys
from pipeline.engines.worker_metrics import RequestTimer
timer = RequestTimer(sys.argv[1])
assert timer.active
for ms in sys.argv[2:]:
    timer.observe("submit", float(ms))
"""


def _worker(engine: str, *ms: float) -> None:
    """A worker process (as spawn_child starts them: this environment, the shared folder in it)."""
    done = subprocess.run([sys.executable, "-c", WORKER, engine, *map(str, ms)], cwd=ROOT, env=dict(os.environ),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_workers_request_times_are_merged_into_the_servers_scrape():
    folder = share_worker_metrics()
    try:
        assert os.environ[ENV] == str(folder)
        metrics = Metrics()
        metrics.read_worker_metrics(folder)
        _worker("ssm-stt", 3.0, 40.0)
        _worker("ssm-stt", 7.0)            # a replacement after the first died: both count
        _worker("ssm-voice", 1500.0)
        text = metrics.render()
    finally:
        unshare_worker_metrics(folder)
    assert ENV not in os.environ and not folder.exists()
    count = 'parley_engine_request_ms_count{engine="ssm-stt",op="submit"}'
    assert sample(text, count) == 3
    assert sample(text, 'parley_engine_request_ms_sum{engine="ssm-stt",op="submit"}') == 50.0
    assert sample(text, 'parley_engine_request_ms_bucket{engine="ssm-stt",le="5.0",op="submit"}') == 1
    assert sample(text, 'parley_engine_request_ms_bucket{engine="ssm-voice",le="1000.0",op="submit"}') == 0
    assert sample(text, 'parley_engine_request_ms_count{engine="ssm-voice",op="submit"}') == 1
    assert "# TYPE parley_event_loop_lag_ms histogram" in text   # beside the server's own, not instead


def test_without_a_shared_folder_a_worker_measures_nothing(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    timer = RequestTimer("pocketsphinx")
    timer.observe("feed", 2.0)             # no folder, no file, no error
    assert not timer.active
