"""Calling windows in the contact's zone (DST included) and the retry policy's backoff."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from telephony.campaign import CallingWindow, RetryPolicy
from telephony.errors import CampaignError

NY = "America/New_York"


def at(text: str, zone: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=ZoneInfo(zone)).timestamp()


def test_inside_the_window_is_now_and_its_edges_are_start_inclusive_end_exclusive():
    window = CallingWindow.parse("09:00-20:00")
    noon = at("2026-03-02T12:00:00", NY)
    assert window.opens_at(noon, NY) == noon
    nine = at("2026-03-02T09:00:00", NY)
    assert window.opens_at(nine, NY) == nine
    eight_pm = at("2026-03-02T20:00:00", NY)
    assert window.opens_at(eight_pm, NY) == at("2026-03-03T09:00:00", NY)


def test_before_the_window_waits_for_today_after_it_for_tomorrow():
    window = CallingWindow.parse("09:00-20:00")
    assert window.opens_at(at("2026-03-02T06:30:00", NY), NY) == at("2026-03-02T09:00:00", NY)
    assert window.opens_at(at("2026-03-02T23:59:00", NY), NY) == at("2026-03-03T09:00:00", NY)


def test_the_same_instant_is_open_in_one_zone_and_closed_in_another():
    window = CallingWindow.parse("09:00-20:00")
    instant = at("2026-06-01T15:00:00", "UTC")          # 11:00 in New York, 00:00 in Tokyo
    assert window.opens_at(instant, NY) == instant
    assert window.opens_at(instant, "Asia/Tokyo") == at("2026-06-02T09:00:00", "Asia/Tokyo")


def test_the_window_is_local_wall_clock_across_a_dst_change():
    window = CallingWindow.parse("09:00-20:00")
    # New York springs forward on 2026-03-08: 09:00 local is 14:00 UTC the day before, 13:00 UTC that day
    opens = window.opens_at(at("2026-03-07T22:00:00", NY), NY)
    assert opens == at("2026-03-08T13:00:00", "UTC")
    assert datetime.fromtimestamp(opens, ZoneInfo(NY)).hour == 9


def test_all_day_is_always_open():
    window = CallingWindow.parse("00:00-24:00")
    for hour in (0, 7, 23):
        t = at(f"2026-03-02T{hour:02d}:59:59", NY)
        assert window.opens_at(t, NY) == t


@pytest.mark.parametrize(("text", "message"), [
    ("9-20", "not a time of day"), ("20:00-09:00", "must start before it ends"), ("09:00", "HH:MM-HH:MM"),
    ("24:30-25:00", "not a time of day")])
def test_a_bad_window_says_what_is_wrong(text, message):
    with pytest.raises(CampaignError, match=message):
        CallingWindow.parse(text)


def test_backoff_doubles_up_to_its_cap_and_stops_at_max_attempts():
    retry = RetryPolicy(retry_on=frozenset({"busy", "no-answer"}), max_attempts=4, backoff_s=60,
                        backoff_factor=2, max_backoff_s=150)
    assert [retry.next_try_s("busy", n) for n in (1, 2, 3, 4)] == [60, 120, 150, None]


def test_only_the_chosen_outcomes_are_retried():
    retry = RetryPolicy(retry_on=frozenset({"busy"}), max_attempts=3)
    assert retry.next_try_s("busy", 1) == 600
    assert retry.next_try_s("no-answer", 1) is None
    assert retry.next_try_s("answered", 1) is None
    with pytest.raises(CampaignError, match="retry on 'answered'"):
        RetryPolicy(retry_on=frozenset({"answered"}))
