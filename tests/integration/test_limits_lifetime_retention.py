"""Host-controlled limits (docs/spec/durable-workflow.md#dw-step: "最多1024 step、instance寿命は作成から31536000秒。上限・期限はHost
制御で、アプリがcatchして延命できるsentinelではない"), retention ("terminal履歴とIDはterminal遷移から
少なくとも2592000秒保持する") and the periodic ``observed`` of a DurableWorkflow — through the real
engine with contexts run in-process at a controllable clock. Production durations are used throughout; the clock moves instead. The test-only
settings (``TAKOHOST_TEST_LIFETIME_SECONDS``, ``TAKOHOST_TEST_RETENTION_SECONDS``) are checked to
take effect where they are read.
"""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa

from models import db as models_db
from models import instances as inst_models
from models import resources as res_models
from models.errors import DomainError
from services import instance_history, instance_stop, instances, retention, workflow_observer
from tests.support import workflows
from workers.engine import sweep

YEAR = 31_536_000
THIRTY_DAYS = 2_592_000


def _call(fn, **kwargs):
    try:
        return fn(**kwargs)
    except DomainError as exc:
        return exc.code


def _timers(db_url, workflow, instance_id):
    with models_db.session_scope(db_url) as session:
        return dict(
            session.execute(
                sa.select(inst_models.Timer.kind, inst_models.Timer.due_at)
                .join(inst_models.Instance, inst_models.Instance.pk == inst_models.Timer.instance_pk)
                .where(
                    inst_models.Instance.workflow_uid == workflow,
                    inst_models.Instance.instance_id == instance_id,
                )
            ).all()
        )


WAITER = """
class Waiter:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        try:
            step.wait_for_event("w", {"type": "go", "timeoutSeconds": 31536000})
        except BaseException:
            pass                      # cannot rescue the instance
        return {"unreachable": True}
"""

SLEEPER = """
class Sleeper:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        step.do("first", lambda: {})
        step.sleep("long", 31536000)
        return {"unreachable": True}
"""


def test_every_instance_gets_a_lifetime_timer_and_ends_lifetime_exceeded_whatever_it_does(
    db_url, space, driver
):
    waiting = workflows.deploy(db_url, space=space, source=WAITER, class_name="Waiter")
    sleeping = workflows.deploy(db_url, space=space, source=SLEEPER, class_name="Sleeper")
    created = driver.clock()
    for d, instance_id in ((waiting, "w"), (sleeping, "s")):
        instances.create(space=space, workflow_uid=d.workflow, instance_id=instance_id, now=created)
        assert (_timers(db_url, d.workflow, instance_id)["lifetime"] - created).total_seconds() == YEAR
    driver.clock.advance(5)
    assert sorted(driver.run()) == ["sleeping", "waiting"]
    wake = workflows.instance_row(db_url, workflow=sleeping.workflow, instance_id="s")
    assert wake.status == "sleeping"
    assert driver.advance(YEAR - 6) == []  # one second before the end: nothing fires
    assert sorted(driver.advance(1)) == ["errored", "errored"]
    for d, instance_id in ((waiting, "w"), (sleeping, "s")):
        status = instances.status(space=space, workflow_uid=d.workflow, instance_id=instance_id)
        assert status["status"] == "errored" and status["error"]["reason"] == "lifetime_exceeded"
        assert "output" not in status
        assert _timers(db_url, d.workflow, instance_id) == {}  # nothing left to fire
    # the sleep deadline was kept (never shortened to the lifetime end)
    with models_db.session_scope(db_url) as session:
        step = session.scalar(
            sa.select(inst_models.Step).where(
                inst_models.Step.instance_pk == wake.pk, inst_models.Step.name == "long"
            )
        )
    assert (step.wake_at - created).total_seconds() == YEAR + 5


def test_a_queued_instance_that_no_version_can_run_still_ends_at_its_lifetime(db_url, space, driver):
    d = workflows.deploy(db_url, space=space, source=WAITER, class_name="Waiter")
    instances.create(space=space, workflow_uid=d.workflow, instance_id="q", now=driver.clock())
    with models_db.session_scope(db_url) as session:  # then no Deployment: nothing can run the code
        session.get(res_models.Resource, d.deployment).deleted_at = driver.clock()
    assert driver.run() == ["no_version"]
    assert instances.status(space=space, workflow_uid=d.workflow, instance_id="q") == {"status": "queued"}
    assert driver.advance(YEAR) == ["errored"]
    status = instances.status(space=space, workflow_uid=d.workflow, instance_id="q")
    assert status["status"] == "errored" and status["error"]["reason"] == "lifetime_exceeded"
    events = instance_history.history(space=space, workflow_uid=d.workflow, instance_id="q").events
    assert [e["eventType"] for e in events] == ["InstanceCreated", "ContextStarted", "InstanceErrored"]
    assert events[1]["attributes"]["versionUid"] is None  # no code ran


def test_the_test_only_lifetime_setting_shortens_the_lifetime_of_new_instances(
    db_url, space, driver, monkeypatch
):
    d = workflows.deploy(db_url, space=space, source=WAITER, class_name="Waiter")
    monkeypatch.setenv("TAKOHOST_TEST_LIFETIME_SECONDS", "7")
    instances.create(space=space, workflow_uid=d.workflow, instance_id="short", now=driver.clock())
    monkeypatch.delenv("TAKOHOST_TEST_LIFETIME_SECONDS")
    instances.create(space=space, workflow_uid=d.workflow, instance_id="normal", now=driver.clock())
    short = workflows.instance_row(db_url, workflow=d.workflow, instance_id="short")
    normal = workflows.instance_row(db_url, workflow=d.workflow, instance_id="normal")
    assert (short.lifetime_ends_at - short.created_at).total_seconds() == 7
    assert (normal.lifetime_ends_at - normal.created_at).total_seconds() == YEAR
    driver.run()
    assert driver.advance(7) == ["errored"]
    assert instances.status(space=space, workflow_uid=d.workflow, instance_id="normal") == {
        "status": "waiting"
    }


NAP = """
class Nap:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        step.sleep("nap", 3600)
        return {}
"""
DONE = """
class Done:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        return {"v": step.do("a", lambda: {"x": 1})}
"""


def test_terminal_instances_are_kept_30_days_then_purged_by_the_beat_sweep(db_url, space, driver):
    d = workflows.deploy(db_url, space=space, source=DONE, class_name="Done")
    napping = workflows.deploy(db_url, space=space, source=NAP, class_name="Nap")
    ids = dict(space=space, workflow_uid=d.workflow)
    instances.create(**ids, instance_id="old", now=driver.clock())
    instances.create(space=space, workflow_uid=napping.workflow, instance_id="alive", now=driver.clock())
    driver.run()
    assert instances.status(**ids, instance_id="old")["status"] == "complete"
    ended = workflows.instance_row(db_url, workflow=d.workflow, instance_id="old").terminal_at
    driver.clock.advance(10)
    instances.create(**ids, instance_id="young", now=driver.clock())
    driver.run()
    # one second before the retention ends: everything is kept
    assert retention.purge_retired(now=ended + dt.timedelta(seconds=THIRTY_DAYS - 1)) == 0
    assert instances.get(**ids, instance_id="old") == "old"
    # the beat's sweep duty purges it afterwards (and only it)
    sweep.sweep(now=ended + dt.timedelta(seconds=THIRTY_DAYS + 1))
    assert _call(instances.get, **ids, instance_id="old") == "unknown_instance"
    assert _call(instance_history.history, **ids, instance_id="old") == "unknown_instance"
    assert instances.status(**ids, instance_id="young")["status"] == "complete"  # 10 s younger: kept
    assert instances.status(space=space, workflow_uid=napping.workflow, instance_id="alive") == {
        "status": "sleeping"
    }  # not terminal: never purged by retention
    with models_db.session_scope(db_url) as session:
        for model in (inst_models.HistoryEvent, inst_models.Step, inst_models.Timer):
            orphans = session.scalar(
                sa.select(sa.func.count())
                .select_from(model)
                .where(~model.instance_pk.in_(sa.select(inst_models.Instance.pk)))
            )
            assert orphans == 0, model
    # a purged id is free again: a new instance with an empty history
    instances.create(**ids, instance_id="old", now=driver.clock())
    types = [e["eventType"] for e in instance_history.history(**ids, instance_id="old").events]
    assert types == ["InstanceCreated"]


def test_the_test_only_retention_setting_shortens_the_retention(db_url, space, driver, monkeypatch):
    d = workflows.deploy(db_url, space=space, source=DONE, class_name="Done")
    instances.create(space=space, workflow_uid=d.workflow, instance_id="r", now=driver.clock())
    driver.run()
    ended = workflows.instance_row(db_url, workflow=d.workflow, instance_id="r").terminal_at
    assert retention.purge_retired(now=ended + dt.timedelta(seconds=5)) == 0
    monkeypatch.setenv("TAKOHOST_TEST_RETENTION_SECONDS", "3")
    assert retention.purge_retired(now=ended + dt.timedelta(seconds=5)) >= 1
    assert _call(instances.get, space=space, workflow_uid=d.workflow, instance_id="r") == "unknown_instance"


def _observed(db_url, uid):
    with models_db.session_scope(db_url) as session:
        resource = session.get(res_models.Resource, uid)
        return resource.observed, resource.observed_at


def test_observed_instance_counts_are_refreshed_by_the_sweep(db_url, space, driver):
    d = workflows.deploy(db_url, space=space, source=NAP, class_name="Nap")
    assert _observed(db_url, d.workflow) == ({}, None)
    workflow_observer.refresh(now=driver.clock(), force=True)
    assert _observed(db_url, d.workflow) == ({}, None)  # never observed: left to its Operation
    with models_db.session_scope(db_url) as session:
        resource = session.get(res_models.Resource, d.workflow)
        resource.observed, resource.observed_at = {"ready": False}, driver.clock()
        deployment = session.get(res_models.Resource, d.deployment)  # its allocation is applied
        deployment.observed = {"versions": deployment.spec["versions"]}
    instances.create(space=space, workflow_uid=d.workflow, instance_id="a", now=driver.clock())
    instances.create(space=space, workflow_uid=d.workflow, instance_id="b", now=driver.clock())
    driver.run()
    instance_stop.terminate(space=space, workflow_uid=d.workflow, instance_id="b")
    at = driver.clock() + dt.timedelta(seconds=1)
    assert workflow_observer.refresh(now=at, force=True) >= 1
    observed, observed_at = _observed(db_url, d.workflow)
    assert observed == {
        "ready": True,
        "instanceCounts": {
            "queued": 0,
            "running": 0,
            "sleeping": 1,
            "waiting": 0,
            "complete": 0,
            "errored": 0,
            "terminated": 1,
        },
    }
    assert observed_at == at
