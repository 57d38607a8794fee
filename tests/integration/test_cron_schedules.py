"""Registering, updating and deleting a trigger's schedule, and the ``observed`` it reports
(docs/spec/cron-trigger.md "観測" and "CRUD"; API-05, CR-05, CR-06, CB-05)."""

from __future__ import annotations

import datetime as dt

import pytest

from core import cron
from models import cron as cron_models
from models import db as models_db
from tests.integration.test_cron_support import (
    at,
    create_stack,
    decide,
    delete_trigger,
    matches_of,
    skips_of,
    update_cron,
)


def test_API_05_observed_is_the_seed_example(db_url: str, space_token: tuple[str, str]) -> None:
    space, _ = space_token
    from services import cron_schedules

    observed = cron_schedules.observed_for("*/5 * * * *", now=at("2026-10-05T12:03:10Z"))
    assert observed == {
        "cron": "*/5 * * * *",
        "timezone": "UTC",
        "scheduleReady": True,
        "nextMatchAt": "2026-10-05T12:05:00Z",
    }
    stack = create_stack(db_url, space=space, cron="0 0 31 2 *", now=at("2030-10-05T12:03:10Z"))
    with models_db.session_scope(db_url) as session:
        from models import resources as res_models

        never = session.get(res_models.Resource, stack.trigger_uid).observed
    assert never == {"cron": "0 0 31 2 *", "timezone": "UTC", "scheduleReady": True}


@pytest.mark.parametrize("expression", ["0 0 31 2 *", "0 0 31 2,4,6 *", "0 0 30 2 *"])
def test_CR_05_CR_06_never_firing_schedule_has_no_next_match_and_no_due(
    db_url: str, space_token: tuple[str, str], expression: str
) -> None:
    space, _ = space_token
    stack = create_stack(db_url, space=space, cron=expression, now=at("2030-03-04T10:17:30Z"))
    with models_db.session_scope(db_url) as session:
        schedule = session.get(cron_models.CronSchedule, stack.trigger_uid)
    assert schedule.next_due_at is None
    assert decide(db_url, now=at("2031-03-04T10:17:30Z"), triggers=[stack.trigger_uid]) == []
    assert skips_of(db_url, stack.trigger_uid) == []


def test_CB_05_update_fires_only_the_new_expression_and_never_at_update_time(
    db_url: str, space_token: tuple[str, str]
) -> None:
    space, _ = space_token
    stack = create_stack(db_url, space=space, cron="0 * * * *", now=at("2030-03-04T09:58:00Z"))
    uid = stack.trigger_uid
    assert [m for _, m in decide(db_url, now=at("2030-03-04T10:00:00.300Z"), triggers=[uid])] == [uid]
    observed = update_cron(db_url, trigger_uid=uid, cron="30 * * * *", now=at("2030-03-04T10:07:00Z"))
    assert observed == {
        "cron": "30 * * * *",
        "timezone": "UTC",
        "scheduleReady": True,
        "nextMatchAt": "2030-03-04T10:30:00Z",
    }
    # Beat's next passes: nothing at update time, the new expression at 10:30, nothing at 11:00.
    assert decide(db_url, now=at("2030-03-04T10:07:00.400Z"), triggers=[uid]) == []
    assert decide(db_url, now=at("2030-03-04T10:30:00.200Z"), triggers=[uid]) != []
    assert decide(db_url, now=at("2030-03-04T11:00:00.200Z"), triggers=[uid]) == []
    recorded = [(cron.format_rfc3339(m.scheduled_time), m.cron) for m in matches_of(db_url, uid)]
    assert recorded == [("2030-03-04T10:00:00Z", "0 * * * *"), ("2030-03-04T10:30:00Z", "30 * * * *")]
    assert skips_of(db_url, uid) == []
    with models_db.session_scope(db_url) as session:
        schedule = session.get(cron_models.CronSchedule, uid)
    assert schedule.superseded is None and schedule.next_due_at == at("2030-03-04T11:30:00Z")


def test_update_before_beat_caught_up_keeps_the_old_match_up_to_the_update(
    db_url: str, space_token: tuple[str, str]
) -> None:
    space, _ = space_token
    stack = create_stack(db_url, space=space, cron="*/5 * * * *", now=at("2030-03-04T10:04:00Z"))
    uid = stack.trigger_uid
    # The PUT's reconcile commits at 10:05:00.1, before any beat decided 10:05.
    update_cron(db_url, trigger_uid=uid, cron="1-59/5 * * * *", now=at("2030-03-04T10:05:00.100Z"))
    update_cron(db_url, trigger_uid=uid, cron="1-59/5 * * * *", now=at("2030-03-04T10:05:00.200Z"))  # retried
    decide(db_url, now=at("2030-03-04T10:05:00.300Z"), triggers=[uid])
    decide(db_url, now=at("2030-03-04T10:06:00.300Z"), triggers=[uid])
    decide(db_url, now=at("2030-03-04T10:10:00.300Z"), triggers=[uid])
    recorded = [(cron.format_rfc3339(m.scheduled_time), m.cron) for m in matches_of(db_url, uid)]
    assert recorded == [("2030-03-04T10:05:00Z", "*/5 * * * *"), ("2030-03-04T10:06:00Z", "1-59/5 * * * *")]


def test_delete_persists_the_boundary(db_url: str, space_token: tuple[str, str]) -> None:
    space, _ = space_token
    stack = create_stack(db_url, space=space, cron="* * * * *", now=at("2030-03-04T10:00:30Z"))
    uid = stack.trigger_uid
    decide(db_url, now=at("2030-03-04T10:01:00.100Z"), triggers=[uid])
    delete_trigger(db_url, trigger_uid=uid, now=at("2030-03-04T10:02:00.050Z"))
    delete_trigger(db_url, trigger_uid=uid, now=at("2030-03-04T10:02:30Z"))  # a retried delete keeps it
    # The 10:02 match happened before the delete: still decided (and owed). Nothing later, ever.
    decide(db_url, now=at("2030-03-04T10:02:00.300Z"), triggers=[uid])
    decide(db_url, now=at("2030-03-04T10:09:00.300Z"), triggers=[uid])
    assert [cron.format_rfc3339(m.scheduled_time) for m in matches_of(db_url, uid)] == [
        "2030-03-04T10:01:00Z",
        "2030-03-04T10:02:00Z",
    ]
    with models_db.session_scope(db_url) as session:
        schedule = session.get(cron_models.CronSchedule, uid)
    assert schedule.deleted_at == at("2030-03-04T10:02:00.050Z")
    assert schedule.next_due_at is None
    assert skips_of(db_url, uid) == []


def test_register_is_idempotent_for_the_same_expression(db_url: str, space_token: tuple[str, str]) -> None:
    space, _ = space_token
    stack = create_stack(db_url, space=space, cron="*/5 * * * *", now=at("2030-03-04T10:01:00Z"))
    update_cron(db_url, trigger_uid=stack.trigger_uid, cron="*/5 * * * *", now=at("2030-03-04T10:03:00Z"))
    with models_db.session_scope(db_url) as session:
        schedule = session.get(cron_models.CronSchedule, stack.trigger_uid)
    assert schedule.superseded is None
    assert schedule.considered_until == at("2030-03-04T10:01:00Z")
    assert schedule.next_due_at == at("2030-03-04T10:05:00Z")


def test_observed_for_uses_utc_whatever_the_offset_of_now() -> None:
    from services import cron_schedules

    paris = dt.timezone(dt.timedelta(hours=2))
    observed = cron_schedules.observed_for("0 2 * * *", now=dt.datetime(2026, 10, 25, 3, 0, tzinfo=paris))
    # 03:00+02:00 is 01:00Z: the next 02:00 UTC is the same day (a local-time reading says the 26th).
    assert observed["nextMatchAt"] == "2026-10-25T02:00:00Z"
