"""Property tests: core.cron against an independent brute-force reference.

The reference below reads each field naively (walk low..high by step) and decides a minute by
checking every field, scanning minute by minute (it skips whole days whose date cannot match, so
windows of months stay cheap). Spec: docs/spec/cron-trigger.md#cr-grammar "cron文法と実行", docs/spec/host-limits.md#hl-decisions.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from core import cron

BOUNDS = [(0, 59), (0, 23), (1, 31), (1, 12), (0, 6)]
ONE_MINUTE = timedelta(minutes=1)
SEARCH_DAYS = 800

# --- the reference -------------------------------------------------------------------------------


def expand(text: str, low: int, high: int) -> set[int]:
    values: set[int] = set()
    for element in text.split(","):
        step = 1
        if "/" in element:
            element, step_text = element.split("/")
            step = int(step_text)
        if element == "*":
            first, last = low, high
        elif "-" in element:
            first_text, last_text = element.split("-")
            first, last = int(first_text), int(last_text)
        else:
            first = last = int(element)
        value = first
        while value <= last:
            values.add(value)
            value += step
    return values


@dataclass
class Reference:
    minutes: set[int]
    hours: set[int]
    days: set[int]
    months: set[int]
    weekdays: set[int]
    day_star: bool
    weekday_star: bool

    @classmethod
    def of(cls, expression: str) -> Reference:
        texts = expression.split(" ")
        sets = [expand(text, low, high) for text, (low, high) in zip(texts, BOUNDS, strict=True)]
        return cls(*sets, day_star=texts[2] == "*", weekday_star=texts[4] == "*")

    def date_ok(self, t: datetime) -> bool:
        if t.month not in self.months:
            return False
        by_day = t.day in self.days
        by_weekday = (t.weekday() + 1) % 7 in self.weekdays  # Monday=0 in Python; Sunday=0 in cron
        if self.day_star and self.weekday_star:
            return True
        if self.day_star:
            return by_weekday
        if self.weekday_star:
            return by_day
        return by_day or by_weekday

    def match(self, t: datetime) -> bool:
        return (
            t.second == 0
            and t.microsecond == 0
            and t.minute in self.minutes
            and t.hour in self.hours
            and self.date_ok(t)
        )

    def scan(self, after: datetime, until: datetime) -> list[datetime]:
        """All matches in (after, until], minute by minute, skipping days whose date fails."""
        found = []
        t = after.astimezone(UTC).replace(second=0, microsecond=0) + ONE_MINUTE
        while t <= until:
            if not self.date_ok(t):
                t = t.replace(hour=0, minute=0) + timedelta(days=1)
                continue
            if self.match(t):
                found.append(t)
            t += ONE_MINUTE
        return found

    def first(self, after: datetime, until: datetime) -> datetime | None:
        t = after.astimezone(UTC).replace(second=0, microsecond=0) + ONE_MINUTE
        while t <= until:
            if not self.date_ok(t):
                t = t.replace(hour=0, minute=0) + timedelta(days=1)
            elif self.match(t):
                return t
            else:
                t += ONE_MINUTE
        return None


# --- strategies ----------------------------------------------------------------------------------


def number(value: int) -> st.SearchStrategy[str]:
    return st.sampled_from([str(value), str(value), str(value), f"0{value}"])


@st.composite
def element(draw: st.DrawFn, low: int, high: int) -> str:
    width = high - low + 1
    kind = draw(st.sampled_from(["star", "int", "range", "star_step", "range_step"]))
    if kind == "star":
        return "*"
    if kind == "star_step":
        return f"*/{draw(st.integers(1, width))}"
    first = draw(st.integers(low, high))
    if kind == "int":
        return draw(number(first))
    last = draw(st.integers(first, high))
    text = f"{draw(number(first))}-{draw(number(last))}"
    if kind == "range_step":
        text += f"/{draw(st.integers(1, width))}"
    return text


def field(low: int, high: int) -> st.SearchStrategy[str]:
    elements = st.lists(element(low, high), min_size=1, max_size=3).map(",".join)
    return st.one_of(st.just("*"), elements)


RARE = [
    "0 0 29 2 *",
    "0 12 29 2 1",
    "*/7 */5 28-31 2 *",
    "0 0 31 * *",
    "0 0 30,31 2 *",
    "0 0 31 2,4,6 *",
    "59 23 31 12 *",
    "0 0 1 1 0",
    "0 0 */2 * 6",
    "*/60 */24 */31 */12 */7",
]

VALID_EXPRESSIONS = st.one_of(
    st.tuples(*(field(low, high) for low, high in BOUNDS)).map(" ".join),
    st.sampled_from(RARE),
).filter(lambda text: len(text) <= 64)

ANCHORS = [
    datetime(1999, 12, 31, 23, 0),
    datetime(2000, 2, 28, 12, 0),
    datetime(2000, 2, 29, 23, 30),
    datetime(2024, 2, 28, 23, 59),
    datetime(2026, 10, 25, 1, 0),
    datetime(2099, 12, 31, 23, 59),
    datetime(2100, 2, 28, 23, 0),
    datetime(2100, 3, 1, 0, 0),
]
OFFSETS = [UTC, timezone(timedelta(hours=9)), timezone(timedelta(hours=-5, minutes=-30))]

STARTS = st.builds(
    lambda base, tz: base.replace(tzinfo=UTC).astimezone(tz),
    st.one_of(
        st.datetimes(min_value=datetime(1999, 1, 1), max_value=datetime(2101, 12, 31)),
        st.builds(
            lambda anchor, minutes, seconds: anchor + timedelta(minutes=minutes, seconds=seconds),
            st.sampled_from(ANCHORS),
            st.integers(-2 * 1440, 2 * 1440),
            st.sampled_from([0, 0, 1, 30, 59.999999]),
        ),
    ),
    st.sampled_from(OFFSETS),
)

FAST = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])


# --- properties ----------------------------------------------------------------------------------


@settings(FAST, max_examples=300)
@given(expression=VALID_EXPRESSIONS, start=STARTS)
def test_next_match_agrees_with_brute_force(expression: str, start: datetime) -> None:
    schedule = cron.parse(expression)
    reference = Reference.of(expression)
    horizon = start.astimezone(UTC) + timedelta(days=SEARCH_DAYS)
    expected = reference.first(start, horizon)
    got = cron.next_match(schedule, start)
    if expected is not None:
        assert got == expected
        assert got.tzinfo is not None and got.utcoffset() == timedelta(0)
    else:
        assert got is None or got > horizon
        if got is not None:
            assert reference.match(got)
    if got is None:
        # Never firing must be real: no matching date in a 29-year stretch (all weekday/leap shapes).
        probe = start.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        assert not any(reference.date_ok(probe + timedelta(days=n)) for n in range(29 * 366))


@settings(FAST, max_examples=200)
@given(
    expression=VALID_EXPRESSIONS,
    start=STARTS,
    minutes=st.integers(0, 3 * 1440),
)
def test_matches_between_agrees_with_brute_force(expression: str, start: datetime, minutes: int) -> None:
    schedule = cron.parse(expression)
    end = start + timedelta(minutes=minutes, seconds=17)
    expected = Reference.of(expression).scan(start, end.astimezone(UTC))
    got = list(cron.matches_between(schedule, start, end))
    assert got == expected
    assert all(cron.matches(schedule, t) for t in got)


@settings(FAST, max_examples=300)
@given(
    expression=VALID_EXPRESSIONS,
    at=st.datetimes(min_value=datetime(1999, 1, 1), max_value=datetime(2101, 12, 31)),
    on_minute=st.booleans(),
)
def test_matches_agrees_with_reference(expression: str, at: datetime, on_minute: bool) -> None:
    moment = at.replace(tzinfo=UTC)
    if on_minute:
        moment = moment.replace(second=0, microsecond=0)
    assert cron.matches(cron.parse(expression), moment) == Reference.of(expression).match(moment)


def canonical(schedule: cron.CronSchedule) -> str:
    def render(values: frozenset[int]) -> str:
        return ",".join(str(v) for v in sorted(values))

    return " ".join(
        [
            render(schedule.minutes),
            render(schedule.hours),
            render(schedule.days_of_month) if schedule.dom_restricted else "*",
            render(schedule.months),
            render(schedule.days_of_week) if schedule.dow_restricted else "*",
        ]
    )


def check_round_trip(expression: str, schedule: cron.CronSchedule) -> None:
    reference = Reference.of(expression)
    assert schedule.expression == expression
    assert schedule.minutes == reference.minutes
    assert schedule.hours == reference.hours
    assert schedule.days_of_month == reference.days
    assert schedule.months == reference.months
    assert schedule.days_of_week == reference.weekdays
    assert schedule.dom_restricted == (not reference.day_star)
    assert schedule.dow_restricted == (not reference.weekday_star)
    rendered = canonical(schedule)
    if len(rendered) <= 64:
        again = cron.parse(rendered)
        fields = ("minutes", "hours", "days_of_month", "months", "days_of_week", "dom_restricted")
        assert all(getattr(again, name) == getattr(schedule, name) for name in fields)
        assert again.dow_restricted == schedule.dow_restricted


@settings(FAST, max_examples=300)
@given(expression=VALID_EXPRESSIONS)
def test_valid_expressions_round_trip_their_field_sets(expression: str) -> None:
    check_round_trip(expression, cron.parse(expression))


def parse_or_reject(text: str) -> cron.CronSchedule | None:
    try:
        return cron.parse(text)
    except cron.CronSyntaxError as error:
        assert error.expression == text
        assert str(error)
        return None


@settings(FAST, max_examples=300)
@given(text=st.text(max_size=80))
def test_parse_arbitrary_text_only_raises_syntax_error(text: str) -> None:
    schedule = parse_or_reject(text)
    if schedule is not None:
        check_round_trip(text, schedule)


@settings(FAST, max_examples=500)
@given(
    text=st.lists(
        st.sampled_from(list("0123456789*,-/ ") + ["5", "1", " ", "*", "\t", "L", "#", "?", "60", "7"]),
        max_size=30,
    ).map("".join)
)
def test_parse_cron_like_text_only_raises_syntax_error(text: str) -> None:
    schedule = parse_or_reject(text)
    if schedule is not None:
        check_round_trip(text, schedule)


@settings(FAST)
@given(value=st.one_of(st.none(), st.integers(), st.binary(), st.lists(st.text())))
def test_parse_non_text_raises_type_error(value: object) -> None:
    try:
        cron.parse(value)  # type: ignore[arg-type]
    except TypeError:
        return
    raise AssertionError("parse accepted a non-str")


@settings(FAST, max_examples=100)
@given(expression=VALID_EXPRESSIONS, start=STARTS)
def test_next_match_is_strictly_increasing_and_matching(expression: str, start: datetime) -> None:
    schedule = cron.parse(expression)
    current = start
    for _ in range(5):
        following = cron.next_match(schedule, current)
        if following is None:
            break
        assume(following.year < 9999)
        assert following > current
        assert cron.matches(schedule, following)
        assert cron.format_rfc3339(following).endswith(":00Z")
        current = following
