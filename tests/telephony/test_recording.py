"""Call recordings: the recorder's timeline (unit, on WAV, whose samples come back exact), the WAV
written as it goes and read back after a crash, and a loopback Twilio call with a barge-in whose
two-channel recording (Ogg/Opus, the default) holds the caller and the agent as the caller heard it,
where the call's record says. The Opus files themselves: tests/pipeline/test_opus_stream.py; SIP
and browser calls' recordings: tests/telephony/sip/test_sip_recording.py and
tests/telephony/webrtc/test_webrtc_recording.py."""

from __future__ import annotations

import struct
import wave

import numpy as np
import pytest

from agent.echo import EchoAgentProcessor
from harness.callers.script import load_utterance_audio
from harness.callers.twilio import CallerConfig, CallerUtterance, run_call
from harness.flite import synthesize_flite
from pipeline.audio.dtmf_tones import find_keys, key_tone
from pipeline.audio.g711 import resample, ulaw_decode, ulaw_encode
from pipeline.audio.wav import write_wav
from pipeline.audio.recordings import read_recording
from pipeline.audio.wav_stream import WavStreamWriter, read_wav_frames
from pipeline.builder import PipelineConfig
from pipeline.errors import PipelineError
from telephony.core.recorder import KEY_AFTER_S, KEY_BEFORE_S, TONE_GUARD_S, CallRecorder, DiskWriter
from telephony.server import CallServer, ServerConfig

from .conftest import TOKEN
from .recording_checks import assert_lines_up

RATE = 8000
FRAME = 160


def frame(value: int, n: int = FRAME) -> bytes:
    return np.full(n, value, np.int16).tobytes()


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_the_agent_channel_is_the_far_ends_playout_buffer(tmp_path):
    """Agent audio plays back to back from when it arrives, on the caller's clock; a barge-in drops
    what was sent and not yet played; after a dry spell the next reply plays at once."""
    clock = FakeClock()
    rec = CallRecorder.open(tmp_path, "CA/1:x", sample_rate_hz=RATE, fmt="wav", writer=DiskWriter(), clock=clock)
    assert rec.path.name == "CA_1_x.wav"

    def caller(value: int) -> None:            # a frame read the moment it came
        clock.t += FRAME / RATE
        rec.caller(frame(value), RATE)

    caller(1)                                  # frame 0: caller only
    rec.agent(frame(7, 3 * FRAME), RATE)       # 60 ms of reply, sent ahead (the pacer's lead)
    caller(2)                                  # frame 1: the reply's first 20 ms plays
    caller(3)                                  # frame 2: its next 20 ms
    rec.clear()                                # barge-in: the last 20 ms is never heard
    caller(4)                                  # frame 3: silence from the agent
    rec.agent(frame(9, FRAME // 2), RATE)      # 10 ms of the next reply plays at once
    caller(5)                                  # frame 4
    rec.agent(frame(8, 2 * FRAME), RATE)       # queued at hang-up, never played
    assert rec.close().wait(5)
    pcm, rate = read_wav_frames(rec.path)
    assert rate == RATE and pcm.shape == (5 * FRAME, 2)
    caller, agent = pcm[:, 0].reshape(5, FRAME), pcm[:, 1].reshape(5, FRAME)
    assert [set(f) for f in caller] == [{1}, {2}, {3}, {4}, {5}]
    assert [set(f) for f in agent[:4]] == [{0}, {7}, {7}, {0}]
    assert list(agent[4]) == [9] * (FRAME // 2) + [0] * (FRAME // 2)
    with wave.open(str(rec.path)) as w:      # the closed file's header is right for any reader
        assert (w.getnchannels(), w.getframerate(), w.getnframes()) == (2, RATE, 5 * FRAME)


def test_a_barge_in_keeps_what_the_callers_clock_played_when_frames_are_read_late(tmp_path):
    """The event loop read the caller's frames 40 ms late: at the barge-in the caller had heard
    40 ms more of the reply than the frames read say, and the recording keeps it."""
    clock = FakeClock()
    rec = CallRecorder.open(tmp_path, "CA2", sample_rate_hz=RATE, fmt="wav", writer=DiskWriter(), clock=clock)
    clock.t += FRAME / RATE
    rec.caller(frame(1), RATE)                 # frame 0, on time: the clock's anchor
    rec.agent(frame(7, 5 * FRAME), RATE)       # 100 ms of reply
    clock.t += 3 * FRAME / RATE                # 60 ms pass; one frame read
    rec.caller(frame(2), RATE)
    rec.clear()                                # by its clock the caller heard 60 ms of the reply, not 20
    for v in (3, 4, 5):                        # the late frames
        rec.caller(frame(v), RATE)
    assert rec.close().wait(5)
    agent = read_wav_frames(rec.path)[0][:, 1].reshape(5, FRAME)
    assert [set(f) for f in agent] == [{0}, {7}, {7}, {7}, {0}]


def test_other_rates_are_put_on_the_recordings_rate(tmp_path):
    rec = CallRecorder.open(tmp_path, "WR1", sample_rate_hz=RATE, fmt="wav", writer=DiskWriter())
    rec.agent(np.full(480, 5, np.int16).tobytes(), 24000)   # 20 ms at 24 kHz
    rec.caller(np.full(320, 3, np.int16).tobytes(), 16000)  # 20 ms at 16 kHz
    assert rec.close().wait(5)
    pcm, _ = read_wav_frames(rec.path)
    assert pcm.shape == (FRAME, 2) and set(pcm[:, 0]) == {3} and set(pcm[:, 1]) == {5}


async def test_keypad_tones_on_the_callers_channel_are_written_as_silence(tmp_path):
    """Card digits keyed on the phone must not stay in a recording (PCI DSS): the caller's channel
    is silent where each in-band tone was, ``TONE_GUARD_S`` either side, and around a key the edge
    reported out of band whose tone was too faint to hear; everywhere else it is, sample for sample,
    what the caller sent, and the agent's channel is untouched."""
    pcm, rate_hz = await synthesize_flite("my card number is", "slt")
    speech = resample(pcm, rate_hz, RATE)
    ms = RATE // 1000
    digits = [np.concatenate((key_tone(d, duration_s=0.07, sample_rate_hz=RATE), np.zeros(60 * ms, np.int16)))
              for d in "4111"]
    faint = key_tone("5", duration_s=0.07, sample_rate_hz=RATE, level_dbfs=-50)   # under the detector's floor
    parts = [speech, np.zeros(200 * ms, np.int16), *digits, np.zeros(400 * ms, np.int16), faint]
    pressed_at = -(-sum(p.size for p in parts) // FRAME) * FRAME     # the key is reported after that frame
    parts += [np.zeros(pressed_at - sum(p.size for p in parts) + 500 * ms, np.int16), speech]
    said = np.concatenate(parts)
    said = np.concatenate((said, np.zeros(-said.size % FRAME, np.int16)))
    tones_at = speech.size + 200 * ms
    tones_end = tones_at + sum(d.size for d in digits) - 60 * ms

    rec = CallRecorder.open(tmp_path, "KEYS", sample_rate_hz=RATE, fmt="wav", writer=DiskWriter())
    rec.agent(frame(7, said.size), RATE)
    for i in range(0, said.size, FRAME):
        rec.caller(said[i:i + FRAME].tobytes(), RATE)
        if i + FRAME == pressed_at:
            rec.key_pressed()
    assert rec.close().wait(5)
    got, _ = read_wav_frames(rec.path)
    caller = got[:, 0]
    assert got.shape == (said.size, 2) and set(got[:, 1]) == {7}
    guard = int(TONE_GUARD_S * RATE)
    assert not caller[tones_at - guard:tones_end + guard].any()                   # the digits and their edges
    assert not caller[pressed_at - int(KEY_BEFORE_S * RATE):pressed_at + int(KEY_AFTER_S * RATE)].any()
    assert find_keys(caller, RATE) == [] and find_keys(said, RATE) != []
    assert np.array_equal(caller[:speech.size], speech)                           # the speech as it was
    assert np.array_equal(caller[-speech.size:], said[-speech.size:])
    assert rec.keys_silenced == 2                                                 # the run of digits, the press


def test_a_file_whose_writer_died_is_read_to_its_last_byte(tmp_path):
    path = tmp_path / "crash.wav"
    w = WavStreamWriter(path, sample_rate_hz=RATE, channels=2, fixup_every_s=60)
    data = np.arange(2 * RATE * 2, dtype=np.int16) % 1000            # 2 s, never fixed up
    w.write(data.tobytes())
    w._f.flush()                                                      # what the OS had; no close
    raw = path.read_bytes()
    assert struct.unpack("<I", raw[40:44])[0] == 0                    # the header still says empty
    pcm, rate = read_wav_frames(path)
    assert rate == RATE and pcm.shape == (2 * RATE, 2) and np.array_equal(pcm.ravel(), data)
    with open(path, "ab") as f:                                       # a half frame at the end: dropped
        f.write(b"\x01\x02")
    assert read_wav_frames(path)[0].shape == (2 * RATE, 2)
    w.close()
    assert struct.unpack("<I", path.read_bytes()[40:44])[0] == data.nbytes


def _find(haystack: np.ndarray, needle: np.ndarray) -> tuple[int, float]:
    """Where ``needle`` best matches in ``haystack``, and the normalised correlation there."""
    h, n = haystack.astype(np.float64), needle.astype(np.float64)
    corr = np.correlate(h, n, mode="valid")
    energy = np.sqrt(np.convolve(h * h, np.ones(len(n)), mode="valid")) * np.sqrt((n * n).sum())
    score = corr / np.maximum(energy, 1e-9)
    at = int(np.argmax(score))
    return at, float(score[at])


def rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(x.astype(np.float64) ** 2))) if x.size else 0.0


async def test_a_twilio_call_with_a_barge_in_is_recorded_on_two_channels(tmp_path):
    server = CallServer(ServerConfig(host="127.0.0.1", port=0, auth_token=TOKEN,
                                     pipeline=PipelineConfig(recordings_dir=str(tmp_path))),
                        agent_factory=lambda _info: EchoAgentProcessor())
    await server.start()
    utterances = (CallerUtterance(text="hello how are you"),
                  CallerUtterance(text="i would like to check my account"))   # cuts into the first reply
    config = CallerConfig(url=f"ws://127.0.0.1:{server.port}/twilio/stream", auth_token=TOKEN,
                          utterances=utterances, barge_in_ms=700, timeout_s=60)
    try:
        report = await run_call(config)
    finally:
        await server.stop()
    assert report.turns[1].barged_in and report.turns[1].clear_received, report.turns[1].to_json_line()
    record = server.store.get(report.call_sid)
    assert record is not None and record.ended and record.recording is not None
    assert record.recording.startswith(str(tmp_path)) and record.recording.endswith(f"{report.call_sid}.opus")
    pcm, rate = read_recording(record.recording)
    assert rate == RATE and pcm.shape[1] == 2
    caller, agent = pcm[:, 0], pcm[:, 1]
    # every frame the caller sent is on the caller channel (the recorder opened before the first)
    assert abs(len(caller) - report.media_frames_sent * FRAME) <= 5 * FRAME

    # the caller channel holds what the caller said, where it said it
    starts = []
    for utt in utterances:
        said = ulaw_decode(await load_utterance_audio(utt, config.voice, 30))
        at, score = _find(caller, said)
        assert score > 0.95, (utt.text, score)
        starts.append((at, at + len(said)))

    # the agent channel is what the caller heard: the caller's own recording of it, on one clock
    heard = report.agent_audio[: len(agent)]
    assert rms(agent) > 300 and abs(rms(agent) - rms(heard)) / rms(heard) < 0.2, (rms(agent), rms(heard))
    lag = _find(np.pad(agent, 4000), heard[RATE // 2: RATE // 2 + 2 * RATE])[0] - 4000 - RATE // 2
    assert abs(lag) <= 2 * FRAME, lag                                    # within two frames of the caller's clock
    n = min(len(agent), len(heard))
    same = float(np.dot(agent[:n].astype(np.float64), heard[:n]) / (np.linalg.norm(agent[:n]) * np.linalg.norm(heard[:n])))
    assert same > 0.9, same                                              # sample for sample, the same audio

    # the barge-in: the first reply was playing as the caller began again, and stopped soon after
    onset, end = starts[1]
    assert rms(agent[onset - RATE // 2: onset + int(0.3 * RATE)]) > 300  # the reply plays as they start
    assert rms(agent[onset + int(0.6 * RATE): end]) < 30                 # cut: silence while they talk

    def last_sound(x: np.ndarray) -> int:
        loud = np.flatnonzero(np.abs(x[onset:end]) > 50)
        return int(loud[-1]) if loud.size else 0
    # ... where the caller's playback stopped (the server's clear), not where the sending did: what was
    # in the far end's buffer (the pacer's lead) is not in the recording
    assert abs(last_sound(agent) - last_sound(heard)) <= 2 * FRAME, (last_sound(agent), last_sound(heard))
    assert rms(agent[end:]) > 300                                        # the second reply, after them

    # and the record's times (speech, replies, the cut) are where the recording has them
    assert_lines_up(record, expect_cut=True)


async def test_a_twilio_callers_keys_are_in_the_record_and_not_in_the_recording(tmp_path):
    """The caller says a card number's start and keys four digits on its heels (tones only, no
    ``dtmf`` message: the recorder's detector must find them), then presses a key as a phone line
    carries it (its tone on the media, then Twilio's ``dtmf`` message). The recording's caller
    channel has the speech and no tone; the record has the key and the stretches silenced."""
    pcm, rate_hz = await synthesize_flite("my card number is", "slt")
    speech = resample(pcm, rate_hz, RATE)
    gap = np.zeros(RATE * 60 // 1000, np.int16)
    keyed = np.concatenate([speech, np.zeros(RATE // 5, np.int16)]
                           + [np.concatenate((key_tone(d, duration_s=0.07, sample_rate_hz=RATE), gap)) for d in "4111"])
    wav = tmp_path / "keyed.wav"
    write_wav(wav, keyed, RATE)
    server = CallServer(ServerConfig(host="127.0.0.1", port=0, auth_token=TOKEN,
                                     pipeline=PipelineConfig(recordings_dir=str(tmp_path))),
                        agent_factory=lambda _info: EchoAgentProcessor())
    await server.start()
    utterances = (CallerUtterance(wav=wav), CallerUtterance(dtmf="5"))
    config = CallerConfig(url=f"ws://127.0.0.1:{server.port}/twilio/stream", auth_token=TOKEN,
                          utterances=utterances, dtmf_in_band=True, timeout_s=60)
    try:
        report = await run_call(config)
    finally:
        await server.stop()
    sent = ulaw_decode(await load_utterance_audio(utterances[0], config.voice, 30))
    assert "".join(k.key for k in find_keys(sent, RATE)) == "4111"          # the tones went on the line
    record = server.store.get(report.call_sid)
    assert record is not None and record.ended and record.recording is not None
    assert record.stats["dtmf"] == 1                                          # the key is in the record
    assert record.stats["recording_keys_silenced"] == 2                       # the four digits, the key
    caller = read_recording(record.recording)[0][:, 0]
    assert find_keys(caller, RATE) == []                                      # no tone in the recording
    assert _find(caller, ulaw_decode(ulaw_encode(speech)))[1] > 0.95          # the speech is


def test_old_recordings_are_pruned_and_the_spec_turns_recording_on(tmp_path):
    import argparse
    import os
    import time

    from agent.spec import parse_spec
    from deploy.serve_cli import _recordings
    from telephony.core.recorder import prune_recordings

    old, new = tmp_path / "2026-01-01" / "CA1.wav", tmp_path / "2026-12-07" / "CA2.wav"
    old_opus, new_opus = old.with_suffix(".opus"), new.with_suffix(".opus")
    for path in (old, new, old_opus, new_opus):
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(b"RIFF" if path.suffix == ".wav" else b"OggS")
    for path in (old, old_opus):
        os.utime(path, (time.time() - 40 * 86400,) * 2)
    spec = parse_spec("name: x\ngreeting: Hello.\nrecording:\n  enabled: true\n  announce: This call is recorded.\n"
                      "  retention_days: 30\n", env={})
    folder, spec = _recordings(argparse.Namespace(recordings=tmp_path), spec)
    assert folder == str(tmp_path) and spec.greeting == "This call is recorded. Hello."
    assert not old.exists() and not old_opus.exists() and not old.parent.exists()
    assert new.exists() and new_opus.exists()
    assert prune_recordings(tmp_path, 30) == 0
    assert _recordings(argparse.Namespace(recordings=None), parse_spec("name: x\ngreeting: Hi.\n", env={}))[0] is None


def test_the_recording_format_is_the_flag_else_the_spec_else_opus(tmp_path):
    import argparse

    from agent.spec import parse_spec
    from deploy.serve_cli import _recording_format

    wav_spec = parse_spec("name: x\ngreeting: Hi.\nrecording:\n  enabled: true\n  format: wav\n", env={})
    plain = parse_spec("name: x\ngreeting: Hi.\n", env={})
    assert _recording_format(argparse.Namespace(recording_format=None), wav_spec) == "wav"
    assert _recording_format(argparse.Namespace(recording_format="opus"), wav_spec) == "opus"
    assert _recording_format(argparse.Namespace(recording_format=None), plain) == "opus"
    assert _recording_format(argparse.Namespace(recording_format=None), None) == "opus"
    rec = CallRecorder.open(tmp_path, "CA3", sample_rate_hz=16000, writer=DiskWriter())
    rec.caller(frame(1000, 320), 16000)
    assert rec.close().wait(5)
    assert rec.path.name == "CA3.opus" and read_recording(rec.path)[0].shape == (320, 2)
    with pytest.raises(PipelineError, match="recording_format must be one of"):
        PipelineConfig(recording_format="mp3")
