"""Publishing after the stop (docs/spec/durable-workflow.md#dw-stop: "sleeping/waiting/terminalを公開する前にHostはコード停止を確認し").

Before ``sleeping``, ``waiting``, a retry or a terminal status is committed, the host SIGKILLs the
child and proves it dead (``ChildHandle.kill_and_wait``). These tests look at the database from
another connection at the moment of the proof, and at what is left when the proof fails or the
token is taken meanwhile.
"""

from __future__ import annotations

import psycopg
import pytest
import sqlalchemy as sa

from core import config
from models import db as models_db
from models import instances as inst_models
from services import instance_history, instances
from services import leases as lease_service
from tests.support import workflows
from workers import sandbox

SOURCE = """
class Ends:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        print("the last line")
        return step.do("only", lambda: {"n": 1})

class Naps:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        step.sleep("nap", 3600)
        return {}

class Waits:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        return step.wait_for_event("w", {"type": "go", "timeoutSeconds": 600})

class Throws:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        raise ValueError("no")

class Retries:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        def effect():
            raise RuntimeError("again")
        return step.do("flaky", effect, {"maxAttempts": 3, "initialDelaySeconds": 60})
"""


def _observer(db_url: str) -> psycopg.Connection:
    return psycopg.connect(**models_db.connect_kwargs(db_url), autocommit=True)


def _status(conn: psycopg.Connection, pk: int) -> str:
    return conn.execute("SELECT status FROM instances WHERE pk = %s", (pk,)).fetchone()[0]


def _locked(conn: psycopg.Connection, pk: int) -> bool:
    """Whether another session holds instance ``pk``'s row lock right now."""
    try:
        with conn.transaction():
            conn.execute("SELECT 1 FROM instances WHERE pk = %s FOR UPDATE NOWAIT", (pk,))
        return False
    except psycopg.errors.LockNotAvailable:
        return True


@pytest.mark.parametrize(
    ("class_name", "published", "outcome"),
    [
        ("Ends", "complete", "complete"),
        ("Naps", "sleeping", "sleeping"),
        ("Waits", "waiting", "waiting"),
        ("Throws", "errored", "errored"),
        ("Retries", "running", "retry"),  # a failed attempt with a retry delay: a fresh context
    ],
)
def test_nothing_is_published_before_the_child_is_proven_dead(
    db_url, space, driver, monkeypatch, class_name, published, outcome
):
    deployed = workflows.deploy(db_url, space=space, source=SOURCE, class_name=class_name)
    instances.create(space=space, workflow_uid=deployed.workflow, instance_id="p")
    pk = driver.queue[0]
    conn = _observer(db_url)
    seen: list[tuple[str, bool]] = []
    original = sandbox.ChildHandle.kill_and_wait

    def kill_and_wait(self, timeout=5.0):
        proven = original(self, timeout)
        seen.append((_status(conn, pk), _locked(conn, pk)))
        return proven

    monkeypatch.setattr(sandbox.ChildHandle, "kill_and_wait", kill_and_wait)
    try:
        assert driver.run() == [outcome]
        assert seen and seen[0] == ("running", False)  # the child is dead; nothing is published yet
        assert _status(conn, pk) == published and not _locked(conn, pk)
    finally:
        conn.close()
    if class_name == "Ends":  # its lines are stored (written after the proof, before the status)
        with models_db.session_scope(db_url) as session:
            texts = session.scalars(
                sa.text("SELECT message FROM tenant_logs WHERE instance_pk = :pk"), {"pk": pk}
            )
            assert "the last line" in list(texts)
    if class_name == "Retries":
        with models_db.session_scope(db_url) as session:
            step = session.scalar(sa.select(inst_models.Step).where(inst_models.Step.instance_pk == pk))
        assert step.attempts == 1 and step.wake_at is not None  # the attempt was recorded after the stop


def test_a_stop_that_is_not_proven_publishes_nothing_and_keeps_the_lease(db_url, space, driver, monkeypatch):
    deployed = workflows.deploy(db_url, space=space, source=SOURCE, class_name="Ends")
    original = sandbox.ChildHandle.kill_and_wait

    def unproven(self, timeout=5.0):
        original(self, timeout)  # the child does die; the host is told it could not prove it
        return False

    monkeypatch.setattr(sandbox.ChildHandle, "kill_and_wait", unproven)
    instances.create(space=space, workflow_uid=deployed.workflow, instance_id="u")
    pk = driver.queue[0]
    assert driver.run() == ["stop_unproven"]
    row = workflows.instance_row(db_url, workflow=deployed.workflow, instance_id="u")
    assert row.status == "running" and row.output is None and row.terminal_at is None
    events = instance_history.history(space=space, workflow_uid=deployed.workflow, instance_id="u").events
    assert "InstanceCompleted" not in [e["eventType"] for e in events]
    # The lease stays until it expires: its expiry, with the child's watchdog, proves the stop.
    assert lease_service.live_leases([pk], settings=config.load_settings())


def test_a_context_fenced_while_it_stops_its_child_publishes_nothing(db_url, space, driver, monkeypatch):
    deployed = workflows.deploy(db_url, space=space, source=SOURCE, class_name="Ends")
    original = sandbox.ChildHandle.kill_and_wait
    proofs: list[bool] = []

    def fenced_meanwhile(self, timeout=5.0):
        proofs.append(original(self, timeout))
        with models_db.session_scope(db_url) as session:  # e.g. terminate took the token meanwhile
            session.execute(
                sa.update(inst_models.Instance)
                .where(inst_models.Instance.pk == pk)
                .values(epoch=inst_models.Instance.epoch + 1)
            )
        return proofs[-1]

    monkeypatch.setattr(sandbox.ChildHandle, "kill_and_wait", fenced_meanwhile)
    instances.create(space=space, workflow_uid=deployed.workflow, instance_id="f")
    pk = driver.queue[0]
    assert driver.run() == ["fenced"]
    assert proofs[0] is True
    row = workflows.instance_row(db_url, workflow=deployed.workflow, instance_id="f")
    assert row.status == "running" and row.output is None
    assert not lease_service.live_leases([pk], settings=config.load_settings())


@pytest.mark.parametrize(
    ("class_name", "status_at_release"),
    [
        # A terminal status: no later context waits for the lease, so its round trip comes after
        # the status a client is waiting for.
        ("Ends", "complete"),
        ("Throws", "errored"),
        # Before sleeping / waiting / a retry the lease goes first: the wake-up may come at once.
        ("Naps", "running"),
        ("Waits", "running"),
        ("Retries", "running"),
    ],
)
def test_the_lease_is_released_after_a_terminal_status_and_before_any_other(
    db_url, space, driver, monkeypatch, class_name, status_at_release
):
    """Each context releases its lease once, after its child is proven dead (the stop proof), and
    the lease is gone when the context ends; a terminal status is stored before the release."""
    from workers.sandbox import lease as lease_mod

    deployed = workflows.deploy(db_url, space=space, source=SOURCE, class_name=class_name)
    instances.create(space=space, workflow_uid=deployed.workflow, instance_id="r")
    pk = driver.queue[0]
    conn = _observer(db_url)
    at_release: list[tuple[str, bool]] = []  # (the stored status, a child not proven dead yet)
    unproven = [False]
    original = lease_mod.LeaseStore.release
    original_kill = sandbox.ChildHandle.kill_and_wait

    def release(self, lease):
        at_release.append((_status(conn, pk), unproven[0]))
        return original(self, lease)

    def kill_and_wait(self, timeout=5.0):
        proven = original_kill(self, timeout)
        unproven[0] = not proven
        return proven

    monkeypatch.setattr(lease_mod.LeaseStore, "release", release)
    monkeypatch.setattr(sandbox.ChildHandle, "kill_and_wait", kill_and_wait)
    try:
        driver.run()
    finally:
        conn.close()
    assert at_release == [(status_at_release, False)]
    assert not lease_service.live_leases([pk], settings=config.load_settings())
