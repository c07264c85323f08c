"""Twilio Media Streams messages: golden fixtures, round trips, and hostile input."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from telephony.errors import ProtocolError
from telephony.twilio.messages import (
    MAX_MESSAGE_BYTES,
    Clear,
    Connected,
    Dtmf,
    Mark,
    Media,
    MediaFormat,
    OutMark,
    OutMedia,
    Start,
    Stop,
    parse_to_twilio,
    parse_twilio,
)

SID = "MZ18ad3ab5a668481ce02b83e7395059f0"
CALL = "CA5a4b8b4ae6d4e5e8c0e4f5e2e3d9a1b2"
ACCOUNT = "AC4e5d8a6f0a7c4b2ea1b3c9d0e6f7a8b9"

# Shaped exactly like the examples on twilio.com/docs/voice/media-streams/websocket-messages,
# in Twilio's compact wire form (no whitespace, Twilio's key order).
GOLDEN_START = (
    '{"event":"start","sequenceNumber":"1","start":{"accountSid":"' + ACCOUNT + '",'
    '"streamSid":"' + SID + '","callSid":"' + CALL + '","tracks":["inbound"],'
    '"mediaFormat":{"encoding":"audio/x-mulaw","sampleRate":8000,"channels":1},'
    '"customParameters":{"FirstName":"Jane","LastName":"Doe","RemoteParty":"Bob"}},'
    '"streamSid":"' + SID + '"}'
)
GOLDEN_PAYLOAD = bytes(range(0x70, 0x80)) * 10  # 160 bytes = 20 ms of mu-law
GOLDEN_MEDIA = (
    '{"event":"media","sequenceNumber":"3","media":{"track":"inbound","chunk":"1",'
    '"timestamp":"5","payload":"' + base64.b64encode(GOLDEN_PAYLOAD).decode() + '"},'
    '"streamSid":"' + SID + '"}'
)
GOLDEN_OTHERS = [
    '{"event":"connected","protocol":"Call","version":"1.0.0"}',
    '{"event":"dtmf","streamSid":"' + SID + '","sequenceNumber":"5",'
    '"dtmf":{"track":"inbound_track","digit":"1"}}',
    '{"event":"mark","sequenceNumber":"4","streamSid":"' + SID + '","mark":{"name":"my label"}}',
    '{"event":"stop","sequenceNumber":"5","stop":{"accountSid":"' + ACCOUNT + '",'
    '"callSid":"' + CALL + '"},"streamSid":"' + SID + '"}',
]
GOLDEN_TO_TWILIO = [
    '{"event":"media","streamSid":"' + SID + '","media":{"payload":"/////w=="}}',
    '{"event":"mark","streamSid":"' + SID + '","mark":{"name":"reply-1"}}',
    '{"event":"clear","streamSid":"' + SID + '"}',
]


def test_golden_start() -> None:
    msg = parse_twilio(GOLDEN_START)
    assert msg == Start(
        sequence_number=1,
        stream_sid=SID,
        account_sid=ACCOUNT,
        call_sid=CALL,
        tracks=("inbound",),
        custom_parameters={"FirstName": "Jane", "LastName": "Doe", "RemoteParty": "Bob"},
        media_format=MediaFormat("audio/x-mulaw", 8000, 1),
    )
    assert msg.to_json() == GOLDEN_START


def test_golden_media() -> None:
    msg = parse_twilio(GOLDEN_MEDIA.encode())
    assert isinstance(msg, Media)
    assert (msg.sequence_number, msg.chunk, msg.timestamp_ms, msg.track) == (3, 1, 5, "inbound")
    assert msg.payload == GOLDEN_PAYLOAD
    assert msg.to_json() == GOLDEN_MEDIA


@pytest.mark.parametrize("raw", GOLDEN_OTHERS)
def test_golden_other_events_round_trip_byte_for_byte(raw: str) -> None:
    assert parse_twilio(raw).to_json() == raw


@pytest.mark.parametrize("raw", GOLDEN_TO_TWILIO)
def test_golden_to_twilio_round_trip_byte_for_byte(raw: str) -> None:
    assert parse_to_twilio(raw).to_json() == raw


def test_to_twilio_values() -> None:
    assert parse_to_twilio(GOLDEN_TO_TWILIO[0]) == OutMedia(SID, b"\xff\xff\xff\xff")
    assert parse_to_twilio(GOLDEN_TO_TWILIO[1]) == OutMark(SID, "reply-1")
    assert parse_to_twilio(GOLDEN_TO_TWILIO[2]) == Clear(SID)


def test_pretty_printed_and_extra_keys_accepted() -> None:
    obj = json.loads(GOLDEN_START)
    obj["start"]["newTwilioField"] = {"x": 1}
    msg = parse_twilio(json.dumps(obj, indent=2))
    assert msg == parse_twilio(GOLDEN_START)


def _mutated(raw: str, edit) -> str:  # type: ignore[no-untyped-def]
    obj = json.loads(raw)
    edit(obj)
    return json.dumps(obj)


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "not json",
        "[]",
        '"media"',
        "{}",
        '{"event": 5}',
        '{"event": "bogus"}',
        '{"event": "clear", "streamSid": "MZ1"}',  # a to-Twilio event is not from Twilio
        _mutated(GOLDEN_MEDIA, lambda o: o.pop("streamSid")),
        _mutated(GOLDEN_MEDIA, lambda o: o.__setitem__("sequenceNumber", 3)),  # int, not string
        _mutated(GOLDEN_MEDIA, lambda o: o.__setitem__("sequenceNumber", "-3")),
        _mutated(GOLDEN_MEDIA, lambda o: o.__setitem__("sequenceNumber", "\u00b2")),  # "²"
        _mutated(GOLDEN_MEDIA, lambda o: o["media"].__setitem__("payload", "@@@")),
        _mutated(GOLDEN_MEDIA, lambda o: o["media"].__setitem__("payload", "abc")),  # bad padding
        _mutated(GOLDEN_MEDIA, lambda o: o["media"].__setitem__("track", "sideways")),
        _mutated(GOLDEN_MEDIA, lambda o: o["media"].pop("chunk")),
        _mutated(GOLDEN_MEDIA, lambda o: o.__setitem__("media", "x")),
        _mutated(GOLDEN_START, lambda o: o["start"].__setitem__("customParameters", {"a": 1})),
        _mutated(GOLDEN_START, lambda o: o["start"].__setitem__("tracks", "inbound")),
        _mutated(GOLDEN_START, lambda o: o["start"]["mediaFormat"].__setitem__("sampleRate", True)),
        _mutated(GOLDEN_START, lambda o: o["start"]["mediaFormat"].update(sampleRate="8000")),
        _mutated(GOLDEN_START, lambda o: o["start"].pop("callSid")),
        _mutated(GOLDEN_OTHERS[1], lambda o: o["dtmf"].__setitem__("digit", "12")),
        _mutated(GOLDEN_OTHERS[2], lambda o: o["mark"].__setitem__("name", "")),
        _mutated(GOLDEN_OTHERS[3], lambda o: o.__setitem__("stop", None)),
        "[" * 100_000,  # oversize
        "[" * 60_000,  # deep nesting, under the size limit
    ],
)
def test_malformed_from_twilio_raises_protocol_error(raw: str) -> None:
    with pytest.raises(ProtocolError):
        parse_twilio(raw)


@pytest.mark.parametrize(
    "raw",
    [
        GOLDEN_OTHERS[0],  # connected is only ever sent by Twilio
        '{"event": "clear"}',
        '{"event": "mark", "streamSid": "MZ1", "mark": {}}',
        '{"event": "media", "streamSid": "MZ1", "media": {"payload": 7}}',
        b'{"event": "clear", "streamSid": "MZ\xff"}',  # not UTF-8
        "\ud800",  # lone surrogate: not encodable
    ],
)
def test_malformed_to_twilio_raises_protocol_error(raw: str | bytes) -> None:
    with pytest.raises(ProtocolError):
        parse_to_twilio(raw)


def test_size_limit_is_in_bytes() -> None:
    payload = base64.b64encode(b"\xff" * 40_000).decode()  # ~53 KiB of JSON: accepted
    raw = OutMedia(SID, b"\xff" * 40_000).to_json()
    assert payload in raw and len(raw) < MAX_MESSAGE_BYTES
    assert parse_to_twilio(raw).payload == b"\xff" * 40_000  # type: ignore[union-attr]
    big = OutMedia(SID, b"\xff" * 60_000).to_json()
    with pytest.raises(ProtocolError, match="exceeds"):
        parse_to_twilio(big)
    assert isinstance(parse_to_twilio(big, max_bytes=len(big)), OutMedia)
    # Multi-byte characters count as bytes, not characters.
    wide = json.dumps({"event": "clear", "streamSid": "\u20ac" * 30_000}, ensure_ascii=False)
    assert len(wide) < MAX_MESSAGE_BYTES < len(wide.encode())
    with pytest.raises(ProtocolError):
        parse_to_twilio(wide)


# --- Property tests ---

text = st.text(min_size=1, max_size=24)
counters = st.integers(0, 10**15 - 1)
from_twilio = st.one_of(
    st.builds(Connected, protocol=text, version=text),
    st.builds(
        Start,
        sequence_number=counters,
        stream_sid=text,
        account_sid=text,
        call_sid=text,
        tracks=st.lists(text, max_size=2).map(tuple),
        custom_parameters=st.dictionaries(st.text(max_size=8), st.text(max_size=16), max_size=4),
        media_format=st.builds(
            MediaFormat,
            encoding=text,
            sample_rate_hz=st.integers(1, 48000),
            channels=st.integers(1, 2),
        ),
    ),
    st.builds(
        Media,
        sequence_number=counters,
        stream_sid=text,
        chunk=counters,
        timestamp_ms=counters,
        payload=st.binary(max_size=320),
        track=st.sampled_from(["inbound", "outbound"]),
    ),
    st.builds(
        Dtmf,
        sequence_number=counters,
        stream_sid=text,
        digit=st.sampled_from("0123456789*#"),
        track=text,
    ),
    st.builds(Mark, sequence_number=counters, stream_sid=text, name=text),
    st.builds(Stop, sequence_number=counters, stream_sid=text, account_sid=text, call_sid=text),
)
to_twilio = st.one_of(
    st.builds(OutMedia, stream_sid=text, payload=st.binary(max_size=320)),
    st.builds(OutMark, stream_sid=text, name=text),
    st.builds(Clear, stream_sid=text),
)


@given(from_twilio)
def test_from_twilio_round_trip(msg) -> None:  # type: ignore[no-untyped-def]
    raw = msg.to_json()
    assert parse_twilio(raw) == msg
    assert parse_twilio(raw.encode()).to_json() == raw


@given(to_twilio)
def test_to_twilio_round_trip(msg) -> None:  # type: ignore[no-untyped-def]
    raw = msg.to_json()
    assert parse_to_twilio(raw) == msg
    assert parse_to_twilio(raw.encode()).to_json() == raw


def _parse_both(raw: str | bytes) -> None:
    for parse in (parse_twilio, parse_to_twilio):
        try:
            parse(raw)
        except ProtocolError:
            pass


@given(st.binary(max_size=512))
def test_arbitrary_bytes_raise_only_protocol_error(raw: bytes) -> None:
    _parse_both(raw)


@given(st.text(max_size=512))
def test_arbitrary_text_raises_only_protocol_error(raw: str) -> None:
    _parse_both(raw)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.text(max_size=10), inner, max_size=3),
    max_leaves=12,
)


@given(
    st.sampled_from(["connected", "start", "media", "dtmf", "mark", "stop", "clear"]),
    st.dictionaries(
        st.sampled_from(
            ["streamSid", "sequenceNumber", "start", "media", "dtmf", "mark", "stop", "protocol",
             "version"]
        ),
        json_values,
    ),
)
def test_json_objects_with_known_events_raise_only_protocol_error(
    event: str, body: dict[str, object]
) -> None:
    _parse_both(json.dumps({"event": event, **body}))
