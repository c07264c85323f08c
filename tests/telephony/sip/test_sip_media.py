"""RTP media over loopback: the jitter buffer, receiving, paced sending, DTMF out, barge-in."""

from __future__ import annotations

import asyncio
import random
import time

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from pipecat.audio.dtmf.types import KeypadEntry
from pipecat.frames.frames import (
    InterruptionFrame,
    OutputAudioRawFrame,
    OutputDTMFFrame,
    TTSAudioRawFrame,
    TTSStartedFrame,
    TTSTextFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.workers.runner import WorkerRunner

from pipeline.audio.g711 import ulaw_decode, ulaw_encode
from telephony.pacer import LEAD_S
from telephony.sip.media import AudioIn, DtmfIn, RtpSession
from telephony.sip.rtp import JitterBuffer, RtpPacket, TelephoneEvent
from telephony.sip.sdp import Codec, NegotiatedMedia
from telephony.playout import UtteranceState
from telephony.sip.transport import SipTransport


def _pkt(seq: int, payload: bytes = b"\xff" * 160) -> RtpPacket:
    return RtpPacket(payload_type=0, sequence=seq & 0xFFFF, timestamp=(seq * 160) & 0xFFFFFFFF, ssrc=7,
                     payload=payload)


def _seqs(items) -> list[int | None]:
    return [None if p is None else p.sequence for p in items]


def test_jitter_buffer_in_order_reorder_loss_duplicates_and_wrap():
    jb = JitterBuffer(depth=2)
    assert _seqs(jb.push(_pkt(65534))) == [65534]  # in order: out at once
    assert _seqs(jb.push(_pkt(65535))) == [65535]
    assert _seqs(jb.push(_pkt(1))) == []  # 0 is missing: wait
    assert _seqs(jb.push(_pkt(0))) == [0, 1]  # it came, late but in the window: reordered
    assert _seqs(jb.push(_pkt(1))) == [] and jb.late == 1  # duplicate dropped
    assert _seqs(jb.push(_pkt(3))) == []
    assert _seqs(jb.push(_pkt(4))) == []
    assert _seqs(jb.push(_pkt(5))) == [None, 3, 4, 5] and jb.lost == 1  # 2 never came: concealed
    assert _seqs(jb.push(_pkt(2))) == [] and jb.late == 2  # too late now
    assert _seqs(jb.push(_pkt(40000))) == [40000] and jb.resyncs == 1  # a restarted sender


@given(st.lists(st.integers(0, 3), min_size=1, max_size=200), st.integers(0, 0xFFFF), st.randoms())
def test_jitter_buffer_output_is_ordered_and_complete(jitter, start, rnd):
    """Packets displaced by at most the buffer depth all come out, in order, none concealed.

    The stream's first packet must arrive first: it sets where playing starts (zero added latency),
    so a packet older than it is late by definition.
    """
    jitter[0] = 0
    seqs = [(start + i) & 0xFFFF for i in range(len(jitter))]
    arrival = sorted(range(len(seqs)), key=lambda i: i + jitter[i] + rnd.random() * 0.1)
    jb = JitterBuffer(depth=4)
    out = []
    for i in arrival:
        out += jb.push(_pkt(seqs[i]))
    out += jb.flush()
    assert _seqs(out) == seqs


def _media(remote, *, hold=False) -> NegotiatedMedia:
    return NegotiatedMedia(Codec(0, "PCMU", 8000), 101, remote, "recvonly" if hold else "sendrecv")


class _Receiver(asyncio.DatagramProtocol):
    def __init__(self):
        self.got: list[tuple[float, RtpPacket]] = []

    def datagram_received(self, data, addr):
        self.got.append((time.monotonic(), RtpPacket.parse(data)))


async def _receiver():
    loop = asyncio.get_running_loop()
    transport, rx = await loop.create_datagram_endpoint(_Receiver, local_addr=("127.0.0.1", 0))
    return transport, rx, transport.get_extra_info("sockname")


async def _session(remote, *, acked: bool = True) -> RtpSession:
    session = RtpSession("test-call", _media(remote), allowed_sources={"127.0.0.1"})
    await session.open("127.0.0.1", 40000, 49999)
    if acked:  # as after the call's ACK
        session.start_sending()
    return session


async def test_nothing_is_sent_before_the_ack_and_a_second_is_held():
    """Regression: an INVITE nobody ACKed had ~36 s of our RTP sent to whatever address its SDP
    named. Now packets wait (the last second of them) for the ACK, then leave in order."""
    transport, rx, remote = await _receiver()
    session = await _session(remote, acked=False)
    for i in range(60):
        session.send_audio(np.full(160, i, np.int16))
    await asyncio.sleep(0.2)
    assert rx.got == [] and session.stats.packets_out == 0
    session.start_sending()
    await asyncio.sleep(0.2)
    assert len(rx.got) == 50 == session.stats.packets_out  # the oldest 10 were dropped
    seqs = [pkt.sequence for _, pkt in rx.got]
    assert seqs == [(seqs[0] + i) & 0xFFFF for i in range(50)]
    session.send_audio(np.zeros(160, np.int16))  # from now on, straight out
    await asyncio.sleep(0.1)
    assert len(rx.got) == 51
    session.close()
    transport.close()


async def test_receiving_reorders_decodes_drops_junk_and_dedupes_dtmf():
    session = await _session(("127.0.0.1", 9))
    loop = asyncio.get_running_loop()
    tx, _ = await loop.create_datagram_endpoint(asyncio.DatagramProtocol, remote_addr=("127.0.0.1", session.port))
    tone = (1000 * np.sin(np.arange(160) * 0.3)).astype(np.int16)
    order = [0, 2, 1, 3, 4]
    for i in order:
        tx.sendto(bytes(_pkt(100 + i, ulaw_encode(tone + i))))
    tx.sendto(b"\x00" * 20)  # RTP version 0
    tx.sendto(bytes(RtpPacket(96, 1, 1, 7, b"x")))  # a payload type we never agreed on
    for end in (False, False, True, True, True):  # one key press, the end retransmitted
        tx.sendto(bytes(RtpPacket(101, 200, 4242, 7, bytes(TelephoneEvent(11, end, 10, 800)))))
    await asyncio.sleep(0.2)
    items = [session.queue.get_nowait() for _ in range(session.queue.qsize())]
    audio = [i for i in items if isinstance(i, AudioIn)]
    assert len(audio) == 5
    for i, a in enumerate(audio):  # back in sequence order, decoded
        np.testing.assert_array_equal(np.frombuffer(a.pcm, np.int16), ulaw_decode(ulaw_encode(tone + i)))
    assert [i.digit for i in items if isinstance(i, DtmfIn)] == ["#"]
    stats = session.stats
    assert (stats.packets_in, stats.bad_packets, stats.foreign_packets, stats.dtmf_in) == (5, 1, 1, ["#"])
    tx.close()
    session.close()


async def test_a_late_end_packet_of_an_earlier_key_is_no_new_key():
    """Regression: a reordered end packet of key 1, arriving after key 2 began, counted as a
    third key press."""
    session = await _session(("127.0.0.1", 9))
    loop = asyncio.get_running_loop()
    tx, _ = await loop.create_datagram_endpoint(asyncio.DatagramProtocol, remote_addr=("127.0.0.1", session.port))

    def event(seq: int, ts: int, key: int, end: bool) -> bytes:
        return bytes(RtpPacket(101, seq, ts, 7, bytes(TelephoneEvent(key, end, 10, 800))))

    for seq, ts, key, end in [(1, 0xFFFFFF00, 1, False), (2, 0xFFFFFF00, 1, True),  # key 1, near the wrap
                              (4, 0x00000100, 2, False),  # key 2, after the timestamp wrapped
                              (3, 0xFFFFFF00, 1, True),   # key 1's end, late
                              (5, 0x00000100, 2, True), (6, 0x00000900, 3, True)]:
        tx.sendto(event(seq, ts, key, end))
    await asyncio.sleep(0.2)
    assert session.stats.dtmf_in == ["1", "2", "3"]
    tx.close()
    session.close()


async def test_lost_and_late_packets_count_as_lost_and_late_frames():
    session = await _session(("127.0.0.1", 9))
    loop = asyncio.get_running_loop()
    tx, _ = await loop.create_datagram_endpoint(asyncio.DatagramProtocol, remote_addr=("127.0.0.1", session.port))
    for i in [*range(0, 5), *range(7, 15)]:  # 5 and 6 never come: the jitter buffer conceals them
        tx.sendto(bytes(_pkt(1000 + i)))
    await asyncio.sleep(0.2)
    # 0.2 s later, a packet stamped only 20 ms after the last one: it came 180 ms late
    tx.sendto(bytes(_pkt(1015)))
    await asyncio.sleep(0.1)
    # a new talkspurt (marker bit) may start where the sender's clock stood: not late
    tx.sendto(bytes(RtpPacket(0, 1016, 1016 * 160, 7, b"\xff" * 160, marker=True)))
    await asyncio.sleep(0.05)
    stats = session.stats.as_dict()
    assert (stats["frames_in"], stats["frames_in_lost"], stats["frames_in_late"]) == (15, 2, 1), stats
    tx.close()
    session.close()


async def test_audio_leaves_in_paced_20ms_packets_on_an_absolute_clock():
    rx_t, rx, addr = await _receiver()
    session = await _session(addr)
    transport = SipTransport(session, on_transfer=None)  # type: ignore[arg-type]
    out = transport.output()
    pcm = (3000 * np.sin(np.arange(8000) * 0.05)).astype(np.int16)  # 1 s
    t0 = time.monotonic()
    for i in range(0, 8000, 160):
        await out.write_audio_frame(OutputAudioRawFrame(pcm[i:i + 160].tobytes(), 8000, 1))
        await asyncio.sleep(random.random() * 0.004)  # scheduling noise must not accumulate
    await asyncio.sleep(0.05)
    await asyncio.sleep(0.3)  # idle: a new talkspurt follows
    await out.write_audio_frame(OutputAudioRawFrame(pcm[:160].tobytes(), 8000, 1))
    await asyncio.sleep(0.05)
    packets = [p for _, p in rx.got]
    times = [t for t, _ in rx.got]
    assert len(packets) == 51
    first, spurt = packets[:50], packets[50]
    assert [p.sequence for p in packets] == [(packets[0].sequence + i) & 0xFFFF for i in range(51)]
    assert [(p.timestamp - first[0].timestamp) & 0xFFFFFFFF for p in first] == [160 * i for i in range(50)]
    assert [p.marker for p in first] == [True] + [False] * 49 and spurt.marker
    gap_samples = (spurt.timestamp - first[-1].timestamp) & 0xFFFFFFFF
    assert 0.3 * 8000 < gap_samples < 0.5 * 8000  # the timestamp follows the wall clock across the gap
    # 50 packets in one second, no drift, each sent LEAD_S before its slot for the far end to hold
    assert 0.96 - LEAD_S <= times[49] - t0 <= 1.06 - LEAD_S, times[49] - t0
    np.testing.assert_array_equal(ulaw_decode(b"".join(p.payload for p in first)), ulaw_decode(ulaw_encode(pcm)))
    rx_t.close()
    session.close()


async def test_dtmf_goes_out_as_rfc4733_events():
    rx_t, rx, addr = await _receiver()
    session = await _session(addr)
    await session.send_dtmf("7", duration_ms=160)
    await asyncio.sleep(0.05)
    packets = [p for _, p in rx.got]
    events = [TelephoneEvent.parse(p.payload) for p in packets]
    assert {p.payload_type for p in packets} == {101} and len({p.timestamp for p in packets}) == 1
    assert [e.event for e in events] == [7] * len(events) and packets[0].marker
    assert [e.end for e in events][-3:] == [True] * 3 and not events[0].end
    assert events[-1].duration == 1280 and session.stats.dtmf_out == ["7"]
    # pipecat's OutputDTMFFrame takes the same native path through the output transport
    out = SipTransport(session, on_transfer=None).output()  # type: ignore[arg-type]
    assert out._supports_native_dtmf()
    await out._write_dtmf_native(OutputDTMFFrame(buttons=[KeypadEntry.POUND, KeypadEntry.ONE]))
    assert session.stats.dtmf_out == ["7", "#", "1"]
    rx_t.close()
    session.close()


async def test_hold_sends_nothing():
    rx_t, rx, addr = await _receiver()
    session = await _session(addr)
    session.update(_media(addr, hold=True))
    session.send_audio(np.zeros(160, np.int16))
    await asyncio.sleep(0.05)
    assert rx.got == [] and session.stats.packets_out == 0
    rx_t.close()
    session.close()


async def test_interruption_drops_the_queued_audio():
    """And keeps only the words already sent. Regression: the base class's reset announced
    BotStoppedSpeaking before the transport cleared the utterance, which then counted as all heard."""
    rx_t, rx, addr = await _receiver()
    session = await _session(addr)
    transport = SipTransport(session, on_transfer=None)  # type: ignore[arg-type]
    worker = PipelineWorker(Pipeline([transport.output()]), enable_rtvi=False,
                            params=PipelineParams(audio_out_sample_rate=8000), idle_timeout_secs=None)
    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    run = asyncio.create_task(runner.run())
    try:
        await worker.queue_frame(TTSStartedFrame())
        for word, start_s in (("one", 0.0), ("two", 0.2), ("three", 1.0), ("four", 1.5)):  # TTS word times
            text = TTSTextFrame(word, text_type="word")
            text.pts = 10**9 + int(start_s * 1e9)
            await worker.queue_frame(text)
        await worker.queue_frame(TTSAudioRawFrame(np.full(16000, 500, np.int16).tobytes(), 8000, 1))  # 2 s
        await asyncio.sleep(0.5)
        await worker.queue_frame(InterruptionFrame())
        await asyncio.sleep(0.6)
        sent = len(rx.got)
        assert 15 <= sent <= 40, sent  # about 0.5 s of the 2 s went out, then nothing more
        await asyncio.sleep(0.3)
        assert len(rx.got) == sent
        (utt,) = transport.tracker.utterances
        assert utt.state is UtteranceState.CLEARED and utt.text == "one two three four"
        assert utt.heard_text() == "one two"
    finally:
        await worker.cancel()
        await run
        rx_t.close()
        session.close()
