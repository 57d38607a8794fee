"""Fencing (docs/spec/architecture.md#ar-shape): a context whose epoch was bumped can never commit again, and stops."""

from __future__ import annotations

import datetime as dt
import threading
import time

import pytest
import sqlalchemy as sa

from core import config
from models import db as models_db
from models import instances as inst_models
from models.base import utcnow
from services import instance_history, instance_stop, instances
from services import leases as lease_service
from takohost.domain import decide, retry
from tests.support import workflows
from workers.engine import context, store
from workers.sandbox import heartbeat
from workers.sandbox import lease as lease_mod

BLOCKING = """
import os, time
class Blocking:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        p = event["params"]
        def effect():
            open(p["started"], "w").close()
            while not os.path.exists(p["go"]):
                time.sleep(0.01)
            with open(p["log"], "a") as f:
                f.write("finished\\n")
            return {"v": 1}
        return step.do("a", effect)
"""

FOREVER = """
import os, time
class Forever:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        p = event["params"]
        def effect():
            while True:
                with open(p["log"], "a") as f:
                    f.write("tick\\n")
                time.sleep(0.02)
        return step.do("a", effect)
"""


ONE_STEP = """
class One:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        return step.do("a", lambda: {"v": 1})
"""


def _pk(db_url, workflow, instance_id):
    return workflows.instance_row(db_url, workflow=workflow, instance_id=instance_id).pk


def _bump(db_url, pk):
    with models_db.session_scope(db_url) as session:
        session.execute(
            sa.update(inst_models.Instance)
            .where(inst_models.Instance.pk == pk)
            .values(epoch=inst_models.Instance.epoch + 1)
        )


def _quiet_heartbeat(monkeypatch, db_url):
    """This process's heartbeat for ``db_url`` with its periodic beat made 60 s long for the test
    (one beat still runs when a context registers); returns it."""
    settings = config.load_settings()
    leases = lease_mod.store_for(
        redis_url=settings.redis_url, namespace=settings.namespace, ttl_ms=settings.lease_ttl_ms
    )
    beat = heartbeat.heartbeat_for(
        leases=leases, url=db_url, read_epochs=store.backend_for(db_url).read_epochs
    )
    monkeypatch.setattr(beat, "interval", 60.0)
    beat._wake.set()  # a waiting loop picks the new interval up now
    return beat


def _forever(db_url, space_token, zygote, monkeypatch, tmp_path, instance_id):
    """A queued instance of ``Forever`` (its effect appends to ``log`` forever) whose context the
    test runs itself: ``(space, deployed, driver, pk, log)``."""
    space, _ = space_token
    deployed = workflows.deploy(db_url, space=space, source=FOREVER, class_name="Forever")
    driver = workflows.Driver(monkeypatch, zygote=zygote)
    log = tmp_path / "log"
    instances.create(
        space=space, workflow_uid=deployed.workflow, instance_id=instance_id, params={"log": str(log)}
    )
    return space, deployed, driver, driver.queue.pop(), log


def _wait_file(path, timeout=20):
    workflows.wait_until(lambda: path.exists(), timeout=timeout, message=str(path))


def test_a_context_whose_epoch_was_bumped_fails_its_next_commit_and_stops(
    db_url, space_token, zygote, monkeypatch, tmp_path
):
    space, _ = space_token
    deployed = workflows.deploy(db_url, space=space, source=BLOCKING, class_name="Blocking")
    driver = workflows.Driver(monkeypatch, zygote=zygote)
    params = {"started": str(tmp_path / "started"), "go": str(tmp_path / "go"), "log": str(tmp_path / "log")}
    instances.create(space=space, workflow_uid=deployed.workflow, instance_id="fenced", params=params)
    pk = driver.queue.pop()
    beat = _quiet_heartbeat(monkeypatch, db_url)
    monkeypatch.setattr(beat, "beat", lambda current: None)  # the commit fence is under test, not the kill
    outcome = []
    thread = threading.Thread(target=lambda: outcome.append(context.run_context(pk, zygote=zygote)))
    thread.start()
    _wait_file(tmp_path / "started")
    _bump(db_url, pk)  # e.g. a newer context or terminate took the token
    (tmp_path / "go").touch()
    thread.join(30)
    assert outcome == ["fenced"]
    assert (tmp_path / "log").read_text() == "finished\n"  # the effect ran; its result was NOT committed
    row = workflows.instance_row(db_url, workflow=deployed.workflow, instance_id="fenced")
    assert row.status == "running"
    with models_db.session_scope(db_url) as session:
        assert (
            session.scalar(
                sa.select(sa.func.count())
                .select_from(inst_models.Step)
                .where(inst_models.Step.instance_pk == pk)
            )
            == 0
        )
    history = instance_history.history(space=space, workflow_uid=deployed.workflow, instance_id="fenced").events
    assert "StepCompleted" not in [e["eventType"] for e in history]
    settings = config.load_settings()
    assert not lease_service.live_leases([pk], settings=settings)  # it stopped and dropped its lease


def test_every_fenced_commit_kind_is_refused(db_url, space_token, zygote, monkeypatch):
    space, _ = space_token
    deployed = workflows.deploy(db_url, space=space, source=BLOCKING, class_name="Blocking")
    workflows.Driver(monkeypatch, zygote=zygote)
    instances.create(space=space, workflow_uid=deployed.workflow, instance_id="direct")
    pk = _pk(db_url, deployed.workflow, "direct")
    conn = models_db.connection_for(db_url)
    snapshot = store.load_instance(conn, pk)
    cs = store.ContextStore(conn, pk=pk, lifetime_ends_at=snapshot.lifetime_ends_at)
    now = utcnow()
    assert cs.start(version_uid=deployed.version, now=now)
    stale = store.ContextStore(conn, pk=pk, lifetime_ends_at=snapshot.lifetime_ends_at)
    stale.epoch = cs.epoch - 1  # the token of an earlier context
    run = decide.RunEffect(attempt=1, policy=retry.parse_retry_policy({"maxAttempts": 1}), new=True)
    with pytest.raises(store.Fenced):
        stale.commit_attempt(
            name="a",
            run=run,
            started_at=now,
            outcome=decide.AttemptSucceeded({"v": 1}),
            now=now,
        )
    with pytest.raises(store.Fenced):
        stale.commit_sleep_completed(name="s", seconds=0, wake_at=now, new=True, now=now)
    wait = decide.TryWait("t", 5, now + dt.timedelta(seconds=5), new=True)
    with pytest.raises(store.Fenced):
        stale.try_wait(name="w", wait=wait, now=now)
    with pytest.raises(store.Fenced):
        stale.commit_wait_suspend(name="w", wait=wait, now=now)
    with pytest.raises(store.Fenced):
        stale.commit_suspend(
            suspend=decide.Suspend("sleep", now, now, new=True), name="s", seconds=1, now=now
        )
    with pytest.raises(store.Fenced):
        stale.commit_terminal(status="complete", output={}, now=now)
    row = workflows.instance_row(db_url, workflow=deployed.workflow, instance_id="direct")
    assert row.status == "running" and row.output is None
    with models_db.session_scope(db_url) as session:
        assert (
            session.scalar(
                sa.select(sa.func.count())
                .select_from(inst_models.Step)
                .where(inst_models.Step.instance_pk == pk)
            )
            == 0
        )


def test_the_heartbeat_notices_fencing_and_kills_a_running_effect(
    db_url, space_token, zygote, monkeypatch, tmp_path
):
    space, deployed, driver, pk, log = _forever(db_url, space_token, zygote, monkeypatch, tmp_path, "loop")
    settings = config.load_settings()
    leases = lease_mod.store_for(
        redis_url=settings.redis_url, namespace=settings.namespace, ttl_ms=settings.lease_ttl_ms
    )
    beat = heartbeat.heartbeat_for(
        leases=leases, url=db_url, read_epochs=store.backend_for(db_url).read_epochs
    )
    captured = []
    original = beat.register
    monkeypatch.setattr(beat, "register", lambda watched: (captured.append(watched), original(watched)))
    outcome = []
    thread = threading.Thread(target=lambda: outcome.append(context.run_context(pk, zygote=zygote)))
    thread.start()
    _wait_file(log)
    workflows.wait_until(lambda: captured and captured[0].child is not None, message="child registered")
    _bump(db_url, pk)
    beat.beat(captured)  # one heartbeat (the thread would do it within a third of the lease TTL)
    thread.join(30)
    assert outcome == ["fenced"]
    size = log.stat().st_size
    time.sleep(0.3)
    assert log.stat().st_size == size  # the effect is dead: the file never grows again
    assert not lease_service.live_leases([pk], settings=settings)


def test_terminate_asks_the_owner_to_stop_at_once_and_returns_once_the_stop_is_proven(
    db_url, space_token, zygote, monkeypatch, tmp_path
):
    """The stop hint (``{namespace}:stop``) wakes the owner's heartbeat: terminate does not wait for
    the next heartbeat period (made 60 s here) nor for the effect, which never ends."""
    space, deployed, driver, pk, log = _forever(db_url, space_token, zygote, monkeypatch, tmp_path, "hint")
    _quiet_heartbeat(monkeypatch, db_url)  # no periodic epoch check during this test: only the hint
    outcome = []
    thread = threading.Thread(target=lambda: outcome.append(context.run_context(pk, zygote=zygote)))
    thread.start()
    _wait_file(log)
    time.sleep(0.5)  # the heartbeat's listener has subscribed by now (it starts with the context)
    started = time.monotonic()
    answer = instance_stop.terminate(space=space, workflow_uid=deployed.workflow, instance_id="hint")
    assert answer == {"status": "terminated"}
    # Without the hint the stop would come with the next beat (60 s) or the lease's expiry (15 s);
    # with it, in about a second. The bound sits well below both and leaves room for a loaded
    # machine (CI once took 2.7 s with other suites beside it).
    assert time.monotonic() - started < 8
    thread.join(30)
    assert outcome == ["fenced"]
    size = log.stat().st_size
    time.sleep(0.3)
    assert log.stat().st_size == size


def test_a_context_fenced_by_a_delete_can_never_commit_later(db_url, space_token, zygote, monkeypatch):
    """docs/spec/durable-workflow.md#dw-delete: an old owner's token can never commit afterwards — also after the purge removed the
    instance, and after an instance of the same id exists again elsewhere."""
    space, _ = space_token
    deployed = workflows.deploy(db_url, space=space, source=BLOCKING, class_name="Blocking")
    workflows.Driver(monkeypatch, zygote=zygote)
    instances.create(space=space, workflow_uid=deployed.workflow, instance_id="doomed")
    pk = _pk(db_url, deployed.workflow, "doomed")
    conn = models_db.connection_for(db_url)
    snapshot = store.load_instance(conn, pk)
    owner = store.ContextStore(conn, pk=pk, lifetime_ends_at=snapshot.lifetime_ends_at)
    now = utcnow()
    assert owner.start(version_uid=deployed.version, now=now)
    assert instance_stop.purge_workflow(deployed.workflow, now=now) is True  # no lease: nothing runs
    other = workflows.deploy(db_url, space=space, source=BLOCKING, class_name="Blocking")
    instances.create(space=space, workflow_uid=other.workflow, instance_id="doomed")
    run = decide.RunEffect(attempt=1, policy=retry.parse_retry_policy({"maxAttempts": 1}), new=True)
    with pytest.raises(store.Fenced):
        owner.commit_attempt(
            name="a",
            run=run,
            started_at=now,
            outcome=decide.AttemptSucceeded({"v": 1}),
            now=now,
        )
    with pytest.raises(store.Fenced):
        owner.commit_terminal(status="complete", output={}, now=now)
    assert workflows.instance_row(db_url, workflow=deployed.workflow, instance_id="doomed") is None
    with models_db.session_scope(db_url) as session:
        assert (
            session.scalar(
                sa.select(sa.func.count())
                .select_from(inst_models.Step)
                .where(inst_models.Step.instance_pk == pk)
            )
            == 0
        )
    assert instances.status(space=space, workflow_uid=other.workflow, instance_id="doomed") == {
        "status": "queued"
    }


def test_a_child_lost_to_its_watchdog_because_the_host_stalled_is_not_a_failed_attempt(
    db_url, space_token, zygote, monkeypatch, tmp_path
):
    """Renewals fail (Redis away, or this process starved): pings are withheld so that the child dies
    before the lease can expire. That death is the host's doing: nothing is recorded against the
    step, and a fresh context is dispatched (the effect runs again: at-least-once)."""
    import dataclasses

    space, deployed, driver, pk, log = _forever(db_url, space_token, zygote, monkeypatch, tmp_path, "stall")
    settings = dataclasses.replace(config.load_settings(), lease_ttl_ms=1000)
    leases = lease_mod.store_for(redis_url=settings.redis_url, namespace=settings.namespace, ttl_ms=1000)

    def unreachable(lease):
        raise ConnectionError("Redis is away")

    monkeypatch.setattr(leases, "renew", unreachable)
    started = time.monotonic()
    outcome = context.run_context(pk, settings=settings, zygote=zygote)
    assert outcome == "restart"
    assert time.monotonic() - started < 5  # the watchdog (half the TTL) fired
    assert driver.queue == [pk]  # a fresh context takes over
    size = log.stat().st_size
    time.sleep(0.3)
    assert log.stat().st_size == size
    types = [
        e["eventType"]
        for e in instance_history.history(space=space, workflow_uid=deployed.workflow, instance_id="stall").events
    ]
    assert "StepAttemptFailed" not in types and "StepFailed" not in types
    assert instances.status(space=space, workflow_uid=deployed.workflow, instance_id="stall") == {
        "status": "running"
    }


def test_a_stop_between_the_token_and_the_registration_is_noticed_at_once(
    db_url, space_token, zygote, monkeypatch, tmp_path
):
    """A terminate that fences a context after it took its token but before its heartbeat watches
    it: the hint found nothing watched, so it is remembered, and the registration wakes the beat,
    which kills the never-ending effect at once (the periodic beat is made 60 s long here)."""
    space, deployed, driver, pk, log = _forever(db_url, space_token, zygote, monkeypatch, tmp_path, "race")
    beat = _quiet_heartbeat(monkeypatch, db_url)
    time.sleep(0.2)  # the beat woken by _quiet_heartbeat is over (if its thread runs yet)...
    beat._wake.clear()  # ...and a thread started by the next registration waits 60 s
    original = beat.register

    def fenced_first(watched):
        _bump(db_url, pk)  # the token was taken; terminate fences it now...
        assert beat.notify({pk}) is False  # ...and its hint arrives before anything watches pk
        original(watched)

    monkeypatch.setattr(beat, "register", fenced_first)
    outcome = []
    thread = threading.Thread(target=lambda: outcome.append(context.run_context(pk, zygote=zygote)))
    thread.start()
    thread.join(10)
    assert outcome == ["fenced"]
    assert not lease_service.live_leases([pk], settings=config.load_settings())


def test_a_registration_without_a_stop_hint_costs_no_beat(db_url, space_token, zygote, monkeypatch):
    """The lease was just taken and the epoch is the context's own: registering does not renew the
    lease nor read the epoch (the periodic beat does, a quarter of the lease TTL later)."""
    space, _ = space_token
    deployed = workflows.deploy(db_url, space=space, source=ONE_STEP, class_name="One")
    driver = workflows.Driver(monkeypatch, zygote=zygote)
    beat = _quiet_heartbeat(monkeypatch, db_url)
    time.sleep(0.2)
    beat._wake.clear()
    beats = []
    monkeypatch.setattr(beat, "beat", lambda current: beats.append(current))
    for i in range(3):
        instances.create(space=space, workflow_uid=deployed.workflow, instance_id=f"quiet{i}")
    assert driver.run() == ["complete"] * 3
    time.sleep(0.2)
    assert beats == []
