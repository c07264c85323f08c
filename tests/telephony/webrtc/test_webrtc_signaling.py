"""The SmallWebRTC signaling bodies: what parses, and that nothing else escapes as a foreign error."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from telephony.errors import ProtocolError
from telephony.webrtc.errors import SignalingError
from telephony.webrtc.signaling import Answer, Candidate, CandidatePatch, Offer

SDP = "v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\nm=audio 9 UDP/TLS/RTP/SAVPF 111\r\n"
CAND = "candidate:1 1 udp 2122260223 127.0.0.1 50000 typ host generation 0"


def test_offer_as_pipecat_clients_send_it():
    offer = Offer.parse(json.dumps({"sdp": SDP, "type": "offer", "pc_id": None, "restart_pc": False}))
    assert offer == Offer(sdp=SDP)
    assert Offer.parse(offer.to_dict()) == offer
    assert Offer.parse({"sdp": SDP, "type": "offer", "pc_id": "abc"}).pc_id == "abc"


@pytest.mark.parametrize("body, message", [
    (b"not json", "not JSON"),
    (b"[1, 2]", "JSON object"),
    (b'{"type": "offer"}', "missing field 'sdp'"),
    (b'{"sdp": "v=0", "type": "answer"}', "type must be 'offer'"),
    (b'{"sdp": "v=0\\r\\nm=video 9 x\\r\\n", "type": "offer"}', "no audio"),
    (b'{"sdp": "hello", "type": "offer"}', "must start with 'v=0'"),
    (b'{"sdp": 5, "type": "offer"}', "wrong type"),
    (b'{"sdp": "v=0\\r\\nm=audio 9 x", "type": "offer", "restart_pc": "yes"}', "wrong type"),
    (b'{"sdp": "v=0\\r\\nm=audio 9 x", "type": "offer", "pc_id": ""}', "pc_id"),
    (b'\xff\xfe', "not JSON"),
])
def test_bad_offers_raise_signaling_error(body, message):
    with pytest.raises(SignalingError, match=message):
        Offer.parse(body)


def test_signaling_error_is_a_telephony_protocol_error():
    assert issubclass(SignalingError, ProtocolError)


def test_answer_round_trip():
    answer = Answer(sdp=SDP, pc_id="pc-1")
    assert Answer.parse(json.dumps(answer.to_dict())) == answer


def test_candidate_patch_snake_and_camel_case():
    patch = CandidatePatch.parse({"pc_id": "pc-1", "candidates": [
        {"candidate": CAND, "sdp_mid": "0", "sdp_mline_index": 0},
        {"candidate": "a=" + CAND, "sdpMid": "0", "sdpMLineIndex": 0},  # RTCIceCandidate.toJSON()
        {"candidate": "", "sdp_mid": "0", "sdp_mline_index": 0},        # end of candidates
    ]})
    first, second, end = patch.candidates
    assert first == second == Candidate(CAND.removeprefix("candidate:"), "0", 0)
    assert first.address == "127.0.0.1" and not first.end_of_candidates
    assert end.end_of_candidates and end.address is None


@pytest.mark.parametrize("candidate", [
    {"candidate": "candidate:1 1 udp"},
    {"candidate": CAND, "sdp_mline_index": -1},
    {"candidate": CAND, "sdp_mline_index": True},
    {"candidate": CAND, "sdp_mid": 3},
    "candidate:1",
])
def test_bad_candidates(candidate):
    with pytest.raises(SignalingError):
        CandidatePatch.parse({"pc_id": "pc-1", "candidates": [candidate]})


def test_too_many_candidates():
    with pytest.raises(SignalingError, match="more than"):
        CandidatePatch.parse({"pc_id": "pc-1", "candidates": [{"candidate": CAND}] * 65})


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)
fields = st.fixed_dictionaries({}, optional={
    "sdp": json_values | st.just(SDP), "type": json_values | st.just("offer"),
    "pc_id": json_values, "restart_pc": json_values,
    "candidates": st.lists(st.fixed_dictionaries({}, optional={
        "candidate": json_values | st.just(CAND), "sdp_mid": json_values, "sdp_mline_index": json_values,
    }) | json_values, max_size=3),
})


@given(st.binary(max_size=200) | fields.map(lambda d: json.dumps(d).encode()) | json_values.map(json.dumps))
def test_arbitrary_bodies_raise_only_signaling_error(body):
    for parse in (Offer.parse, CandidatePatch.parse, Answer.parse):
        try:
            parse(body)
        except SignalingError:
            pass
