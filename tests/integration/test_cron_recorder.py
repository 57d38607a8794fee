"""Beat's recording pass against the real database: matches vs skips, no duplicates under
concurrency, and dispatch only after commit (docs/spec/cron-trigger.md#cr-grammar; docs/spec/cron-trigger.md#cr-runs; CB-01, CB-06)."""

from __future__ import annotations

import datetime as dt
import threading
import uuid

import pytest
import sqlalchemy as sa

from beat import cron_recorder
from core import cron
from models import cron as cron_models
from models import cron_sql
from models import db as models_db
from tests.integration.test_cron_support import at, create_stack, decide, matches_of, skips_of


def test_CB_01_outage_is_skipped_listed_and_never_backfilled(
    db_url: str, space_token: tuple[str, str]
) -> None:
    space, _ = space_token
    stack = create_stack(db_url, space=space, cron="*/5 * * * *", now=at("2030-03-04T09:58:00Z"))
    uid = stack.trigger_uid
    assert len(decide(db_url, now=at("2030-03-04T10:00:00.200Z"), triggers=[uid])) == 1
    assert decide(db_url, now=at("2030-03-04T10:02:00.300Z"), triggers=[uid]) == []
    # Every host process stopped at 10:02; started again at 10:23.
    restarted = decide(
        db_url,
        now=at("2030-03-04T10:23:00.400Z"),
        triggers=[uid],
        previous_tick=at("2030-03-04T10:02:00.300Z"),
    )
    assert restarted == []  # no burst
    assert decide(db_url, now=at("2030-03-04T10:24:59.900Z"), triggers=[uid]) == []
    assert len(decide(db_url, now=at("2030-03-04T10:25:00.100Z"), triggers=[uid])) == 1
    assert [cron.format_rfc3339(m.scheduled_time) for m in matches_of(db_url, uid)] == [
        "2030-03-04T10:00:00Z",
        "2030-03-04T10:25:00Z",
    ]
    skips = skips_of(db_url, uid)
    assert [cron.format_rfc3339(s.scheduled_time) for s in skips] == [
        "2030-03-04T10:05:00Z",
        "2030-03-04T10:10:00Z",
        "2030-03-04T10:15:00Z",
        "2030-03-04T10:20:00Z",
    ]
    assert all(s.reason.startswith("no beat was running at scheduledTime") for s in skips)
    assert {s.cron for s in skips} == {"*/5 * * * *"}


def test_CB_06_concurrent_recorders_never_duplicate_a_match(
    db_url: str, space_token: tuple[str, str]
) -> None:
    space, _ = space_token
    uids = [
        create_stack(db_url, space=space, cron="* * * * *", now=at("2030-05-01T10:00:30Z")).trigger_uid
        for _ in range(30)
    ]
    results: list[list[tuple[int, str]]] = [[], [], []]
    barrier = threading.Barrier(3)

    def beat(index: int) -> None:
        for minute in range(1, 4):
            now = at("2030-05-01T10:00:00.100Z") + dt.timedelta(minutes=minute)
            barrier.wait()
            while True:  # small batches so the three really interleave on row locks
                with models_db.session_scope(db_url) as session:
                    claimed, recorded = cron_recorder.record_batch_txn(
                        session, now=now, previous_tick=now, limit=4, trigger_uids=uids
                    )
                results[index].extend(recorded)
                if claimed < 4:
                    break

    threads = [threading.Thread(target=beat, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    recorded_pks = [pk for result in results for pk, _ in result]
    assert len(recorded_pks) == len(set(recorded_pks)) == 30 * 3
    with models_db.session_scope(db_url) as session:
        rows = session.execute(
            sa.select(cron_models.CronMatch.trigger_uid, sa.func.count())
            .where(cron_models.CronMatch.trigger_uid.in_(uids))
            .group_by(cron_models.CronMatch.trigger_uid)
        ).all()
    assert sorted(count for _, count in rows) == [3] * 30
    assert all(skips_of(db_url, uid) == [] for uid in uids[:3])


def test_a_stale_boundary_cannot_record_a_second_match(db_url: str, space_token: tuple[str, str]) -> None:
    space, _ = space_token
    uid = create_stack(db_url, space=space, cron="* * * * *", now=at("2030-06-01T10:00:30Z")).trigger_uid
    assert len(decide(db_url, now=at("2030-06-01T10:01:00.100Z"), triggers=[uid])) == 1
    with models_db.session_scope(db_url) as session:  # a beat that did not see the advance
        session.execute(
            sa.update(cron_models.CronSchedule)
            .where(cron_models.CronSchedule.trigger_uid == uid)
            .values(considered_until=at("2030-06-01T10:00:30Z"), next_due_at=at("2030-06-01T10:01:00Z"))
        )
    assert decide(db_url, now=at("2030-06-01T10:01:00.200Z"), triggers=[uid]) == []
    assert len(matches_of(db_url, uid)) == 1


def test_record_due_dispatches_after_commit_and_notes_the_tick(
    db_url: str, space_token: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    space, _ = space_token
    now = dt.datetime.now(dt.UTC)
    minute = now.replace(second=0, microsecond=0)
    uid = create_stack(
        db_url, space=space, cron="* * * * *", now=minute - dt.timedelta(seconds=1)
    ).trigger_uid
    seen: list[tuple[int, bool]] = []

    def fake_dispatch(match_pks: list[int]) -> int:  # sees the committed rows from another session
        with models_db.session_scope(db_url) as session:
            for match_pk in match_pks:
                seen.append((match_pk, session.get(cron_models.CronMatch, match_pk) is not None))
        return len(match_pks)

    monkeypatch.setattr(cron_recorder.dispatch, "deliver_cron_matches", fake_dispatch)
    count = cron_recorder.record_due(now=now, beat_id="test-beat")
    mine = [m.pk for m in matches_of(db_url, uid)]
    assert len(mine) == 1 and (mine[0], True) in seen and count >= 1
    with models_db.session_scope(db_url) as session:
        tick = session.get(cron_models.BeatTick, cron_recorder.TICK_NAME)
    assert tick.last_tick_at >= now
    assert cron_recorder.next_due_at(url=db_url) is not None


def test_observed_next_match_moves_on_after_each_match(db_url: str, space_token: tuple[str, str]) -> None:
    """docs/spec/host-features.md#hf-newcomer: ``observed.nextMatchAt`` never keeps showing a match that already fired
    (before, it moved only when the trigger was reconciled again)."""
    from models import resources as res_models

    space, _ = space_token
    stack = create_stack(db_url, space=space, cron="*/5 * * * *", now=at("2030-03-04T09:58:00Z"))

    def observed() -> tuple[dict, dt.datetime]:
        with models_db.session_scope(db_url) as session:
            row = session.get(res_models.Resource, stack.trigger_uid)
            return dict(row.observed), row.observed_at

    assert observed()[0]["nextMatchAt"] == "2030-03-04T10:00:00Z"
    assert len(decide(db_url, now=at("2030-03-04T10:00:00.200Z"), triggers=[stack.trigger_uid])) == 1
    after, observed_at = observed()
    assert after == {"cron": "*/5 * * * *", "timezone": "UTC", "scheduleReady": True,
                     "nextMatchAt": "2030-03-04T10:05:00Z"}
    assert observed_at == at("2030-03-04T10:00:00.200Z")
    # a gap (no beat 10:05-10:23): skipped matches move it on too
    decide(db_url, now=at("2030-03-04T10:23:00Z"), triggers=[stack.trigger_uid],
           previous_tick=at("2030-03-04T10:02:00Z"))
    assert observed()[0]["nextMatchAt"] == "2030-03-04T10:25:00Z"


def test_a_tick_moves_only_forward_and_returns_the_one_before(db_url: str) -> None:
    """``cron_sql.note_tick_txn``: the first tick of a name inserts its row (None before), a later
    one moves it, an earlier one (a beat whose clock is behind) leaves it; each returns the tick
    stored before it."""
    name = f"t-{uuid.uuid4().hex[:16]}"
    first = dt.datetime(2030, 3, 4, 10, 0, tzinfo=dt.UTC)
    steps = [(first, "a", None), (first + dt.timedelta(seconds=5), "b", first)]
    steps.append((first + dt.timedelta(seconds=1), "c", first + dt.timedelta(seconds=5)))
    for now, beat_id, previous in steps:
        with models_db.session_scope(db_url) as session:
            assert cron_sql.note_tick_txn(session, name=name, now=now, beat_id=beat_id) == previous
    with models_db.session_scope(db_url) as session:
        row = session.get(cron_models.BeatTick, name)
        assert row is not None and (row.last_tick_at, row.beat_id) == (first + dt.timedelta(seconds=5), "b")
        session.delete(row)
