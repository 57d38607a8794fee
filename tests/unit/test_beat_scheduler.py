"""``beat.scheduler.HostScheduler``: duties run in order, errors logged not raised, tick timing.

No I/O: the duties and the next-match query are replaced by in-memory fakes.
"""

from __future__ import annotations

import datetime as dt
import logging
import types

import pytest

from beat import scheduler as host_scheduler

CALLS: list[tuple[str, dt.datetime]] = []


def _fake_duties() -> types.SimpleNamespace:
    def ok(*, now: dt.datetime) -> int:
        CALLS.append(("ok", now))
        return 3

    def boom(*, now: dt.datetime) -> int:
        CALLS.append(("boom", now))
        raise RuntimeError("duty exploded")

    def sweep(*, now: dt.datetime) -> int:
        CALLS.append(("sweep", now))
        return 0

    return types.SimpleNamespace(ok=ok, boom=boom, sweep=sweep)


@pytest.fixture()
def scheduler(monkeypatch: pytest.MonkeyPatch) -> host_scheduler.HostScheduler:
    from services.celery_app import app

    CALLS.clear()
    duties = _fake_duties()
    monkeypatch.setattr(host_scheduler, "TICK_DUTIES", (duties.ok, duties.boom))
    monkeypatch.setattr(host_scheduler, "SWEEP_DUTIES", (duties.sweep,))
    monkeypatch.setattr(host_scheduler.cron_recorder, "next_due_at", lambda url=None: None)
    return host_scheduler.HostScheduler(app=app)


def test_tick_runs_every_duty_and_logs_failures(
    scheduler: host_scheduler.HostScheduler, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="beat.scheduler")
    interval = scheduler.tick()
    assert [name for name, _ in CALLS] == ["ok", "boom", "sweep"]
    messages = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert any("_fake_duties.<locals>.boom failed" in m for m in messages)
    assert 0.0 <= interval <= host_scheduler.MAX_TICK_INTERVAL_S
    # The failure is logged again on the next tick (never silently swallowed); sweeps wait.
    caplog.clear()
    scheduler.tick()
    assert [name for name, _ in CALLS] == ["ok", "boom", "sweep", "ok", "boom"]
    assert any("boom failed" in r.getMessage() for r in caplog.records)


def test_the_production_duties_are_the_engine_cron_operations_and_packages_functions() -> None:
    names = [host_scheduler.duty_name(d) for d in host_scheduler.TICK_DUTIES + host_scheduler.SWEEP_DUTIES]
    assert names == [
        "beat.cron_recorder.record_due",
        "workers.engine.timers.fire_due",
        "workers.engine.sweep.sweep",
        "services.operations.sweep",
        "workers.cron_tasks.sweep",
        "workers.packages.sweep.sweep",
    ]


def test_tick_wakes_right_after_the_next_cron_match(
    scheduler: host_scheduler.HostScheduler, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = dt.datetime(2026, 3, 4, 10, 0, 59, 700_000, tzinfo=dt.UTC)
    monkeypatch.setattr(host_scheduler, "utcnow", lambda: now)
    monkeypatch.setattr(
        host_scheduler.cron_recorder,
        "next_due_at",
        lambda url=None: dt.datetime(2026, 3, 4, 10, 1, tzinfo=dt.UTC),
    )
    assert scheduler._sleep_seconds() == pytest.approx(0.3 + host_scheduler.WAKE_AFTER_MATCH_S)
    monkeypatch.setattr(
        host_scheduler.cron_recorder,
        "next_due_at",
        lambda url=None: dt.datetime(2026, 3, 4, 10, 0, 59, 800_000, tzinfo=dt.UTC),
    )
    assert scheduler._sleep_seconds() == pytest.approx(0.1 + host_scheduler.WAKE_AFTER_MATCH_S)
    monkeypatch.setattr(
        host_scheduler.cron_recorder,
        "next_due_at",
        lambda url=None: dt.datetime(2026, 3, 4, 9, 0, tzinfo=dt.UTC),
    )
    assert scheduler._sleep_seconds() == 0.0  # overdue: tick again at once


def test_scheduler_installs_no_celery_entries(scheduler: host_scheduler.HostScheduler) -> None:
    assert scheduler.schedule == {}
    assert "HostScheduler" in scheduler.info
