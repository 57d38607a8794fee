"""Periodic observation of DurableWorkflows (docs/spec/durable-workflow.md "入力、観測、CRUD": "確認済みならready:booleanと
…instanceCountsを返す。時点はobservedAtであり、GET時の即時照会を保証しない").

A DurableWorkflow's ``observed`` (built by :func:`observe_workflow_txn`) is written by its
Operations (create/update) and whenever its Worker's Deployment changes
(``workers.operations_tasks``); between those, instance counts move with every instance.
:func:`refresh` (run by the beat sweep at most every ``INTERVAL_S``) re-reads
``ready`` and the seven ``instanceCounts`` of every observed, live DurableWorkflow, and writes the
ones that changed — or whose ``observedAt`` is older than ``MAX_AGE_S`` — with ``observedAt = now``.
A workflow never observed yet keeps ``{}`` (its create Operation observes it first); a workflow
being deleted, or one whose row an Operation holds right now, is skipped this time.
"""

from __future__ import annotations

import datetime as dt
import logging
import time

import sqlalchemy as sa
from sqlalchemy import orm

from models import db as models_db
from models import resource_sql, status_counts
from models import resources as res_models
from services import forms

log = logging.getLogger(__name__)

#: Seconds between two refreshes in one process (the sweep itself may run more often).
INTERVAL_S = 3.0
#: ``observedAt`` is moved at least this often (seconds) even when nothing changed.
MAX_AGE_S = 60.0

_last_run = 0.0


def observe_workflow_txn(session: orm.Session, *, workflow: res_models.Resource, ready: bool) -> dict:
    """A DurableWorkflow's ``observed``: ``{"ready": ready, "instanceCounts": {status: n}}`` with all
    seven statuses (docs/spec/durable-workflow.md#dw-resource "確認済みならready:booleanと…instanceCounts"). Runs in the caller's
    transaction; ``ready`` is decided by the caller (every weighted Version exports the class)."""
    counts = status_counts.counts_txn(session, workflow_uids=[workflow.uid])[workflow.uid]
    return {"ready": bool(ready), "instanceCounts": counts}


def refresh(*, now: dt.datetime, force: bool = False) -> int:
    """Re-observe every observed, live DurableWorkflow (see the module doc); returns how many
    ``observed`` documents were written. Skips the work (returns 0) when the previous refresh of
    this process is younger than ``INTERVAL_S``, unless ``force``."""
    global _last_run
    if not force and time.monotonic() - _last_run < INTERVAL_S:
        return 0
    _last_run = time.monotonic()
    written = 0
    with models_db.session_scope() as session:
        query = (
            sa.select(res_models.Resource)
            .where(
                res_models.is_live("DurableWorkflow"),
                res_models.Resource.phase != "deleting",
                res_models.Resource.observed_at.is_not(None),
            )
            .with_for_update(key_share=True, skip_locked=True)
        )
        for workflow in session.scalars(query).all():
            observed = observe_workflow_txn(
                session, workflow=workflow, ready=forms.workflow_ready_txn(session, workflow=workflow)
            )
            stale = workflow.observed_at is None or (now - workflow.observed_at).total_seconds() >= MAX_AGE_S
            if observed != workflow.observed or stale:
                resource_sql.observe(workflow, observed=observed, now=now)
                written += 1
    if written:
        log.info("re-observed DurableWorkflows", extra={"count": written})
    return written
