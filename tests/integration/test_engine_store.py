"""Store-level races (workers/engine/store.py): what a concurrent send_event commits while a
context's statement waits for the instance row lock is never lost or left behind."""

from __future__ import annotations

import dataclasses
import datetime as dt
import threading
import time

import psycopg
import pytest

from models import db as models_db
from models import instance_sql
from models.base import utcnow
from services import dispatch, instance_events, instance_history, instance_stop, instances
from takohost.domain import decide, history, retry
from tests.support import workflows
from workers.engine import store

SOURCE = """
class W:
    def __init__(self, env): self.env = env
    def run(self, event, step):
        return {}
"""


@pytest.fixture()
def started(db_url, space_token, monkeypatch):
    """A context store that took the token of a fresh instance (no child: the store alone)."""
    monkeypatch.setattr(dispatch, "run_context", lambda pk, **_: None)
    monkeypatch.setattr(dispatch, "run_contexts", len)
    space = space_token[0]
    deployed = workflows.deploy(db_url, space=space, source=SOURCE, class_name="W")
    instances.create(space=space, workflow_uid=deployed.workflow, instance_id="i")
    pk = workflows.instance_row(db_url, workflow=deployed.workflow, instance_id="i").pk
    conn = psycopg.connect(**models_db.connect_kwargs(db_url), autocommit=True)
    snapshot = store.load_instance(conn, pk)
    cs = store.ContextStore(conn, pk=pk, lifetime_ends_at=snapshot.lifetime_ends_at)
    assert cs.start(version_uid=deployed.version, now=utcnow())
    yield cs, deployed
    conn.close()


def _concurrent_event(db_url, pk, event_type, *, hold: float, during):
    """Accept an event in a transaction that holds the instance row lock while ``during`` runs in a
    thread (so that its statement waits for the lock), then commit it."""
    conn = psycopg.connect(**models_db.connect_kwargs(db_url))
    conn.execute("SELECT 1 FROM instances WHERE pk = %s FOR UPDATE", [pk])
    conn.execute(
        "INSERT INTO inbox_events (instance_pk, sequence, type, payload, canonical_bytes, accepted_at)"
        " SELECT pk, next_sequence, %s, NULL, 12, now() FROM instances WHERE pk = %s",
        [event_type.encode(), pk],
    )
    conn.execute(
        "UPDATE instances SET next_sequence = next_sequence + 1, inbox_count = inbox_count + 1 WHERE pk = %s",
        [pk],
    )
    result = []
    thread = threading.Thread(target=lambda: result.append(during()))
    thread.start()
    time.sleep(hold)
    assert thread.is_alive()  # it waits for our lock
    conn.commit()
    conn.close()
    thread.join(10)
    return result


def test_a_terminal_commit_purges_an_event_committed_while_it_waited(db_url, started):
    cs, deployed = started
    _concurrent_event(
        db_url,
        cs.pk,
        "late",
        hold=0.3,
        during=lambda: cs.commit_terminal(status="complete", output={}, now=utcnow()),
    )
    assert (
        instances.status(space=deployed.space, workflow_uid=deployed.workflow, instance_id="i")["status"]
        == "complete"
    )
    assert instance_events.inbox(space=deployed.space, workflow_uid=deployed.workflow, instance_id="i") == []
    with psycopg.connect(**models_db.connect_kwargs(db_url)) as conn:
        assert conn.execute(
            "SELECT count(*) FROM inbox_events WHERE instance_pk = %s", [cs.pk]
        ).fetchone() == (0,)


def test_a_wait_that_suspends_sees_an_event_committed_while_it_waited(db_url, started):
    cs, _ = started
    now = utcnow()
    wait = decide.TryWait("go", 60, now + dt.timedelta(seconds=60), new=True)
    result = _concurrent_event(
        db_url, cs.pk, "go", hold=0.3, during=lambda: cs.commit_wait_suspend(name="w", wait=wait, now=now)
    )
    assert result == [True]  # the event arrived: stay running and dispatch, never sit in waiting
    consumed = cs.try_wait(name="w", wait=decide.TryWait("go", 60, wait.timeout_at, new=False), now=now)
    assert consumed == ("consumed", None)


def test_history_stays_newest_last_in_time_when_a_commit_waited_for_a_later_event(db_url, started):
    """The finding: a commit stamped with a ``now`` taken before it waited for the row lock got a
    larger eventId but an earlier timestamp than the event committed meanwhile. Every append now
    stamps ``max(own time, newest stored event)`` under the row lock (``instances.last_event_at``)."""
    cs, deployed = started
    early = utcnow()
    late = early + dt.timedelta(seconds=5)
    conn = psycopg.connect(**models_db.connect_kwargs(db_url))
    first = conn.execute(
        "UPDATE instances SET next_event_id = next_event_id + 1, last_event_at = %s WHERE pk = %s"
        " RETURNING next_event_id - 1",
        [late, cs.pk],
    ).fetchone()[0]
    conn.execute(
        "INSERT INTO history_events (instance_pk, event_id, event_type, attributes, event_timestamp)"
        ' VALUES (%s, %s, \'EventAccepted\', \'{"sequence": 1, "type": "x"}\', %s)',
        [cs.pk, first, late],
    )
    outcome = decide.AttemptSucceeded({"v": 1})
    thread = threading.Thread(
        target=lambda: cs.commit_attempt(
            name="a",
            run=decide.RunEffect(attempt=1, policy=retry.parse_retry_policy({"maxAttempts": 1}), new=True),
            started_at=early,
            outcome=outcome,
            now=early,
        )
    )
    thread.start()
    time.sleep(0.3)
    assert thread.is_alive()  # the context's statement waits for our row lock
    conn.commit()
    conn.close()
    thread.join(10)
    events = instance_history.history(space=deployed.space, workflow_uid=deployed.workflow, instance_id="i").events
    assert [e["eventId"] for e in events] == list(range(1, len(events) + 1))
    stamps = [e["eventTimestamp"] for e in events]
    assert stamps == sorted(stamps), stamps
    assert [e["eventType"] for e in events][-3:] == ["EventAccepted", "StepAttemptStarted", "StepCompleted"]


def _contexts(db_url, deployed, instance_id, *, now):
    """``(conn, context store that took the token)`` of a fresh instance ``instance_id``."""
    instances.create(space=deployed.space, workflow_uid=deployed.workflow, instance_id=instance_id, now=now)
    pk = workflows.instance_row(db_url, workflow=deployed.workflow, instance_id=instance_id).pk
    conn = psycopg.connect(**models_db.connect_kwargs(db_url), autocommit=True)
    cs = store.ContextStore(conn, pk=pk, lifetime_ends_at=store.load_instance(conn, pk).lifetime_ends_at)
    assert cs.start(version_uid=deployed.version, now=now)
    return conn, cs


def _written(conn, pk):
    """What the database holds for instance ``pk``: its history rows (type, attributes text exactly
    as stored, timestamp), its wait row, its counters and its timer kinds."""
    events = conn.execute(
        "SELECT event_type, attributes::text, event_timestamp FROM history_events WHERE instance_pk = %s"
        " ORDER BY event_id",
        [pk],
    ).fetchall()
    step = conn.execute(
        "SELECT name, kind, state, attempts, result::text, error::text, config::text, wake_at, timeout_at, updated_at"
        " FROM steps WHERE instance_pk = %s",
        [pk],
    ).fetchall()
    counters = conn.execute(
        "SELECT status, next_sequence, inbox_count, inbox_bytes, step_count, last_event_at FROM instances"
        " WHERE pk = %s",
        [pk],
    ).fetchone()
    timers = [k for (k,) in conn.execute("SELECT kind FROM timers WHERE instance_pk = %s ORDER BY kind", [pk])]
    inbox = conn.execute("SELECT count(*) FROM inbox_events WHERE instance_pk = %s", [pk]).fetchone()[0]
    return events, step, counters, timers, inbox


@pytest.mark.parametrize("name,event_type", [("w", "go"), ("wärten 待つ", "éé\u2028")])
def test_a_direct_delivery_writes_what_the_engine_writes_when_it_consumes_the_same_event(
    db_url, space_token, monkeypatch, name, event_type
):
    """``send_event`` to a waiting wait (``direct``) and a context consuming the same event from the
    inbox (``engine``) leave the same records: ``EventAccepted``, ``EventConsumed`` and
    ``StepCompleted`` byte for byte (the stored JSON text) and stamp for stamp, the same wait row and
    counters, and the ``lifetime`` timer in place (a direct delivery used to delete every timer of
    the instance, the lifetime's too)."""
    monkeypatch.setattr(dispatch, "run_context", lambda pk, **_: None)
    deployed = workflows.deploy(db_url, space=space_token[0], source=SOURCE, class_name="W")
    t0 = utcnow()
    t1 = t0 + dt.timedelta(seconds=1)
    wait = decide.TryWait(event_type, 60, t0 + dt.timedelta(seconds=60), new=True)
    payload = {"by": "ada", "note": "ünïcode ✓"}

    def send(instance_id):
        instance_events.send_event(
            space=deployed.space,
            workflow_uid=deployed.workflow,
            instance_id=instance_id,
            event_type=event_type,
            payload=payload,
            now=t1,
        )

    direct_conn, direct = _contexts(db_url, deployed, "direct", now=t0)
    assert direct.try_wait(name=name, wait=wait, now=t0) == ("suspend", None)
    assert direct.commit_wait_suspend(name=name, wait=wait, now=t0) is False  # waiting
    send("direct")  # straight to the wait

    engine_conn, engine = _contexts(db_url, deployed, "engine", now=t0)
    assert engine.try_wait(name=name, wait=wait, now=t0) == ("suspend", None)
    send("engine")  # the instance is running: queued
    assert engine.commit_wait_suspend(name=name, wait=wait, now=t0) is True  # it arrived: stay running
    assert engine.start(version_uid=deployed.version, now=t1)  # the next context consumes it
    consumed = engine.try_wait(name=name, wait=dataclasses.replace(wait, new=False), now=t1)
    assert consumed == ("consumed", payload)

    d_events, d_step, d_counters, d_timers, d_inbox = _written(direct_conn, direct.pk)
    e_events, e_step, e_counters, e_timers, e_inbox = _written(engine_conn, engine.pk)
    direct_conn.close()
    engine_conn.close()
    assert [e[0] for e in d_events][-3:] == ["EventAccepted", "EventConsumed", "StepCompleted"]
    assert [e[0] for e in e_events][-3:] == ["ContextStarted", "EventConsumed", "StepCompleted"]
    accepted = [[e for e in events if e[0] == "EventAccepted"] for events in (d_events, e_events)]
    assert accepted[0] == accepted[1] and len(accepted[0]) == 1
    assert d_events[-2:] == e_events[-2:]  # EventConsumed, StepCompleted
    assert d_events[-1][2] == t1
    assert d_step == e_step and len(d_step) == 1 and d_step[0][2] == "succeeded"
    assert d_counters == e_counters and d_counters[:4] == ("running", 2, 0, 0)
    assert d_timers == e_timers == ["lifetime"]
    assert d_inbox == e_inbox == 0


def test_the_services_store_their_history_rows_as_the_builders_give_them(db_url, space_token, monkeypatch):
    """``InstanceCreated``, ``EventAccepted`` and ``InstanceTerminated`` (with its note) are stored as
    the compact text of ``takohost.domain.history``'s records (``instance_sql.document``), like every
    row a context commits; the create used to store ``{"instanceId": "…"}`` with blanks."""
    monkeypatch.setattr(dispatch, "run_context", lambda pk, **_: None)
    deployed = workflows.deploy(db_url, space=space_token[0], source=SOURCE, class_name="W")
    instances.create(space=deployed.space, workflow_uid=deployed.workflow, instance_id="ï")
    instance_events.send_event(
        space=deployed.space, workflow_uid=deployed.workflow, instance_id="ï", event_type="go", payload={"a": 1}
    )
    assert instance_stop.terminate(
        space=deployed.space, workflow_uid=deployed.workflow, instance_id="ï", reason="done ✓", by="test"
    ) == {"status": "terminated"}
    pk = workflows.instance_row(db_url, workflow=deployed.workflow, instance_id="ï").pk
    with psycopg.connect(**models_db.connect_kwargs(db_url)) as conn:
        rows = conn.execute(
            "SELECT event_id, event_type, attributes::text FROM history_events WHERE instance_pk = %s ORDER BY event_id",
            [pk],
        ).fetchall()
        counters = conn.execute("SELECT next_event_id, inbox_count FROM instances WHERE pk = %s", [pk]).fetchone()
    built = [
        history.instance_created("ï"),
        history.event_accepted(1, "go"),
        history.terminated({"reason": "done ✓", "by": "test"}),
    ]
    assert rows == [(i + 1, e.event_type, instance_sql.document(e.attributes)) for i, e in enumerate(built)]
    assert counters == (4, 0)


@pytest.mark.parametrize("with_version", [True, False])
def test_context_started_is_stored_as_the_builder_gives_it(db_url, space_token, monkeypatch, with_version):
    """``ContextStarted`` (its epoch taken by ``START_CONTEXT`` itself) is stored as the compact
    text of ``history.context_started`` (``instance_sql.document``), like every other history row
    — also with a null ``versionUid`` (a context that only ends the lifetime); the statement used
    to store ``json_build_object``'s ``{"versionUid" : "…", "epoch" : 1}`` with blanks. The served
    history is unchanged."""
    monkeypatch.setattr(dispatch, "run_context", lambda pk, **_: None)
    deployed = workflows.deploy(db_url, space=space_token[0], source=SOURCE, class_name="W")
    version = deployed.version if with_version else None
    conn, cs = _contexts(db_url, deployed, "c", now=utcnow())
    assert cs.start(version_uid=version, now=utcnow())  # a second context: epoch 2
    rows = conn.execute(
        "SELECT event_type, attributes::text FROM history_events WHERE instance_pk = %s"
        " AND event_type = 'ContextStarted' ORDER BY event_id",
        [cs.pk],
    ).fetchall()
    conn.close()
    built = [history.context_started(deployed.version, 1), history.context_started(version, 2)]
    assert rows == [(e.event_type, instance_sql.document(e.attributes)) for e in built]
    served = instance_history.history(space=deployed.space, workflow_uid=deployed.workflow, instance_id="c").events
    assert [e["attributes"] for e in served if e["eventType"] == "ContextStarted"] == [
        {"versionUid": deployed.version, "epoch": 1},
        {"versionUid": version, "epoch": 2},
    ]
