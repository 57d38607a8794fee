"""Grammar table for core.cron.parse (docs/spec/cron-trigger.md#cr-grammar "cron文法と実行", docs/spec/host-limits.md#hl-decisions)."""

from __future__ import annotations

import pickle
from datetime import UTC, datetime, timedelta, timezone

import pytest

from core import cron

MINUTES = frozenset(range(60))
HOURS = frozenset(range(24))
DAYS = frozenset(range(1, 32))
MONTHS = frozenset(range(1, 13))
WEEKDAYS = frozenset(range(7))

# (expression, minutes, hours, days_of_month, months, days_of_week, dom_restricted, dow_restricted)
ACCEPTED = [
    ("* * * * *", MINUTES, HOURS, DAYS, MONTHS, WEEKDAYS, False, False),
    ("*/5 * * * *", frozenset(range(0, 60, 5)), HOURS, DAYS, MONTHS, WEEKDAYS, False, False),
    ("0 12 1 * 1", {0}, {12}, {1}, MONTHS, {1}, True, True),
    ("59 23 31 12 6", {59}, {23}, {31}, {12}, {6}, True, True),
    ("0 0 1 1 0", {0}, {0}, {1}, {1}, {0}, True, True),
    ("*/60 * * * *", {0}, HOURS, DAYS, MONTHS, WEEKDAYS, False, False),
    ("0 */24 */31 */12 */7", {0}, {0}, {1}, {1}, {0}, True, True),
    ("*/1 */1 */1 */1 */1", MINUTES, HOURS, DAYS, MONTHS, WEEKDAYS, True, True),
    ("5-59/15 * * * *", {5, 20, 35, 50}, HOURS, DAYS, MONTHS, WEEKDAYS, False, False),
    ("10-20/30 * * * *", {10}, HOURS, DAYS, MONTHS, WEEKDAYS, False, False),
    ("0-59/60 * * * *", {0}, HOURS, DAYS, MONTHS, WEEKDAYS, False, False),
    (
        "*/2,1-5/2 * * * *",
        frozenset(range(0, 60, 2)) | {1, 3, 5},
        HOURS,
        DAYS,
        MONTHS,
        WEEKDAYS,
        False,
        False,
    ),
    ("0 9-17 * * 1-5", {0}, set(range(9, 18)), DAYS, MONTHS, {1, 2, 3, 4, 5}, False, True),
    ("0 0 */2 * *", {0}, {0}, set(range(1, 32, 2)), MONTHS, WEEKDAYS, True, False),
    ("0 0 1-31 * *", {0}, {0}, DAYS, MONTHS, WEEKDAYS, True, False),  # restricted: text is not '*'
    ("0 0 * * 0-6", {0}, {0}, DAYS, MONTHS, WEEKDAYS, False, True),
    ("0 0 *,* * *", {0}, {0}, DAYS, MONTHS, WEEKDAYS, True, False),
    ("5-5 * * * *", {5}, HOURS, DAYS, MONTHS, WEEKDAYS, False, False),
    ("1,1,1 * * * *", {1}, HOURS, DAYS, MONTHS, WEEKDAYS, False, False),
    ("3,1,2 * * * *", {1, 2, 3}, HOURS, DAYS, MONTHS, WEEKDAYS, False, False),
    ("05 007 01 09 00", {5}, {7}, {1}, {9}, {0}, True, True),  # leading zeros: decimal, not octal
    ("*/05 * * * *", frozenset(range(0, 60, 5)), HOURS, DAYS, MONTHS, WEEKDAYS, False, False),
    ("0 0 31 2 *", {0}, {0}, {31}, {2}, WEEKDAYS, True, False),  # valid, merely never fires
    ("0 0 * 2-11/3 *", {0}, {0}, DAYS, {2, 5, 8, 11}, WEEKDAYS, False, False),
]


@pytest.mark.parametrize("row", ACCEPTED, ids=[row[0] for row in ACCEPTED])
def test_accepted_expression_field_sets(row: tuple) -> None:
    expression, minutes, hours, doms, months, dows, dom_restricted, dow_restricted = row
    schedule = cron.parse(expression)
    assert schedule.expression == expression
    assert schedule.minutes == frozenset(minutes)
    assert schedule.hours == frozenset(hours)
    assert schedule.days_of_month == frozenset(doms)
    assert schedule.months == frozenset(months)
    assert schedule.days_of_week == frozenset(dows)
    assert schedule.dom_restricted is dom_restricted
    assert schedule.dow_restricted is dow_restricted


# (expression, field named by the error or None, fragment of the message)
REJECTED = [
    # names, any letters
    ("0 0 * * MON", "day-of-week", "letters"),
    ("0 0 1 JAN *", "month", "letters"),
    ("0 0 * * mon", "day-of-week", "letters"),
    ("0 0 * * Mon-Sun", "day-of-week", "letters"),
    ("e * * * *", "minute", "letters"),
    ("1e1 * * * *", "minute", "letters"),
    # empty elements, doubled / leading / trailing commas
    ("0 0 1,,15 * *", "day-of-month", "empty list element"),
    ("0 0 1, * *", "day-of-month", "empty list element"),
    ("0 0 ,1 * *", "day-of-month", "empty list element"),
    (", * * * *", "minute", "empty list element"),
    # /step on a bare integer
    ("5/15 * * * *", "minute", "bare integer"),
    ("0/15 * * * *", "minute", "bare integer"),
    ("0 9 1 * 0/1", "day-of-week", "bare integer"),
    # reversed ranges, also inside lists with a step
    ("0 22-5 * * *", "hour", "reversed"),
    ("0 12 * * 1,5-3/2", "day-of-week", "reversed"),
    ("0 0 * * 5-1", "day-of-week", "reversed"),
    # values out of range, single and inside ranges
    ("60 * * * *", "minute", "out of range 0..59"),
    ("90 * * * *", "minute", "out of range 0..59"),
    ("0 24 * * *", "hour", "out of range 0..23"),
    ("0 0-24 * * *", "hour", "out of range 0..23"),
    ("0 0 0 * *", "day-of-month", "out of range 1..31"),
    ("0 0 32 * *", "day-of-month", "out of range 1..31"),
    ("0 0 1 0 *", "month", "out of range 1..12"),
    ("0 0 1 13 *", "month", "out of range 1..12"),
    ("0 0 0-5 * *", "day-of-month", "out of range 1..31"),
    # 7 is not Sunday
    ("0 0 * * 7", "day-of-week", "value 7 is out of range 0..6"),
    ("0 0 * * 1-7", "day-of-week", "value 7 is out of range 0..6"),
    ("0 0 * * 0,7", "day-of-week", "value 7 is out of range 0..6"),
    # steps outside 1..width (60, 24, 31, 12, 7)
    ("*/0 * * * *", "minute", "step 0 is out of range 1..60"),
    ("0-59/0 * * * *", "minute", "step 0 is out of range 1..60"),
    ("*/61 * * * *", "minute", "step 61 is out of range 1..60"),
    ("*/90 * * * *", "minute", "step 90 is out of range 1..60"),
    ("0 */25 * * *", "hour", "step 25 is out of range 1..24"),
    ("0 0 */32 * *", "day-of-month", "step 32 is out of range 1..31"),
    ("0 0 * */13 *", "month", "step 13 is out of range 1..12"),
    ("0 0 * * */8", "day-of-week", "step 8 is out of range 1..7"),
    ("0 0 * * 1-5/0", "day-of-week", "step 0 is out of range 1..7"),
    # malformed steps
    ("*/ * * * *", "minute", "step"),
    ("*/5/2 * * * *", "minute", "more than one '/'"),
    ("1-5/ * * * *", "minute", "step"),
    ("/5 * * * *", "minute", "not a plain"),
    ("*/-1 * * * *", "minute", "not a plain"),
    # signs, decimals, hex, half-open and malformed ranges
    ("+5 * * * *", "minute", "unexpected character '+'"),
    ("-5 * * * *", "minute", "signs"),
    ("5.0 * * * *", "minute", "unexpected character '.'"),
    ("0x5 * * * *", "minute", "letters"),
    ("5- * * * *", "minute", "missing its upper bound"),
    ("1-2-3 * * * *", "minute", "not a plain"),
    ("*-5 * * * *", "minute", "not a plain"),
    ("5-* * * * *", "minute", "not a plain"),
    ("** * * * *", "minute", "not a plain"),
    ("5* * * * *", "minute", "not a plain"),
    # Quartz / Vixie / AWS extensions
    ("0 0 L * *", "day-of-month", "letters"),
    ("0 0 ? * 1", "day-of-month", "unexpected character '?'"),
    ("0 0 * * 5L", "day-of-week", "letters"),
    ("0 0 * * 1#2", "day-of-week", "unexpected character '#'"),
    ("0 0 15W * *", "day-of-month", "letters"),
    ("0 0 $ * *", "day-of-month", "unexpected character '$'"),
    ("0 0 LW * *", "day-of-month", "letters"),
    ("H * * * *", "minute", "letters"),
    # macros
    ("@daily", None, "macros"),
    ("@weekly", None, "macros"),
    ("@hourly", None, "macros"),
    ("@reboot", None, "macros"),
    ("@every 5m", None, "macros"),
    # field counts and separators
    ("", None, "empty"),
    ("* * * *", None, "4 fields"),
    ("* * * * * *", None, "6 fields"),
    ("0 0 0 * * * 2026", None, "7 fields"),
    ("*", None, "1 fields"),
    ("*  * * * *", None, "exactly one space"),
    (" * * * * *", None, "leading or trailing"),
    ("* * * * * ", None, "leading or trailing"),
    ("*\t* * * *", None, "single spaces"),
    ("* * * * *\n", None, "single spaces"),
    ("*\r\n* * * *", None, "single spaces"),
    ("*\x0b* * * *", None, "single spaces"),
    # non-ASCII
    ("０ * * * *", None, "ASCII"),  # fullwidth digit zero
    ("٣ * * * *", None, "ASCII"),  # Arabic-Indic digit three
    ("*\u00a0* * * *", None, "ASCII"),  # no-break space
    ("*\u3000* * * *", None, "ASCII"),  # ideographic space
    ("5 * * * *\u200b", None, "ASCII"),  # zero-width space
    # other characters
    ("0 0 * * 1;2", "day-of-week", "unexpected character ';'"),
    ("0 0 * * 1\x00", "day-of-week", "unexpected character"),
]


@pytest.mark.parametrize(("expression", "field", "fragment"), REJECTED, ids=[repr(r[0]) for r in REJECTED])
def test_rejected_expression(expression: str, field: str | None, fragment: str) -> None:
    with pytest.raises(cron.CronSyntaxError) as caught:
        cron.parse(expression)
    error = caught.value
    assert isinstance(error, ValueError)
    assert error.expression == expression
    assert error.field == field
    assert fragment in str(error)
    if field is not None:
        assert str(error).startswith(field)


def test_day_of_week_seven_message_is_explicit() -> None:
    with pytest.raises(cron.CronSyntaxError, match=r"day-of-week: value 7 is out of range 0\.\.6"):
        cron.parse("0 0 * * 7")


def _padded(length: int) -> str:
    """A valid expression of exactly ``length`` characters (a long minute list, then 4 stars)."""
    tail = " * * * *"
    minute = ",".join(["0"] * 40)
    minute = minute[: length - len(tail)]
    if minute.endswith(","):
        minute = minute[:-1] + "1"  # keep it a valid list: replace the dangling comma
    return minute + tail


def test_length_boundary_64_accepted_65_rejected() -> None:
    at_limit = _padded(64)
    assert len(at_limit) == 64
    assert cron.parse(at_limit).minutes <= {0, 1, 10}
    over = "0" + at_limit  # still a valid-looking field, now 65 characters
    assert len(over) == 65
    with pytest.raises(cron.CronSyntaxError, match="65 characters") as caught:
        cron.parse(over)
    assert caught.value.field is None
    # A long expression that is otherwise fine, with leading zeros: 64 passes, 65 fails.
    zeros_64 = "0" * 56 + " * * * *"
    assert len(zeros_64) == 64 and cron.parse(zeros_64).minutes == {0}
    with pytest.raises(cron.CronSyntaxError):
        cron.parse("0" + zeros_64)


@pytest.mark.parametrize("value", [None, 5, b"* * * * *", ["*", "*", "*", "*", "*"], 5.0])
def test_non_string_raises_type_error(value: object) -> None:
    with pytest.raises(TypeError):
        cron.parse(value)  # type: ignore[arg-type]


def test_str_subclass_is_parsed_as_plain_str() -> None:
    class Text(str):
        pass

    schedule = cron.parse(Text("*/5 * * * *"))
    assert type(schedule.expression) is str
    assert schedule == cron.parse("*/5 * * * *")


def test_error_survives_pickling() -> None:
    with pytest.raises(cron.CronSyntaxError) as caught:
        cron.parse("0 0 * * 7")
    copy = pickle.loads(pickle.dumps(caught.value))
    assert (copy.expression, copy.field, str(copy)) == (
        caught.value.expression,
        caught.value.field,
        str(caught.value),
    )


def test_schedule_is_hashable_value_and_rejects_bad_sets() -> None:
    assert cron.parse("0 0 * * *") == cron.parse("0 0 * * *")
    assert hash(cron.parse("0 0 * * *")) == hash(cron.parse("0 0 * * *"))
    assert cron.parse("0 0 * * *") != cron.parse("0 0 1-31 * *")  # restriction differs
    good = cron.parse("0 0 * * *")
    with pytest.raises(ValueError):
        cron.CronSchedule(
            expression="x",
            minutes=frozenset({60}),
            hours=good.hours,
            days_of_month=good.days_of_month,
            months=good.months,
            days_of_week=good.days_of_week,
            dom_restricted=False,
            dow_restricted=False,
        )
    with pytest.raises(ValueError):
        cron.CronSchedule(
            expression="x",
            minutes=frozenset(),
            hours=good.hours,
            days_of_month=good.days_of_month,
            months=good.months,
            days_of_week=good.days_of_week,
            dom_restricted=False,
            dow_restricted=False,
        )


# --- matches / next_match / matches_between / format_rfc3339 behaviour outside the CR cases ---


def test_matches_requires_whole_minutes_and_converts_to_utc() -> None:
    schedule = cron.parse("30 4 * * *")
    assert cron.matches(schedule, datetime(2026, 3, 4, 4, 30, tzinfo=UTC))
    assert not cron.matches(schedule, datetime(2026, 3, 4, 4, 30, 1, tzinfo=UTC))
    assert not cron.matches(schedule, datetime(2026, 3, 4, 4, 30, 0, 1, tzinfo=UTC))
    tokyo = timezone(timedelta(hours=9))
    assert cron.matches(schedule, datetime(2026, 3, 4, 13, 30, tzinfo=tokyo))
    assert not cron.matches(schedule, datetime(2026, 3, 4, 4, 30, tzinfo=tokyo))


def test_matches_day_rules() -> None:
    monday_2nd = datetime(2026, 3, 2, 0, 0, tzinfo=UTC)  # Monday
    sunday_1st = datetime(2026, 3, 1, 0, 0, tzinfo=UTC)  # Sunday
    tuesday_3rd = datetime(2026, 3, 3, 0, 0, tzinfo=UTC)
    both = cron.parse("0 0 1 * 1")
    assert cron.matches(both, monday_2nd) and cron.matches(both, sunday_1st)
    assert not cron.matches(both, tuesday_3rd)
    dom_only = cron.parse("0 0 1 * *")
    assert cron.matches(dom_only, sunday_1st) and not cron.matches(dom_only, monday_2nd)
    dow_only = cron.parse("0 0 * * 1")
    assert cron.matches(dow_only, monday_2nd) and not cron.matches(dow_only, sunday_1st)
    sunday = cron.parse("0 0 * * 0")
    assert cron.matches(sunday, sunday_1st) and not cron.matches(sunday, monday_2nd)
    # '1-31' restricts day-of-month (docs/spec/host-limits.md#hl-decisions): with a weekday it means "every day".
    assert cron.matches(cron.parse("0 0 1-31 * 1"), tuesday_3rd)
    assert not cron.matches(cron.parse("0 0 * * 1"), tuesday_3rd)


@pytest.mark.parametrize("bad", [datetime(2026, 1, 1), "2026-01-01T00:00:00Z"])
def test_naive_or_non_datetime_rejected(bad: object) -> None:
    schedule = cron.parse("* * * * *")
    expected = ValueError if isinstance(bad, datetime) else TypeError
    aware = datetime(2026, 1, 1, tzinfo=UTC)
    with pytest.raises(expected):
        cron.matches(schedule, bad)  # type: ignore[arg-type]
    with pytest.raises(expected):
        cron.next_match(schedule, bad)  # type: ignore[arg-type]
    with pytest.raises(expected):
        cron.matches_between(schedule, bad, aware)  # type: ignore[arg-type]
    with pytest.raises(expected):
        cron.matches_between(schedule, aware, bad)  # type: ignore[arg-type]
    with pytest.raises(expected):
        cron.format_rfc3339(bad)  # type: ignore[arg-type]


def test_next_match_floors_to_minute_and_returns_utc() -> None:
    every = cron.parse("* * * * *")
    at_second_59 = datetime(2026, 3, 4, 10, 17, 59, 999999, tzinfo=UTC)
    assert cron.next_match(every, at_second_59) == datetime(2026, 3, 4, 10, 18, tzinfo=UTC)
    on_minute = datetime(2026, 3, 4, 10, 17, tzinfo=UTC)
    assert cron.next_match(every, on_minute) == datetime(2026, 3, 4, 10, 18, tzinfo=UTC)
    plus_two = timezone(timedelta(hours=2))
    result = cron.next_match(cron.parse("0 0 * * *"), datetime(2026, 3, 4, 1, 0, tzinfo=plus_two))
    assert result == datetime(2026, 3, 4, 0, 0, tzinfo=UTC) and result.utcoffset() == timedelta(0)
    assert result.tzinfo is UTC


def test_next_match_crosses_year_and_month_ends() -> None:
    new_year = cron.parse("0 0 1 1 *")
    assert cron.next_match(new_year, datetime(2026, 12, 31, 23, 59, tzinfo=UTC)) == datetime(
        2027, 1, 1, tzinfo=UTC
    )
    last_minute = cron.parse("59 23 * * *")
    assert cron.next_match(last_minute, datetime(2026, 2, 28, 23, 59, tzinfo=UTC)) == datetime(
        2026, 3, 1, 23, 59, tzinfo=UTC
    )
    thirtieth = cron.parse("0 0 30 * *")
    assert cron.next_match(thirtieth, datetime(2026, 1, 30, 0, 0, tzinfo=UTC)) == datetime(
        2026, 3, 30, tzinfo=UTC
    )


def test_next_match_at_the_end_of_datetime_returns_none() -> None:
    yearly = cron.parse("0 0 31 12 *")
    assert cron.next_match(yearly, datetime(9999, 12, 30, tzinfo=UTC)) == datetime(9999, 12, 31, tzinfo=UTC)
    assert cron.next_match(yearly, datetime(9999, 12, 31, tzinfo=UTC)) is None
    assert cron.next_match(cron.parse("* * * * *"), datetime.max.replace(tzinfo=UTC)) is None
    assert cron.next_match(cron.parse("0 0 29 2 *"), datetime(9996, 3, 1, tzinfo=UTC)) is None


@pytest.mark.parametrize(
    "expression", ["0 0 31 2 *", "0 0 30 2 *", "0 0 31 2,4,6 *", "0 0 30,31 2 *", "* * 31 4,6,9,11 *"]
)
def test_impossible_schedules_are_known_without_search(expression: str) -> None:
    schedule = cron.parse(expression)
    assert not schedule.can_fire
    assert cron.next_match(schedule, datetime(2000, 1, 1, tzinfo=UTC)) is None


@pytest.mark.parametrize("expression", ["0 0 29 2 *", "0 0 31 2,3 *", "0 0 31 2 0", "0 0 30 2 */7"])
def test_rare_but_possible_schedules_can_fire(expression: str) -> None:
    schedule = cron.parse(expression)
    assert schedule.can_fire
    assert cron.next_match(schedule, datetime(2000, 1, 1, tzinfo=UTC)) is not None


def test_matches_between_bounds() -> None:
    hourly = cron.parse("0 * * * *")
    start = datetime(2026, 3, 4, 10, 0, tzinfo=UTC)
    end = datetime(2026, 3, 4, 13, 0, tzinfo=UTC)
    got = list(cron.matches_between(hourly, start, end))
    assert got == [datetime(2026, 3, 4, h, 0, tzinfo=UTC) for h in (11, 12, 13)]  # (start, end]
    assert list(cron.matches_between(hourly, end, start)) == []
    assert list(cron.matches_between(hourly, start, start)) == []


def test_format_rfc3339() -> None:
    assert cron.format_rfc3339(datetime(2026, 10, 5, 12, 5, tzinfo=UTC)) == "2026-10-05T12:05:00Z"
    tokyo = timezone(timedelta(hours=9))
    assert (
        cron.format_rfc3339(datetime(2026, 10, 5, 21, 5, 7, 999999, tzinfo=tokyo)) == "2026-10-05T12:05:07Z"
    )
    assert cron.format_rfc3339(datetime(999, 1, 2, 3, 4, 5, tzinfo=UTC)) == "0999-01-02T03:04:05Z"
