"""Does a call's recording line up with its record? One check for every transport's test.

The record says, in seconds after the call began, where the caller's speech began and ended
(``speech_start``/``speech_end``, from the VAD), where each reply began playing (``agent_start``)
and where the caller stopped hearing it (``agent_end``); ``marks_s["recording_start"]`` is where the
recording's second 0 falls. :func:`assert_lines_up` finds the sound on each channel (10 ms windows
louder than ``LOUD`` RMS, gaps under ``GAP_S`` bridged, clicks under ``MIN_SPAN_S`` dropped) and holds the record to it within
``TOLERANCE_S``:

* each turn's caller speech is a stretch of sound on channel 0 that begins and ends where the
  record says;
* each reply (the greeting too) begins on channel 1 where the record says; a reply cut by a
  barge-in falls silent where the record says the caller stopped hearing it, and stays silent
  until the next reply; an uncut one ends before its ``agent_end`` (which counts its trailing
  silence).
"""

from __future__ import annotations

import numpy as np

from pipeline.audio.recordings import read_recording
from pipeline.records import CallRecord

TOLERANCE_S = 0.04
LOUD = 104.0        # RMS of a 10 ms window (int16, -50 dBFS: the VAD's floor too) that counts as sound
GAP_S = 0.35        # quieter stretches inside one utterance (between words) are bridged
MIN_SPAN_S = 0.06   # a click shorter than this is not speech
WINDOW_S = 0.01


def sound_spans(x: np.ndarray, rate: int) -> list[tuple[float, float]]:
    """Where ``x`` has sound, as (start, end) seconds."""
    w = int(rate * WINDOW_S)
    n = x.size // w
    rms = np.sqrt((x[: n * w].astype(np.float64).reshape(n, w) ** 2).mean(axis=1))
    loud = np.flatnonzero(rms > LOUD)
    spans: list[list[float]] = []
    for i in loud:
        t = i * WINDOW_S
        if spans and t - spans[-1][1] <= GAP_S:
            spans[-1][1] = t + WINDOW_S
        else:
            spans.append([t, t + WINDOW_S])
    return [(a, b) for a, b in spans if b - a >= MIN_SPAN_S]


def _agent_spans(record: CallRecord) -> list[tuple[str, float, float | None, bool]]:
    """(name, start, heard end, cut) of the greeting and each turn's reply, on the call's clock."""
    out = []
    marks = record.marks_s
    if "greeting_start" in marks:
        cut = bool(record.greeting) and record.greeting_heard != record.greeting
        out.append(("greeting", marks["greeting_start"], marks.get("greeting_end"), cut))
    for turn in record.turns:
        if "agent_start" in turn.at_s:
            cut = bool(turn.agent_text) and turn.agent_text_heard != turn.agent_text
            out.append((f"turn {turn.turn}", turn.at_s["agent_start"], turn.at_s.get("agent_end"), cut))
    return out


def assert_lines_up(record: CallRecord, *, tolerance_s: float = TOLERANCE_S,
                    expect_cut: bool = False) -> dict[str, float]:
    """Assert the recording of ``record`` lines up with it (module docstring). Returns the worst
    error found for each kind of moment, in seconds (for a message). ``expect_cut``: the call had
    a barge-in, and its check must have run."""
    assert record.recording, "the call was not recorded"
    pcm, rate = read_recording(record.recording)
    offset = record.marks_s["recording_start"]
    worst: dict[str, float] = {}
    caller, agent = sound_spans(pcm[:, 0], rate), sound_spans(pcm[:, 1], rate)

    def near(kind: str, expected: float, found: float, what: str) -> None:
        error = found - (expected - offset)
        worst[kind] = max(worst.get(kind, 0.0), abs(error))
        assert abs(error) <= tolerance_s, (
            f"{what}: the recording has it at {found:.3f} s, the record at {expected - offset:.3f} s "
            f"({error * 1000:+.0f} ms); the record: {record.marks_s}, turns "
            f"{[(t.at_s, t.agent_text[:30], t.agent_text_heard[:30]) for t in record.turns]}; sound: caller "
            f"{[(round(a, 2), round(b, 2)) for a, b in caller]}, agent {[(round(a, 2), round(b, 2)) for a, b in agent]}")

    for turn in record.turns:
        at = turn.at_s
        if "speech_start" not in at:
            continue
        start = at["speech_start"] - offset
        span = min(caller, key=lambda s: abs(s[0] - start))
        near("speech_start", at["speech_start"], span[0], f"turn {turn.turn}'s caller speech start")
        near("speech_end", at["speech_end"], span[1], f"turn {turn.turn}'s caller speech end")

    replies = _agent_spans(record)
    cuts = 0
    for i, (name, began, heard_end, cut) in enumerate(replies):
        nxt = replies[i + 1][1] - offset if i + 1 < len(replies) else float("inf")
        mine = [s for s in agent if began - offset - tolerance_s <= s[0] < nxt - tolerance_s]
        assert mine, f"{name}: no sound on the agent channel after {began - offset:.3f} s"
        if began - offset >= 0:   # a greeting can begin before the caller's first frame (second 0)
            near("agent_start", began, mine[0][0], f"{name}'s reply start")
        if heard_end is None:
            continue
        last = max(b for _, b in mine)
        if cut:
            cuts += 1
            near("agent_cut", heard_end, last, f"{name}'s reply, cut by a barge-in, falls silent")
        else:
            assert last <= heard_end - offset + tolerance_s, (
                f"{name}'s reply sounds until {last:.3f} s, past its end at {heard_end - offset:.3f} s")
    assert cuts or not expect_cut, "no reply was cut by a barge-in"
    return worst
