"""Finals from Whisper tiny.en's own decoder: the utterance encoded with two seconds of silence,
the rest of the 30 s Whisper's encoding of silence; the CTC final pass beside it where its heads
do what Whisper's text cannot (a spelled name, keyword spotting), and after a loop."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from ssm_engine.stt.decode import cer
from pipeline.engines import whisper_final
from pipeline.engines.ssm_recognizer import DEFAULT_MODEL_DIR, FINAL_DIR, SSMSTTEngine
from pipeline.engines.whisper_final import (DECODER_FILE, WhisperFinalDecoder,
                                            shared_whisper_final, whisper_prompt)
from pipeline.errors import EngineUnavailableError
from ssm_engine.stt.encoder_model import save_whisper_stt
from ssm_engine.stt.hints import Hints, Recognition
from tests.pipeline.stt_models import saying

SENTENCE = "please call me back tomorrow afternoon about my order"

pytestmark = pytest.mark.usefixtures("one_torch_thread")   # tests/conftest.py


@pytest.fixture
def folder(tmp_path):
    """A recogniser folder whose stream says "h", whose CTC final pass says "b", and whose
    ``decoder.json`` asks for Whisper's finals."""
    d = tmp_path / "stt"
    save_whisper_stt(saying("h"), d)
    save_whisper_stt(saying("b", "utterance"), d / FINAL_DIR)
    (d / FINAL_DIR / DECODER_FILE).write_text(json.dumps({"decoder": "whisper"}))
    for name in ("lm.arpa.gz", "lexicon.dict.gz"):
        shutil.copy(DEFAULT_MODEL_DIR / name, d / name)
    return d


def _as_float(pcm: np.ndarray) -> np.ndarray:
    return pcm.astype(np.float32) / 32768.0


def test_whisper_reads_a_sentence_and_silence_is_empty(flite_speech):
    wf = shared_whisper_final()
    text, confidence, ended = wf.decode(_as_float(flite_speech(SENTENCE, 8000)), 8000)
    assert ended and 0.5 < confidence <= 1.0
    assert cer([SENTENCE], [text.lower().strip(".")]) < 0.15, text
    text, _confidence, ended = wf.decode(np.zeros(8000, np.float32), 8000)
    assert (text, ended) == ("", True)


def test_the_engine_takes_whisper_finals_and_the_streams_partials(folder, flite_speech):
    pcm = flite_speech(SENTENCE, 8000)
    for runner in ("thread", "process"):
        engine = SSMSTTEngine(folder, decoder="greedy", runner=runner)
        try:
            assert engine.final_decoder == "whisper"
            utt = engine.open(8000)
            partials = []
            for i in range(0, len(pcm), 160):
                fut = utt.push(pcm[i: i + 160])
                if fut is not None and utt.take(fut.result(timeout=30)):
                    partials.append(utt.text)
            final = utt.finish_sync()
        finally:
            engine.close()
        assert partials and set(partials) == {"h"}, runner      # the stream's greedy partials
        assert cer([SENTENCE], [final]) < 0.15, (runner, final)  # Whisper's words, lower case
        assert final == final.lower() and "." not in final
        rec = utt.recognition
        assert rec is not None and rec.text == final
        assert rec.confidence is None and rec.alternatives == ()   # no posterior: taken as heard


def test_the_ctc_decoder_is_still_chosen_by_the_caller(folder, flite_speech):
    engine = SSMSTTEngine(folder, decoder="greedy", final_decoder="ctc")
    try:
        assert engine.transcribe(flite_speech("hello", 8000), 8000) == "b"
    finally:
        engine.close()


def test_a_decoder_file_naming_nothing_known_is_one_clear_error(folder):
    (folder / FINAL_DIR / DECODER_FILE).write_text('{"decoder": "gpt"}')
    with pytest.raises(EngineUnavailableError, match="decoder must be 'whisper' or 'ctc'"):
        SSMSTTEngine(folder, decoder="greedy")
    (folder / FINAL_DIR / DECODER_FILE).write_text("not json")
    with pytest.raises(EngineUnavailableError, match="is not a JSON object"):
        SSMSTTEngine(folder, decoder="greedy")


class _Scripted:
    """A WhisperFinal that answers from a script and counts its calls."""

    def __init__(self, *answers: tuple[str, float, bool]) -> None:
        self.answers = list(answers)
        self.seconds: list[float] = []
        self.prompts: list[str] = []

    def decode(self, audio: np.ndarray, rate: int, prompt: str = "") -> tuple[str, float, bool]:
        self.seconds.append(audio.size / rate)
        self.prompts.append(prompt)
        return self.answers.pop(0)


class _CTC:
    """A CTC final pass that says what it is given."""

    def __init__(self, rec: Recognition) -> None:
        self.rec, self.pieces = rec, 0

    def piece(self, audio: np.ndarray) -> None:
        self.pieces += 1

    def result(self) -> Recognition:
        return self.rec


def test_a_turns_hints_are_whispers_prompt_and_free_turns_have_none():
    assert whisper_prompt(Hints()) == "" and whisper_prompt(Hints(expect=frozenset({"name"}))) == ""
    menu = whisper_prompt(Hints(phrases=("billing", "talk to a person"), expect=frozenset({"yes_no"})))
    assert "Billing." in menu and "Talk to a person." in menu and "Yes" in menu
    script = _Scripted(("Four one five.", 0.9, True))
    dec = WhisperFinalDecoder(script, 8000, Hints(expect=frozenset({"digits"})))  # type: ignore[arg-type]
    dec.piece(np.ones(8000, np.float32))
    rec = dec.result()
    assert rec is not None and rec.text == "four one five" and rec.hinted
    assert script.prompts == [whisper_prompt(Hints(expect=frozenset({"digits"})))] and "seven zero nine" in script.prompts[0]


def test_whisper_reads_the_words_said_not_its_prompt(flite_speech):
    wf = shared_whisper_final()
    prompt = whisper_prompt(Hints(phrases=("billing", "shipping"), expect=frozenset({"digits"})))
    text, _confidence, ended = wf.decode(_as_float(flite_speech(SENTENCE, 8000)), 8000, prompt)
    assert ended and cer([SENTENCE], [text.lower().strip(".")]) < 0.15, text
    assert "billing" not in text.lower() and "four one five" not in text.lower()
    assert wf.decode(np.zeros(8000, np.float32), 8000, prompt)[0] == ""      # silence: still nothing


def test_a_loop_is_decoded_by_the_ctc_final_pass_instead():
    whole = []
    dec = WhisperFinalDecoder(_Scripted(("Code Code Code", 0.4, False)), 8000,  # type: ignore[arg-type]
                              whole=lambda audio: whole.append(audio.size) or Recognition("coat", None))
    dec.piece(np.ones(4000, np.float32))
    dec.piece(np.ones(4000, np.float32))
    assert dec.result() == Recognition("coat", None) and whole == [8000]


def test_a_spelled_name_keeps_the_ctc_letters_and_spotted_keywords_ride_on_whispers_text():
    letters = Recognition("d a v i d", 0.9, (("d a v i d", 0.9),), hinted=True)
    dec = WhisperFinalDecoder(_Scripted(), 8000, Hints(expect=frozenset({"spelling"})),  # type: ignore[arg-type]
                              ctc=_CTC(letters))
    dec.piece(np.ones(8000, np.float32))
    assert dec.result() == letters
    spotted = Recognition("i want to pay my bill", 0.5, spotted=(("billing", -0.2),))
    ctc = _CTC(spotted)
    dec = WhisperFinalDecoder(_Scripted(("I'd like to pay my bill, Mr. Jones.", 0.9, True)), 8000,  # type: ignore[arg-type]
                              Hints(keywords=("billing",)), ctc=ctc)
    dec.piece(np.ones(8000, np.float32))
    rec = dec.result()
    assert rec is not None and ctc.pieces == 1
    assert rec.text == "i'd like to pay my bill mister jones" and rec.spotted == spotted.spotted
    assert rec.confidence is None and rec.alternatives == ()


def test_a_long_utterance_is_decoded_a_block_at_a_time_as_it_is_spoken(monkeypatch):
    monkeypatch.setattr(whisper_final, "CHUNK_S", 2.0)
    script = _Scripted(("first part.", 0.9, True), ("Second part.", 0.7, True))
    dec = WhisperFinalDecoder(script, 8000)  # type: ignore[arg-type]
    dec.piece(np.ones(12000, np.float32))
    assert script.seconds == []
    dec.piece(np.ones(6000, np.float32))           # 2.25 s: the block is decoded now
    assert script.seconds == [2.25]
    dec.piece(np.ones(4000, np.float32))
    rec = dec.result()
    assert script.seconds == [2.25, 0.5]
    assert rec is not None and rec.text == "first part second part"


def test_nothing_decoded_is_no_final():
    assert WhisperFinalDecoder(_Scripted(), 8000).result() is None  # type: ignore[arg-type]


def test_the_audio_past_thirty_seconds_keeps_its_end(flite_speech):
    """An over-long block keeps its last 28 s (Whisper reads 30, two of them the padding)."""
    wf = shared_whisper_final()
    speech = _as_float(flite_speech(SENTENCE, 8000))
    audio = np.concatenate([np.zeros(8000 * 30, np.float32), speech])
    text, _confidence, ended = wf.decode(audio, 8000)
    assert ended and cer([SENTENCE], [text.lower().strip(".")]) < 0.15, text


def test_a_run_said_five_times_in_a_row_is_a_loop_kept_once():
    dec = WhisperFinalDecoder(_Scripted(("Montreal up up up up up up up up aligner, four zero zero "  # type: ignore[arg-type]
                                         "zero zero.", 0.8, True)), 8000)
    dec.piece(np.ones(8000, np.float32))
    rec = dec.result()
    assert rec is not None and rec.text == "montreal up aligner four zero zero zero zero"


def test_digits_said_five_times_in_a_row_are_a_number_not_a_loop():
    dec = WhisperFinalDecoder(_Scripted(("My number is four one five, five, five, five, five, zero "  # type: ignore[arg-type]
                                         "one nine nine.", 0.8, True)), 8000)
    dec.piece(np.ones(8000, np.float32))
    rec = dec.result()
    assert rec is not None
    assert rec.text == "my number is four one five five five five five zero one nine nine"
