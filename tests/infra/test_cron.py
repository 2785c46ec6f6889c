"""unix-cron as Cloud Scheduler reads it (infra.cron): what each field accepts, and the gap between runs."""

from __future__ import annotations

import pytest

from infra.cron import CronError, parse_cron


@pytest.mark.parametrize(
    ("text", "minutes", "hours", "days_of_week", "gap"),
    [
        ("0 3 * * *", {0}, {3}, set(range(7)), 1440),
        ("30 2 * * MON-FRI", {30}, {2}, {1, 2, 3, 4, 5}, 1440),
        ("0 */6 * * *", {0}, {0, 6, 12, 18}, set(range(7)), 360),
        ("15,45 8-9 * * *", {15, 45}, {8, 9}, set(range(7)), 30),  # 9:45 -> 8:15 next day is longer
        ("5/20 1 * * *", {5, 25, 45}, {1}, set(range(7)), 20),
        ("0 0 * * 7", {0}, {0}, {0}, 1440),  # Sunday as 7
        ("0 0 * * sun,Sat", {0}, {0}, {0, 6}, 1440),
        ("0 23,1 * * *", {0}, {1, 23}, set(range(7)), 120),  # across midnight
        ("0 0 29 feb *", {0}, {0}, set(range(7)), 1440),
        ("0 0 31 2 MON", {0}, {0}, {1}, 1440),  # with a day of week: day-of-month OR day-of-week
    ],
)
def test_parses_fields_and_the_smallest_gap(text, minutes, hours, days_of_week, gap):
    cron = parse_cron(text)
    assert (cron.minutes, cron.hours, cron.days_of_week) == (minutes, hours, days_of_week)
    assert cron.min_gap_minutes() == gap


@pytest.mark.parametrize(
    ("text", "days"),
    [
        ("0 3 * * *", 1),
        ("0 */6 * * *", 0.25),
        ("15,45 8-9 * * *", 1350 / 1440),  # 9:45 -> 8:15 the next day
        ("30 2 * * MON-FRI", 3),  # Friday -> Monday
        ("0 6 * * MON", 7),
        ("0 3 1 * *", 31),
        ("0 0 31 * *", 61),  # July 31 -> August 31 is 31 days, but Aug 31 -> Oct 31 is 61
        ("0 3 1 1 *", 366),  # across a leap day
        ("0 0 29 feb *", 1461),  # leap years only
        ("0 0 31 2 MON", 350),  # day-of-month OR day-of-week: February's Mondays
        ("0 0 1 * MON", 7),  # the 1st or a Monday: never more than a week
    ],
)
def test_the_longest_gap_between_runs(text, days):
    assert parse_cron(text).max_gap_minutes() == days * 1440


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("60 * * * *", "minute 60 is out of range; allowed: 0-59"),
        ("0 24 * * *", "hour 24 is out of range; allowed: 0-23"),
        ("0 0 0 * *", "day-of-month 0 is out of range; allowed: 1-31"),
        ("0 0 * 13 *", "month 13 is out of range; allowed: 1-12 or JAN-DEC"),
        ("0 0 * * 8", "day-of-week 8 is out of range; allowed: 0-7 or SUN-SAT"),
        ("0 0 * * FUNDAY", "day-of-week 'FUNDAY' is not a value"),
        ("5-1 * * * *", "minute range '5-1' runs backwards"),
        ("*/0 * * * *", "minute step '*/0'; allowed: a step from 1 to 59"),
        ("0 0 * * * *", "6 fields; allowed: five"),
        ("", "0 fields; allowed: five"),
        ("0 0 ? * *", "day-of-month '?' is not *, a number, a range or a step"),
        ("0 0 L * *", "day-of-month 'L' is not a value"),
        ("0 0 30 2 *", "day-of-month '30' never occurs in month '2'"),
        ("0 0 31 APR,JUN *", "never occurs"),
    ],
)
def test_refuses_what_cloud_scheduler_would(text, message):
    with pytest.raises(CronError) as info:
        parse_cron(text)
    assert message in str(info.value) and "\n" not in str(info.value)
