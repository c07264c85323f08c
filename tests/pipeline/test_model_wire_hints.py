"""parley's additions to the STT wire: keyword hints and the VAD's pauses in, spotted keywords out."""

from __future__ import annotations

import json

import pytest

from pipeline.model_wire import SttHints, SttPause, WireError, parse_spotted, parse_stt_text, stt_transcript


def test_hints_carry_keywords_and_bad_ones_are_refused():
    msg = parse_stt_text(json.dumps({"type": "hints", "expect": ["yes_no"],
                                     "keywords": ["parking", "take a message"]}))
    assert msg == SttHints(("yes_no",), (), ("parking", "take a message"))
    assert parse_stt_text('{"type": "hints"}') == SttHints()
    for bad in (["x" * 61], "parking", [1], ["k"] * 129):
        with pytest.raises(WireError, match="keywords"):
            parse_stt_text(json.dumps({"type": "hints", "keywords": bad}))


def test_a_final_names_the_keywords_spotted_and_a_reader_keeps_only_well_formed_ones():
    event = json.loads(stt_transcript("in occur in", is_final=True, request_id="r", duration_s=1.2,
                                      confidence=0.4, spotted=(("parking", -0.912345),)))
    assert event["spotted"] == [{"keyword": "parking", "score": -0.912}]
    assert parse_spotted(event) == (("parking", -0.912),)
    assert "spotted" not in json.loads(stt_transcript("hi", is_final=True, request_id="r",
                                                      duration_s=1.0))
    messy = {"spotted": [{"keyword": "parking", "score": -0.5}, {"keyword": 3, "score": 0},
                         {"keyword": "x"}, "parking", {"keyword": "nan", "score": float("nan")}]}
    assert parse_spotted(messy) == (("parking", -0.5),)
    assert parse_spotted({"spotted": "parking"}) == () and parse_spotted({}) == ()


def test_a_pause_says_whether_the_vad_paused_and_anything_else_is_refused():
    assert parse_stt_text('{"type": "pause", "paused": true}') == SttPause(True)
    assert parse_stt_text('{"type": "pause", "paused": false}') == SttPause(False)
    for bad in ('{"type": "pause"}', '{"type": "pause", "paused": 1}', '{"type": "pause", "paused": "yes"}'):
        with pytest.raises(WireError, match="pause.paused must be true or false"):
            parse_stt_text(bad)
    with pytest.raises(WireError, match="a hints or a pause object"):
        parse_stt_text('{"type": "pasue"}')
