"""The call tier's CloudWatch metrics as EMF lines: the shape CloudWatch parses, true per-turn
values (not a mean), deltas of dropped frames, EMF's 100-value limit, and the names parley
deploy's alarms read."""

from __future__ import annotations

import asyncio
import json

from telephony.audio_meter import FrameCounts
from telephony.emf import EmfPublisher
from telephony.metrics import Metrics


def _publisher(metrics: Metrics) -> tuple[EmfPublisher, list[str]]:
    lines: list[str] = []
    return EmfPublisher(metrics, "parley-voice", lines.append, clock=lambda: 1764676800.0), lines


def test_a_flush_is_one_emf_line_with_every_turns_first_byte_live_calls_and_dropped_frames():
    metrics = Metrics()
    emf, lines = _publisher(metrics)
    frames = FrameCounts()
    metrics.call_started("twilio", frames)
    metrics.call_started("sip")
    for ms in (312.04, 287.5, 640.0):
        metrics.observe_turn("twilio", {"vad_stop": 10.0, "transport_first_byte": ms})
    metrics.observe_turn("twilio", {"vad_stop": 10.0, "transport_first_byte": None})   # a turn with no reply
    frames.in_lost, frames.out_underrun = 2, 3
    emf.flush()
    doc = json.loads(lines[0])
    assert doc["_aws"] == {"Timestamp": 1764676800000, "CloudWatchMetrics": [{
        "Namespace": "Parley", "Dimensions": [["Deployment"]],
        "Metrics": [{"Name": "FirstByteMs", "Unit": "Milliseconds"}, {"Name": "LiveCalls", "Unit": "Count"},
                    {"Name": "DroppedFrames", "Unit": "Count"}]}]}
    assert (doc["Deployment"], doc["FirstByteMs"], doc["LiveCalls"], doc["DroppedFrames"]) == \
        ("parley-voice", [312.0, 287.5, 640.0], 2, 5)
    frames.in_late = 1
    metrics.call_ended("twilio", frames)
    emf.flush()
    doc = json.loads(lines[1])
    assert "FirstByteMs" not in doc and (doc["LiveCalls"], doc["DroppedFrames"]) == (1, 1)   # the delta only
    assert [m["Name"] for m in doc["_aws"]["CloudWatchMetrics"][0]["Metrics"]] == ["LiveCalls", "DroppedFrames"]


def test_a_busy_interval_is_split_at_emfs_100_values_and_gauges_are_written_once():
    metrics = Metrics()
    emf, lines = _publisher(metrics)
    for i in range(250):
        metrics.observe_turn("sip", {"transport_first_byte": float(i)})
    emf.flush()
    docs = [json.loads(line) for line in lines]
    assert [len(d["FirstByteMs"]) for d in docs] == [100, 100, 50]
    assert [v for d in docs for v in d["FirstByteMs"]] == [float(i) for i in range(250)]
    assert ["LiveCalls" in d for d in docs] == [True, False, False]


def test_run_flushes_each_interval_and_once_more_when_stopped():
    async def go() -> list[str]:
        metrics = Metrics()
        lines: list[str] = []
        emf = EmfPublisher(metrics, "parley-voice", lines.append, interval_s=0.05)
        task = asyncio.create_task(emf.run())
        await asyncio.sleep(0.18)
        metrics.observe_turn("twilio", {"transport_first_byte": 300.0})
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return lines

    lines = asyncio.run(go())
    assert len(lines) >= 3 and json.loads(lines[-1])["FirstByteMs"] == [300.0]


def test_the_names_are_the_ones_parley_deploys_alarms_read():
    from deploy.aws import requests as rq
    from telephony import emf

    assert (emf.NAMESPACE, emf.DIMENSION, emf.FIRST_BYTE, emf.LIVE_CALLS, emf.DROPPED_FRAMES) == \
        (rq.METRIC_NAMESPACE, rq.DEPLOYMENT_DIMENSION, rq.FIRST_BYTE_METRIC, rq.LIVE_CALLS_METRIC,
         rq.DROPPED_FRAMES_METRIC)
