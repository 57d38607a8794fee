"""Beat duties of the engine: ``timers.fire_due`` and ``sweep.sweep`` (docs/spec/architecture.md#ar-shape, docs/spec/architecture.md#ar-beat "Beat")."""

from __future__ import annotations

import datetime as dt

import pytest
import sqlalchemy as sa

from core import config
from models import db as models_db
from models import instances as inst_models
from models.base import utcnow
from services import dispatch, instances
from tests.support import workflows
from workers.engine import sweep, timers
from workers.sandbox import lease as lease_mod

NAP = """
class Nap:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        step.sleep("nap", 60)
        return {}
"""


@pytest.fixture()
def dispatched(monkeypatch, db_url):
    sent: list[int] = []
    monkeypatch.setattr(dispatch, "run_context", lambda pk, **_: sent.append(pk))
    monkeypatch.setattr(dispatch, "run_contexts", lambda pks: sent.extend(pks) or len(pks))
    yield sent
    workflows.clear_timers(db_url)
    with models_db.session_scope(db_url) as session:  # nothing of this test is runnable for the next
        session.execute(sa.update(inst_models.Instance).values(status="terminated"))


@pytest.fixture()
def deployed(db_url, space_token):
    return workflows.deploy(db_url, space=space_token[0], source=NAP, class_name="Nap")


def _pk(db_url, deployed, instance_id):
    return workflows.instance_row(db_url, workflow=deployed.workflow, instance_id=instance_id).pk


def _set(db_url, pk, **values):
    with models_db.session_scope(db_url) as session:
        session.execute(sa.update(inst_models.Instance).where(inst_models.Instance.pk == pk).values(**values))


def _timer(db_url, pk, kind, due):
    with models_db.session_scope(db_url) as session:
        session.add(inst_models.Timer(instance_pk=pk, kind=kind, due_at=due, created_at=due))


def test_fire_due_fires_only_due_timers_once(db_url, deployed, dispatched):
    now = utcnow()
    ids = {
        name: instances.create(space=deployed.space, workflow_uid=deployed.workflow, instance_id=name)
        for name in ("due", "later", "done")
    }
    pks = {name: _pk(db_url, deployed, name) for name in ids}
    dispatched.clear()
    _set(db_url, pks["due"], status="sleeping")
    _set(db_url, pks["later"], status="sleeping")
    _set(db_url, pks["done"], status="terminated")
    _timer(db_url, pks["due"], "wake", now - dt.timedelta(seconds=1))
    _timer(db_url, pks["later"], "wake", now + dt.timedelta(seconds=60))
    _timer(db_url, pks["done"], "timeout", now - dt.timedelta(seconds=1))
    assert timers.fire_due(now=now) == 1
    assert dispatched == [pks["due"]]
    assert workflows.instance_row(db_url, workflow=deployed.workflow, instance_id="due").status == "running"
    assert timers.fire_due(now=now) == 0  # fired once: the row is gone
    with models_db.session_scope(db_url) as session:
        left = session.scalars(
            sa.select(inst_models.Timer.instance_pk).where(inst_models.Timer.kind != "lifetime")
        ).all()
    assert left == [pks["later"]]  # the terminal instance's timer was dropped


def test_fire_due_sends_a_batch_of_woken_instances_in_one_bulk_send(db_url, deployed, dispatched, monkeypatch):
    """Timers use the bulk send cron uses (docs/spec/host-features.md#hf-performance): one ``run_contexts`` call per batch
    of rows taken, never one ``run_context`` message at a time."""
    now = utcnow()
    names = [f"bulk{i}" for i in range(7)]
    for name in names:
        instances.create(space=deployed.space, workflow_uid=deployed.workflow, instance_id=name)
    pks = [_pk(db_url, deployed, name) for name in names]
    dispatched.clear()
    for pk in pks:
        _set(db_url, pk, status="sleeping")
        _timer(db_url, pk, "wake", now - dt.timedelta(seconds=1))
    calls: list[list[int]] = []
    monkeypatch.setattr(dispatch, "run_context", lambda pk, **_: pytest.fail("one message at a time"))
    monkeypatch.setattr(dispatch, "run_contexts", lambda batch: calls.append(list(batch)) or len(batch))
    monkeypatch.setattr(timers, "BATCH", 4)
    assert timers.fire_due(now=now) == 7
    assert [len(batch) for batch in calls] == [4, 3]
    assert sorted(pk for batch in calls for pk in batch) == sorted(pks)


def test_sweep_redispatches_runnable_instances_without_a_lease(db_url, deployed, dispatched):
    settings = config.load_settings()
    now = utcnow()
    old = now - dt.timedelta(seconds=sweep.grace_seconds(settings) + 1)
    names = ("orphan", "leased", "fresh", "retrying", "sleeping")
    for name in names:
        instances.create(space=deployed.space, workflow_uid=deployed.workflow, instance_id=name)
    pks = {name: _pk(db_url, deployed, name) for name in names}
    dispatched.clear()
    for name in names:
        _set(db_url, pks[name], status="running", updated_at=old)
    _set(db_url, pks["fresh"], updated_at=now)
    _set(db_url, pks["sleeping"], status="sleeping")
    _timer(db_url, pks["retrying"], "retry", now + dt.timedelta(seconds=30))
    leases = lease_mod.store_for(
        redis_url=settings.redis_url, namespace=settings.namespace, ttl_ms=settings.lease_ttl_ms
    )
    held = leases.acquire(pks["leased"])
    try:
        assert sweep.sweep(now=now) == 1
        assert dispatched == [pks["orphan"]]
        dispatched.clear()
        assert sweep.sweep(now=now) == 0  # just dispatched: not again within the grace period
        later = now + dt.timedelta(seconds=sweep.grace_seconds(settings) + 1)
        assert sweep.sweep(now=later) == 2  # still no lease: again; and "fresh" is old enough now
        assert sorted(dispatched) == sorted([pks["orphan"], pks["fresh"]])
    finally:
        leases.release(held)


def test_sweep_finishes_an_interrupted_terminate_once_the_stop_is_proven(db_url, deployed, dispatched):
    settings = config.load_settings()
    instances.create(space=deployed.space, workflow_uid=deployed.workflow, instance_id="stopping")
    pk = _pk(db_url, deployed, "stopping")
    old = utcnow() - dt.timedelta(seconds=sweep.grace_seconds(settings) + 1)
    _set(db_url, pk, status="running", stopping="terminate", updated_at=old)
    leases = lease_mod.store_for(
        redis_url=settings.redis_url, namespace=settings.namespace, ttl_ms=settings.lease_ttl_ms
    )
    held = leases.acquire(pk)
    assert sweep.sweep(now=utcnow()) == 0  # a context still runs: not proven
    leases.release(held)
    assert sweep.sweep(now=utcnow()) == 1
    status = instances.status(space=deployed.space, workflow_uid=deployed.workflow, instance_id="stopping")
    assert status == {"status": "terminated"}
