"""Field cases CR-* (area "cron") from cases.json, copied literally so the tests are self-contained.

Valid cases: the next three matches strictly after ``start`` and ``nextMatchAt`` (= ``next_match``
rendered as RFC 3339). Impossible cases: ``next_match`` is ``None`` and returns in under a second.
``cron_each`` cases: every expression raises ``CronSyntaxError``.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from core import cron


def _instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _check_valid(expression: str, start: str, expected: list[str], next_match_at: str) -> None:
    schedule = cron.parse(expression)
    begin = _instant(start)
    following = cron.matches_between(schedule, begin, begin + timedelta(days=3660))
    got = [cron.format_rfc3339(t) for t in itertools.islice(following, 3)]
    assert got == expected
    # The same three by chaining next_match, each strictly after the previous one.
    chained, current = [], begin
    for _ in range(3):
        current = cron.next_match(schedule, current)
        assert current is not None and current.tzinfo is not None
        chained.append(cron.format_rfc3339(current))
    assert chained == expected
    first = cron.next_match(schedule, begin)
    assert first is not None and cron.format_rfc3339(first) == next_match_at
    assert all(cron.matches(schedule, _instant(t)) for t in expected)


def _check_never(expression: str, start: str) -> None:
    schedule = cron.parse(expression)  # valid: accepted, not a parse error
    began = time.perf_counter()
    assert cron.next_match(schedule, _instant(start)) is None
    assert time.perf_counter() - began < 1.0
    assert not schedule.can_fire
    window = list(cron.matches_between(schedule, _instant(start), _instant(start) + timedelta(days=3000)))
    assert window == []


def _check_rejected(expressions: list[str]) -> None:
    for expression in expressions:
        with pytest.raises(cron.CronSyntaxError) as caught:
            cron.parse(expression)
        assert caught.value.expression == expression


_EU_CENTRAL = "CET-1CEST,M3.5.0,M10.5.0/3"
_US_EASTERN = "EST5EDT,M3.2.0,M11.1.0"


@pytest.fixture
def dst_local_timezone() -> Iterator[None]:
    """Run with a DST-observing host timezone; the matcher must ignore it (CR-35)."""
    saved = os.environ.get("TZ")
    # POSIX rules rather than zone names, so this works without tzdata on the CI image.
    os.environ["TZ"] = _EU_CENTRAL
    time.tzset()
    try:
        yield
    finally:
        if saved is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = saved
        time.tzset()


def test_CR_01_both_day_fields_restricted_is_or() -> None:
    _check_valid(
        "0 12 1 * 1",
        "2026-03-28T00:00:00Z",
        ["2026-03-30T12:00:00Z", "2026-04-01T12:00:00Z", "2026-04-06T12:00:00Z"],
        "2026-03-30T12:00:00Z",
    )


def test_CR_04_only_day_of_week_restricted() -> None:
    _check_valid(
        "0 9 * * 1",
        "2026-03-04T10:17:30Z",
        ["2026-03-09T09:00:00Z", "2026-03-16T09:00:00Z", "2026-03-23T09:00:00Z"],
        "2026-03-09T09:00:00Z",
    )


def test_CR_05_february_31_never_fires_and_returns_promptly() -> None:
    _check_never("0 0 31 2 *", "2026-03-04T10:17:30Z")
    _check_never("0 0 30 2 *", "2026-03-04T10:17:30Z")


def test_CR_06_no_listed_month_has_a_31st() -> None:
    _check_never("0 0 31 2,4,6 *", "2026-03-04T10:17:30Z")


def test_CR_07_one_month_with_a_31st_fires_yearly() -> None:
    _check_valid(
        "0 0 31 4,5 *",
        "2026-03-04T10:17:30Z",
        ["2026-05-31T00:00:00Z", "2027-05-31T00:00:00Z", "2028-05-31T00:00:00Z"],
        "2026-05-31T00:00:00Z",
    )


def test_CR_09_restricting_day_of_week_makes_february_31_fire() -> None:
    _check_valid(
        "0 0 31 2 1",
        "2026-01-01T00:00:00Z",
        ["2026-02-02T00:00:00Z", "2026-02-09T00:00:00Z", "2026-02-16T00:00:00Z"],
        "2026-02-02T00:00:00Z",
    )
    assert cron.parse("0 0 31 2 1").can_fire


def test_CR_10_leap_days_only() -> None:
    _check_valid(
        "0 0 29 2 *",
        "2026-03-01T00:00:00Z",
        ["2028-02-29T00:00:00Z", "2032-02-29T00:00:00Z", "2036-02-29T00:00:00Z"],
        "2028-02-29T00:00:00Z",
    )
    # 2100 is not a leap year: from 2096-03-01 the next leap day is 2104-02-29.
    after_2096 = cron.next_match(cron.parse("0 0 29 2 *"), _instant("2096-03-01T00:00:00Z"))
    assert after_2096 is not None and cron.format_rfc3339(after_2096) == "2104-02-29T00:00:00Z"


def test_CR_11_step_on_bare_integer_rejected() -> None:
    _check_rejected(["5/15 * * * *", "0/15 * * * *", "0 9 1 * 0/1"])


def test_CR_12_range_with_step() -> None:
    _check_valid(
        "5-59/15 * * * *",
        "2026-03-04T10:17:30Z",
        ["2026-03-04T10:20:00Z", "2026-03-04T10:35:00Z", "2026-03-04T10:50:00Z"],
        "2026-03-04T10:20:00Z",
    )
    assert cron.parse("5-59/15 * * * *").minutes == frozenset({5, 20, 35, 50})


def test_CR_14_step_beyond_minute_width_rejected() -> None:
    _check_rejected(["*/90 * * * *", "*/61 * * * *"])


def test_CR_15_step_equal_to_minute_width_selects_minute_zero() -> None:
    _check_valid(
        "*/60 * * * *",
        "2026-03-04T10:17:30Z",
        ["2026-03-04T11:00:00Z", "2026-03-04T12:00:00Z", "2026-03-04T13:00:00Z"],
        "2026-03-04T11:00:00Z",
    )


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("0 */24 * * *", ["2026-03-05T00:00:00Z", "2026-03-06T00:00:00Z", "2026-03-07T00:00:00Z"]),
        ("0 0 */31 * *", ["2026-04-01T00:00:00Z", "2026-05-01T00:00:00Z", "2026-06-01T00:00:00Z"]),
        ("0 0 * */12 *", ["2027-01-01T00:00:00Z", "2027-01-02T00:00:00Z", "2027-01-03T00:00:00Z"]),
        ("0 0 * * */7", ["2026-03-08T00:00:00Z", "2026-03-15T00:00:00Z", "2026-03-22T00:00:00Z"]),
    ],
)
def test_CR_16_step_equal_to_field_width_is_valid(expression: str, expected: list[str]) -> None:
    _check_valid(expression, "2026-03-04T10:17:30Z", expected, expected[0])


def test_CR_16_step_width_plus_one_rejected() -> None:
    _check_rejected(["0 */25 * * *", "0 0 */32 * *", "0 0 * */13 *", "0 0 * * */8"])


def test_CR_17_step_zero_rejected() -> None:
    _check_rejected(["*/0 * * * *", "0 0 * * 1-5/0", "0-59/0 * * * *"])


def test_CR_18_seven_is_not_sunday() -> None:
    _check_rejected(["0 0 * * 7", "0 0 * * 1-7", "0 0 * * 0,7"])


def test_CR_19_names_rejected() -> None:
    _check_rejected(["0 0 * * MON", "0 0 1 JAN *", "0 0 * * Mon-Sun", "0 0 * * mon"])


def test_CR_20_reversed_ranges_rejected() -> None:
    _check_rejected(["0 22-5 * * *", "0 12 * * 1,5-3/2", "0 0 * * 5-1"])


def test_CR_21_values_out_of_range_rejected() -> None:
    _check_rejected(["90 * * * *", "0 24 * * *", "0 0-24 * * *", "0 0 0 * *", "0 0 1 0 *", "0 0 1 13 *"])


def test_CR_23_crontab_manual_example() -> None:
    _check_valid(
        "30 4 1,15 * 5",
        "2026-03-04T10:17:30Z",
        ["2026-03-06T04:30:00Z", "2026-03-13T04:30:00Z", "2026-03-15T04:30:00Z"],
        "2026-03-06T04:30:00Z",
    )


def test_CR_24_first_friday_idiom_is_or() -> None:
    _check_valid(
        "0 11 1-7 * 5",
        "2024-10-04T12:00:00Z",
        ["2024-10-05T11:00:00Z", "2024-10-06T11:00:00Z", "2024-10-07T11:00:00Z"],
        "2024-10-05T11:00:00Z",
    )


def test_CR_26_day_step_is_odd_days_not_48_hours() -> None:
    _check_valid(
        "0 0 */2 * *",
        "2026-01-30T00:00:00Z",
        ["2026-01-31T00:00:00Z", "2026-02-01T00:00:00Z", "2026-02-03T00:00:00Z"],
        "2026-01-31T00:00:00Z",
    )


def test_CR_27_quartz_and_vixie_extensions_rejected() -> None:
    _check_rejected(["0 0 L * *", "0 0 ? * 1", "0 0 * * 5L", "0 0 * * 1#2", "0 0 15W * *", "0 0 $ * *"])


def test_CR_28_macros_rejected() -> None:
    _check_rejected(["@daily", "@weekly", "@hourly", "@reboot"])


def test_CR_30_empty_list_elements_rejected() -> None:
    _check_rejected(["0 0 1,,15 * *", "0 0 1, * *", "0 0 ,1 * *"])


def test_CR_31_list_mixing_star_step_and_range_step() -> None:
    _check_valid(
        "*/2,1-5/2 * * * *",
        "2026-03-04T10:59:30Z",
        ["2026-03-04T11:00:00Z", "2026-03-04T11:01:00Z", "2026-03-04T11:02:00Z"],
        "2026-03-04T11:00:00Z",
    )


def test_CR_32_only_plain_decimal_integers() -> None:
    _check_rejected(["5.0 * * * *", "+5 * * * *", "-5 * * * *", "5- * * * *", "0x5 * * * *"])


@pytest.mark.usefixtures("dst_local_timezone")
def test_CR_35_utc_only_across_eu_dst_end() -> None:
    assert time.localtime(time.mktime((2026, 7, 1, 12, 0, 0, 0, 0, -1))).tm_isdst == 1  # fixture works
    _check_valid(
        "0 2 * * *",
        "2026-10-24T12:00:00Z",
        ["2026-10-25T02:00:00Z", "2026-10-26T02:00:00Z", "2026-10-27T02:00:00Z"],
        "2026-10-25T02:00:00Z",
    )


@pytest.mark.usefixtures("dst_local_timezone")
def test_CR_35_utc_only_across_us_dst_start() -> None:
    os.environ["TZ"] = _US_EASTERN
    time.tzset()
    assert time.localtime(time.mktime((2026, 7, 1, 12, 0, 0, 0, 0, -1))).tm_isdst == 1
    _check_valid(
        "0 2 * * *",
        "2026-03-07T12:00:00Z",
        ["2026-03-08T02:00:00Z", "2026-03-09T02:00:00Z", "2026-03-10T02:00:00Z"],
        "2026-03-08T02:00:00Z",
    )


def test_CR_38_next_match_is_strictly_after_start() -> None:
    _check_valid(
        "0 1 * * *",
        "2018-10-18T12:00:00Z",
        ["2018-10-19T01:00:00Z", "2018-10-20T01:00:00Z", "2018-10-21T01:00:00Z"],
        "2018-10-19T01:00:00Z",
    )
    # Exactly on a match is not "after" it.
    on_match = cron.next_match(cron.parse("0 1 * * *"), datetime(2018, 10, 19, 1, 0, tzinfo=UTC))
    assert on_match == datetime(2018, 10, 20, 1, 0, tzinfo=UTC)
