"""Every valid ``cron`` field case (cases.json) seen from the trigger: the ``observed`` it reports
(docs/spec/cron-trigger.md "観測": ``nextMatchAt`` only when computable) and the matches beat would decide next.

The grammar module has its own per-case tests; these pin what a WorkerCronTrigger shows and
fires for the same inputs (CR-01 … CR-38 with a start instant).
"""

from __future__ import annotations

import datetime as dt
import json
import pathlib

import pytest

from beat import cron_plan
from core import cron
from services import cron_schedules

CASES_PATH = pathlib.Path(__file__).resolve().parents[1] / "data" / "cases.json"
CASES = [
    c
    for c in json.loads(CASES_PATH.read_text(encoding="utf-8"))
    if c["area"] == "cron" and "start" in c["input"] and "next_matches_utc" in c["expected"]
]


def _at(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_observed_and_next_matches_of_each_cron_case(case: dict) -> None:
    expression, start = case["input"]["cron"], _at(case["input"]["start"])
    expected = case["expected"]["next_matches_utc"]
    observed = cron_schedules.observed_for(expression, now=start)
    assert (
        observed["cron"] == expression and observed["timezone"] == "UTC" and observed["scheduleReady"] is True
    )
    if expected:
        assert observed["nextMatchAt"] == case["expected"]["nextMatchAt_if_observed_at_start"] == expected[0]
    else:
        assert "nextMatchAt" not in observed  # absent, not null, not ""
    # What beat decides: a schedule registered at `start`, ticking right after each match.
    segments = [cron_plan.Segment(expression, None)]
    considered, fired = start, []
    for _ in range(len(expected)):
        due = cron_plan.plan(
            segments=segments, considered_until=considered, now=considered, previous_tick=considered
        ).next_due_at
        assert due is not None
        tick = due + dt.timedelta(milliseconds=50)
        plan = cron_plan.plan(segments=segments, considered_until=considered, now=tick, previous_tick=tick)
        assert all(d.record for d in plan.decisions)
        fired.extend(cron.format_rfc3339(d.scheduled_time) for d in plan.decisions)
        considered = plan.considered_until
    assert fired == expected


def test_the_case_file_has_the_cron_cases() -> None:
    assert {"CR-01", "CR-05", "CR-10", "CR-35"} <= {c["id"] for c in CASES}
