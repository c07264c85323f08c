"""PageEventsObserver on a scripted timeline of frame pushes (no pipeline, no network)."""

from __future__ import annotations

import asyncio
import json

from pipecat.frames.frames import (
    BotStartedSpeakingFrame,
    BotStoppedSpeakingFrame,
    InterimTranscriptionFrame,
    InterruptionFrame,
    TranscriptionFrame,
    TTSTextFrame,
)
from pipecat.observers.base_observer import FramePushed
from pipecat.processors.frame_processor import FrameDirection
from pipecat.utils.text.base_text_aggregator import TextType

from pipeline.latency import TurnLatency
from telephony.webrtc import events
from telephony.webrtc.events import CallMessage, LatencyMessage, PageEventsObserver

DOWN, UP = FrameDirection.DOWNSTREAM, FrameDirection.UPSTREAM
STT, TTS, OUT, NEXT = object(), object(), object(), object()


class Timeline:
    def __init__(self):
        self.sent: list[dict] = []
        self.turn = 0
        self.observer = PageEventsObserver(send=lambda m: self.sent.append(m.to_dict()), output_transport=OUT,
                                           tts=TTS, turn_number=lambda: self.turn)

    async def push(self, source, frame, direction=DOWN, first=True):
        await self.observer.on_push_frame(FramePushed(source=source, destination=NEXT, frame=frame,
                                                      direction=direction, timestamp=0, first_push=first))


def _word(text: str) -> TTSTextFrame:
    return TTSTextFrame(text, text_type=TextType.WORD)


async def test_both_sides_of_two_turns_and_an_interruption():
    t = Timeline()
    # the greeting: said by the TTS, then played through the output transport word by word
    for w in ("Hello", "there."):
        frame = _word(w)
        await t.push(TTS, frame)
        await t.push(OUT, frame, first=False)
    await t.push(OUT, BotStoppedSpeakingFrame())
    await t.push(OUT, BotStoppedSpeakingFrame(), UP)

    # the caller: partials, then a final (each seen again downstream: counted once)
    interim = InterimTranscriptionFrame("hello how", "u", "t")
    await t.push(STT, interim)
    await t.push(NEXT, interim, first=False)
    await t.push(STT, TranscriptionFrame("hello how are you", "u", "t"))
    t.turn = 1
    frame = _word("You")
    await t.push(TTS, frame)
    await t.push(TTS, _word("said"))  # generated, never played: the caller barged in
    await t.push(OUT, frame, first=False)
    await t.push(NEXT, InterruptionFrame())

    assert [(m["role"], m["text"], m["final"], m["turn"], m["interrupted"]) for m in t.sent] == [
        ("agent", "Hello", False, 0, False),
        ("agent", "Hello there.", False, 0, False),
        ("agent", "Hello there.", True, 0, False),
        ("user", "hello how", False, 1, False),
        ("user", "hello how are you", True, 1, False),
        ("agent", "You", False, 1, False),
        ("agent", "You", True, 1, True),
    ]
    assert t.observer.lines[0].said_text == t.observer.lines[0].played_text == "Hello there."
    assert t.observer.lines[1].said_text == "You said" and t.observer.lines[1].played_text == "You"
    assert t.observer.lines[1].interrupted
    assert all(json.loads(json.dumps(m)) == m for m in t.sent)  # what the connection JSON-encodes


async def test_nothing_sent_for_blank_text_or_a_silent_stop():
    t = Timeline()
    await t.push(STT, TranscriptionFrame("  ", "u", "t"))
    await t.push(OUT, BotStoppedSpeakingFrame())
    await t.push(NEXT, InterruptionFrame())
    assert t.sent == []


def test_latency_and_call_messages():
    turn = TurnLatency(turn=2, end_of_speech_s=10.0, user_text="hi",
                       at={"vad_stop": 10.2, "transport_first_byte": 10.45})
    msg = LatencyMessage.of(turn).to_dict()
    assert msg["type"] == "latency" and msg["turn"] == 2 and msg["user_text"] == "hi"
    assert msg["latency_ms"]["vad_stop"] == 200.0 and msg["latency_ms"]["transport_first_byte"] == 450.0
    assert msg["latency_ms"]["stt_final"] is None
    assert CallMessage("ended", "WR1", "caller hung up").to_dict() == {
        "type": "call", "state": "ended", "call_id": "WR1", "reason": "caller hung up"}


async def test_a_reply_that_pauses_stays_one_line():
    """Regression: playback pausing mid-greeting (TTS behind real time) split it into two lines."""
    t = Timeline()
    await t.push(OUT, _word("Hello,"), first=False)
    await t.push(OUT, BotStoppedSpeakingFrame())
    await t.push(OUT, _word("this is parley."), first=False)
    await t.push(OUT, BotStoppedSpeakingFrame())
    assert [(m["text"], m["final"], m["turn"]) for m in t.sent] == [
        ("Hello,", False, 0), ("Hello,", True, 0), ("Hello, this is parley.", False, 0),
        ("Hello, this is parley.", True, 0)]


async def test_a_word_played_after_playback_stopped_still_ends_its_line(monkeypatch):
    """Regression (CI, 2026-12-06): pipecat times words by the clock and the stop by the audio;
    on a busy machine the greeting's last word came after its BotStoppedSpeakingFrame, and the
    line never became final."""
    monkeypatch.setattr(events, "LATE_WORD_END_S", 0.05)
    t = Timeline()
    await t.push(OUT, BotStartedSpeakingFrame())
    await t.push(OUT, _word("Hello,"), first=False)
    await t.push(OUT, BotStoppedSpeakingFrame())
    await t.push(OUT, _word("goodbye."), first=False)     # late: no stop follows it
    assert [(m["text"], m["final"]) for m in t.sent] == [
        ("Hello,", False), ("Hello,", True), ("Hello, goodbye.", False)]
    await asyncio.sleep(0.2)
    assert [(m["text"], m["final"]) for m in t.sent][3:] == [("Hello, goodbye.", True)]
    await t.push(OUT, BotStoppedSpeakingFrame())                # nothing new to end
    assert len(t.sent) == 4


async def test_a_word_played_just_before_playback_starts_does_not_end_its_line(monkeypatch):
    monkeypatch.setattr(events, "LATE_WORD_END_S", 0.05)
    t = Timeline()
    await t.push(OUT, _word("Hello,"), first=False)             # the clock let it through first
    await t.push(OUT, BotStartedSpeakingFrame())
    await t.push(OUT, _word("this is parley."), first=False)
    await asyncio.sleep(0.2)
    assert [(m["text"], m["final"]) for m in t.sent] == [
        ("Hello,", False), ("Hello, this is parley.", False)]
    await t.push(OUT, BotStoppedSpeakingFrame())
    assert [(m["text"], m["final"]) for m in t.sent][2:] == [("Hello, this is parley.", True)]


async def test_the_line_playing_when_the_call_ends_is_final():
    """A drain's farewell ends the pipeline with an EndFrame: no stop may follow its last word,
    so the call's end makes the line final (seen in full test runs: the page's last agent line
    stopped at "... How can I help you", never final)."""
    t = Timeline()
    await t.push(OUT, BotStartedSpeakingFrame())
    for w in ("We are closing now.", "Goodbye."):
        await t.push(OUT, _word(w), first=False)
    t.observer.end()
    t.observer.end()                                            # once only
    assert [(m["text"], m["final"], m["interrupted"]) for m in t.sent] == [
        ("We are closing now.", False, False), ("We are closing now. Goodbye.", False, False),
        ("We are closing now. Goodbye.", True, False)]


async def test_a_reply_cut_after_one_word_is_tagged_when_the_stop_comes_first():
    """Regression: a reply cut to one word showed no "(interrupted)": the output's stop reached
    the observer before the interruption, which then found no line playing and tagged none."""
    t = Timeline()
    t.turn = 1
    frame = _word("Sure,")
    await t.push(TTS, frame)
    await t.push(TTS, _word("your order ships on Tuesday."))   # said, never played
    await t.push(OUT, BotStartedSpeakingFrame())
    await t.push(OUT, frame, first=False)
    await t.push(OUT, BotStoppedSpeakingFrame())               # the caller cut in: playback stops
    await t.push(NEXT, InterruptionFrame())                    # ... and the interruption follows
    assert [(m["text"], m["final"], m["interrupted"]) for m in t.sent] == [
        ("Sure,", False, False), ("Sure,", True, False), ("Sure,", True, True)]
    await t.push(NEXT, InterruptionFrame())                    # tagged once
    assert len(t.sent) == 3


async def test_an_interruption_after_a_whole_reply_tags_nothing():
    t = Timeline()
    frame = _word("Goodbye.")
    await t.push(TTS, frame)
    await t.push(OUT, frame, first=False)
    await t.push(OUT, BotStoppedSpeakingFrame())
    await t.push(NEXT, InterruptionFrame())                    # the caller speaks after it ended
    assert [(m["text"], m["final"], m["interrupted"]) for m in t.sent] == [
        ("Goodbye.", False, False), ("Goodbye.", True, False)]


def test_a_turn_without_reply_audio_of_its_own_still_gets_its_latency_row():
    """Regression: the page's latency table skipped a turn of a four-turn call: a row went out
    only when a turn's reply audio left, and a turn the agent took back had none."""
    from types import SimpleNamespace

    from telephony.webrtc.call import WebRTCCall

    call = WebRTCCall.__new__(WebRTCCall)  # the page's side only: no connection, no pipeline
    sent: list[dict] = []
    call.send = lambda message: sent.append(message.to_dict())
    call._latency_rows_sent = 0
    turns = [TurnLatency(turn=n, end_of_speech_s=float(n)) for n in (1, 2, 3, 4)]
    call.latency = SimpleNamespace(turns=turns[:1])
    call._on_turn(turns[0])
    call.latency.turns = turns[:3]            # turn 2 got no audio of its own; turn 3 did
    call._on_turn(turns[2])
    call.latency.turns = turns                # turn 4 had no reply when the call ended
    call._send_latency_rows()
    call._send_latency_rows()
    assert [m["turn"] for m in sent] == [1, 2, 3, 4]
