"""Fencing (CONTRACT §1): a context whose epoch was bumped can never commit again, and stops."""

from __future__ import annotations

import datetime as dt
import threading
import time

import pytest
import sqlalchemy as sa

from models import db as models_db
from models import instances as inst_models
from models.base import utcnow
from takohost import config
from tests.support import workflows
from workers.engine import context, decide, heartbeat, store
from workers.engine import lease as lease_mod
from workers.services import instances as service

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


@pytest.fixture(scope="module")
def db_url():
    """This module's own database (see ``workflows.isolated_database``)."""
    with workflows.isolated_database() as url:
        yield url


@pytest.fixture(scope="module")
def zygote():
    z = workflows.start_zygote()
    yield z
    z.stop()


def _pk(db_url, workflow, instance_id):
    return workflows.instance_row(db_url, workflow=workflow, instance_id=instance_id).pk


def _bump(db_url, pk):
    with models_db.session_scope(db_url) as session:
        session.execute(
            sa.update(inst_models.Instance)
            .where(inst_models.Instance.pk == pk)
            .values(epoch=inst_models.Instance.epoch + 1)
        )


def _wait_file(path, timeout=20):
    workflows.wait_until(lambda: path.exists(), timeout=timeout, message=str(path))


def test_a_context_whose_epoch_was_bumped_fails_its_next_commit_and_stops(
    db_url, space_token, zygote, monkeypatch, tmp_path
):
    space, _ = space_token
    deployed = workflows.deploy(db_url, space=space, source=BLOCKING, class_name="Blocking")
    driver = workflows.Driver(monkeypatch, zygote=zygote)
    params = {"started": str(tmp_path / "started"), "go": str(tmp_path / "go"), "log": str(tmp_path / "log")}
    service.create(space=space, workflow_uid=deployed.workflow, instance_id="fenced", params=params)
    pk = driver.queue.pop()
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
    history = service.history(space=space, workflow_uid=deployed.workflow, instance_id="fenced")["events"]
    assert "StepCompleted" not in [e["eventType"] for e in history]
    settings = config.load_settings()
    assert not service.live_leases([pk], settings=settings)  # it stopped and dropped its lease


def test_every_fenced_commit_kind_is_refused(db_url, space_token, zygote, monkeypatch):
    space, _ = space_token
    deployed = workflows.deploy(db_url, space=space, source=BLOCKING, class_name="Blocking")
    workflows.Driver(monkeypatch, zygote=zygote)
    service.create(space=space, workflow_uid=deployed.workflow, instance_id="direct")
    pk = _pk(db_url, deployed.workflow, "direct")
    conn = store.connection_for(db_url)
    snapshot = store.load_instance(conn, pk)
    cs = store.ContextStore(conn, pk=pk, lifetime_ends_at=snapshot.lifetime_ends_at)
    now = utcnow()
    assert cs.start(version_uid=deployed.version, now=now)
    stale = store.ContextStore(conn, pk=pk, lifetime_ends_at=snapshot.lifetime_ends_at)
    stale.epoch = cs.epoch - 1  # the token of an earlier context
    policy = {"maxAttempts": 1, "initialDelaySeconds": 0, "backoff": "constant", "maxDelaySeconds": 43200}
    with pytest.raises(store.Fenced):
        stale.commit_attempt(
            name="a",
            attempt=1,
            new=True,
            policy=policy,
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
    space, _ = space_token
    deployed = workflows.deploy(db_url, space=space, source=FOREVER, class_name="Forever")
    driver = workflows.Driver(monkeypatch, zygote=zygote)
    log = tmp_path / "log"
    service.create(space=space, workflow_uid=deployed.workflow, instance_id="loop", params={"log": str(log)})
    pk = driver.queue.pop()
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
    assert not service.live_leases([pk], settings=settings)
