"""The event-loop lag probe: it sees a stalled loop, logs it once per quiet period, and the
server exports it in /metrics."""

from __future__ import annotations

import asyncio
import logging
import time

import aiohttp
import pytest

from agent.echo import EchoAgentProcessor
from telephony.loop_lag import LoopLagProbe
from telephony.metrics import Metrics
from telephony.server import CallServer, ServerConfig
from tests.metrics_text import sample
from telephony.errors import ConfigError

TOKEN = "lag-token-" + "0" * 22


async def test_a_blocked_loop_is_measured_and_logged(caplog):
    seen: list[float] = []
    probe = LoopLagProbe(seen.append, live_calls=lambda: 3, interval_s=0.01, warn_s=0.2)
    task = asyncio.get_running_loop().create_task(probe.run())
    await asyncio.sleep(0.05)            # a few quiet probes first
    with caplog.at_level(logging.WARNING, logger="telephony.loop_lag"):
        time.sleep(0.3)                  # what building a decoder on the loop did: a hard stall
        await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert max(seen) >= 250.0 and probe.worst_s >= 0.25   # at least the 300 ms it was blocked, less a probe interval
    assert min(seen) < 200.0                               # and the quiet probes were not
    [warning] = [r for r in caplog.records if "event loop stalled" in r.getMessage()]
    assert "3 live call(s)" in warning.getMessage()


def test_warnings_are_rate_limited_and_count_what_they_skipped(caplog):
    seen: list[float] = []
    probe = LoopLagProbe(seen.append, warn_s=0.1, quiet_s=60.0)
    with caplog.at_level(logging.WARNING, logger="telephony.loop_lag"):
        for lag in (0.5, 0.3, 0.2, 0.01, -0.001):
            probe.record(lag)
        probe._last_warning -= 61.0      # the quiet period is over
        probe.record(0.4)
    msgs = [r.getMessage() for r in caplog.records]
    assert len(msgs) == 2 and "500 ms" in msgs[0]
    assert "400 ms" in msgs[1] and "2 more stall(s)" in msgs[1]
    assert seen == [500.0, 300.0, 200.0, 10.0, 0.0, 400.0]   # a clock hiccup below zero counts as 0
    with pytest.raises(ConfigError):
        LoopLagProbe(seen.append, interval_s=0)


def test_metrics_render_the_lag_histogram():
    m = Metrics()
    for ms in (0.4, 3.0, 30.0, 3000.0):
        m.observe_loop_lag(ms)
    text = m.render()
    assert "# TYPE parley_event_loop_lag_ms histogram" in text
    assert sample(text, 'parley_event_loop_lag_ms_bucket{le="1"}') == 1
    assert sample(text, 'parley_event_loop_lag_ms_bucket{le="50"}') == 3
    assert sample(text, 'parley_event_loop_lag_ms_bucket{le="2500"}') == 3
    assert sample(text, 'parley_event_loop_lag_ms_bucket{le="+Inf"}') == 4
    assert sample(text, "parley_event_loop_lag_ms_count") == 4
    assert sample(text, "parley_event_loop_lag_ms_sum") == pytest.approx(3033.4)


async def test_the_server_probes_its_loop_from_start_to_stop():
    srv = CallServer(ServerConfig(port=0, auth_token=TOKEN), agent_factory=lambda _info: EchoAgentProcessor())
    port = await srv.start()
    try:
        await asyncio.sleep(0.3)         # a few 50 ms probes
        async with aiohttp.ClientSession() as s:
            async with s.get(f"http://127.0.0.1:{port}/metrics") as r:
                text = await r.text()
    finally:
        await srv.stop()
    assert sample(text, "parley_event_loop_lag_ms_count") >= 1
    assert srv._lag_task is None         # stopped with the server
