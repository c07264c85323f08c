"""Frame-loss counting: the inbound meter, the output pacer, the WebRTC playout track, /metrics."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from pipecat.frames.frames import EndFrame, OutputAudioRawFrame, StartFrame
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.transports.base_output import BaseOutputTransport
from pipecat.transports.base_transport import TransportParams
from pipecat.workers.runner import WorkerRunner

from telephony.audio_meter import FrameCounts, InboundMeter
from telephony.metrics import Metrics
from telephony.pacer import OutputPacer, paced_transport_params
from telephony.playout import PlayoutTracker, UtteranceState
from telephony.webrtc.media import PlayoutTrack
from tests.metrics_text import sample


def test_counts_name_themselves_for_the_record():
    c = FrameCounts(in_frames=5, in_lost=1, out_frames=7, out_underrun=2)
    assert c.as_dict() == {"frames_in": 5, "frames_in_lost": 1, "frames_in_late": 0, "frames_out": 7,
                           "frames_out_underrun": 2, "frames_out_late": 0}
    assert c.missed == 3


def test_inbound_gaps_are_lost_and_repeats_late():
    c = FrameCounts()
    m = InboundMeter(c)
    for i in (1, 2, 3, 6, 7, 7, 5, 8):  # 4 and 5 missing; 7 repeated; 5 comes after its place passed
        m.arrived(index=i, media_s=i * 0.02, now_s=i * 0.02)
    assert (c.in_frames, c.in_lost, c.in_late) == (8, 2, 2)


def test_inbound_lateness_is_measured_against_the_quickest_transit():
    c = FrameCounts()
    m = InboundMeter(c, late_after_s=0.06)
    now = 100.0
    for i in range(10):  # in step with the sender, give or take a few ms: none late
        m.arrived(index=i, media_s=i * 0.02, now_s=now + i * 0.02 + (i % 3) * 0.004)
    m.arrived(index=10, media_s=0.2, now_s=now + 0.2 + 0.05)  # 50 ms behind the quickest: on time
    m.arrived(index=11, media_s=0.22, now_s=now + 0.22 + 0.07)  # 70 ms behind: late
    assert (c.in_frames, c.in_lost, c.in_late) == (12, 0, 1)
    # an RTP talkspurt (or a new sender) restarts the baseline: a clock that stood still is no fault
    m.arrived(index=None, media_s=0.24, now_s=now + 5.0, new_spurt=True)
    m.arrived(index=None, media_s=0.26, now_s=now + 5.02)
    assert c.in_late == 1


class FakeClock:
    def __init__(self) -> None:
        self.now = 50.0
        self.slept: list[float] = []
        self.oversleep_s = 0.0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.now += s + self.oversleep_s


async def test_pacer_keeps_an_absolute_clock_and_counts_gaps():
    clock, c = FakeClock(), FrameCounts()
    pacer = OutputPacer(c, lead_s=0.04, clock=clock, sleep=clock.sleep)
    for _ in range(3):  # the first 40 ms go at once (the lead), then one per 20 ms slot
        await pacer.wait(0.02)
    assert clock.now == pytest.approx(50.0)
    await pacer.wait(0.02)
    assert clock.now == pytest.approx(50.02)
    assert (c.out_frames, c.out_underrun, c.out_late) == (4, 0, 0)
    # 80 ms are out; the next chunk comes 65 ms after they finished playing: 3 frames of silence
    clock.now = 50.08 + 0.065
    await pacer.wait(0.02)  # the clock restarts now: sent at once, with the lead
    assert c.out_underrun == 3 and clock.now == pytest.approx(50.145)
    await pacer.wait(0.02)
    await pacer.wait(0.02)
    assert (c.out_frames, c.out_underrun, c.out_late) == (7, 3, 0)
    pacer.idle()  # between utterances a pause is no underrun
    clock.now += 2.0
    await pacer.wait(0.02)
    assert (c.out_frames, c.out_underrun, c.out_late) == (8, 3, 0)


async def test_late_counts_frames_past_their_playout_slot_not_past_the_lead():
    clock, c = FakeClock(), FrameCounts()
    pacer = OutputPacer(c, lead_s=0.06, clock=clock, sleep=clock.sleep)
    await pacer.wait(0.1)  # at once: its slot is 50.00
    clock.oversleep_s = 0.05  # due at 50.04, woken at 50.09: still 10 ms before its slot
    await pacer.wait(0.1)
    assert clock.now == pytest.approx(50.09) and c.out_late == 0
    clock.oversleep_s = 0.11  # due at 50.14, woken at 50.25: 50 ms past its slot (50.20)
    await pacer.wait(0.1)
    # of its five 20 ms frames, the first two left a whole frame or more past their slots
    assert (c.out_frames, c.out_underrun, c.out_late) == (15, 0, 2)


def test_tracker_words_from_pts_and_echo_less_playout():
    t = PlayoutTracker()
    t.add_words("Hello there,", 5_000_000_000)
    t.add_words("how are", 5_600_000_000)
    t.add_words("you?", 6_100_000_000)
    t.audio_played(700.0)
    u = t.clear()
    assert u is not None and u.state is UtteranceState.CLEARED
    assert u.heard_text() == "Hello there, how are"  # words that started within the 700 ms played
    u.played(500.0)  # a straggler after the barge-in changes nothing
    assert u.heard_ms == 700.0
    t.add_words("Goodbye.", 9_000_000_000)
    t.audio_played(100.0)
    done = t.finish()
    assert done is not None and done.state is UtteranceState.HEARD and done.heard_text() == "Goodbye."


async def test_playout_track_counts_underruns_inside_an_utterance_only():
    c = FrameCounts()
    tracker = PlayoutTracker()
    track = PlayoutTrack(16000, c)
    a = tracker.begin()
    chunk = np.full(160, 1000, np.int16).tobytes()  # 10 ms
    done = track.add_audio(chunk * 4, a)  # 40 ms
    frames = [await track.recv() for _ in range(4)]
    assert done.done() and [f.pts for f in frames] == [0, 160, 320, 480]
    assert [await track.recv() for _ in range(3)]  # 30 ms with nothing queued
    track.add_audio(chunk * 2, a)  # more of the same utterance: the hole was an underrun
    for _ in range(2):
        await track.recv()
    assert (c.out_frames, c.out_underrun) == (3, 2)  # 20 ms frames: 30 ms of hole touched two
    assert a.sent_ms == a.heard_ms == 60.0
    for _ in range(5):
        await track.recv()
    b = tracker.begin()  # a new utterance after a pause: no underrun
    track.add_audio(chunk * 2, b)
    for _ in range(2):
        await track.recv()
    assert (c.out_frames, c.out_underrun) == (4, 2)
    pending = track.add_audio(chunk * 8, b)
    track.clear()  # barge-in: the queue goes, its writer is released
    assert pending.done() and not track._queue
    track.stop()


def test_metrics_include_live_calls_and_fold_in_ended_ones():
    m = Metrics()
    live, done = FrameCounts(in_frames=10, in_lost=1), FrameCounts(out_frames=4, out_underrun=2)
    m.call_started("twilio", live)
    m.call_started("twilio", done)
    m.call_ended("twilio", done)
    text = m.render()
    assert sample(text, 'parley_audio_frames_total{transport="twilio",direction="in"}') == 10
    assert sample(text, 'parley_audio_frames_total{transport="twilio",direction="out"}') == 4
    assert sample(text, 'parley_audio_frames_missed_total{transport="twilio",direction="in",reason="lost"}') == 1
    assert sample(text, 'parley_audio_frames_missed_total{transport="twilio",direction="out",reason="underrun"}') == 2
    live.in_lost += 2  # a live call's counters are read at each scrape
    assert m.frames("twilio").in_lost == 3
    m.call_ended("twilio", live)
    live.in_lost += 100  # after the end it is folded in and no longer read
    assert m.frames("twilio").in_lost == 3


def test_pacer_refuses_nonsense():
    with pytest.raises(ValueError):
        OutputPacer(FrameCounts(), lead_s=-1)
    with pytest.raises(ValueError):
        OutputPacer(FrameCounts(), frame_s=0)


async def test_pacer_survives_the_utterance_ending_while_a_chunk_waits():
    """Regression: idle() (barge-in, end of utterance) ran while wait() slept, and the wake-up
    did ``None += duration`` (TypeError in the transport's audio writer)."""
    clock, c = FakeClock(), FrameCounts()

    async def sleep_then_idle(s: float) -> None:
        await clock.sleep(s)
        pacer.idle()

    pacer = OutputPacer(c, lead_s=0.0, clock=clock, sleep=sleep_then_idle)
    await pacer.wait(0.02)
    await pacer.wait(0.02)        # sleeps 20 ms; the utterance is cut meanwhile
    assert pacer.speaking and c.out_frames == 2


async def _write_tasks(params) -> list[asyncio.Task]:
    """Run 5 agent frames of 100 ms through pipecat's output machinery; the task each write ran in."""
    tasks: list[asyncio.Task] = []

    class Out(BaseOutputTransport):
        async def start(self, frame: StartFrame):
            await super().start(frame)
            await self.set_transport_ready(frame)

        async def write_audio_frame(self, frame: OutputAudioRawFrame) -> bool:
            tasks.append(asyncio.current_task())
            return True

    out = Out(params)
    worker = PipelineWorker(Pipeline([out]), params=PipelineParams(audio_out_sample_rate=8000),
                            enable_rtvi=False)
    await worker.queue_frames([OutputAudioRawFrame(bytes(1600), 8000, 1) for _ in range(5)] + [EndFrame()])
    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    await asyncio.wait_for(runner.run(), 20)
    return tasks


async def test_paced_transports_write_frames_without_a_task_per_frame():
    """pipecat wraps each write in wait_for, a task per 20 ms frame on Python 3.11 (two more loop
    turns a frame, which starved calls' output under load); the paced transports' params do not."""
    default = await _write_tasks(TransportParams(audio_out_enabled=True, audio_out_sample_rate=8000,
                                                 audio_out_10ms_chunks=2))
    paced = await _write_tasks(paced_transport_params(8000))
    # 500 ms of audio, then pipecat's one write of silence at the end
    assert len(default) == 25 + 1, "pipecat's default: 20 ms writes"
    assert len(paced) == 5 + 1, "the paced transports write 100 ms frames"
    assert len(set(paced)) == 1, "every write ran in the media sender's own task"
    assert len(set(default)) == len(default), "pipecat's guarded write: a task per frame"
