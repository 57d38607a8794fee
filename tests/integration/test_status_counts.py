"""Instance counts per status are maintained, not counted (``models.status_counts``; docs/spec/durable-workflow.md#dw-resource
``instanceCounts``): through a real lifecycle (create, contexts, sleep, complete, terminate,
purge), under concurrent writers and compactions, and in what the console and the observer show,
the counts equal a recount of ``instances``.

Real Postgres (this module's own database); contexts run in the test process with the Celery
task's code.
"""

from __future__ import annotations

import random
import threading
import uuid

import sqlalchemy as sa

from models import db as models_db
from models import instances as inst_models
from models import resources as res_models
from models import status_counts
from models.base import utcnow
from services import console, instance_stop, instances, workflow_observer
from tests.support import workflows
from workers.engine import sweep

SOURCE = """
class Flow:
    def __init__(self, env): pass
    def run(self, event, step):
        if (event.get("params") or {}).get("nap"):
            step.sleep("nap", 3600)
        return {"n": step.do("one", lambda: {"n": 1})}
"""


def _recount(db_url: str, uid: str) -> dict[str, int]:
    counts = dict.fromkeys(inst_models.STATUSES, 0)
    with models_db.session_scope(db_url) as session:
        for status, n in session.execute(
            sa.select(inst_models.Instance.status, sa.func.count())
            .where(inst_models.Instance.workflow_uid == uid)
            .group_by(inst_models.Instance.status)
        ):
            counts[status] = n
    return counts


def _read(db_url: str, uid: str) -> dict[str, int]:
    with models_db.session_scope(db_url) as session:
        return status_counts.counts_txn(session, workflow_uids=[uid])[uid]


def test_a_real_lifecycle_is_counted_exactly_before_and_after_compaction(db_url, space, driver):
    d = workflows.deploy(db_url, space=space, source=SOURCE, class_name="Flow")
    for i in range(6):
        instances.create(space=space, workflow_uid=d.workflow, instance_id=f"i{i}", params={"nap": i % 2 == 0})
    assert _read(db_url, d.workflow) == _recount(db_url, d.workflow) and _read(db_url, d.workflow)["queued"] == 6
    outcomes = driver.run()
    counted = _recount(db_url, d.workflow)
    assert counted["complete"] == 3 and counted["sleeping"] == 3, (outcomes, counted)
    assert _read(db_url, d.workflow) == counted
    instance_stop.terminate(space=space, workflow_uid=d.workflow, instance_id="i0")
    assert _read(db_url, d.workflow) == _recount(db_url, d.workflow)

    # The sweep's housekeeping folds the deltas; the counts do not move.
    before = _read(db_url, d.workflow)
    sweep.housekeeping(now=utcnow())
    with models_db.session_scope(db_url) as session:
        assert session.scalar(sa.text("SELECT count(*) FROM instance_count_deltas")) == 0
    assert _read(db_url, d.workflow) == before == _recount(db_url, d.workflow)

    # What the console and the observer show is the same count.
    with models_db.session_scope(db_url) as session:
        assert console.status_counts_txn(session, workflow_uid=d.workflow) == before
        [row] = [w for w in console.workflows_txn(session, space=space) if w["uid"] == d.workflow]
        assert row["counts"] == before and row["total"] == 6
        workflow = session.get(res_models.Resource, d.workflow)
        observed = workflow_observer.observe_workflow_txn(session, workflow=workflow, ready=True)
        assert observed["instanceCounts"] == before

    # Deleting instances (a purge) is counted too.
    with models_db.session_scope(db_url) as session:
        session.execute(sa.delete(inst_models.Instance).where(inst_models.Instance.workflow_uid == d.workflow))
    assert _read(db_url, d.workflow) == dict.fromkeys(inst_models.STATUSES, 0)
    status_counts.compact()
    with models_db.session_scope(db_url) as session:
        left = session.scalar(
            sa.text("SELECT count(*) FROM instance_counts WHERE workflow_uid = :w"), {"w": d.workflow}
        )
    assert left == 0  # zero counts are dropped


def test_concurrent_writers_and_compactions_keep_the_counts_exact(db_url):
    uid = str(uuid.uuid4())
    rows = [
        {
            "workflow_uid": uid, "space": "counts", "instance_id": f"c{i}", "status": "queued", "epoch": 0,
            "lifetime_ends_at": utcnow(), "step_count": 0, "next_event_id": 1, "next_sequence": 1,
            "inbox_count": 0, "inbox_bytes": 0,
        }
        for i in range(400)
    ]
    with models_db.session_scope(db_url) as session:
        session.execute(sa.insert(inst_models.Instance), rows)
        pks = list(session.scalars(sa.select(inst_models.Instance.pk).where(inst_models.Instance.workflow_uid == uid)))
    errors: list[BaseException] = []
    stop = threading.Event()

    def writer(seed: int) -> None:
        rng = random.Random(seed)
        try:
            for _ in range(150):
                with models_db.session_scope(db_url) as session:
                    if rng.random() < 0.3:  # a multi-row statement, like a timer wake-up
                        chosen = rng.sample(pks, 20)
                        session.execute(
                            sa.update(inst_models.Instance)
                            .where(inst_models.Instance.pk.in_(chosen))
                            .values(status=rng.choice(inst_models.STATUSES))
                        )
                    else:
                        session.execute(
                            sa.update(inst_models.Instance)
                            .where(inst_models.Instance.pk == rng.choice(pks))
                            .values(status=rng.choice(inst_models.STATUSES))
                        )
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    def compactor() -> None:
        try:
            while not stop.is_set():
                status_counts.compact(database_url=db_url, max_batches=1)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    writers = [threading.Thread(target=writer, args=(seed,)) for seed in range(4)]
    compactors = [threading.Thread(target=compactor) for _ in range(2)]
    for t in writers + compactors:
        t.start()
    for t in writers:
        t.join(120)
    stop.set()
    for t in compactors:
        t.join(30)
    assert not errors, errors  # no deadlock, no failed statement
    assert _read(db_url, uid) == _recount(db_url, uid)
    assert sum(_read(db_url, uid).values()) == 400
    status_counts.compact(database_url=db_url)
    assert _read(db_url, uid) == _recount(db_url, uid)
    with models_db.session_scope(db_url) as session:
        totals = status_counts.totals_txn(session)
        every = dict(session.execute(sa.select(inst_models.Instance.status, sa.func.count()).group_by(inst_models.Instance.status)).all())
    assert totals == {s: every.get(s, 0) for s in inst_models.STATUSES}
