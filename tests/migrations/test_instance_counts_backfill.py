"""The instance-count migration on a database that already holds instances (docs/spec/durable-workflow.md#dw-resource
``instanceCounts``; ``models.status_counts``): the counts read after the upgrade equal a recount of
``instances``, and the triggers keep them exact after."""

from __future__ import annotations

import sqlalchemy as sa

from models import migrate, status_counts
from models.instances import STATUSES
from tests.migrations.conftest import revision_before

BEFORE_SQL = """
INSERT INTO instances (workflow_uid, space, instance_id, status, epoch, step_count, next_event_id, next_sequence,
                       inbox_count, inbox_bytes, created_at, updated_at, lifetime_ends_at)
SELECT CASE WHEN i % 3 = 0 THEN 'w2' ELSE 'w1' END, 'a', convert_to('i' || i, 'UTF8'),
       (ARRAY['queued', 'running', 'sleeping', 'waiting', 'complete', 'errored', 'terminated'])[1 + i % 7],
       1, 0, 1, 1, 0, 0, now(), now(), now()
FROM generate_series(1, 500) AS i;
"""


def _recount(conn, uid: str) -> dict[str, int]:
    counts = dict.fromkeys(STATUSES, 0)
    for status, n in conn.execute(
        sa.text("SELECT status, count(*) FROM instances WHERE workflow_uid = :w GROUP BY status"), {"w": uid}
    ):
        counts[status] = n
    return counts


def test_the_counts_are_backfilled_and_kept(empty_database):
    from sqlalchemy import orm

    url, engine = empty_database
    migrate.upgrade(url, revision_before(url, "_instance_counts"))
    with engine.begin() as conn:
        conn.exec_driver_sql(BEFORE_SQL.replace("%", "%%"))
    migrate.upgrade(url)
    with orm.Session(engine) as session:
        read = status_counts.counts_txn(session, workflow_uids=["w1", "w2", "none"])
        assert read["w1"] == _recount(session, "w1") and read["w2"] == _recount(session, "w2")
        assert sum(read["w1"].values()) == 334 and read["none"] == dict.fromkeys(STATUSES, 0)
        # and the triggers keep them: a multi-row update and a delete
        session.execute(sa.text("UPDATE instances SET status = 'complete' WHERE status IN ('queued', 'running')"))
        session.execute(sa.text("DELETE FROM instances WHERE status = 'errored' AND workflow_uid = 'w2'"))
        session.commit()
        read = status_counts.counts_txn(session, workflow_uids=["w1", "w2"])
        assert read["w1"] == _recount(session, "w1") and read["w2"] == _recount(session, "w2")
        assert read["w1"]["queued"] == 0 and read["w2"]["errored"] == 0
    assert status_counts.compact(database_url=url) > 0
    with orm.Session(engine) as session:
        read = status_counts.counts_txn(session, workflow_uids=["w1", "w2"])
        assert read["w1"] == _recount(session, "w1") and read["w2"] == _recount(session, "w2")
        assert session.scalar(sa.text("SELECT count(*) FROM instance_count_deltas")) == 0
        # No zero row is kept.
        assert session.scalar(sa.text("SELECT count(*) FROM instance_counts WHERE n = 0")) == 0
