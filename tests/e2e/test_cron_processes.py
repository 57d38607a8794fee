"""Cron triggers with real beat and worker processes (docs/spec/host-features.md#hf-cron; CB-01, CB-03, CB-04, CB-06).

One timeline of about eight real minutes on ``* * * * *`` triggers, so the slow parts run
concurrently:

1. two beat processes and one worker (CB-06: exactly one match per minute, no duplicate);
   a handler that sleeps 60 s on its first call has its worker SIGKILLed mid-handler and a
   fresh worker started (CB-03: delivered again with the identical event);
2. every beat stopped for three minutes (CB-01: those matches are skipped and listed, none is
   back-filled, the next one fires);
3. a beat with the ``TAKOHOST_TEST_BEAT_EXIT_AFTER_RECORD`` fault hook records the first match
   after the outage and exits before dispatching it; a normal beat's sweep still delivers it;
4. a raising handler throughout (CB-04: one failed run per match, never retried).

Runs on its own scratch database and Redis namespace, so no session-wide worker or beat of
other tests can take part in (or be hurt by) the kills.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import time
import uuid

import pytest
import sqlalchemy as sa

from beat import cron_recorder
from core import config
from models import cron as cron_models
from models import db as models_db
from models import migrate
from services import cron_runs, tokens
from tests import conftest
from tests.integration.test_cron_support import RAISING_HANDLER, create_stack
from tests.support import processes

pytestmark = pytest.mark.slow

MARKER_HANDLER = """
import json
def scheduled(event, env, ctx):
    with open(env.MARKER, "a") as f:
        f.write(json.dumps(event) + "\\n")
"""
SLOW_FIRST_CALL_HANDLER = """
import json, os, time
def scheduled(event, env, ctx):
    first = not os.path.exists(env.MARKER)
    with open(env.MARKER, "a") as f:
        f.write(json.dumps(event) + "\\n")
    if first:
        time.sleep(60)
"""
MINUTE = dt.timedelta(minutes=1)


@pytest.fixture()
def scratch():
    """A fresh migrated database and Redis namespace; env for host processes using them."""
    run = uuid.uuid4().hex[:10]
    name = f"takohost_cron_e2e_{run}"
    url = conftest.ADMIN_URL.rsplit("/", 1)[0] + "/" + name
    with conftest._admin().connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    migrate.upgrade(url)
    env = {
        "TAKOHOST_DATABASE_URL": url,
        "TAKOHOST_NAMESPACE": f"tkc{run}",
        "TAKOHOST_LEASE_TTL_MS": "6000",
        "TAKOHOST_SWEEP_INTERVAL_S": "1",
    }
    started: list[processes.HostProcess] = []
    yield url, env, started
    for process in started:
        process.stop()
    settings = config.load_settings()
    client = __import__("redis").Redis.from_url(settings.redis_url)
    for key in client.scan_iter(match=f"{env['TAKOHOST_NAMESPACE']}:*"):
        client.delete(key)
    models_db.dispose_all()
    with conftest._admin().connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def _wait(predicate, *, timeout: float, what: str, every: float = 0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def _sleep_until(t: dt.datetime) -> None:
    time.sleep(max(0.0, (t - dt.datetime.now(dt.UTC)).total_seconds()))


def _ledger(
    url: str, trigger_uid: str
) -> tuple[
    list[cron_models.CronMatch], list[cron_models.CronSkip], dict[int, list[cron_models.CronDelivery]]
]:
    with models_db.session_scope(url) as session:
        matches = list(
            session.scalars(
                sa.select(cron_models.CronMatch)
                .where(cron_models.CronMatch.trigger_uid == trigger_uid)
                .order_by(cron_models.CronMatch.scheduled_time)
            )
        )
        skips = list(
            session.scalars(
                sa.select(cron_models.CronSkip)
                .where(cron_models.CronSkip.trigger_uid == trigger_uid)
                .order_by(cron_models.CronSkip.scheduled_time)
            )
        )
        deliveries: dict[int, list[cron_models.CronDelivery]] = {m.pk: [] for m in matches}
        if matches:
            for d in session.scalars(
                sa.select(cron_models.CronDelivery)
                .where(cron_models.CronDelivery.match_pk.in_(list(deliveries)))
                .order_by(cron_models.CronDelivery.pk)
            ):
                deliveries[d.match_pk].append(d)
    return matches, skips, deliveries


def _calls(path) -> list[dict]:
    try:
        with open(path, encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []


@dataclasses.dataclass
class Triggers:
    ok: str
    failing: str
    slow: str
    crash: str


@pytest.mark.timeout(1200)
def test_CB_01_CB_03_CB_04_CB_06_cron_with_real_processes(scratch, tmp_path) -> None:
    url, env, started = scratch
    space = f"e2e{uuid.uuid4().hex[:8]}"
    with models_db.session_scope(url) as session:
        token = tokens.create_token_txn(session, space=space)
    now = dt.datetime.now(dt.UTC)
    first_minute = (now + dt.timedelta(seconds=40)).replace(second=0, microsecond=0) + MINUTE
    ok_marker, slow_marker = tmp_path / "ok.jsonl", tmp_path / "slow.jsonl"
    slow_cron = f"{first_minute.minute} {first_minute.hour} {first_minute.day} {first_minute.month} *"
    triggers = Triggers(
        ok=create_stack(
            url, space=space, cron="* * * * *", source=MARKER_HANDLER, variables={"MARKER": str(ok_marker)}
        ).trigger_uid,
        failing=create_stack(url, space=space, cron="* * * * *", source=RAISING_HANDLER).trigger_uid,
        slow=create_stack(
            url,
            space=space,
            cron=slow_cron,
            source=SLOW_FIRST_CALL_HANDLER,
            variables={"MARKER": str(slow_marker)},
        ).trigger_uid,
        crash=create_stack(url, space=space, cron="* * * * *").trigger_uid,
    )

    # Phase 1: one worker, two beats at once.
    worker = processes.start_worker(concurrency=2, env=env)
    started.append(worker)
    beats = [processes.start_beat(env=env), processes.start_beat(env=env)]
    started.extend(beats)
    phase1_start = dt.datetime.now(dt.UTC)

    # CB-03: SIGKILL the worker while the slow handler sleeps in its first call.
    _wait(
        lambda: _calls(slow_marker),
        timeout=first_minute.timestamp() - time.time() + 30,
        what="the slow handler's first call",
    )
    time.sleep(3)
    worker.kill()
    worker.proc.wait(10)
    replacement = processes.start_worker(concurrency=2, env=env)
    started.append(replacement)

    _sleep_until(first_minute + 2 * MINUTE + dt.timedelta(seconds=20))
    for process in beats:
        process.stop()
        assert "Traceback" not in process.log(), process.log()[-3000:]
    outage_start = dt.datetime.now(dt.UTC)

    # Phase 2: no beat for three minutes (the worker keeps delivering what was recorded).
    _sleep_until(outage_start + 3 * MINUTE)

    # Phase 3: a beat that exits right after recording, before dispatching.
    crashing = processes.start_beat(env={**env, "TAKOHOST_TEST_BEAT_EXIT_AFTER_RECORD": triggers.crash})
    started.append(crashing)
    assert crashing.proc.wait(60) == cron_recorder.FAULT_EXIT_STATUS, crashing.log()[-3000:]
    restart = dt.datetime.now(dt.UTC)
    resumed = processes.start_beat(env=env)
    started.append(resumed)

    def crash_match_delivered() -> bool:
        matches, _, deliveries = _ledger(url, triggers.crash)
        late = [m for m in matches if m.recorded_at >= outage_start]
        return bool(late) and any(d.outcome == "ok" for d in deliveries[late[0].pk])

    _wait(crash_match_delivered, timeout=100, what="delivery of the match recorded before the beat died")
    final_minute = restart.replace(second=0, microsecond=0) + 2 * MINUTE
    _sleep_until(final_minute + dt.timedelta(seconds=5))

    def all_settled() -> bool:
        for uid in (triggers.ok, triggers.failing, triggers.crash):
            matches, _, deliveries = _ledger(url, uid)
            if not matches or matches[-1].scheduled_time < final_minute:
                return False
            if any(m.state != "done" for m in matches):
                return False
        return True

    _wait(all_settled, timeout=120, what="every recorded match delivered")
    _check_ledgers(
        url,
        triggers,
        phase1_start=phase1_start,
        outage_start=outage_start,
        restart=restart,
        final_minute=final_minute,
        first_minute=first_minute,
        ok_marker=ok_marker,
        slow_marker=slow_marker,
    )
    _check_runs_api(url, space=space, token=token, trigger_uid=triggers.ok)
    for process in (resumed, replacement):
        assert "Traceback" not in process.log(), process.log()[-3000:]


def _check_ledgers(
    url: str,
    triggers: Triggers,
    *,
    phase1_start: dt.datetime,
    outage_start: dt.datetime,
    restart: dt.datetime,
    final_minute: dt.datetime,
    first_minute: dt.datetime,
    ok_marker,
    slow_marker,
) -> None:
    matches, skips, deliveries = _ledger(url, triggers.ok)
    recorded = [m.scheduled_time for m in matches]
    skipped = [s.scheduled_time for s in skips]
    # CB-06: with two beats, exactly one match per minute, no minute missing while beats ran.
    assert len(set(recorded)) == len(recorded)
    assert not set(recorded) & set(skipped)
    first = recorded[0]
    assert first <= phase1_start.replace(second=0, microsecond=0) + MINUTE
    ledger_minutes = sorted(recorded + skipped)
    assert ledger_minutes == [first + i * MINUTE for i in range(len(ledger_minutes))], "a minute is missing"
    assert ledger_minutes[-1] >= final_minute
    # CB-01: every minute at least 60 s old when beat came back is skipped (≥ 2 of a 3-minute
    # outage), with its reason; none of them ever reached the handler.
    outage_minutes = [t for t in ledger_minutes if outage_start < t <= restart]
    assert len(outage_minutes) >= 3
    assert set(skipped) <= set(outage_minutes)
    assert {t for t in outage_minutes if restart - t >= dt.timedelta(seconds=62)} <= set(skipped)
    assert not {t for t in outage_minutes if restart - t < dt.timedelta(seconds=55)} & set(skipped)
    assert len(skipped) >= 2 and all("no beat was running" in s.reason for s in skips)
    calls = _calls(ok_marker)
    called = [c["scheduledTime"] for c in calls]
    assert all(c == {"cron": "* * * * *", "scheduledTime": c["scheduledTime"]} for c in calls)
    for t in skipped:
        assert cron_runs.epoch_ms(t) not in called, "a skipped match was back-filled"
    for match in matches:
        ms = cron_runs.epoch_ms(match.scheduled_time)
        attempts = deliveries[match.pk]
        assert any(d.outcome == "ok" for d in attempts), f"match {match.scheduled_time} not delivered"
        assert 1 <= called.count(ms) <= len(attempts)  # at least once; duplicates only on redelivery

    # CB-04: one failed run per match, never retried.
    matches, _, deliveries = _ledger(url, triggers.failing)
    assert len(matches) >= 5
    for match in matches:
        assert [d.outcome for d in deliveries[match.pk] if d.outcome != "unknown"] == ["failed"]
        assert "boom" in deliveries[match.pk][-1].error

    # CB-03: the killed delivery was delivered again with the identical event; one match only.
    matches, _, deliveries = _ledger(url, triggers.slow)
    assert [m.scheduled_time for m in matches] == [first_minute]
    outcomes = [d.outcome for d in deliveries[matches[0].pk]]
    assert len(outcomes) >= 2 and outcomes[0] == "unknown" and outcomes[-1] == "ok"
    expected = {"cron": matches[0].cron, "scheduledTime": cron_runs.epoch_ms(first_minute)}
    slow_calls = _calls(slow_marker)
    assert len(slow_calls) >= 2 and all(c == expected for c in slow_calls)

    # The match recorded by the beat that died before dispatching was delivered anyway.
    matches, _, deliveries = _ledger(url, triggers.crash)
    late = [m for m in matches if m.recorded_at >= outage_start]
    assert late and late[0].scheduled_time > outage_start
    assert any(d.outcome == "ok" for d in deliveries[late[0].pk])


def _check_runs_api(url: str, *, space: str, token: str, trigger_uid: str) -> None:
    from host_api.app import create_app

    app = create_app(dataclasses.replace(config.load_settings(), database_url=url))
    response = app.test_client().get(
        f"/v2/spaces/{space}/resources/{trigger_uid}/runs", headers={"Authorization": f"Bearer {token}"}
    )
    assert response.status_code == 200
    runs = response.get_json()["runs"]
    times = [r["scheduledTime"] for r in runs]
    assert times == sorted(times, reverse=True)
    assert any(r.get("outcome") == "skipped" for r in runs)
    assert all(r["deliveries"] for r in runs if "deliveries" in r)
