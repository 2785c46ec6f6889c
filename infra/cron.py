"""unix-cron expressions as Cloud Scheduler reads them (pure stdlib): parse and check, no scheduling.

    from infra.cron import parse_cron
    parse_cron("0 3 * * *").min_gap_minutes()   # 1440

Five fields, minute hour day-of-month month day-of-week, each `*`, a number, a range `a-b`, a step `*/n` or
`a-b/n`, or a comma list of those; months JAN-DEC and days SUN-SAT by name too, Sunday as 0 or 7. What
Cloud Scheduler accepts besides (App Engine's "every 24 hours" form) does not work for HTTP targets, so it is
refused here rather than by the API at deploy time.
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass
from functools import lru_cache

from common.reader import shown

_MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_DAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
# (name, low, high, names or None): names map to low, low + 1, ...
FIELDS = (
    ("minute", 0, 59, None),
    ("hour", 0, 23, None),
    ("day-of-month", 1, 31, None),
    ("month", 1, 12, _MONTHS),
    ("day-of-week", 0, 7, _DAYS),
)
_ITEM = re.compile(r"^(?P<range>\*|(?P<lo>[0-9A-Za-z]+)(?:-(?P<hi>[0-9A-Za-z]+))?)(?:/(?P<step>[0-9]+))?$")
_TEXT = re.compile(r"[ -~]*")
MINUTES_PER_DAY = 24 * 60
# Weekdays and leap years repeat every 28 years (between 1901 and 2099): one cycle, and a year more so that
# the gap across its end is seen too, holds every gap a schedule has.
_CYCLE = (datetime.date(2001, 1, 1), datetime.date(2030, 1, 1))
_MONTH_DAYS = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


class CronError(ValueError):
    """An expression Cloud Scheduler would refuse; str() says which field and what is allowed."""


@dataclass(frozen=True)
class Cron:
    text: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days_of_month: frozenset[int]
    months: frozenset[int]
    days_of_week: frozenset[int]  # 0 = Sunday (7 folded into 0)

    def min_gap_minutes(self) -> int:
        """A lower bound of the time between two consecutive runs, in wall-clock minutes.

        Taken over one day's hour x minute grid as if every day ran, wrapping past midnight: skipped days only
        lengthen gaps, so a schedule this accepts never runs closer than the bound (DST aside).
        """
        times = sorted(h * 60 + m for h in self.hours for m in self.minutes)
        gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
        return min([*gaps, times[0] + MINUTES_PER_DAY - times[-1]])

    def max_gap_minutes(self) -> int:
        """The longest time between two consecutive runs, in wall-clock minutes (DST aside), over a whole
        calendar cycle: what an alert on "no run for a while" must wait at least."""
        return _max_gap(self)

    def runs_on(self, day: datetime.date) -> bool:
        """Cron's day rule: with both day fields restricted a day matches either, otherwise both."""
        weekday = day.isoweekday() % 7  # 0 = Sunday
        in_month = day.day in self.days_of_month
        in_week = weekday in self.days_of_week
        either = len(self.days_of_month) < 31 and len(self.days_of_week) < 7
        return day.month in self.months and ((in_month or in_week) if either else (in_month and in_week))


def parse_cron(text: str) -> Cron:
    if not isinstance(text, str):
        raise CronError(f"got {type(text).__name__}; allowed: a string of five fields")
    if not _TEXT.fullmatch(text):
        bad = next(c for c in text if not _TEXT.fullmatch(c))
        raise CronError(f"contains {bad!r}; allowed: one line of printable ASCII, fields separated by spaces")
    fields = text.split()
    if len(fields) != len(FIELDS):
        raise CronError(f"{len(fields)} fields; allowed: five (minute hour day-of-month month day-of-week)")
    values = [_parse_field(field, *spec) for field, spec in zip(fields, FIELDS, strict=True)]
    values[4] = frozenset(d % 7 for d in values[4])
    # With a day-of-week restriction, days are "day-of-month OR day-of-week" (cron's rule) and some day
    # matches; without one, "0 0 30 2 *" would be accepted and never run.
    if fields[4] == "*" and min(values[2]) > max(_MONTH_DAYS[m - 1] for m in values[3]):
        raise CronError(f"day-of-month {fields[2]!r} never occurs in month {fields[3]!r}; allowed: a day "
                        "that exists in one of the months")
    return Cron(text, *values)


@lru_cache(maxsize=256)
def _max_gap(cron: Cron) -> int:
    times = sorted(h * 60 + m for h in cron.hours for m in cron.minutes)
    within = max((b - a for a, b in zip(times, times[1:], strict=False)), default=0)
    start, end = _CYCLE
    days = [n for n in range(start.toordinal(), end.toordinal())
            if cron.runs_on(datetime.date.fromordinal(n))]
    across = max((b - a) * MINUTES_PER_DAY + times[0] - times[-1]
                 for a, b in zip(days, days[1:], strict=False))
    return max(within, across)


def _parse_field(field: str, name: str, low: int, high: int, names: tuple[str, ...] | None) -> frozenset[int]:
    allowed = f"{low}-{high}" + (f" or {names[0]}-{names[-1]}" if names else "")
    values: set[int] = set()
    for item in field.split(","):
        found = _ITEM.fullmatch(item)
        if not found:
            raise CronError(f"{name} {shown(item)} is not *, a number, a range or a step; allowed: {allowed}")
        if found["range"] == "*":
            lo, hi = low, high
        else:
            lo = _number(found["lo"], name, low, high, names, allowed)
            hi = _number(found["hi"], name, low, high, names, allowed) if found["hi"] else lo
            if hi < lo:
                raise CronError(f"{name} range {item!r} runs backwards; allowed: a-b with a <= b")
        step = 1
        if found["step"] is not None:
            step = _int(found["step"], f"{name} step", high)
            if not 1 <= step <= high:
                raise CronError(f"{name} step {shown(item)}; allowed: a step from 1 to {high}")
            if found["hi"] is None and found["range"] != "*":
                hi = high  # "5/15" means from 5 to the end, every 15
        values.update(range(lo, hi + 1, step))
    return frozenset(values)


def _number(token: str, name: str, low: int, high: int, names: tuple[str, ...] | None, allowed: str) -> int:
    if token.isdigit():
        value = _int(token, name, high)
    elif names and token.upper() in names:
        value = low + names.index(token.upper())
    else:
        raise CronError(f"{name} {shown(token)} is not a value; allowed: {allowed}")
    if not low <= value <= high:
        raise CronError(f"{name} {value} is out of range; allowed: {allowed}")
    return value


def _int(digits: str, name: str, high: int) -> int:
    """The value of ASCII digits, compared as text first: int() of over 4,300 digits is a ValueError, and
    no cron value has more than two (leading zeros aside)."""
    significant = digits.lstrip("0")
    if len(significant) > 2:
        raise CronError(f"{name} {shown(digits)} has {len(significant)} digits; allowed: at most {high}")
    return int(significant or "0")

