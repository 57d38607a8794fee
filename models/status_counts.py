"""Each DurableWorkflow's instances per status, read in constant time (docs/spec/durable-workflow.md#dw-resource ``instanceCounts``).

Counting ``instances`` rows costs ~30 ms at 100,000 instances of one workflow. Instead, triggers on
``instances`` (migration ``0010_instance_counts``) append every change of a count to
``instance_count_deltas`` in the writer's transaction, and :func:`compact` (a beat sweep duty)
folds those rows into ``instance_counts``. The count of a status is its ``instance_counts.n``
plus its pending deltas; :func:`counts_txn` reads both in one statement, so what it returns is
exact at the statement's snapshot, whether or not a compaction committed in between.

Appending, not updating, keeps writers apart: no transaction waits for another's counter row,
and no two statements that change many instances (timer wake-ups, purges) can deadlock on it.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy import orm

from models import db as models_db
from models.instances import STATUSES

#: Delta rows folded per compaction statement (one transaction each).
COMPACT_BATCH = 10_000
#: The advisory lock key of compaction: one compactor at a time across the fleet.
_COMPACT_LOCK = 0x7A6B_0010

_READ = sa.text(
    """
    SELECT workflow_uid, status, sum(n)::bigint FROM (
      SELECT workflow_uid, status, n FROM instance_counts WHERE workflow_uid = ANY(:uids)
      UNION ALL
      SELECT workflow_uid, status, delta FROM instance_count_deltas WHERE workflow_uid = ANY(:uids)
    ) AS c GROUP BY workflow_uid, status
    """
)

_FOLD = sa.text(
    """
    WITH moved AS (
      DELETE FROM instance_count_deltas
      WHERE pk IN (SELECT pk FROM instance_count_deltas ORDER BY pk LIMIT :batch)
      RETURNING workflow_uid, status, delta
    ), folded AS (
      INSERT INTO instance_counts AS c (workflow_uid, status, n)
      SELECT workflow_uid, status, sum(delta)::bigint FROM moved
      GROUP BY workflow_uid, status ORDER BY workflow_uid, status
      ON CONFLICT (workflow_uid, status) DO UPDATE SET n = c.n + excluded.n
      RETURNING 1
    )
    SELECT count(*) FROM moved
    """
)


def counts_txn(session: orm.Session, *, workflow_uids: list[str]) -> dict[str, dict[str, int]]:
    """``{workflow uid: {status: n}}`` for every uid of ``workflow_uids``, all seven statuses
    (zeros included); one statement on two small indexed tables. Runs in the caller's session."""
    counts = {uid: dict.fromkeys(STATUSES, 0) for uid in workflow_uids}
    if not workflow_uids:
        return counts
    for uid, status, n in session.execute(_READ, {"uids": list(workflow_uids)}):
        if status in counts[uid]:
            counts[uid][status] = int(n)
    return counts


_TOTALS = sa.text(
    """
    SELECT status, sum(n)::bigint FROM (
      SELECT status, n FROM instance_counts UNION ALL SELECT status, delta FROM instance_count_deltas
    ) AS c GROUP BY status
    """
)


def totals_txn(session: orm.Session) -> dict[str, int]:
    """``{status: n}`` over every instance of the host, all seven statuses (the metrics gauge)."""
    counts = dict.fromkeys(STATUSES, 0)
    for status, n in session.execute(_TOTALS):
        if status in counts:
            counts[status] = int(n)
    return counts


def compact(*, now: object = None, database_url: str | None = None, max_batches: int = 20) -> int:
    """Fold pending deltas into ``instance_counts``, ``COMPACT_BATCH`` rows per transaction, until
    none is left or ``max_batches`` ran; returns how many delta rows were folded. Only one
    compactor runs at a time (a transaction-scoped advisory lock; another caller returns at once).
    Counts that fell to zero are dropped. ``now`` is accepted for the sweep's duty signature.

    Raises ``sqlalchemy.exc.SQLAlchemyError`` when the database fails (the sweep logs it).
    """
    folded = 0
    for _ in range(max_batches):
        with models_db.session_scope(database_url) as session:
            if not session.scalar(sa.select(sa.func.pg_try_advisory_xact_lock(_COMPACT_LOCK))):
                return folded
            moved = int(session.scalar(_FOLD, {"batch": COMPACT_BATCH}) or 0)
            if moved:
                session.execute(sa.text("DELETE FROM instance_counts WHERE n = 0"))
        folded += moved
        if moved < COMPACT_BATCH:
            return folded
    return folded
