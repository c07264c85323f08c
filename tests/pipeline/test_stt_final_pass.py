"""The final pass: a recogniser folder with a ``final/`` model decodes each utterance's final
from Whisper's encoding of the whole utterance at its end; the stream only makes partials."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import time

import numpy as np
import pytest
import torch

from pipeline.engines import utterance_final
from pipeline.engines.ssm_recognizer import DEFAULT_MODEL_DIR, FINAL_DIR, SSMSTTEngine
from pipeline.errors import EngineUnavailableError, PipelineError
from ssm_engine.stt.hints import NO_HINTS, Hints
from ssm_engine.stt.joint import JointConfig
from ssm_engine.stt.encoder_model import save_whisper_stt
from ssm_engine.stt.stream import decode_utterance
from tests.pipeline.stt_models import saying



@pytest.fixture
def folder(tmp_path):
    """A recogniser folder: a stream model saying "h", a final-pass model saying "b"."""
    d = tmp_path / "stt"
    save_whisper_stt(saying("h"), d)
    save_whisper_stt(saying("b", "utterance"), d / FINAL_DIR)
    for name in ("lm.arpa.gz", "lexicon.dict.gz"):
        shutil.copy(DEFAULT_MODEL_DIR / name, d / name)
    return d


pytestmark = pytest.mark.usefixtures("one_torch_thread")   # tests/conftest.py


@pytest.fixture
def short_pieces(monkeypatch):
    """Pieces of 0.6 s, cut in their last 0.3 s: a long utterance in a test's few seconds."""
    monkeypatch.setattr(utterance_final, "FINAL_PIECE_S", 0.6)
    monkeypatch.setattr(utterance_final, "FINAL_CUT_SEARCH_S", 0.3)


def _speech(seconds: float = 1.2) -> np.ndarray:
    rng = np.random.default_rng(0)
    t = np.arange(int(seconds * 8000)) / 8000
    x = 0.3 * np.sin(2 * np.pi * 220 * t) + 0.02 * rng.standard_normal(t.size)
    return (x * 32767).astype(np.int16)


def test_the_final_comes_from_the_final_pass_and_partials_from_the_stream(folder):
    engine = SSMSTTEngine(folder, decoder="greedy")
    try:
        assert engine.final_model is not None and engine.final_model.config.features == "utterance"
        utt = engine.open(8000)
        pcm = _speech()
        partials = []
        for i in range(0, len(pcm), 160):
            fut = utt.push(pcm[i: i + 160])
            if fut is not None and utt.take(fut.result(timeout=30)):
                partials.append(utt.text)
        assert partials and set(partials) == {"h"}             # the stream's greedy partials
        assert utt.final_pass and utt.finish_sync() == "b"     # the final pass's final
        assert utt.recognition is not None and utt.recognition.text == "b"
    finally:
        engine.close()


def test_the_final_pass_decodes_with_the_engines_beam_and_hints(folder):
    engine = SSMSTTEngine(folder)                              # the joint beam over both heads
    try:
        pcm = _speech(0.9)
        got = engine.transcribe(pcm, 8000)
        audio = torch.from_numpy(pcm.astype(np.float32) / 32768.0)[None]
        want = decode_utterance(engine.final_model.utterance_log_probs(audio), engine.final_model.config,
                                beam=engine.beam)
        assert got == want.text
    finally:
        engine.close()


def test_without_the_final_pass_the_stream_decodes_the_final(folder):
    engine = SSMSTTEngine(folder, decoder="greedy", final_pass=False)
    try:
        assert engine.final_model is None
        assert engine.transcribe(_speech(), 8000) == "h"
    finally:
        engine.close()


def test_a_failing_final_pass_keeps_the_streams_final_and_says_why(folder, monkeypatch, caplog):
    engine = SSMSTTEngine(folder, decoder="greedy")
    try:
        def broken(audio, state=None):
            raise RuntimeError("boom")
        monkeypatch.setattr(engine.final_model, "piece_log_probs", broken)
        with caplog.at_level(logging.ERROR, logger="pipeline.engines.utterance_final"):
            assert engine.transcribe(_speech(), 8000) == "h"
        assert "the final pass failed; the stream's final stands" in caplog.text
    finally:
        engine.close()


@pytest.mark.usefixtures("short_pieces")
def test_a_long_utterance_is_encoded_in_pieces_while_the_caller_speaks(folder):
    engine = SSMSTTEngine(folder, decoder="greedy")
    try:
        utt = engine.open(8000)
        pcm = _speech(2.5)
        pcm[int(0.5 * 8000): int(0.52 * 8000)] = 0          # a pause: the first piece ends in it
        for i in range(0, len(pcm), 160):
            fut = utt.push(pcm[i: i + 160])
            if fut is not None:
                utt.take(fut.result(timeout=30))
        final_pass = utt._final_pass
        deadline = time.monotonic() + 30
        while final_pass.decoded < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert final_pass.decoded >= 3      # encoded while the audio came, before the end
        assert utt.finish_sync() == "b" and final_pass.decoded >= 4
    finally:
        engine.close()


def test_pieces_carry_the_ssm_on_and_cut_at_the_pause():
    model = saying("b", "utterance")
    torch.manual_seed(1)
    with torch.no_grad():                                     # a state worth carrying
        for p in model.stack.parameters():
            p.add_(0.05 * torch.randn_like(p))
    audio = torch.from_numpy(_speech(1.6).astype(np.float32) / 32768.0)[None]
    first, state = model.piece_log_probs(audio[:, :6400])
    second, _ = model.piece_log_probs(audio[:, 6400:], state)
    fresh, _ = model.piece_log_probs(audio[:, 6400:])
    assert first.shape[0] == 40 and second.shape[0] == 40
    assert not torch.allclose(second, fresh)                 # the second piece heard the first's state
    x = np.ones(16000, np.float32)
    x[15040:15200] = 0.0                  # the quietest 20 ms frame of the last 1.5 s (from 4,000)
    assert utterance_final._quiet_cut(x, 8000) == 15120        # its middle
    assert utterance_final._quiet_cut(np.ones(100, np.float32), 8000) == 100   # under a frame: all


def test_a_final_folder_that_is_not_a_final_pass_model_is_refused(folder):
    save_whisper_stt(saying("b"), folder / FINAL_DIR)        # a stream model in final/
    with pytest.raises(EngineUnavailableError, match="not a final-pass model"):
        SSMSTTEngine(folder, decoder="greedy")
    shutil.rmtree(folder / FINAL_DIR)
    with pytest.raises(EngineUnavailableError, match="final-pass model failed to load"):
        SSMSTTEngine(folder, decoder="greedy", final_pass=True)


def _push_all(utt, pcm):
    for i in range(0, len(pcm), 160):
        fut = utt.push(pcm[i: i + 160])
        if fut is not None:
            utt.take(fut.result(timeout=30))


def _said_then_quiet(engine, seconds: float):
    """An utterance of ``seconds`` of speech, then 300 ms of quiet (the VAD's stop timer runs)."""
    utt = engine.open(8000)
    _push_all(utt, _speech(seconds))
    _push_all(utt, np.zeros(2400, np.int16))
    return utt


def _final_of(engine, pcm: np.ndarray) -> str:
    """What the final pass makes of exactly ``pcm``, decoded whole."""
    audio = torch.from_numpy(pcm.astype(np.float32) / 32768.0)[None]
    return decode_utterance(engine.final_model.utterance_log_probs(audio), engine.final_model.config,
                            beam=engine.beam).text


def test_quiet_after_speech_starts_the_final_early_and_it_is_the_final(folder):
    engine = SSMSTTEngine(folder)
    try:
        utt = engine.open(8000)
        speech = _speech(1.0)
        _push_all(utt, speech)
        final_pass = utt._final_pass
        assert final_pass.speculated == 0                      # no quiet yet
        _push_all(utt, np.zeros(2400, np.int16))              # 300 ms of quiet: the VAD's stop timer
        assert final_pass.speculated == 1
        text = utt.finish_sync()
        assert final_pass.early_final
        heard = np.concatenate([speech, np.zeros(800, np.int16)])   # up to 100 ms into the quiet
        assert text == _final_of(engine, heard) != ""          # that audio decoded whole
    finally:
        engine.close()


@pytest.mark.parametrize("pause", ["quiet", "vad"])
def test_speech_after_a_pause_discards_the_early_final(folder, pause):
    engine = SSMSTTEngine(folder, decoder="greedy")
    try:
        utt = engine.open(8000)
        _push_all(utt, _speech(0.6))
        if pause == "quiet":
            _push_all(utt, np.zeros(1600, np.int16))          # a 200 ms pause: an early final starts
        else:
            utt.pause(True)                                   # the VAD's stop timer: one starts,
            utt.pause(False)                                  # then the VAD heard speech again
        _push_all(utt, _speech(0.6))                          # the caller goes on
        final_pass = utt._final_pass
        assert final_pass.speculated == 1
        assert utt.finish_sync() == "b" and not final_pass.early_final   # decoded at the end
    finally:
        engine.close()


def test_no_early_final_without_a_pause_nor_past_speech_the_vad_missed(folder):
    engine = SSMSTTEngine(folder, decoder="greedy")
    try:
        noisy = engine.open(8000)                             # never quiet: never early
        _push_all(noisy, _speech(1.0))
        assert noisy.finish_sync() == "b" and noisy._final_pass.speculated == 0
        missed = engine.open(8000)                            # speech the VAD does not hear:
        _push_all(missed, _speech(0.6))                       # past PAUSE_LOUD_MAX_S of it the
        missed.pause(True)                                    # pause's final is stale too
        _push_all(missed, _speech(0.3))
        assert missed._final_pass.speculated == 1 and missed._final_pass._vspec is None
        assert missed.finish_sync() == "b" and not missed._final_pass.early_final
    finally:
        engine.close()


def test_early_finals_are_on_by_default_and_zero_turns_them_off(folder, monkeypatch):
    engine = SSMSTTEngine(folder, decoder="greedy")
    try:
        utt = _said_then_quiet(engine, 0.6)
        futures = utt.finish()
        assert len(futures) == 1                              # the early final: no flush waited for
        utt.take(futures[0].result())
        assert utt._final_pass.early_final and utt.text == "b"
        monkeypatch.setattr(utterance_final, "SPECULATE_MAX", 0)
        late = _said_then_quiet(engine, 0.6)
        assert late._final_pass.speculated == 0 and late.finish_sync() == "b"
        assert not late._final_pass.early_final
    finally:
        engine.close()


def test_the_vads_pause_starts_the_final_before_the_quiet_would(folder):
    engine = SSMSTTEngine(folder)
    try:
        utt = engine.open(8000)
        speech = _speech(1.0)
        _push_all(utt, speech)
        final_pass = utt._final_pass
        utt.pause(True)                                     # the VAD's stop timer starts
        assert final_pass.speculated == 1                   # at once: no quiet heard yet
        _push_all(utt, np.zeros(2400, np.int16))            # the timer's quiet begins nothing more
        assert final_pass.speculated == 1
        text = utt.finish_sync()
        assert final_pass.early_final and text == _final_of(engine, speech) != ""
    finally:
        engine.close()


def test_a_loud_end_after_the_vads_pause_gets_a_quiet_rule_final_too(folder):
    """What the VAD heard as no speech but is loud (a word's soft end) is decoded as well: the
    quiet rule begins a second early final, and the first of the two to be ready is the final."""
    engine = SSMSTTEngine(folder, decoder="greedy")
    try:
        utt = engine.open(8000)
        _push_all(utt, _speech(0.8))
        utt.pause(True)
        _push_all(utt, _speech(0.1))                        # loud, though the VAD calls it quiet
        _push_all(utt, np.zeros(2400, np.int16))
        final_pass = utt._final_pass
        assert final_pass.speculated == 2
        assert utt.finish_sync() == "b" and final_pass.early_final
        before = engine.open(8000)                          # quiet first, then the VAD's pause:
        _push_all(before, _speech(0.8))                     # the quiet rule's covers it
        _push_all(before, np.zeros(1200, np.int16))
        before.pause(True)
        assert before._final_pass.speculated == 1
        assert before.finish_sync() == "b" and before._final_pass.early_final
    finally:
        engine.close()


def test_a_failing_early_final_keeps_the_streams_partial_and_says_why(folder, monkeypatch, caplog):
    def broken(*args, **kwargs):
        raise RuntimeError("a bug in the decode")

    monkeypatch.setattr(utterance_final, "decode_whole_final", broken)
    engine = SSMSTTEngine(folder, decoder="greedy")
    try:
        utt = _said_then_quiet(engine, 0.6)
        with caplog.at_level(logging.ERROR):
            assert utt.finish_sync() == "h" and utt._final_pass.early_final   # the stream's
        assert "an early final failed; the stream's transcript stands" in caplog.text
    finally:
        engine.close()


@pytest.mark.usefixtures("short_pieces")
def test_a_long_utterance_in_pieces_gets_an_early_final_up_to_a_bound(folder, monkeypatch):
    engine = SSMSTTEngine(folder, decoder="greedy")
    try:
        utt = _said_then_quiet(engine, 2.5)
        assert utt._final_pass.pieces >= 3 and utt._final_pass.speculated == 1
        assert utt.finish_sync() == "b" and utt._final_pass.early_final   # the whole utterance
        monkeypatch.setattr(utterance_final, "EARLY_MAX_S", 2.0)
        longer = _said_then_quiet(engine, 2.5)              # past the bound: decoded at the end
        assert longer._final_pass.speculated == 0 and longer.finish_sync() == "b"
        assert not longer._final_pass.early_final
    finally:
        engine.close()


# -- the final pass in a worker process (``parley serve``'s recogniser worker) -------------------
def test_in_a_worker_process_the_final_is_the_same_as_in_a_thread(folder):
    here = SSMSTTEngine(folder)                                # the joint beam over both heads
    there = SSMSTTEngine(folder, runner="process")
    try:
        assert there.final_model is None and there.final_proc is not None
        assert there.final_proc.pid != there.runner.pid
        pcm = _speech(0.9)
        hints = Hints(expect=frozenset({"yes_no"}))
        for h in (NO_HINTS, hints):
            a, b = here.open(8000, h), there.open(8000, h)
            _push_all(a, pcm)
            _push_all(b, pcm)
            a.finish_sync()
            b.finish_sync()
            assert b.recognition == a.recognition and b.text != ""
    finally:
        here.close()
        there.close()


@pytest.mark.usefixtures("short_pieces")
def test_in_a_worker_process_a_long_utterance_goes_in_pieces(folder):
    engine = SSMSTTEngine(folder, decoder="greedy", runner="process")
    try:
        utt = engine.open(8000)
        _push_all(utt, _speech(2.5))
        assert utt._final_pass.pieces >= 3                     # handed over while the audio came
        assert utt.finish_sync() == "b"
    finally:
        engine.close()


def test_a_dead_final_pass_worker_keeps_the_streams_final_then_comes_back(folder, caplog):
    engine = SSMSTTEngine(folder, decoder="greedy", runner="process")
    try:
        proc = engine.final_proc
        utt = engine.open(8000)
        _push_all(utt, _speech(0.6))
        os.kill(proc.pid, signal.SIGKILL)
        with caplog.at_level(logging.WARNING):
            assert utt.finish_sync() == "h"                    # the stream's final stands
        assert "the stream's final stands" in caplog.text
        deadline = time.monotonic() + 60
        while (proc.workers_up == 0 or proc.restarts == 0) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert proc.restarts == 1
        assert engine.transcribe(_speech(0.6), 8000) == "b"    # the replacement decodes again
    finally:
        engine.close()


def test_in_a_worker_process_early_finals_work(folder):
    engine = SSMSTTEngine(folder, decoder="greedy", runner="process")
    try:
        utt = engine.open(8000)
        _push_all(utt, _speech(1.0))
        _push_all(utt, np.zeros(2400, np.int16))
        assert utt._final_pass.speculated == 1
        assert utt.finish_sync() == "b" and utt._final_pass.early_final
    finally:
        engine.close()


def test_in_a_worker_process_a_wanted_early_final_runs_first_and_a_forgotten_one_never(folder):
    """Many calls' early finals queue in the one worker: the one a turn waits for goes first,
    a stale one is answered null without being decoded."""
    engine = SSMSTTEngine(folder, decoder="greedy", runner="process")
    try:
        proc = engine.final_proc
        audio = _speech(0.8).astype(np.float32) / 32768.0
        order: list[int] = []
        os.kill(proc.pid, signal.SIGSTOP)       # all of it queued before the worker reads any
        try:
            futures = {n: proc.whole(audio, NO_HINTS, uid=7, spec=n) for n in (1, 2, 3)}
            for n, fut in futures.items():
                fut.add_done_callback(lambda _, n=n: order.append(n))
            proc.forget(7, 2)
            proc.want(7, 3)
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        results = {n: fut.result(timeout=30) for n, fut in futures.items()}
        assert results[2] is None and results[1].text == results[3].text == "b"
        assert order == [2, 3, 1], order
    finally:
        engine.close()


def test_in_worker_processes_an_early_final_goes_to_the_least_busy_worker(folder):
    engine = SSMSTTEngine(folder, decoder="greedy", runner="process", final_procs=2)
    try:
        first, second = engine.final_procs
        assert first.pid != second.pid and engine.final_proc is first
        os.kill(first.pid, signal.SIGSTOP)
        try:
            held = first.whole(_speech(0.8).astype(np.float32) / 32768.0, NO_HINTS, uid=99, spec=1)
            utt = _said_then_quiet(engine, 0.6)                 # the first worker is busy
            assert utt._final_pass._spec.proc is second
            assert utt.finish_sync() == "b" and utt._final_pass.early_final
        finally:
            os.kill(first.pid, signal.SIGCONT)
        assert held.result(timeout=30).text == "b"
        with pytest.raises(PipelineError):
            SSMSTTEngine(folder, runner="process", final_procs=0)
    finally:
        engine.close()


def test_the_final_pass_rescores_free_turns_with_the_weights_its_folder_chose(folder):
    (folder / FINAL_DIR / "search.json").write_text('{"free": {"lm_weight": 0.5, "word_bonus": 2.0, '
                                                    '"char_weight": 0.3}}')
    here = SSMSTTEngine(folder)
    there = SSMSTTEngine(folder, runner="process")
    hinted = Hints(expect=frozenset({"yes_no"}))
    try:
        free = here.beam.free_config
        assert (free.lm_weight, free.word_bonus, free.char_weight) == (0.5, 2.0, 0.3)
        assert free.phone_weight == JointConfig().phone_weight            # the rest as default
        assert here.beam.config == JointConfig()                          # hinted turns: the defaults
        assert here.beam.stream().config is free and here.beam.stream(hinted).config == JointConfig()
        pcm = _speech(0.9)
        heard = []
        for engine in (here, there):
            utt = engine.open(8000)
            _push_all(utt, pcm)
            utt.finish_sync()
            heard.append(utt.recognition)
        assert heard[1] == heard[0]                          # the worker's search: the same weights
    finally:
        here.close()
        there.close()
    (folder / FINAL_DIR / "search.json").unlink()
    default = SSMSTTEngine(folder)
    try:
        utt = default.open(8000)
        _push_all(utt, pcm)
        utt.finish_sync()
        assert utt.recognition != heard[0]                   # which other weights score otherwise
    finally:
        default.close()
    (folder / FINAL_DIR / "search.json").write_text('{"free": {"lm_wieght": 0.5}}')   # misspelt
    with pytest.raises(EngineUnavailableError, match="search.json is not a search file"):
        SSMSTTEngine(folder)
