"""The strict UTC cron grammar of WorkerCronTrigger 0.3.0 and its matcher (pure, no I/O).

Spec sources: docs/spec/cron-trigger.md#cr-grammar "cron文法と実行" (five fields, UTC only, the rejection list, the step origin,
the day-of-month / day-of-week OR rule, impossible dates never fire) and docs/spec/host-limits.md#hl-decisions (a day field
is "restricted" iff its text is not exactly ``*``). Field cases: CR-01 … CR-38.

Grammar (after the expression-level checks: a ``str``, 1..64 characters, ASCII only, exactly five
fields separated by exactly one space)::

    field   := element ("," element)*
    element := "*" | "*/" NUM | NUM | NUM "-" NUM | NUM "-" NUM "/" NUM
    NUM     := [0-9]+

Decisions where the Form leaves room (docs/spec/cron-trigger.md#cr-grammar; documented here, pinned by tests):

* Leading zeros are accepted: ``05`` reads as 5 (it is a plain decimal integer in range).
* A step may exceed the length of its range as long as it is within 1..field width
  (``10-20/30`` selects 10 only); the width is the number of values (60, 24, 31, 12, 7).
* ``matches`` is true only for instants on a whole UTC minute (seconds and microseconds zero).
* ``next_match`` returns ``None`` for schedules with no calendar match, and also when the next
  match would fall after 9999-12-31 (beyond ``datetime``).

Nothing here reads the host's clock or local timezone; every instant is converted to UTC.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
from collections.abc import Callable, Iterator
from datetime import UTC, date, datetime, timedelta
from typing import NamedTuple

MAX_EXPRESSION_LENGTH = 64

_ONE_MINUTE = timedelta(minutes=1)
_DIGITS = frozenset("0123456789")
_FIELD_CHARS = _DIGITS | frozenset("*,-/")
# The Gregorian calendar repeats every 400 years; scanning one cycle of months proves "never".
_MAX_MONTHS_SCANNED = 400 * 12 + 1
# Month lengths a month can have in some year (February: 28 or 29).
_MONTH_LENGTHS: dict[int, tuple[int, ...]] = {
    1: (31,),
    2: (28, 29),
    3: (31,),
    4: (30,),
    5: (31,),
    6: (30,),
    7: (31,),
    8: (31,),
    9: (30,),
    10: (31,),
    11: (30,),
    12: (31,),
}


class _Field(NamedTuple):
    name: str
    low: int
    high: int

    @property
    def width(self) -> int:
        return self.high - self.low + 1


# Builds the CronSyntaxError for one field; passed down the element parsers.
_Fail = Callable[[str], "CronSyntaxError"]

_FIELDS = (
    _Field("minute", 0, 59),
    _Field("hour", 0, 23),
    _Field("day-of-month", 1, 31),
    _Field("month", 1, 12),
    _Field("day-of-week", 0, 6),
)


class CronSyntaxError(ValueError):
    """A cron expression that the WorkerCronTrigger 0.3.0 grammar rejects (docs/spec/cron-trigger.md, CR-11…CR-32).

    Attributes: ``expression`` (the rejected text), ``field`` (``"minute"``, ``"hour"``,
    ``"day-of-month"``, ``"month"``, ``"day-of-week"``, or ``None`` for expression-level problems
    such as length, non-ASCII text or the number of fields) and ``message`` (human readable, e.g.
    ``"day-of-week value 7 is out of range 0..6 (0 is Sunday; 7 is not an alias)"``).
    """

    def __init__(self, message: str, *, expression: str, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.expression = expression
        self.field = field

    def __reduce__(self) -> tuple[object, ...]:
        # Keyword-only __init__ parameters are not restored by the default exception pickling.
        return (_rebuild_syntax_error, (self.message, self.expression, self.field))


def _rebuild_syntax_error(message: str, expression: str, field: str | None) -> CronSyntaxError:
    return CronSyntaxError(message, expression=expression, field=field)


@dataclasses.dataclass(frozen=True)
class CronSchedule:
    """A parsed cron expression: the selected values of each field, all in UTC.

    ``minutes`` ⊆ 0..59, ``hours`` ⊆ 0..23, ``days_of_month`` ⊆ 1..31, ``months`` ⊆ 1..12,
    ``days_of_week`` ⊆ 0..6 (0 = Sunday); each non-empty. ``dom_restricted`` / ``dow_restricted``
    are true iff that field's text is not exactly ``*`` (docs/spec/host-limits.md#hl-decisions). Build it with ``parse``;
    the constructor checks the shapes and raises ``ValueError`` on sets that no expression yields.
    """

    expression: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days_of_month: frozenset[int]
    months: frozenset[int]
    days_of_week: frozenset[int]
    dom_restricted: bool
    dow_restricted: bool
    # Derived lookup tables for next_match (not part of equality or hashing).
    _minute_list: tuple[int, ...] = dataclasses.field(init=False, repr=False, compare=False)
    _hour_list: tuple[int, ...] = dataclasses.field(init=False, repr=False, compare=False)
    _days_by_shape: dict[tuple[int, int], tuple[int, ...]] = dataclasses.field(
        init=False, repr=False, compare=False
    )
    _never: bool = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        sets = (self.minutes, self.hours, self.days_of_month, self.months, self.days_of_week)
        for spec, values in zip(_FIELDS, sets, strict=True):
            if not isinstance(values, frozenset) or not values:
                raise ValueError(f"{spec.name} must be a non-empty frozenset")
            if not all(isinstance(v, int) and spec.low <= v <= spec.high for v in values):
                raise ValueError(f"{spec.name} values must be integers in {spec.low}..{spec.high}")
        # The matching days of a month depend only on its length and the weekday of its 1st.
        shapes = {
            (length, first_dow): tuple(
                day for day in range(1, length + 1) if self._day_ok(day, (first_dow + day - 1) % 7)
            )
            for length in (28, 29, 30, 31)
            for first_dow in range(7)
        }
        # Every (month, length, weekday of the 1st) occurs within one 400-year cycle, so this
        # proves "never fires" (CR-05, CR-06) without any search.
        never = not any(
            shapes[(length, first_dow)]
            for month in self.months
            for length in _MONTH_LENGTHS[month]
            for first_dow in range(7)
        )
        object.__setattr__(self, "_minute_list", tuple(sorted(self.minutes)))
        object.__setattr__(self, "_hour_list", tuple(sorted(self.hours)))
        object.__setattr__(self, "_days_by_shape", shapes)
        object.__setattr__(self, "_never", never)

    def _day_ok(self, day_of_month: int, day_of_week: int) -> bool:
        """docs/spec/cron-trigger.md#cr-days: both day fields restricted → either may match; one restricted → only it."""
        if self.dom_restricted and self.dow_restricted:
            return day_of_month in self.days_of_month or day_of_week in self.days_of_week
        if self.dom_restricted:
            return day_of_month in self.days_of_month
        if self.dow_restricted:
            return day_of_week in self.days_of_week
        return True

    @property
    def can_fire(self) -> bool:
        """False iff no calendar date ever matches (e.g. ``0 0 31 2 *``, CR-05/CR-06)."""
        return not self._never


def parse(expression: str) -> CronSchedule:
    """Parse a WorkerCronTrigger 0.3.0 cron expression (docs/spec/cron-trigger.md#cr-grammar "cron文法と実行").

    Returns a ``CronSchedule``. Raises ``TypeError`` if ``expression`` is not a ``str`` and
    ``CronSyntaxError`` (a ``ValueError``) for anything outside the grammar in the module
    docstring: more than 64 characters, non-ASCII text, other than exactly five fields separated
    by exactly one space, names, empty list elements, ``/step`` on a bare integer, reversed
    ranges, values outside the field range, steps outside 1..field width, signs, decimals, hex,
    half-open ranges, Quartz/Vixie extensions, macros and 7 as Sunday.
    """
    if not isinstance(expression, str):
        raise TypeError(f"cron expression must be a str, not {type(expression).__name__}")
    # str.__str__ yields an exact str, so a str subclass cannot reach the cache or the schedule.
    return _parse_cached(str.__str__(expression))


# Parsing is pure and CronSchedule immutable, so the beat may call parse() on every tick cheaply.
@functools.lru_cache(maxsize=1024)
def _parse_cached(expression: str) -> CronSchedule:
    _check_expression_shape(expression)
    texts = expression.split(" ")
    values = [_parse_field(text, spec, expression) for text, spec in zip(texts, _FIELDS, strict=True)]
    return CronSchedule(
        expression=expression,
        minutes=values[0],
        hours=values[1],
        days_of_month=values[2],
        months=values[3],
        days_of_week=values[4],
        dom_restricted=texts[2] != "*",
        dow_restricted=texts[4] != "*",
    )


def _check_expression_shape(expression: str) -> None:
    def fail(message: str) -> CronSyntaxError:
        return CronSyntaxError(message, expression=expression)

    if not expression:
        raise fail("cron expression is empty; five fields are required")
    if len(expression) > MAX_EXPRESSION_LENGTH:
        raise fail(
            f"cron expression is {len(expression)} characters long; "
            f"at most {MAX_EXPRESSION_LENGTH} are allowed"
        )
    if not expression.isascii():
        bad = next(c for c in expression if not c.isascii())
        raise fail(f"cron expression must be ASCII; found {bad!r} (U+{ord(bad):04X})")
    if expression.startswith("@"):
        raise fail(f"macros such as {expression!r} are not supported; write five fields")
    for char in expression:
        if char.isspace() and char != " ":
            raise fail(f"fields must be separated by single spaces; found {char!r}")
    if expression != expression.strip(" "):
        raise fail("cron expression must not have leading or trailing spaces")
    if "  " in expression:
        raise fail("fields must be separated by exactly one space")
    count = expression.count(" ") + 1
    if count != len(_FIELDS):
        raise fail(f"cron expression has {count} fields; exactly 5 are required")


def _parse_field(text: str, spec: _Field, expression: str) -> frozenset[int]:
    def fail(message: str) -> CronSyntaxError:
        return CronSyntaxError(f"{spec.name}: {message}", expression=expression, field=spec.name)

    for char in text:
        if char.isalpha():
            raise fail(
                f"letters are not allowed ({text!r}): names such as MON or JAN and extensions "
                f"such as L or W are not supported; use numbers {spec.low}..{spec.high}"
            )
        if char not in _FIELD_CHARS:
            raise fail(
                f"unexpected character {char!r} in {text!r}; only digits, '*', ',', '-' and '/' are allowed"
            )
    selected: set[int] = set()
    for element in text.split(","):
        if not element:
            raise fail(f"empty list element in {text!r} (leading, trailing or doubled comma)")
        selected.update(_parse_element(element, spec, fail))
    return frozenset(selected)


def _parse_element(element: str, spec: _Field, fail: _Fail) -> range:
    base, slash, step_text = element.partition("/")
    if "/" in step_text:
        raise fail(f"more than one '/' in {element!r}")
    if base == "*":
        low, high = spec.low, spec.high
    elif "-" in base:
        if base.startswith("-"):
            raise fail(f"{base!r}: signs and negative numbers are not allowed")
        low_text, _, high_text = base.partition("-")
        if not high_text:
            raise fail(f"range {base!r} is missing its upper bound")
        low = _parse_value(low_text, spec, fail)
        high = _parse_value(high_text, spec, fail)
        if low > high:
            raise fail(f"range {low}-{high} is reversed (no wrap-around: low must be <= high)")
    else:
        low = high = _parse_value(base, spec, fail)
        if slash:
            raise fail(
                f"'/step' is not allowed on a bare integer ({element!r}); "
                f"write a range such as '{base}-{spec.high}/{step_text}'"
            )
    step = 1
    if slash:
        step = _parse_number(step_text, "step", fail)
        if not 1 <= step <= spec.width:
            raise fail(f"step {step} is out of range 1..{spec.width}")
    # The step counts from the range's low end (or the field minimum for '*'): docs/spec/cron-trigger.md.
    return range(low, high + 1, step)


def _parse_value(text: str, spec: _Field, fail: _Fail) -> int:
    value = _parse_number(text, "value", fail)
    if not spec.low <= value <= spec.high:
        note = " (0 is Sunday; 7 is not an alias)" if spec.name == "day-of-week" else ""
        raise fail(f"value {value} is out of range {spec.low}..{spec.high}{note}")
    return value


def _parse_number(text: str, role: str, fail: _Fail) -> int:
    if not text or not _DIGITS.issuperset(text):
        raise fail(f"{role} {text!r} is not a plain ASCII decimal integer")
    return int(text)


def _to_utc(moment: datetime, name: str) -> datetime:
    if not isinstance(moment, datetime):
        raise TypeError(f"{name} must be a datetime, not {type(moment).__name__}")
    if moment.utcoffset() is None:
        raise ValueError(f"{name} must be timezone-aware (got a naive datetime)")
    return moment.astimezone(UTC)


def matches(schedule: CronSchedule, at: datetime) -> bool:
    """True iff ``at`` (timezone-aware; converted to UTC) is a match of ``schedule``.

    Only whole UTC minutes can match: a nonzero second or microsecond gives False. Day rule
    (docs/spec/cron-trigger.md#cr-spec, docs/spec/host-limits.md#hl-decisions): both day fields restricted → day-of-month OR day-of-week; one
    restricted → only that one; neither → every day. Raises ``TypeError`` if ``at`` is not a
    ``datetime`` and ``ValueError`` if it is naive.
    """
    utc = _to_utc(at, "at")
    return (
        utc.second == 0
        and utc.microsecond == 0
        and utc.minute in schedule.minutes
        and utc.hour in schedule.hours
        and utc.month in schedule.months
        and schedule._day_ok(utc.day, utc.isoweekday() % 7)
    )


def next_match(schedule: CronSchedule, after: datetime) -> datetime | None:
    """The first match strictly after ``after`` (timezone-aware), as a UTC datetime on a whole minute.

    Returns ``None`` when the schedule can never fire (``0 0 31 2 *``: CR-05, CR-06; decided
    without searching) or when the next match would be after year 9999. Otherwise scans at most
    one 400-year Gregorian cycle month by month, so it always returns promptly. Raises
    ``TypeError`` if ``after`` is not a ``datetime`` and ``ValueError`` if it is naive.
    """
    utc = _to_utc(after, "after")
    if schedule._never:
        return None
    try:
        start = utc.replace(second=0, microsecond=0) + _ONE_MINUTE
    except OverflowError:
        return None
    year, month, day, hour, minute = start.year, start.month, start.day, start.hour, start.minute
    hours, minutes = schedule._hour_list, schedule._minute_list
    for _ in range(_MAX_MONTHS_SCANNED):
        if month in schedule.months:
            first_dow = date(year, month, 1).isoweekday() % 7
            days = schedule._days_by_shape[(_month_length(year, month), first_dow)]
            for index in range(bisect.bisect_left(days, day), len(days)):
                found = days[index]
                if found != day:
                    return datetime(year, month, found, hours[0], minutes[0], tzinfo=UTC)
                time_of_day = _first_time_at_or_after(hours, minutes, hour, minute)
                if time_of_day is not None:
                    return datetime(year, month, found, *time_of_day, tzinfo=UTC)
        day, hour, minute = 1, 0, 0
        month += 1
        if month > 12:
            month, year = 1, year + 1
            if year > 9999:
                return None
    return None  # unreachable for a schedule that can fire: every month shape recurs in 400 years


def _month_length(year: int, month: int) -> int:
    if month != 2:
        return _MONTH_LENGTHS[month][0]
    leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    return 29 if leap else 28


def _first_time_at_or_after(
    hours: tuple[int, ...], minutes: tuple[int, ...], hour: int, minute: int
) -> tuple[int, int] | None:
    index = bisect.bisect_left(hours, hour)
    if index < len(hours) and hours[index] == hour:
        minute_index = bisect.bisect_left(minutes, minute)
        if minute_index < len(minutes):
            return hour, minutes[minute_index]
        index += 1
    if index < len(hours):
        return hours[index], minutes[0]
    return None


def matches_between(schedule: CronSchedule, start: datetime, end: datetime) -> Iterator[datetime]:
    """All matches ``t`` with ``start < t <= end``, ascending, as UTC datetimes on whole minutes.

    Both bounds must be timezone-aware (``ValueError`` if naive, ``TypeError`` if not a
    ``datetime``; checked when called, not when iterated). Empty when ``end <= start``.
    """
    start_utc = _to_utc(start, "start")
    end_utc = _to_utc(end, "end")
    return _iterate_matches(schedule, start_utc, end_utc)


def _iterate_matches(schedule: CronSchedule, start: datetime, end: datetime) -> Iterator[datetime]:
    current = next_match(schedule, start)
    while current is not None and current <= end:
        yield current
        current = next_match(schedule, current)


def format_rfc3339(t: datetime) -> str:
    """Render ``t`` (timezone-aware) as RFC 3339 UTC with whole seconds: ``2026-10-05T12:05:00Z``.

    Fractional seconds are dropped (truncated). Used for ``observed.nextMatchAt`` (docs/spec/cron-trigger.md).
    Raises ``TypeError`` if ``t`` is not a ``datetime`` and ``ValueError`` if it is naive.
    """
    utc = _to_utc(t, "t")
    # Formatted by hand: strftime's %Y does not zero-pad years below 1000 on every platform.
    return f"{utc.year:04d}-{utc.month:02d}-{utc.day:02d}T{utc.hour:02d}:{utc.minute:02d}:{utc.second:02d}Z"
