"""The contacts file and the do-not-call list: refused whole, every problem named by file and line."""

from __future__ import annotations

import pytest

from telephony.campaign import load_dnc, parse_contacts
from telephony.errors import ContactsError


def problems(text: str, **kwargs) -> list[str]:
    with pytest.raises(ContactsError) as caught:
        parse_contacts(text, "c.csv", **kwargs)
    return caught.value.problems


def test_a_good_file_gives_contacts_with_their_lines_zones_and_params():
    contacts = parse_contacts("to,timezone,first_name,account\n+15551230001,America/New_York,Ada,A-17\n\n"
                              "SIP:bob@10.0.0.5,Europe/London,Bob,B-2\n", "c.csv")
    assert [(c.line, c.target, c.timezone, c.params) for c in contacts] == [
        (2, "+15551230001", "America/New_York", {"first_name": "Ada", "account": "A-17"}),
        (4, "sip:bob@10.0.0.5", "Europe/London", {"first_name": "Bob", "account": "B-2"})]


def test_missing_columns_are_named_on_line_1():
    assert problems("number,zone\n+15551230001,UTC\n") == [
        "c.csv:1: no column 'to' (whom to call: +15551234567 or sip:user@host)",
        "c.csv:1: no column 'timezone' (e.g. America/New_York), and no default time zone given"]


def test_a_default_zone_fills_a_missing_column_and_empty_cells():
    contacts = parse_contacts("to\n+15551230001\n", "c.csv", default_timezone="America/Chicago")
    assert contacts[0].timezone == "America/Chicago"
    assert problems("to\n+15551230001\n", default_timezone="Nowhere/Else")[0] == \
        "c.csv: the default time zone 'Nowhere/Else' is not a known zone (e.g. America/New_York)"


def test_every_problem_is_listed_not_only_the_first():
    text = ("to,timezone,note\n"
            "5551230001,America/New_York,x\n"         # no +: not E.164
            "+15551230002,America/Nowhere,x\n"
            "+15551230003,../../etc/passwd,x\n"
            "+15551230004,UTC,x\n"
            "+15551230004,UTC,y\n"
            "+15551230005,UTC\n"
            "+15551230006,UTC," + "z" * 501 + "\n")
    assert problems(text) == [
        "c.csv:2: '5551230001' is neither a phone number in E.164 form (+15551234567) nor a sip: URI",
        "c.csv:3: unknown time zone 'America/Nowhere' (an IANA name, e.g. America/New_York)",
        "c.csv:4: unknown time zone '../../etc/passwd' (an IANA name, e.g. America/New_York)",
        "c.csv:6: +15551230004 is a duplicate of line 5",
        "c.csv:7: 2 fields, the header has 3",
        "c.csv:8: 'note' is over 500 characters"]


def test_an_empty_file_or_one_without_contacts_is_refused():
    assert problems("") == ["c.csv:1: the file is empty: a header line is needed (to,timezone,...)"]
    assert problems("to,timezone\n") == ["c.csv: no contacts: the file has a header and nothing under it"]


def test_the_dnc_list_takes_numbers_and_uris_with_comments_and_names_bad_lines(tmp_path):
    good = tmp_path / "dnc.txt"
    good.write_text("# opted out\n+15551230001  # by phone\n\nsip:bob@10.0.0.5\n")
    assert load_dnc(good) == frozenset({"+15551230001", "sip:bob@10.0.0.5"})
    bad = tmp_path / "bad.txt"
    bad.write_text("+15551230001\n555-0100\n")
    with pytest.raises(ContactsError) as caught:
        load_dnc(bad)
    assert caught.value.problems == [f"{bad}:2: '555-0100' is neither a phone number in E.164 form nor a sip: URI"]
