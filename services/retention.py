"""Retention of terminal instances (docs/spec/durable-workflow.md#dw-instance-id: "terminal履歴とIDはterminal遷移から少なくとも2592000秒
保持する。その後はHostが破棄でき、getがunknown_instanceになり得る").

A terminal instance (``complete``, ``errored``, ``terminated``) is kept, with its id, steps and
history, for :func:`retention_seconds` after its terminal transition (2 592 000 s; the
test-only ``TAKOHOST_TEST_RETENTION_SECONDS`` shortens it) and then purged by the beat sweep:
``get`` answers ``unknown_instance`` and the id may be created again. Only the explicit DELETE of
the DurableWorkflow purges earlier (``instance_stop.purge_workflow``).
"""

from __future__ import annotations

import datetime as dt
import logging

import sqlalchemy as sa

from core import config
from models import db as models_db
from models import instances as inst_models
from services import instance_common

log = logging.getLogger(__name__)

#: A terminal instance's history and id are kept at least 2592000 s after its terminal transition
#: (docs/spec/durable-workflow.md#dw-retention).
RETENTION_SECONDS = 2_592_000

BATCH = 500

INSTANCES = inst_models.Instance.__table__


def _retired(cutoff: dt.datetime) -> sa.Select:
    # ``updated_at`` is never earlier than ``terminal_at`` (every terminal commit sets both), so it
    # lets the ``(status, updated_at)`` index find the rows; ``terminal_at`` decides.
    return (
        sa.select(INSTANCES.c.pk)
        .where(
            INSTANCES.c.status.in_(inst_models.TERMINAL_STATUSES),
            INSTANCES.c.updated_at < cutoff,
            INSTANCES.c.terminal_at < cutoff,
        )
        .limit(BATCH)
    )


def retention_seconds(settings: config.Settings | None = None) -> float:
    """How long a terminal instance is kept: 2592000 s, or ``TAKOHOST_TEST_RETENTION_SECONDS``."""
    settings = settings or config.load_settings()
    return settings.test_retention_seconds or RETENTION_SECONDS


def purge_retired(*, now: dt.datetime, settings: config.Settings | None = None) -> int:
    """Beat duty: delete every instance whose terminal transition is older than the retention
    period at ``now`` (aware UTC), with its steps, history, inbox and timers; returns how many.
    Opens its own sessions (batches of ``BATCH``); safe to run in several processes at once."""
    cutoff = now - dt.timedelta(seconds=retention_seconds(settings))
    purged = 0
    while True:
        with models_db.session_scope() as session:
            query = _retired(cutoff)
            batch = session.scalars(query.with_for_update(skip_locked=True)).all()
            if batch:
                instance_common.delete_instances_txn(session, list(batch))
        purged += len(batch)
        if len(batch) < BATCH:
            break
    if purged:
        log.info("purged retired instances", extra={"count": purged})
    return purged
