"""Redaction: card and account numbers, SSNs and sensitive slots masked in text, records, the
stores' rows and log lines; the digit-run masker checked with Hypothesis."""

from __future__ import annotations

import logging
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.records import CallRecord, MemoryCallStore, TurnRecord
from pipeline.records_sqlite import SQLiteCallStore
from pipeline.redaction import RedactingCallStore, Redactor, luhn_valid, mask_numbers

CARD = "4111111111111111"      # Luhn-valid test numbers
AMEX = "378282246310005"


def luhn_complete(body: str) -> str:
    """``body`` plus the check digit that makes it Luhn-valid."""
    return next(body + d for d in "0123456789" if luhn_valid(body + d))


def test_luhn():
    assert luhn_valid(CARD) and luhn_valid(AMEX) and luhn_valid("79927398713")
    assert not luhn_valid("4111111111111112") and not luhn_valid("79927398710")


def test_cards_in_every_shape_keep_their_last_four():
    assert mask_numbers(f"card {CARD}.") == "card ************1111."
    assert mask_numbers("4111 1111 1111 1111") == "**** **** **** 1111"
    assert mask_numbers("3782-822463-10005") == "****-******-*0005"
    assert mask_numbers("it is 4 1 1 1, 1 1 1 1, 1 1 1 1, 1 1 1 1 right") == \
        "it is * * * *, * * * *, * * * *, 1 1 1 1 right"
    assert mask_numbers("four one one one one one one one one one one one one one one one") == "************1111"
    assert mask_numbers("Four-One-One-One one one one one, one one one one one one one one") == "************1111"


def test_what_is_not_a_card_is_left_alone():
    for text in ("call 555 0123", "order 4111111111111112", "+15550100199", "a 25-digit run 1234567890123456789012345",
                 "on 2026-12-07 at 10:30", "one two three", "room 12 13 14"):
        assert mask_numbers(text) == text


def test_social_security_numbers():
    assert mask_numbers("ssn 123-45-6789, or 123 45 6789") == "ssn ***-**-6789, or *** ** 6789"
    for text in ("000-12-3456", "666-12-3456", "912-34-5678", "123-00-4567", "123-45-0000", "123-45 6789"):
        assert mask_numbers(text) == text


@given(st.text(alphabet="0123456789 -,a", max_size=120))
@settings(max_examples=400, deadline=None)
def test_no_luhn_valid_13_to_19_digit_run_is_left(text):
    masked = mask_numbers(text)
    assert len(masked) == len(text)                                  # shape kept: digits become '*'
    assert all(a == b or (a.isdigit() and b == "*") for a, b in zip(text, masked))
    for run in re.findall(r"\d+", masked):
        assert not (13 <= len(run) <= 19 and luhn_valid(run)), (text, masked)
    assert mask_numbers(masked) == masked                            # idempotent


@given(body=st.text(alphabet="0123456789", min_size=12, max_size=18),
       cuts=st.lists(st.integers(1, 18), max_size=5), sep=st.sampled_from([" ", "-", ", "]),
       before=st.text(alphabet="abc xyz.", max_size=20), after=st.text(alphabet="abc xyz.", max_size=20))
@settings(max_examples=300, deadline=None)
def test_a_card_however_grouped_shows_only_its_last_four(body, cuts, sep, before, after):
    number = luhn_complete(body)
    points = sorted({c for c in cuts if c < len(number)})
    groups = [number[a:b] for a, b in zip([0, *points], [*points, len(number)])]
    masked = mask_numbers(before + " " + sep.join(groups) + " " + after)
    digits = "".join(re.findall(r"\d", masked))
    assert digits == number[-4:], (groups, masked)


def test_a_cards_last_groups_that_read_as_an_ssn_do_not_hide_the_card():
    # "001 01 0008" alone is SSN-shaped; inside this 13-digit card it must not leave "0000" shown
    assert mask_numbers("card 0000 001 01 0008 ok") == "card **** *** ** 0008 ok"
    assert mask_numbers("ssn 123-45-6789") == "ssn ***-**-6789"


def _record() -> CallRecord:
    record = CallRecord(call_sid="CA1", transport="twilio", params={"From": "+15550100"}, greeting="Hello.")
    record.turns = [
        TurnRecord(turn=1, user_text="my card is 4111 1111 1111 1111 and my pin is 2468",
                   agent_text=f"I have {CARD}. And your account? Your pin 2468 is set.",
                   agent_text_heard="I have", tool_calls=[{"name": "pay", "arguments": {"card": CARD, "pin": "2468"}}],
                   events=[{"kind": "slot", "data": {"name": "pin", "value": "2468"}},
                           {"kind": "slot", "data": {"name": "account", "value": "98765432"}}]),
        TurnRecord(turn=2, user_text="nine eight seven six five four three two",
                   agent_text="I have 9 8 7, 6 5 4, 3 2. Is that right?"),
    ]
    return record


def test_a_record_is_masked_and_the_live_one_is_not():
    record = _record()
    masked = Redactor(frozenset({"pin", "account"})).record(record)
    t1, t2 = masked.turns
    assert t1.user_text == "my card is **** **** **** 1111 and my pin is ****"
    assert t1.agent_text == "I have ************1111. And your account? Your pin **** is set."
    assert t1.tool_calls == [{"name": "pay", "arguments": {"card": "************1111", "pin": "****"}}]
    assert [e["data"]["value"] for e in t1.events] == ["****", "****5432"]
    assert t2.user_text == "****5432"
    assert "9 8 7" not in t2.agent_text and t2.agent_text.endswith("5 4, 3 2. Is that right?")
    assert record.turns[0].events[0]["data"]["value"] == "2468" and CARD in record.turns[0].agent_text
    assert masked.params == record.params and masked.greeting == "Hello."


def test_the_store_keeps_only_masked_rows(tmp_path):
    inner = SQLiteCallStore(tmp_path / "calls.db")
    store = RedactingCallStore(inner, Redactor(frozenset({"pin"})))
    store.open(_record())
    store.update(_record())
    raw = (tmp_path / "calls.db").read_bytes() + b"".join(p.read_bytes() for p in tmp_path.glob("calls.db-*"))
    assert b"************1111" in raw and CARD.encode() not in raw and b"1111 1111 1111 1111" not in raw and b"2468" not in raw
    got = store.get("CA1")
    assert got is not None and got.turns[0].events[0]["data"]["value"] == "****"
    assert [r.call_sid for r in store.list()] == ["CA1"]
    store.close()


def test_memory_store_behind_the_mask():
    store = RedactingCallStore(MemoryCallStore(), Redactor())
    record = _record()
    store.open(record)
    assert store.get("CA1") is not record and CARD not in store.get("CA1").turns[0].agent_text


def test_log_lines_are_masked(caplog):
    from deploy.logs import redact_logs

    handler = logging.StreamHandler()
    logging.getLogger().addHandler(handler)
    try:
        redact_logs(Redactor())
        redact_logs(Redactor())           # twice: one filter
        assert sum(type(f).__name__ == "RedactingLogFilter" for f in handler.filters) == 1
        record = logging.LogRecord("t", logging.INFO, __file__, 1, "caller said %r", (f"card {CARD}",), None)
        for f in handler.filters:
            f.filter(record)
        assert record.getMessage() == "caller said 'card ************1111'"
    finally:
        logging.getLogger().removeHandler(handler)
